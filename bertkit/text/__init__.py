"""Text: the tokenizer (encode, decode, offsets, word ids), vocabulary training, and sentence
splitting."""
