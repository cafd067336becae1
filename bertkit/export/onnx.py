"""ONNX export: a model directory as one .onnx graph that onnxruntime runs without torch.

Four kinds of graph, each with dynamic batch and sequence axes:

- "encoder": input_ids, [token_type_ids,] attention_mask -> last_hidden_state [B, T, H];
- "fill-mask": the same inputs -> logits [B, T, V] (the masked-LM head at every position;
  of an ELECTRA pair, its generator's, as `fill-mask` guesses with it);
- a fine-tuned task model (a directory written by `bertkit finetune`): its logits, as
  `TaskModel` reads them (classify/pair/regress [B, K], tag [B, T, K] (a CRF's emissions),
  qa start_logits and end_logits [B, T]). A spans model's graph takes two more inputs, each
  word's first piece `word_index` [B, W] and `word_mask` [B, W] (1 for a real word), and
  returns the span logits [B, W, L, K]: the number of words is an input's shape, not a value
  read from the data, so it stays dynamic (`OnnxForward` computes both from word ids). A tag
  or spans model with the word-case feature takes `case_ids` [B, T] after the attention mask;
- "sentence": a sentence model (the default for a sentence-transformers directory) ->
  sentence_embedding [B, D], its pooling and normalisation inside the graph, and
  `OnnxEmbedder` to put text in (`bertkit.export.sentence`);
- a reranker (`bertkit finetune rerank`), a task model as above: a (query, passage) pair in as
  one input (token_type_ids telling them apart) -> logits [B, 1], the relevance score, as
  sentence-transformers' CrossEncoder gives it with an identity activation;
- a sparse encoder (a SparseEncoder directory, `bertkit finetune sparse`) -> sparse_embedding
  [B, V], SPLADE-max with the mask inside the graph (`bertkit.export.sparse`).

A "modern" model has no segments, so its graph takes no token_type_ids. The graph is traced
from the reference encoder (`Encoder(cfg, fast=False)`) with a padded example, so that the
attention mask is always applied (it changes nothing where there is no padding). `--quantize`
adds `quantize_dynamic`'s int8 weights beside it; `dev=` scores both graphs on a labelled file
with the task's own metrics.

onnx and onnxruntime are an optional extra (the `onnx` extra), imported on use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from bertkit.export.graph import (OPSET, ExportResult, difference, onnx_modules, onnx_session,
                                  quantize_model, run_session, write_graph)
from bertkit.export.sentence import export_sentence, is_sentence_model
from bertkit.export.sparse import export_sparse
from bertkit.files import UserError
from bertkit.finetuning.heads import first_subword_index, load_task_weights
from bertkit.finetuning.inputs import WORD_CASES
from bertkit.finetuning.predict import TaskModel, fits_encoder
from bertkit.finetuning.tasks import load_task
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.model.kind import ModelKind, model_kind, require_kind
from bertkit.text.tokenizer import Tokenizer

Kind = Literal["auto", "encoder", "fill-mask", "sentence"]


@dataclass(kw_only=True)
class ExportOptions:
    model: Path = field(metadata={"model": True})
    """Model directory (bertkit or Hugging Face): pretrained, or written by `bertkit finetune`."""
    out: Path = field(metadata={"output": True})
    """Output .onnx file (the int8 one goes beside it, as OUT.int8.onnx)."""
    task: Kind = "auto"
    """What the graph returns: "encoder" (last_hidden_state), "fill-mask" (the logits of the
    masked-language-model head, MLM), "sentence" (the sentence vector: a sentence-transformers
    directory's pooling and normalisation, else mean pooling), or "auto": a fine-tuned
    model's logits (a reranker's: one relevance score per text pair), else the sentence vector of a
    sentence-transformers directory, else a sparse encoder's vector over the vocabulary,
    else the MLM logits when the directory has an MLM head, else the encoder's states."""
    quantize: bool = False
    """Also write a dynamically int8-quantized copy (onnxruntime.quantization)."""
    dev: Path | None = None
    """A fine-tuned model's labelled dev file (a sentence model's: scored pairs, pairs,
    triplets or NLI): report the task's metrics with PyTorch, the ONNX graph and (with
    --quantize) the int8 graph."""
    opset: int = OPSET
    """ONNX opset version."""


class _Graph(nn.Module):
    """What is traced: named tensor inputs -> a tuple of output tensors."""

    def __init__(self, model: nn.Module, kind: str, segments: bool, cases: bool):
        super().__init__()
        self.model, self.kind, self.segments, self.cases = model, kind, segments, cases

    def forward(self, input_ids, *rest):
        words = ()
        if self.kind == "spans":  # the two word inputs come last
            rest, words = rest[:-2], rest[-2:]
        cases = {}
        if self.cases:  # case_ids after the attention mask
            rest, cases = rest[:-1], {"case_ids": rest[-1]}
        token_type_ids, attention_mask = rest if self.segments else (None, rest[0])
        if self.kind == "spans":
            return (self.model.score_words(input_ids, token_type_ids, attention_mask, *words,
                                           **cases),)
        if cases:
            return (self.model(input_ids, token_type_ids, attention_mask, **cases),)
        if self.kind == "encoder":
            return (self.model(input_ids, token_type_ids, attention_mask).last_hidden_state,)
        if self.kind == "fill-mask":
            return (self.model(input_ids, token_type_ids, attention_mask)[0],)
        out = self.model(input_ids, token_type_ids, attention_mask)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _has_mlm_head(path: Path, architecture: str) -> bool:
    _, heads = hub.from_hf_state_dict(hub.load_weights(path), architecture)
    return any(name.startswith("mlm.") for name in heads)


