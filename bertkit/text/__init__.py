"""Text: the tokenizer (encode, decode, offsets, word ids) and vocabulary training."""
