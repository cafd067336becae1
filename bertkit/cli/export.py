"""Commands that write a model in another runtime's format: `export onnx`."""
from __future__ import annotations

import json

from bertkit.cli.options import Command
from bertkit.files import INSTALL_ONNX


def run_export_onnx(opts) -> int:
    from bertkit.export.onnx import export_onnx, headline

    result = export_onnx(opts.model, opts.out, opts.task, quantize=opts.quantize, dev=opts.dev,
                         opset=opts.opset)
    detail = f" ({result.detail})" if result.detail else ""
    print(f"{result.path}: {result.kind} graph{detail}, inputs {', '.join(result.inputs)} -> "
          f"{', '.join(result.outputs)} (dynamic batch and sequence); max |onnx - pytorch| "
          f"{result.max_abs_diff:.2e}")
    if result.quantized:
        print(f"{result.quantized}: int8 weights (dynamic quantization)")
    for runtime, scores in result.dev_scores.items():
        shown = headline(scores, result.kind)
        figure = f"{shown[0]} {shown[1]:.4f}" if shown else json.dumps(scores, default=float)
        print(f"dev {runtime:>10}: {figure}")
    return 0


COMMANDS = (
    Command("export onnx", run_export_onnx, ("bertkit.export.onnx:ExportOptions",),
            help="write a model as an ONNX graph (encoder, fill-mask, sentence vector, "
                 "reranker, sparse vector or a fine-tuned task)",
            description="An ONNX graph with dynamic batch and sequence axes that onnxruntime "
                        "runs without torch: the encoder's last_hidden_state, the masked-LM "
                        "logits, a sentence model's pooled (and normalised) vector, a "
                        "sparse encoder's vector over the vocabulary, or a fine-tuned "
                        "model's logits (a reranker's: a text pair's score); checked against "
                        "PyTorch. --quantize adds an "
                        "int8 copy; --dev scores a fine-tuned or sentence model's graphs on a "
                        f"labelled file. Needs {INSTALL_ONNX}."),
)
