"""What the heads share with the data that feeds them.

IGNORE_INDEX marks a label position that no loss reads: an unmasked token in masked-LM
pretraining, a special token or a non-first subword in tagging. It is PyTorch's default
`ignore_index` of `cross_entropy`, and Hugging Face's, so labels made here train the same there.
"""
IGNORE_INDEX = -100
