"""Task models: an Encoder plus a small head, saved as the Hugging Face task model of that shape.

Each model holds `.encoder` and its head under the Hugging Face name (`classifier`,
`qa_outputs`), so the exported weights load in `transformers` as BertForSequenceClassification,
BertForTokenClassification or BertForQuestionAnswering with no missing or unexpected keys.
What transformers has no place for (CRF transitions, the span head) goes to
`task_head.safetensors`, and what the task is (labels, columns, scheme, thresholds) to
`bertkit_task.json`; both sit beside config.json and are ignored by transformers.

Shapes: B batch, T tokens, W words, H hidden, K labels, L longest span.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from bertkit.model import hub
from bertkit.files import UserError
from bertkit.model.encoder import Encoder, cls_rows, init_weights
from bertkit.model.heads import IGNORE_INDEX
from bertkit.finetuning.spans import SpanHead

TASK_FILE = "bertkit_task.json"
HEAD_FILE = "task_head.safetensors"
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


def head_dropout(encoder: Encoder) -> float:
    """Hugging Face's rule: `classifier_dropout` from config.json, else the hidden dropout."""
    p = encoder.config.extra.get("classifier_dropout")
    return encoder.config.hidden_dropout if p is None else float(p)


class SequenceClassifier(nn.Module):
    """Pooled [CLS] -> dropout -> linear (BertForSequenceClassification); also sentence pairs."""

    architecture = "BertForSequenceClassification"
    uses_pooler = True

    def __init__(self, encoder: Encoder, num_labels: int,
                 problem_type: str = "single_label_classification"):
        super().__init__()
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
        self.encoder = encoder
        self.problem_type = problem_type
        self.dropout = nn.Dropout(head_dropout(encoder))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        # the head reads [CLS] alone, so the last block runs at [CLS] alone (`forward_rows`)
        cls, = self.encoder.forward_rows(input_ids, token_type_ids, attention_mask,
                                         cls_rows(input_ids))  # [B, H]
        pooled = self.encoder.pool(cls)
        return self.classifier(self.dropout(pooled))  # [B, K]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1)) \
                if logits.shape[-1] == 1 else F.mse_loss(logits, labels.to(logits.dtype))
        if self.problem_type == "multi_label_classification":
            return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return F.cross_entropy(logits, labels)

    def head_spec(self) -> dict:
        return {"kind": "sequence", "num_labels": self.classifier.out_features,
                "problem_type": self.problem_type}


