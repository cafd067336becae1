"""Contextual embeddings: the embedder (vectors from any layer, of tokens, words and sentences),
files of vectors (`files`), rescaling before cosines (`standardize`), anisotropy and rogue
dimensions (`anisotropy`), and their pictures (`plots`)."""
