"""The one training loop shared by pretraining and fine-tuning, its checkpoints and its run log."""
