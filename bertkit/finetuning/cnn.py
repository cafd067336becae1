"""A convolutional network for sentence classification (Kim 2014), the BERT explainer's "CNN
for NLP": a model family that `finetune classify`, `pair` and `regress` train in place of BERT.

    words -> vectors [T, D] -> for each filter width w (3, 4, 5): F filters, each spanning
    w words and the full width D -> ReLU -> max over time (one number per filter)
    -> concatenation [3F] -> dropout -> linear -> logits

Max-pooling over time keeps, for each filter, how strongly its pattern occurs anywhere in the
sentence, whatever the position and the length. A pair of texts is encoded by the same
network one side at a time, and the classifier reads [u; v; |u - v|; u * v].

The word vectors are those of a `bertkit static` directory (its vocabulary and tokenization:
whole lowercase words, or a tokenizer's pieces), initialising an embedding table that is
fine-tuned ("static", Kim's CNN-non-static), kept fixed ("frozen", CNN-static) or learned
from random values over the same vocabulary ("random", CNN-rand).

The recipe (`bertkit.finetuning.recipe.finetune`) takes this family as its `backbone`: the
tasks, the data, the dev evaluation, the best checkpoint and the shared training loop are
BERT's. The result is a directory with the task (bertkit_task.json), cnn.json (the shape and
vocabulary) and cnn.safetensors; `load_cnn` reads it back.

Shapes: B batch, T words, D vector width, F filters per width, K labels.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, Sequence, runtime_checkable

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.files import UserError, atomic_dir, read_json
from bertkit.finetuning.heads import PROBLEM_TYPES, TASK_FILE, problem_loss, read_task_file
from bertkit.finetuning.tasks import TASKS, task_type
from bertkit.model.kind import CNN_FILE, CNN_WEIGHTS_FILE as WEIGHTS_FILE
from bertkit.embeddings.static import TOKENIZER_DIR, StaticVectors, Tokenization
from bertkit.text.tokenizer import Tokenizer

SPECIALS = ("[PAD]", "[UNK]", "[SEP]")
PAD, UNK, SEP = 0, 1, 2


@dataclass
class CnnOptions:
    """The convolutional model family (`--model cnn`)."""

    vectors: Path | None = None
    """With --model cnn: a `bertkit static` directory, whose vocabulary and vectors the
    network reads."""
    embeddings: Literal["static", "frozen", "random"] = "static"
    """With --model cnn: the static vectors fine-tuned (static), kept fixed (frozen), or
    random values learned over their vocabulary (random)."""
    filter_widths: list[int] = field(default_factory=lambda: [3, 4, 5])
    """With --model cnn: words each filter spans, one group of filters per width."""
    filters: int = 100
    """With --model cnn: filters per width."""
    cnn_dropout: float = 0.5
    """With --model cnn: dropout on the pooled features."""

    def __post_init__(self) -> None:
        if not self.filter_widths or min(self.filter_widths) < 1 or self.filters < 1:
            raise UserError("--filter-widths and --filters must be positive")
        if not 0 <= self.cnn_dropout < 1:
            raise UserError(f"--cnn-dropout must be in [0, 1), got {self.cnn_dropout}")


# Words -> ids -----------------------------------------------------------------------------------

@dataclass
class WordEncoding:
    ids: list[int]
    type_ids: list[int]


class WordBatch(list):
    """The encodings of a batch, and which were cut to the maximum length (as
    `bertkit.text.tokenizer.EncodedBatch.cut`)."""

    def __init__(self):
        super().__init__()
        self.cut: list[bool] = []


class WordTokenizer:
    """Texts -> vocabulary ids with the tokenization of a static-vectors directory; the same
    `encode_batch` call as bertkit's Tokenizer, so the tasks encode through it unchanged. A
    pair is a [SEP] b (type ids 0 then 1); ids 0, 1, 2 are [PAD], [UNK], [SEP]."""

    def __init__(self, tokens: Sequence[str], tokenization: Tokenization):
        self.tokens = list(SPECIALS) + list(tokens)
        self.tokenization = tokenization
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id = PAD

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.index)

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [[self.index.get(t, UNK) for t in toks] for toks in self.tokenization.tokens(texts)]

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *,
                     max_length: int | None = None, truncation: str | bool = "longest_first",
                     **_) -> "WordBatch":
        firsts = self._ids(texts)
        seconds = self._ids(pairs) if pairs is not None else [None] * len(firsts)
        out = WordBatch()
        for a, b in zip(firsts, seconds):
            if b is None:
                out.cut.append(bool(max_length and truncation and len(a) > max_length))
                a = a[:max_length] if max_length and truncation else a
                out.append(WordEncoding(a, [0] * len(a)))
                continue
            out.cut.append(bool(max_length and truncation and len(a) + len(b) + 1 > max_length))
            if max_length and truncation:  # trim the longer side, one word at a time
                a, b = list(a), list(b)
                while len(a) + len(b) + 1 > max_length and (a or b):
                    (a if len(a) >= len(b) else b).pop()
            out.append(WordEncoding(a + [SEP] + b, [0] * len(a) + [1] * (len(b) + 1)))
        return out

    def to_json(self) -> dict:
        return {"tokens": self.tokens[len(SPECIALS):], "tokenization": self.tokenization.kind}


# The network ------------------------------------------------------------------------------------

def max_over_time(maps: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """maps [B, F, P], valid [B, P] bool -> the largest value of each map at a valid position,
    [B, F] (0 for a row with none)."""
    pooled = maps.masked_fill(~valid[:, None, :], float("-inf")).amax(-1)
    return pooled.masked_fill(~valid.any(-1, keepdim=True), 0.0)


class ConvEncoder(nn.Module):
    """Word ids -> one feature per filter: the convolutions and max-pooling over time."""

    def __init__(self, vocab_size: int, dim: int, widths: Sequence[int], filters: int):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        # A filter of width w spans w words and all D numbers of each: a Conv1d over time
        # with D input channels. Padding w - 1 both sides lets a text shorter than w (or a
        # pattern at its edge) still meet every filter.
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, w, padding=w - 1) for w in widths)
        self.widths = tuple(widths)

    @property
    def width(self) -> int:
        return len(self.convs) * self.convs[0].out_channels

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ids, mask [B, T] (mask: the words to read) -> features [B, F * len(widths)]."""
        keep = mask.to(self.embeddings.weight.dtype)
        x = (self.embeddings(ids) * keep[..., None]).transpose(1, 2)  # [B, D, T]
        features = []
        for w, conv in zip(self.widths, self.convs):
            maps = F.relu(conv(x))  # [B, F, T + w - 1]
            # a window counts when it holds at least one word of the text
            valid = F.conv1d(keep[:, None, :], keep.new_ones(1, 1, w), padding=w - 1)[:, 0] > 0
            features.append(max_over_time(maps, valid))
        return torch.cat(features, -1)


