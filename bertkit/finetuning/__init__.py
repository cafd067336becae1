"""Fine-tuning: task data readers, task models and heads, the recipe on the shared loop,
prediction and metrics."""
