"""Task models: an Encoder plus a small head, saved as the Hugging Face task model of that shape.

Each model holds `.encoder` and its head under the Hugging Face name (`classifier`,
`qa_outputs`), so the exported weights load in `transformers` as BertForSequenceClassification,
BertForTokenClassification or BertForQuestionAnswering with no missing or unexpected keys.
What transformers has no place for (CRF transitions, the span head) goes to
`task_head.safetensors`, and what the task is (labels, columns, scheme, thresholds) to
`bertkit_task.json`; both sit beside config.json and are ignored by transformers. Which head a
task uses is the task's choice (`Task.make_model`); saving and loading ask the model, never
the task's name.

Shapes: B batch, T tokens, W words, H hidden, K labels, L longest span.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from bertkit.model import hub
from bertkit.files import UserError
from bertkit.finetuning.inputs import WORD_CASES
from bertkit.model.encoder import Encoder, cls_rows, init_weights
from bertkit.model.heads import IGNORE_INDEX
from bertkit.model.kind import TASK_FILE
from bertkit.model.scalar_mix import ScalarMix

HEAD_FILE = "task_head.safetensors"
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")
POOLINGS = ("cls", "mean")
"""What a sequence head reads: [CLS] (through the pooler for "bert"), or the tokens' mean."""


def problem_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """The loss of a sequence head of `problem_type` (one of PROBLEM_TYPES), as transformers'
    BertForSequenceClassification computes it: squared error (per output for several),
    a sigmoid per label, or a softmax over the labels. Every model family's sequence head
    (the encoder's, the CNN's) calls this one."""
    if problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1)) \
            if logits.shape[-1] == 1 else F.mse_loss(logits, labels.to(logits.dtype))
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    return F.cross_entropy(logits, labels)


def head_dropout(encoder: Encoder) -> float:
    """Hugging Face's rule: `classifier_dropout` from config.json, else the hidden dropout."""
    p = encoder.config.extra.get("classifier_dropout")
    return encoder.config.hidden_dropout if p is None else float(p)


@dataclass(frozen=True)
class Parts:
    """The optional parts of a task model, declared to its constructor."""
    layer_mix: bool = False
    """The head reads ELMo's learned mix of all layers (`finetune --layer-mix`)."""
    word_case: bool = False
    """Each piece's word case is an input beside its id (`finetune tag --case-feature`)."""