def load_for_export(path: str | Path, kind: Kind = "auto") -> tuple[nn.Module, str, object]:
    """(the reference-path model in eval mode, its kind, the Task of a fine-tuned one or None)."""
    path = require_kind(path, ModelKind.TASK, ModelKind.ENCODER)
    cfg = hub.load_config(path)
    if kind == "auto":
        if model_kind(path) is ModelKind.TASK:
            task = load_task(path)
            model = load_task_weights(task.make_model(Encoder(cfg, fast=False)), path)
            return model.eval(), task.name, task
        kind = "fill-mask" if _has_mlm_head(path, cfg.architecture) else "encoder"
    if kind == "fill-mask" and hub.is_electra_dir(path):  # the discriminator has no
        return hub.load_electra(path, fast=False).generator.eval(), kind, None  # MLM head
    if kind == "fill-mask":
        model = PretrainingModel(cfg, fast=False)
        init_weights(model, cfg, torch.Generator().manual_seed(0))
        encoder_state, heads = hub.from_hf_state_dict(hub.load_weights(path), cfg.architecture)
        hub.load_state_into(model, encoder_state, heads, path)
        return model.eval(), kind, None
    if kind != "encoder":
        raise UserError(f"--task must be auto, encoder, fill-mask or sentence, got {kind!r}")
    model = Encoder(cfg, fast=False)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    encoder_state, _ = hub.from_hf_state_dict(hub.load_weights(path), cfg.architecture)
    hub.load_state_into(model, encoder_state, {}, path)
    return model.eval(), kind, None