class TokenClassifier(nn.Module):
    """Every token -> dropout -> linear (BertForTokenClassification), optionally a linear-chain
    CRF on top.

    Labels live on subword pieces (tagging.align_labels: copied from the word or on the first
    piece only, IGNORE_INDEX elsewhere); the CRF chains the labelled pieces, skipping the rest,
    and Viterbi decodes the same positions.
    """

    architecture = "BertForTokenClassification"
    uses_pooler = False

    def __init__(self, encoder: Encoder, num_labels: int, crf: nn.Module | None = None):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(head_dropout(encoder))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        self.crf = crf

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        h = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        return self.classifier(self.dropout(h))  # [B, T, K]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """labels: [B, T] piece label ids, IGNORE_INDEX (-100) where nothing is learned."""
        if self.crf is None:
            return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                   ignore_index=IGNORE_INDEX)
        return -self.crf.log_likelihood(logits, labels, labels != IGNORE_INDEX).mean()

    def piece_labels(self, logits: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Best label id of each kept piece ([B, T] bool mask), in order: Viterbi through the CRF
        when there is one, else the argmax."""
        if self.crf is not None:
            return self.crf.decode(logits, mask)
        best = logits.argmax(-1)
        return [row[keep].tolist() for row, keep in zip(best, mask)]

    def head_spec(self) -> dict:
        return {"kind": "token", "num_labels": self.classifier.out_features,
                "crf": self.crf is not None}


class QuestionAnswerer(nn.Module):
    """Start and end scores for every token (BertForQuestionAnswering: no dropout before it)."""

    architecture = "BertForQuestionAnswering"
    uses_pooler = False

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        h = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        start, end = self.qa_outputs(h).unbind(-1)  # 2 x [B, T]
        if attention_mask is not None:  # padding can never be an answer
            start = start.masked_fill(attention_mask == 0, -1e4)
            end = end.masked_fill(attention_mask == 0, -1e4)
        return start, end

    @staticmethod
    def loss(logits: tuple[torch.Tensor, torch.Tensor], start_positions: torch.Tensor,
             end_positions: torch.Tensor) -> torch.Tensor:
        """The sum of the start and end cross-entropies (position 0, [CLS], = no answer)."""
        start, end = logits
        return F.cross_entropy(start, start_positions) + F.cross_entropy(end, end_positions)

    def head_spec(self) -> dict:
        return {"kind": "qa"}


class SpanTagger(nn.Module):
    """Encoder + span head over word spans (spans.py); exported as a plain BertModel."""

    architecture = "BertModel"
    uses_pooler = True

    def __init__(self, encoder: Encoder, num_types: int, max_width: int = 8,
                 ffn_size: int = 150):
        super().__init__()
        self.encoder = encoder
        self.span_head = SpanHead(encoder.config.hidden_size, num_types, max_width, ffn_size,
                                  head_dropout(encoder))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, *,
                word_ids: torch.Tensor):
        h = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        # At least one word column, so that a batch of sentences with no pieces still has shape.
        num_words = max(1, int(word_ids.max()) + 1 if word_ids.numel() else 0)
        index, mask = first_subword_index(word_ids, num_words)
        z = h.gather(1, index[..., None].expand(-1, -1, h.shape[-1]))  # [B, W, H]
        return self.span_head(z, mask), mask  # [B, W, L, K], [B, W]

    def head_spec(self) -> dict:
        head = self.span_head
        return {"kind": "spans", "num_labels": head.num_types, "max_width": head.max_width,
                "ffn_size": head.start[0].out_features}


# Subwords and words ------------------------------------------------------------------------------

def first_subword_index(word_ids: torch.Tensor, num_words: int):
    """word_ids [B, T] (word index per token, -1 for specials and padding) -> the position of
    each word's first subword [B, W] (0 where the sequence has fewer words) and a mask [B, W]."""
    B, T = word_ids.shape
    positions = torch.arange(T, device=word_ids.device).expand(B, T)
    slot = torch.where(word_ids >= 0, word_ids, num_words)  # specials land in a spare column
    index = torch.full((B, num_words + 1), T, dtype=torch.long, device=word_ids.device)
    index = index.scatter_reduce(1, slot, positions, reduce="amin")[:, :num_words]
    mask = index < T
    return index.masked_fill(~mask, 0), mask


# Building, saving, loading -----------------------------------------------------------------------

def build_model(encoder: Encoder, head: dict, crf_factory=None) -> nn.Module:
    """A task model from its `head_spec()`; `crf_factory(num_labels)` makes the CRF if needed."""
    kind = head["kind"]
    if kind == "sequence":
        return SequenceClassifier(encoder, head["num_labels"], head["problem_type"])
    if kind == "token":
        crf = crf_factory(head["num_labels"]) if head.get("crf") else None
        return TokenClassifier(encoder, head["num_labels"], crf)
    if kind == "qa":
        return QuestionAnswerer(encoder)
    if kind == "spans":
        return SpanTagger(encoder, head["num_labels"], head["max_width"], head["ffn_size"])
    raise ValueError(f"unknown head kind {kind!r}")


def init_head(model: nn.Module) -> None:
    """BERT initialisation for everything but the (pretrained) encoder."""
    for name, child in model.named_children():
        if name != "encoder" and isinstance(child, nn.Module):
            init_weights(child, model.encoder.config)


class _Exported(nn.Module):
    """The weights transformers expects: encoder (without the pooler for token and QA models,
    as transformers builds them) and the HF-named head. Shares the model's tensors."""

    def __init__(self, model: nn.Module):
        super().__init__()
        enc = model.encoder
        self.encoder = nn.Module()
        self.encoder.config = enc.config
        self.encoder.embeddings = enc.embeddings
        self.encoder.blocks = enc.blocks
        if model.uses_pooler:
            self.encoder.pooler = enc.pooler
        for name in ("classifier", "qa_outputs"):
            if hasattr(model, name):
                setattr(self, name, getattr(model, name))


def _extra_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Weights transformers has no place for: CRF transitions, the span head."""
    out = {}
    for prefix in ("crf", "span_head"):
        module = getattr(model, prefix, None)
        if module is not None:
            out.update({f"{prefix}.{k}": v.detach().cpu().float().contiguous()
                        for k, v in module.state_dict().items()})
    return out


def save_task_model(model: nn.Module, path: str | Path, *, task: dict, tokenizer=None,
                    labels: list[str] | None = None) -> Path:
    """Write `model` as a Hugging Face directory plus bertkit_task.json / task_head.safetensors.

    `labels` become id2label/label2id in config.json; `task` (JSON-able: task name, columns,
    scheme, thresholds, ...) goes to bertkit_task.json together with the head's shape.
    """
    extra_config = {}
    if labels is not None:
        extra_config["id2label"] = {str(i): name for i, name in enumerate(labels)}
        extra_config["label2id"] = {name: i for i, name in enumerate(labels)}
    if isinstance(model, SequenceClassifier):
        extra_config["problem_type"] = model.problem_type
        if labels is None:
            extra_config["num_labels"] = model.classifier.out_features
    task_json = dict(task, head=model.head_spec())
    files = {TASK_FILE: (json.dumps(task_json, indent=2, ensure_ascii=False) + "\n").encode()}
    extra = _extra_state(model)
    if extra:
        files[HEAD_FILE] = save_safetensors_bytes(extra, metadata={"format": "pt"})
    target = model.encoder if isinstance(model, SpanTagger) else _Exported(model)
    return hub.save_model(target, path, tokenizer=tokenizer, architectures=[model.architecture],
                          extra_config=extra_config, extra_files=files)


def read_task(path: str | Path) -> dict:
    """bertkit_task.json of a saved task model; for a plain Hugging Face task directory (saved by
    transformers) a description inferred from config.json."""
    p = Path(path)
    if (p / TASK_FILE).is_file():
        try:
            return json.loads((p / TASK_FILE).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{p / TASK_FILE}: not valid JSON ({e})") from None
    cfg = hub.load_config(p).extra
    arch = (cfg.get("architectures") or [""])[0]
    labels = [cfg["id2label"][k] for k in sorted(cfg.get("id2label", {}), key=int)]
    if arch == "BertForSequenceClassification":
        problem = cfg.get("problem_type") or "single_label_classification"
        kind = {"regression": "float", "multi_label_classification": "multi"}.get(problem, "single")
        return {"task": "regress" if problem == "regression" else "classify", "labels": labels,
                "label_kind": kind, "text_column": "text", "label_column": "label",
                "head": {"kind": "sequence", "num_labels": len(labels) or 2,
                         "problem_type": problem}}
    if arch == "BertForTokenClassification":
        return {"task": "tag", "labels": labels, "alignment": "first",
                "head": {"kind": "token", "num_labels": len(labels), "crf": False}}
    if arch == "BertForQuestionAnswering":
        return {"task": "qa", "head": {"kind": "qa"}}
    raise UserError(f"{p}: not a fine-tuned model (no {TASK_FILE}, architecture {arch or 'none'})")


def load_task_model(path: str | Path, crf_factory=None,
                    device: str | torch.device = "cpu") -> tuple[nn.Module, dict]:
    """(model in eval mode, task description) from a directory written by `save_task_model` or
    by transformers' task models."""
    p = Path(path)
    task = read_task(p)
    cfg = hub.load_config(p)
    encoder_state, rest = hub.from_hf_state_dict(hub.load_weights(p))
    model = build_model(Encoder(cfg), task["head"], crf_factory)
    init_weights(model, cfg)
    if (p / HEAD_FILE).is_file():
        try:
            rest.update(load_safetensors_bytes((p / HEAD_FILE).read_bytes()))
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p / HEAD_FILE}: unreadable weights ({e})") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        missing = hub.load_state_into(model, encoder_state, rest, p)
    # Token and QA models have no pooler in transformers' layout; it is unused there.
    missing = [k for k in missing if not k.startswith("encoder.pooler.")]
    if missing:
        raise UserError(f"{p}: the saved model lacks {', '.join(missing)}")
    for w in caught:
        if "pooler" not in str(w.message):
            warnings.warn(w.message, stacklevel=2)
    return model.to(device).eval(), task


__all__ = ["SequenceClassifier", "TokenClassifier", "QuestionAnswerer", "SpanTagger",
           "first_subword_index", "build_model", "init_head",
           "save_task_model", "read_task", "load_task_model", "head_dropout", "TASK_FILE",
           "HEAD_FILE", "PROBLEM_TYPES"]
