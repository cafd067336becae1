"""How ELMo is used for a task: the language model frozen, its layers mixed with weights the
task learns (bertkit.model.scalar_mix), a small model on top. Here, tagging (POS, or any
CoNLL / CoNLL-U tags) one word at a time:

    tag(word) = softmax(W dropout(gamma * sum_j s_j h_j(word)) + b)

where h_j(word) is layer j's vector of the word's first piece (`--layers mix`), or one chosen
layer alone (`--layers 0`: ELMo's context-free token embedding, a static-vector baseline from
the same corpus and pieces). Any directory the Embedder loads works, so BERT's layers get the
same probe beside ELMo's, and so does a `bertkit static` directory (one layer: the word's
vector, the same in every context). The frozen vectors are computed once; the mix and the
linear layer then train with the shared loop (bertkit.training.loop.train). Tags that mark
entities (BIO, BIOES, IOB1) are judged by entity F1 (seqeval's), others by accuracy.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from bertkit.config import TrainConfig
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.plots import plot_layer_weights
from bertkit.embeddings.static import StaticVectors
from bertkit.figures import draw_or_skip
from bertkit.files import UserError, atomic_dir, check_not_input, write_json
from bertkit.finetuning.baselines import most_frequent_tag
from bertkit.finetuning.metrics import entity_scores
from bertkit.finetuning.readers import TaggedSentence, read_tagged
from bertkit.finetuning.recipe import hold_out
from bertkit.finetuning.tagging import has_entities
from bertkit.model.kind import ModelKind, model_kind
from bertkit.model.scalar_mix import ScalarMix
from bertkit.runtime import resolve_device
from bertkit.training.loop import train
from bertkit.training.settings import run_settings


class MixTagger(nn.Module):
    """Frozen per-layer word vectors [N, L+1, H] -> a scalar mix (or one layer) -> tag scores."""

    def __init__(self, num_layers: int, width: int, num_tags: int, layer: int | None = None,
                 dropout: float = 0.1, generator: torch.Generator | None = None):
        super().__init__()
        self.layer = layer
        self.mix = ScalarMix(num_layers) if layer is None else None
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(width, num_tags)
        with torch.no_grad():
            self.classifier.weight.normal_(0.0, 0.02, generator=generator)
            self.classifier.bias.zero_()

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        h = layers[:, self.layer] if self.mix is None else self.mix(layers.unbind(1))
        return self.classifier(self.dropout(h))


def word_layers(embedder: Embedder, sentences: Sequence[TaggedSentence], batch_size: int = 32,
                progress: bool = True) -> np.ndarray:
    """[words, L+1, H] every layer's vector of each word's first piece, the words of each
    sentence read in context (the tokens joined by spaces)."""
    texts, groups = [], []
    for s in sentences:
        text = " ".join(s.tokens)
        starts = np.cumsum([0] + [len(t) + 1 for t in s.tokens[:-1]])
        texts.append(text)
        groups.append([(int(a), int(a) + len(t)) for a, t in zip(starts, s.tokens)])
    encoded = embedder.tokenize(texts)
    positions = []
    for i, (e, spans) in enumerate(zip(encoded, groups)):
        mine = []
        for a, b in spans:
            hit = np.flatnonzero((e.segment == 0) & (e.offsets[:, 0] < b) & (e.offsets[:, 1] > a))
            if hit.size == 0:  # a word the tokenizer drops (a control character): [CLS]
                hit = np.array([0])
            mine.append(hit)
        positions.append(mine)
    L, H = embedder.config.num_layers + 1, embedder.config.hidden_size
    flat = embedder.pool_groups(encoded, positions, "all", "concat", "first", False,
                                batch_size, progress, "sentences")
    return flat.reshape(len(flat), L, H)


def static_word_layers(vectors: StaticVectors, sentences: Sequence[TaggedSentence]) -> np.ndarray:
    """[words, 1, D] each word's static vector (the mean of its pieces' for a piece vocabulary),
    zeros for a word out of the vocabulary: what a context-free model gives a tagger."""
    out = np.zeros((sum(len(s.tokens) for s in sentences), 1, vectors.dim), dtype=np.float32)
    known: dict[str, np.ndarray | None] = {}
    for n, word in enumerate(w for s in sentences for w in s.tokens):
        if word not in known:
            ids = vectors.ids_of(word)
            known[word] = vectors.vectors[ids].mean(0) if ids else None
        if known[word] is not None:
            out[n, 0] = known[word]
    return out


@dataclass
class ElmoTagOptions:
    """Tag words with a frozen ELMo (or BERT): a learned scalar mix of its layers, then linear."""
    model: Path = field(metadata={"model": True})
    """An ELMo directory (`bertkit road elmo`), a BERT one (whatever `bertkit embed` takes), or
    a `bertkit static` directory of word vectors."""
    train: Path
    """Tagged training sentences: CoNLL (token TAB tag) or CoNLL-U."""
    out: Path
    """Output directory: tagger.safetensors, tagger.json, metrics.json, metrics.jsonl, and with
    a mix layer_weights.png."""
    dev: Path | None = None
    """Tagged dev sentences; none holds out --dev-fraction of --train (the split `finetune`
    makes with the same seed)."""
    dev_fraction: float = 0.1
    """Share of the training sentences held out when there is no --dev."""
    conllu_column: Literal["upos", "xpos"] = "upos"
    """CoNLL-U: which column holds the tag."""
    layers: str = "mix"
    """"mix" (a learned scalar mix of every layer) or one layer number (0 = the token
    embeddings, -1 = the top)."""
    epochs: int = 20
    """Passes over the training words."""
    batch_size: int = 256
    """Words per step."""
    lr: float = 5e-3
    """Peak learning rate (AdamW, 5% warm-up, linear decay)."""
    dropout: float = 0.1
    """Dropout on the mixed vector."""
    seed: int = 0
    """Seed of the split, the initialisation, the batch order and dropout."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    quiet: bool = False
    """No progress on stderr."""