def example_inputs(cfg, batch: int = 2, length: int = 12, seed: int = 0,
                   words: bool = False, cases: bool = False) -> dict[str, torch.Tensor]:
    """A batch whose second row is padded: tracing it keeps the attention mask in the graph.
    `words`: with a spans graph's word_index and word_mask (words of one and two pieces).
    `cases`: with case_ids (a random word case per piece, 0 on padding)."""
    g = torch.Generator().manual_seed(seed)
    length = min(length, cfg.max_positions)
    ids = torch.randint(5, cfg.vocab_size, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1:, length * 2 // 3:] = 0
    ids = ids.masked_fill(mask == 0, cfg.pad_token_id)
    inputs = {"input_ids": ids}
    if cfg.architecture == "bert":
        types = torch.zeros_like(ids)
        types[:, length // 2:] = 1
        inputs["token_type_ids"] = types * mask
    inputs["attention_mask"] = mask
    if cases:
        inputs["case_ids"] = torch.randint(1, len(WORD_CASES), ids.shape, generator=g) * mask
    if words:
        inputs.update(word_inputs(example_word_ids(mask, seed)))
    return inputs


def example_word_ids(attention_mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """[B, T] word ids for a padded batch: [CLS] and the last real token (its [SEP]) -1, the
    pieces between them grouped into words of one or two pieces at random."""
    g = torch.Generator().manual_seed(seed)
    word_ids = torch.full_like(attention_mask, -1)
    for b, n in enumerate(attention_mask.sum(1).tolist()):
        starts = torch.rand(max(0, n - 2), generator=g) < 0.6
        if len(starts):
            starts[0] = True
        word_ids[b, 1:n - 1] = starts.long().cumsum(0) - 1
    return word_ids


def word_inputs(word_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """A spans graph's word inputs from word ids [B, T] (-1 for specials and padding), as
    SpanTagger.forward makes them."""
    num_words = max(1, int(word_ids.max()) + 1 if word_ids.numel() else 0)
    index, mask = first_subword_index(word_ids, num_words)
    return {"word_index": index, "word_mask": mask.long()}


def output_names(kind: str, task) -> list[str]:
    if kind == "encoder":
        return ["last_hidden_state"]
    if task is not None and task.name == "qa":
        return ["start_logits", "end_logits"]
    return ["logits"]


def _kind_of(kind: str, task) -> str:
    """What _Graph computes: the kind, or "spans" for a spans task model."""
    return "spans" if task is not None and task.name == "spans" else kind


def _graph(model: nn.Module, kind: str, task, cfg) -> _Graph:
    """What is traced of `model`: a fine-tuned one's case input too, where it has one."""
    cases = task is not None and model.word_case is not None  # a TaskHead's declared part
    return _Graph(model, _kind_of(kind, task), cfg.architecture == "bert", cases).eval()


def max_difference(model: nn.Module, kind: str, task, session, cfg) -> float:
    """Largest |onnx - torch| over a batch of another size and length than the traced one."""
    graph = _graph(model, kind, task, cfg)
    inputs = example_inputs(cfg, batch=3, length=min(cfg.max_positions, 21), seed=1,
                            words=graph.kind == "spans", cases=graph.cases)
    with torch.inference_mode():
        expected = graph(*inputs.values())
    got = run_session(session, inputs)
    return max(difference(g, e.float().numpy()) for g, e in zip(got, expected))


def export_onnx(model: str | Path, out: str | Path, kind: Kind = "auto", *,
                quantize: bool = False, dev: str | Path | None = None,
                opset: int = OPSET) -> ExportResult:
    """Write `model` as an ONNX graph at `out` (atomically); see the module docstring."""
    onnx_modules()
    if kind == "sentence" or kind == "auto" and is_sentence_model(model):
        return export_sentence(model, out, quantize=quantize, dev=dev, opset=opset)
    if kind == "auto" and model_kind(model) is ModelKind.SPARSE:
        return export_sparse(model, out, quantize=quantize, dev=dev, opset=opset)
    path, out = Path(model), Path(out)
    module, kind, task = load_for_export(path, kind)
    if dev is not None and task is None:
        raise UserError(f"--dev scores a fine-tuned model; {path} is not one")
    cfg = hub.load_config(path)
    graph = _graph(module, kind, task, cfg)
    inputs = example_inputs(cfg, words=graph.kind == "spans", cases=graph.cases)
    names, outputs = list(inputs), output_names(kind, task)
    axes = {name: {0: "batch", 1: "words" if name.startswith("word_") else "sequence"}
            for name in names}
    for name in outputs:
        axes[name] = {0: "batch"} if kind not in ("encoder", "fill-mask") \
            and task.name in ("classify", "pair", "regress", "rerank") else \
            {0: "batch", 1: "words" if graph.kind == "spans" else "sequence"}
    write_graph(graph, inputs, outputs, axes, out, opset)
    session = onnx_session(out)
    result = ExportResult(out, kind, names, outputs,
                          max_difference(module, kind, task, session, cfg))
    if quantize:
        result.quantized = quantize_model(out)
    if dev is not None:
        result.dev_scores = dev_scores(path, task, module, out, result.quantized, dev)
    return result


class OnnxForward(nn.Module):
    """A task model whose forward runs an onnxruntime session: the task's decoding (argmax, the
    CRF's Viterbi, answer spans) still reads the PyTorch module's other parts."""

    def __init__(self, session, model: nn.Module):
        super().__init__()
        self.session = session
        self.torch_model = model

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, *, word_ids=None,
                case_ids=None):
        inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                  "attention_mask": attention_mask, "case_ids": case_ids}
        if word_ids is not None:  # a spans graph: (logits, word mask), as SpanTagger returns
            words = word_inputs(word_ids)
            logits, = run_session(self.session, {**{k: v for k, v in inputs.items()
                                                    if v is not None}, **words})
            return torch.from_numpy(logits), words["word_mask"].bool()
        out = [torch.from_numpy(o) for o in run_session(
            self.session, {k: v for k, v in inputs.items() if v is not None})]
        return tuple(out) if len(out) > 1 else out[0]

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["torch_model"], name)


def dev_scores(path: Path, task, model: nn.Module, onnx_path: Path, quantized: Path | None,
               dev: str | Path) -> dict:
    """The task's metrics on `dev` with PyTorch and each graph."""
    tokenizer = Tokenizer.load(path)
    examples = task.read(dev)
    check = fits_encoder(tokenizer, hub.load_config(path), path)
    scores = {"pytorch": TaskModel(model, tokenizer, task, check_inputs=check).evaluate(examples)}
    for name, graph in (("onnx", onnx_path), ("onnx-int8", quantized)):
        if graph is not None:
            runner = TaskModel(OnnxForward(onnx_session(graph), model), tokenizer, task)
            scores[name] = runner.evaluate(examples)
    return scores


def headline(scores: dict, kind: str = "") -> tuple[str, float] | None:
    """The first plain figure of a task's metrics (accuracy, f1, exact...) to show; of a
    sentence model's, the STS Spearman or the retrieval nDCG@10."""
    keys = ("spearman", "ndcg@10") if kind == "sentence" else \
        ("accuracy", "f1", "exact", "pearson", "spearman", "micro_f1")
    for key in keys:
        if isinstance(scores.get(key), (int, float)):
            return key, float(scores[key])
    return None


__all__ = ["ExportOptions", "ExportResult", "export_onnx", "quantize_model", "load_for_export",
           "example_inputs", "example_word_ids", "word_inputs", "onnx_session", "run_session",
           "OnnxForward", "headline"]
