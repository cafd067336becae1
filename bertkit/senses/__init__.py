"""Word senses: sense-labelled data, word-sense disambiguation by nearest sense embedding, and the
static skip-gram baseline."""
