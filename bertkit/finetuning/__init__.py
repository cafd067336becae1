"""Fine-tuning: a Task per task (task.py, the protocol; tasks/, one module each), data readers,
model inputs and batches, task heads and their Hugging Face layout, the recipe on the shared
training loop, prediction, metrics and baselines; the CRF and the tagging schemes beside them."""