class WordCaseInput(nn.Module):
    """An embedding of each piece's word case (inputs.WORD_CASES), added to the encoder's
    input embeddings. It starts at zero, so that fine-tuning starts from the pretrained
    model's input (the heads' random initialisation does not reach it)."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(len(WORD_CASES), width))  # [cases, H]

    def forward(self, case_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(case_ids, self.weight)  # [B, T] -> [B, T, H]


class TaskHead(nn.Module):
    """An encoder with a head: how it is saved for transformers. Subclasses set the class
    attributes, hold `.encoder`, and name their head modules as transformers does."""

    architecture = "BertModel"
    """The transformers class that loads the saved directory."""
    uses_pooler = True
    """Whether that class has the pooler (transformers' token and QA models have none)."""
    hf_heads: tuple[str, ...] = ()
    """Child modules transformers has a place for; other non-encoder children go to
    task_head.safetensors."""

    def __init__(self, encoder: Encoder, parts: Parts | None = None):
        super().__init__()
        parts = parts or Parts()
        self.encoder = encoder
        width, depth = encoder.config.hidden_size, encoder.config.num_layers
        self.layer_mix = ScalarMix(depth + 1) if parts.layer_mix else None
        """ELMo's learned mix of the embeddings and every layer, which the head then reads;
        None: the last layer."""
        self.word_case = WordCaseInput(width) if parts.word_case else None
        """Each piece's word case embedded and added to the encoder's input; None: no such
        input."""

    def hf_config(self) -> dict:
        """config.json entries the transformers class reads (beyond id2label / label2id)."""
        return {}

    def token_states(self, input_ids, token_type_ids=None, attention_mask=None,
                     case_ids=None) -> torch.Tensor:
        """[B, T, H] what the head reads: the last layer, or, when the model has a `layer_mix`
        (`finetune --layer-mix`, bertkit.model.scalar_mix), ELMo's learned mix of all layers.
        With a `word_case` embedding (`finetune --case-feature`), `case_ids` [B, T] (each
        piece's word case, inputs.WORD_CASES) add it to the encoder's input."""
        mix, case = self.layer_mix, self.word_case
        extra = None if case is None or case_ids is None else case(case_ids)  # [B, T, H]
        if mix is None:
            return self.encoder(input_ids, token_type_ids, attention_mask,
                                extra_embeddings=extra).last_hidden_state
        return mix(self.encoder(input_ids, token_type_ids, attention_mask,
                                output_hidden_states=True, extra_embeddings=extra).hidden_states)

    def head_spec(self) -> dict:
        """The head's shape, saved under "head" in bertkit_task.json."""
        return {}

    def transformers_reads_it(self) -> bool:
        """Whether the transformers class `architecture` computes what this model does: not
        with a word-case input (no transformers class takes one) or a mean-pooled head."""
        return self.word_case is None


class SequenceClassifier(TaskHead):
    """Pooled [CLS] -> dropout -> linear (BertForSequenceClassification); also sentence pairs.
    `pooling="mean"` reads the mean of the last layer over the tokens instead of [CLS]."""

    architecture = "BertForSequenceClassification"
    uses_pooler = True
    hf_heads = ("classifier",)

    def __init__(self, encoder: Encoder, num_labels: int,
                 problem_type: str = "single_label_classification", pooling: str = "cls",
                 parts: Parts | None = None):
        super().__init__(encoder, parts)
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.problem_type = problem_type
        self.pooling = pooling
        self.dropout = nn.Dropout(head_dropout(encoder))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        if self.pooling == "mean":  # no pooler: BERT's was trained on [CLS] alone
            h = self.token_states(input_ids, token_type_ids, attention_mask)  # [B, T, H]
            keep = (torch.ones_like(input_ids) if attention_mask is None
                    else attention_mask)[..., None].to(h.dtype)  # [B, T, 1]
            mean = (h * keep).sum(1) / keep.sum(1).clamp(min=1)  # [B, H]
            return self.classifier(self.dropout(mean))  # [B, K]
        if self.layer_mix is not None:  # every layer at [CLS], mixed
            h = self.token_states(input_ids, token_type_ids, attention_mask)
            cls = h.flatten(0, 1)[cls_rows(input_ids)]  # [B, H]
        else:  # the head reads [CLS] alone, so the last block runs at [CLS] alone
            cls, = self.encoder.forward_rows(input_ids, token_type_ids, attention_mask,
                                             cls_rows(input_ids))  # [B, H]
        pooled = self.encoder.pool(cls)
        return self.classifier(self.dropout(pooled))  # [B, K]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return problem_loss(logits, labels, self.problem_type)

    def hf_config(self) -> dict:
        return {"problem_type": self.problem_type, "num_labels": self.classifier.out_features}

    def head_spec(self) -> dict:
        return {"kind": "sequence", "num_labels": self.classifier.out_features,
                "problem_type": self.problem_type, "pooling": self.pooling}

    def transformers_reads_it(self) -> bool:
        return super().transformers_reads_it() and self.pooling == "cls"


class TokenClassifier(TaskHead):
    """Every token -> dropout -> linear (BertForTokenClassification), optionally a linear-chain
    CRF on top.

    Labels live on subword pieces (tagging.align_labels: copied from the word or on the first
    piece only, IGNORE_INDEX elsewhere); the CRF chains the labelled pieces, skipping the rest,
    and Viterbi decodes the same positions.
    """

    architecture = "BertForTokenClassification"
    uses_pooler = False
    hf_heads = ("classifier",)

    def __init__(self, encoder: Encoder, num_labels: int, crf: nn.Module | None = None,
                 parts: Parts | None = None):
        super().__init__(encoder, parts)
        self.dropout = nn.Dropout(head_dropout(encoder))
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        self.crf = crf

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                case_ids=None) -> torch.Tensor:
        h = self.token_states(input_ids, token_type_ids, attention_mask, case_ids)
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


class QuestionAnswerer(TaskHead):
    """Start and end scores for every token (BertForQuestionAnswering: no dropout before it)."""

    architecture = "BertForQuestionAnswering"
    uses_pooler = False
    hf_heads = ("qa_outputs",)

    def __init__(self, encoder: Encoder, parts: Parts | None = None):
        super().__init__(encoder, parts)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        h = self.token_states(input_ids, token_type_ids, attention_mask)
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


# Initialising, saving, loading -------------------------------------------------------------------

def init_head(model: nn.Module, generator: torch.Generator) -> None:
    """BERT's initialisation (N(0, initializer_range) weights, zero biases, unit LayerNorms) for
    everything but the (pretrained) encoder, drawn from `generator`."""
    std = model.encoder.config.initializer_range
    for name, child in model.named_children():
        if name == "encoder":
            continue
        for m in child.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std, generator=generator)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)


class _Exported(nn.Module):
    """The weights transformers expects: encoder (without the pooler for token and QA models,
    as transformers builds them) and the HF-named head. Shares the model's tensors."""

    def __init__(self, model: TaskHead):
        super().__init__()
        enc = model.encoder
        self.encoder = nn.Module()
        self.encoder.config = enc.config
        self.encoder.embeddings = enc.embeddings
        self.encoder.blocks = enc.blocks
        if model.uses_pooler:
            self.encoder.pooler = enc.pooler
        for name in model.hf_heads:
            setattr(self, name, getattr(model, name))