class _WordBatches:
    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
        self.x, self.y, self.batch_size, self.seed, self.epoch = x, y, batch_size, seed, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        self.epoch += 1
        order = torch.randperm(len(self.y), generator=g)
        for k in range(0, len(order), self.batch_size):
            rows = order[k:k + self.batch_size]
            yield {"layers": self.x[rows], "labels": self.y[rows],
                   "num_tokens": torch.tensor(len(rows))}


def read_splits(options: ElmoTagOptions) -> tuple[list[TaggedSentence], list[TaggedSentence],
                                                  list[str]]:
    """(training sentences, dev sentences, the tags seen in training); a dev tag never seen in
    training is a UserError."""
    sentences = read_tagged(options.train, options.conllu_column)
    if options.dev is None:
        train_set, dev_set = hold_out(sentences, options.dev_fraction, options.seed)
    else:
        train_set, dev_set = sentences, read_tagged(options.dev, options.conllu_column)
    tags = sorted({t for s in train_set for t in s.tags})
    unknown = sorted({t for s in dev_set for t in s.tags} - set(tags))
    if unknown:
        raise UserError(f"{options.dev or options.train}: dev tags never seen in training: "
                        f"{', '.join(unknown[:5])}")
    return train_set, dev_set, tags


def word_features(options: ElmoTagOptions, parts: Sequence[Sequence[TaggedSentence]]
                  ) -> tuple[list[torch.Tensor], int, int]:
    """Each part's words as [N, L, H] layers of the model (static vectors: one layer), with L
    and H."""
    if model_kind(options.model) is ModelKind.STATIC:
        vectors = StaticVectors.load(options.model)
        return ([torch.from_numpy(static_word_layers(vectors, part)) for part in parts],
                1, vectors.dim)
    embedder = Embedder.load(options.model, device=options.device)
    return ([torch.from_numpy(word_layers(embedder, part, progress=not options.quiet))
             for part in parts], embedder.config.num_layers + 1, embedder.config.hidden_size)


def chosen_layer(layers: str, num_layers: int) -> int | None:
    """--layers as a layer index in 0..num_layers - 1, or None for the mix."""
    if layers == "mix":
        return None
    try:
        layer = int(layers)
    except ValueError:
        raise UserError(f"--layers must be mix or a layer number, got {layers!r}") from None
    if not -num_layers <= layer < num_layers:
        raise UserError(f"--layers {layer}: the model has layers 0..{num_layers - 1}")
    return layer % num_layers


