"""A model in another runtime's format: `bertkit export onnx`.

- `onnx`: an encoder, a fill-mask model or a fine-tuned task model as one ONNX graph that
  onnxruntime runs without torch, checked against PyTorch, with an int8 copy on request.

It sits above `finetuning/` (a task model's graph reads the task's heads and inputs), so
`model/` stays below the tasks.
"""
