"""A model in another runtime's format: `bertkit export onnx`.

- `onnx`: an encoder, a fill-mask model or a fine-tuned task model as one ONNX graph that
  onnxruntime runs without torch, checked against PyTorch, with an int8 copy on request.
- `sentence`: a sentence model's graph, its pooling and normalisation inside, and
  `OnnxEmbedder`, which puts the tokenizer in front of it (text in, the vector out).
- `sparse`: a sparse (SPLADE) encoder's graph, its vector over the vocabulary out.
- `graph`: what every export shares: tracing a module into a checked file, running it,
  quantizing it.

It sits above `finetuning/` (a task model's graph reads the task's heads and inputs), so
`model/` stays below the tasks.
"""