def dev_scores(model: nn.Module, features: torch.Tensor, labels: torch.Tensor,
               dev_set: Sequence[TaggedSentence], tags: list[str]) -> dict:
    """Dev accuracy per word and, for entity tags, entity precision, recall and F1."""
    device = next(model.parameters()).device
    scores = torch.cat([model(features[k:k + 4096].to(device)).argmax(-1).cpu()
                        for k in range(0, len(labels), 4096)])
    result = {"dev_accuracy": float((scores == labels).float().mean())}
    if has_entities(tags):
        flat = [tags[i] for i in scores.tolist()]
        bounds = np.cumsum([0] + [len(s.tags) for s in dev_set])
        pred = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        found = entity_scores([s.tags for s in dev_set], pred)
        result.update({f"dev_{k}": float(found[k]) for k in ("precision", "recall", "f1")})
    return result


def save_tagger(model: MixTagger, path: Path, description: dict) -> None:
    """tagger.safetensors and tagger.json (`description`: the model, tags and layers)."""
    with atomic_dir(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(tmp / "tagger.safetensors"))
        (tmp / "tagger.json").write_text(json.dumps(
            {"format": "bertkit-mix-tagger", **description}, indent=2) + "\n", encoding="utf-8")


def tag_words(options: ElmoTagOptions, command_line: str | None = None) -> dict:
    """Train the probe, score dev accuracy beside the most-frequent-tag baseline, save."""
    options = replace(options, device=str(resolve_device(options.device)))  # "auto": this one
    out = Path(options.out)
    check_not_input(out, [options.model, options.train, options.dev],
                    names=["model", "training file", "dev file"])
    train_set, dev_set, tags = read_splits(options)
    entities = has_entities(tags)
    features, L, H = word_features(options, (train_set, dev_set))
    layer = chosen_layer(options.layers, L)
    index = {t: i for i, t in enumerate(tags)}
    labels = [torch.tensor([index[t] for s in part for t in s.tags]) for part in
              (train_set, dev_set)]
    model = MixTagger(L, H, len(tags), layer, options.dropout,
                      torch.Generator().manual_seed(options.seed))
    steps = options.epochs * -(-len(labels[0]) // options.batch_size)
    evaluate = partial(dev_scores, features=features[1], labels=labels[1], dev_set=dev_set,
                       tags=tags)
    save = partial(save_tagger, description={"model": str(options.model), "tags": tags,
                                             "layers": options.layers, "num_layers": L,
                                             "width": H})
    cfg = TrainConfig(lr=options.lr, max_steps=steps, warmup_fraction=0.05, weight_decay=0.0,
                      seed=options.seed, eval_every=max(1, steps // options.epochs),
                      best_metric="dev_f1" if entities else "dev_accuracy", log_every=50)
    result = train(model, lambda m, b: (F.cross_entropy(m(b["layers"]), b["labels"]), {}),
                   _WordBatches(features[0], labels[0], options.batch_size, options.seed), cfg,
                   out, evaluate=evaluate, save=save, device=options.device,
                   fingerprint={"task": "elmo-tag", "layers": options.layers},
                   settings=run_settings({"options": options}, device=options.device,
                                         precision=cfg.precision, command=command_line),
                   show_progress=not options.quiet)
    model.cpu().eval()
    metrics = {**evaluate(model), "baseline": most_frequent_tag(train_set, dev_set),
               "train_words": len(labels[0]), "dev_words": len(labels[1]),
               "layers": options.layers, "steps": result.step,
               "train_seconds": result.train_seconds,
               "stopped_by": result.stopped_by}  # "interrupted": the weights of that step
    if model.mix is not None:
        metrics["layer_weights"] = model.mix.layer_weights().detach().tolist()
        metrics["gamma"] = float(model.mix.gamma.detach())
        if L > 1 and result.stopped_by != "interrupted":
            draw_or_skip(lambda: plot_layer_weights(
                {f"{Path(options.model).name} tagging {Path(options.train).name}":
                 metrics["layer_weights"]}, out / "layer_weights.png"), out / "layer_weights.png")
    write_json(out / "metrics.json", metrics)
    if not options.quiet:
        name, base = ("entity F1", "f1") if entities else ("accuracy", "accuracy")
        print(f"tagger ({options.layers}): dev {name} {metrics['dev_' + base]:.3f}, "
              f"most frequent tag {metrics['baseline'][base]:.3f}", file=sys.stderr)
    return metrics


__all__ = ["MixTagger", "word_layers", "static_word_layers", "ElmoTagOptions", "tag_words"]
