"""Contextual embeddings: vectors from any layer, files of vectors, anisotropy and
standardization, and their pictures."""
