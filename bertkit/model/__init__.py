"""The model: the encoder and its pretraining heads, Hugging Face directories in and out, a fresh
model from a preset, what a model directory holds, and fill-mask."""