class ConvClassifier(nn.Module):
    """ConvEncoder -> dropout -> linear: logits [B, K] (a pair: [u; v; |u - v|; u * v]).
    Called as BERT's SequenceClassifier: (input_ids, token_type_ids, attention_mask)."""

    def __init__(self, vocab_size: int, dim: int, num_labels: int, *, widths: Sequence[int],
                 filters: int, dropout: float, pair: bool,
                 problem_type: str = "single_label_classification"):
        super().__init__()
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
        self.conv = ConvEncoder(vocab_size, dim, widths, filters)
        self.pair = pair
        self.problem_type = problem_type
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.conv.width * (4 if pair else 1), num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None \
            else attention_mask.bool()
        if not self.pair:
            return self.classifier(self.dropout(self.conv(input_ids, mask)))
        second = token_type_ids.bool() if token_type_ids is not None else torch.zeros_like(mask)
        words = mask & (input_ids != SEP)
        u = self.conv(input_ids, words & ~second)
        v = self.conv(input_ids, words & second)
        return self.classifier(self.dropout(torch.cat([u, v, (u - v).abs(), u * v], -1)))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return problem_loss(logits, labels, self.problem_type)


# The family as the recipe's backbone ------------------------------------------------------------

@runtime_checkable
class SentenceTask(Protocol):
    """What the CNN reads of its task: one label (or number) per text or pair of texts."""
    problem_type: str
    """One of PROBLEM_TYPES: the classifier's loss."""
    pairs: bool
    """Whether each example is a pair of texts."""

    def label_names(self) -> tuple[str, ...]: ...