def _hf_heads(model: TaskHead) -> tuple[str, ...]:
    """The heads saved under their transformers names. transformers' ModernBERT task models
    put a dense + LayerNorm head between the encoder and the classifier, which bertkit's heads
    do not have: a "modern" task model is saved as a ModernBertModel, its head beside it. So
    is a model that its transformers class would not compute (`transformers_reads_it`)."""
    if model.encoder.config.architecture == "modern" or not model.transformers_reads_it():
        return ()
    return model.hf_heads


def _extra_state(model: TaskHead) -> dict[str, torch.Tensor]:
    """Weights transformers has no place for (CRF transitions, the span head)."""
    out = {}
    for prefix, module in model.named_children():
        if prefix != "encoder" and prefix not in _hf_heads(model):
            out.update({f"{prefix}.{k}": v.detach().cpu().float().contiguous()
                        for k, v in module.state_dict().items()})
    return out


def save_task_model(model: TaskHead, path: str | Path, *, task: dict, tokenizer=None,
                    labels: list[str] | None = None) -> Path:
    """Write `model` as a Hugging Face directory plus bertkit_task.json / task_head.safetensors.

    `labels` become id2label/label2id in config.json; `task` (JSON: the task's name and
    settings, `Task.to_json()`) goes to bertkit_task.json together with the head's shape.
    """
    extra_config = model.hf_config()
    if labels is not None:
        extra_config.pop("num_labels", None)  # transformers counts id2label
        extra_config["id2label"] = {str(i): name for i, name in enumerate(labels)}
        extra_config["label2id"] = {name: i for i, name in enumerate(labels)}
    task_json = dict(task, head=model.head_spec())
    if model.layer_mix is not None:  # its weights go to task_head.safetensors
        task_json["head"]["layer_mix"] = model.layer_mix.num_layers
    files = {TASK_FILE: (json.dumps(task_json, indent=2, ensure_ascii=False) + "\n").encode()}
    extra = _extra_state(model)
    if extra:
        files[HEAD_FILE] = save_safetensors_bytes(extra, metadata={"format": "pt"})
    target = _Exported(model) if _hf_heads(model) else model.encoder
    if model.encoder.config.architecture == "modern":
        architecture = "ModernBertModel"
    elif _hf_heads(model) or not model.hf_heads:
        architecture = model.architecture
    else:  # a head transformers' class would not compute, saved beside a BertModel
        architecture = "BertModel"
    return hub.save_model(target, path, tokenizer=tokenizer, architectures=[architecture],
                          extra_config=extra_config, extra_files=files)


def read_task_file(path: str | Path) -> dict | None:
    """bertkit_task.json of a saved task model, or None when the directory has none."""
    file = Path(path) / TASK_FILE
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{file}: not valid JSON ({e})") from None


def saved_parts(path: str | Path) -> Parts:
    """The optional parts a saved task model's head declares in its bertkit_task.json (the
    word case is a setting of the task itself, which builds it)."""
    head = (read_task_file(path) or {}).get("head") or {}
    return Parts(layer_mix=bool(head.get("layer_mix")))


def task_model(task, encoder: Encoder, layer_mix: bool = False) -> nn.Module:
    """`task.make_model` (a finetuning Task's) of `encoder`; the layer mix asked for only when
    wanted, so that a task of the user's whose `make_model` takes the encoder alone builds."""
    return task.make_model(encoder, layer_mix=True) if layer_mix else task.make_model(encoder)


def load_task_model(task, path: str | Path, device: str | torch.device = "cpu") -> TaskHead:
    """The task model of a saved directory: `task` (a finetuning Task) builds it with the parts
    the directory declares, and its weights are loaded; in eval mode on `device`."""
    model = task_model(task, Encoder(hub.load_config(path)), saved_parts(path).layer_mix)
    return load_task_weights(model, path, device)


def load_task_weights(model: TaskHead, path: str | Path,
                      device: str | torch.device = "cpu") -> TaskHead:
    """Fill `model` (built by its task for the saved config, with the `saved_parts`) with the weights of a directory
    written by `save_task_model` or by transformers' task models; returns it in eval mode."""
    p = Path(path)
    encoder_state, rest = hub.from_hf_state_dict(hub.load_weights(p),
                                                 model.encoder.config.architecture)
    init_weights(model, model.encoder.config)
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
    return model.to(device).eval()


__all__ = ["Parts", "WordCaseInput", "saved_parts", "TaskHead", "SequenceClassifier",
           "TokenClassifier", "QuestionAnswerer",
           "first_subword_index", "init_head", "save_task_model", "read_task_file",
           "task_model", "load_task_model", "load_task_weights", "head_dropout", "problem_loss", "TASK_FILE", "HEAD_FILE",
           "PROBLEM_TYPES", "POOLINGS"]
