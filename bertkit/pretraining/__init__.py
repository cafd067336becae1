"""Pretraining: corpus -> token shards -> masking -> examples and batches -> objectives, and the
recipe that runs them through the shared training loop."""