class CnnBackbone:
    """The family as a `bertkit.finetuning.backbone.Backbone`: a tokenizer, the longest
    input, a fresh task model, and how to save one."""
    architecture = None  # not a transformer: no pooling choice, no word-case embedding
    block_weights = None
    lowercases = False
    width = None  # its filters' outputs are a head's business, not a vector a task sizes

    def __init__(self, vectors: StaticVectors, options: CnnOptions):
        self.vectors = vectors
        self.options = options
        self.tokenizer = WordTokenizer(vectors.tokens, vectors.tokenization)
        self.max_positions = 100_000  # words: a convolution has no position limit

    def check_fit(self, items) -> None:
        """Nothing to check: the ids are those of the network's own vocabulary."""

    def activation_bytes(self, inputs: int, length: int) -> None:
        """Not estimated: a convolution over word vectors keeps little."""

    @classmethod
    def load(cls, options: CnnOptions) -> "CnnBackbone":
        if options.vectors is None:
            raise UserError("--model cnn needs --vectors DIR (a `bertkit static train` "
                            "directory: the vocabulary and the word vectors)")
        return cls(StaticVectors.load(options.vectors), options)

    @staticmethod
    def trains(task_type: type) -> bool:
        """Whether the family trains tasks of this class: those that answer SentenceTask."""
        return all(hasattr(task_type, name) for name in ("problem_type", "pairs", "label_names"))

    def check_task(self, task) -> None:
        if not isinstance(task, SentenceTask):
            raise UserError(f"--model cnn trains a label or a number per text (classify, pair, "
                            f"regress), not the {task.name} task")

    def build(self, task, seed: int) -> ConvClassifier:
        """The network for `task` (labels known), initialised from `seed`."""
        self.check_task(task)
        labels = len(task.label_names()) or 1
        o = self.options
        with torch.random.fork_rng(devices=[]):  # the modules' default init draws globally
            model = ConvClassifier(self.tokenizer.vocab_size, self.vectors.dim, labels,
                                   widths=o.filter_widths, filters=o.filters,
                                   dropout=o.cnn_dropout, pair=task.pairs,
                                   problem_type=task.problem_type)
        init_cnn(model, torch.Generator().manual_seed(seed),
                 None if o.embeddings == "random" else torch.from_numpy(self.vectors.vectors))
        model.conv.embeddings.weight.requires_grad_(o.embeddings != "frozen")
        return model

    def spec(self, model: ConvClassifier) -> dict:
        o = self.options
        return {"format": "bertkit-cnn", "dim": self.vectors.dim, "widths": list(o.filter_widths),
                "filters": o.filters, "dropout": o.cnn_dropout, "pair": model.pair,
                "problem_type": model.problem_type,
                "num_labels": model.classifier.out_features, "embeddings": o.embeddings,
                "vectors": str(o.vectors), **self.tokenizer.to_json()}

    def save(self, model: ConvClassifier, path: str | Path, *, task: dict, tokenizer=None,
             labels: list[str] | None = None) -> Path:
        """A directory: bertkit_task.json, cnn.json, cnn.safetensors (and the tokenizer of
        piece vectors)."""
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        with atomic_dir(path) as tmp:
            save_file(state, str(tmp / WEIGHTS_FILE))
            (tmp / CNN_FILE).write_text(json.dumps(self.spec(model), ensure_ascii=False) + "\n",
                                        encoding="utf-8")
            (tmp / TASK_FILE).write_text(json.dumps(task, indent=2) + "\n", encoding="utf-8")
            if self.vectors.tokenization.tokenizer is not None:
                self.vectors.tokenization.tokenizer.save(tmp / TOKENIZER_DIR)
        return Path(path)


def init_cnn(model: ConvClassifier, generator: torch.Generator,
             vectors: torch.Tensor | None = None) -> None:
    """Kim's initialisation: the static vectors where given (specials: [PAD] zero, the others
    small uniform), else U(-0.25, 0.25) word vectors; filters and classifier uniform in
    +-1/sqrt(fan_in), zero biases."""
    with torch.no_grad():
        E = model.conv.embeddings.weight
        E.uniform_(-0.25, 0.25, generator=generator)
        if vectors is not None:
            E[len(SPECIALS):] = vectors.to(E.dtype)
        E[PAD] = 0
        for layer in [*model.conv.convs, model.classifier]:
            bound = 1 / layer.weight[0].numel() ** 0.5
            layer.weight.uniform_(-bound, bound, generator=generator)
            layer.bias.zero_()


def load_cnn(path: str | Path, device: str | torch.device = "cpu",
             task_types: Sequence[type] = TASKS):
    """(model, tokenizer, task) of a directory written by `finetune --model cnn`, its task
    found by name among `task_types`; build a `bertkit.finetuning.predict.TaskModel` from
    them to predict and evaluate."""
    p = Path(path)
    spec = read_json(p / CNN_FILE, "bertkit CNN", format="bertkit-cnn")
    tokenizer = Tokenizer.load(p / TOKENIZER_DIR) if spec["tokenization"] == "pieces" else None
    words = WordTokenizer(spec["tokens"], Tokenization(tokenizer))
    model = ConvClassifier(words.vocab_size, spec["dim"], spec["num_labels"],
                           widths=spec["widths"], filters=spec["filters"],
                           dropout=spec["dropout"], pair=spec["pair"],
                           problem_type=spec["problem_type"])
    model.load_state_dict(load_file(str(p / WEIGHTS_FILE)))
    data = read_task_file(p)
    task = task_type(data.get("task", ""), task_types).from_json(data)
    return model.to(device).eval(), words, task


__all__ = ["CnnOptions", "WordTokenizer", "ConvEncoder", "ConvClassifier", "CnnBackbone",
           "SentenceTask",
           "max_over_time", "init_cnn", "load_cnn"]
