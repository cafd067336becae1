"""Pictures of what an encoder does: word senses in 2-D, anisotropy per layer, attention, the
weights a learned mix gives each layer.

Every function writes one PNG (atomically) that explains itself: a title saying what is shown
and how it was made, labelled axes, a legend, and returns a `Plot`: the file, the figure, and
the numbers drawn. Figures are `matplotlib.figure.Figure`s of their own, saved through their
canvas, never pyplot, so no backend is chosen and the caller's open figures are left alone.
matplotlib is an extra (`bertkit.figures`): without it each function fails at once, before any
encoding, with a one-line `UserError`.
"""
from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from bertkit.embeddings.anisotropy import AnisotropyReport
from bertkit.embeddings.embedder import Embedder, LayerSpec
from bertkit.embeddings.pca import pca
from bertkit.figures import colormap, new_figure, require_matplotlib, save_png
from bertkit.files import UserError
from bertkit.model.attention import attention_weights
from bertkit.senses.data import SenseExample, read_examples
from bertkit.text.tokenizer import cut_warning

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Plot:
    """A written picture and what it shows."""

    path: Path
    figure: Figure
    data: dict = field(default_factory=dict)
    """The numbers drawn, by name (see each plot function)."""


def _save(fig: Figure, out: str | Path, data: dict) -> Plot:
    return Plot(save_png(fig, out), fig, data)


# Word senses ----------------------------------------------------------------------------------

def _context(inst: SenseExample, words: int = 4) -> str:
    """A few words either side of the target, the target in capitals: "...his more WORKS"."""
    left = inst.text[:inst.start].split()
    right = inst.text[inst.end:].split()
    return " ".join((["…"] if len(left) > words else []) + left[-words:]
                    + [inst.text[inst.start:inst.end].upper()] + right[:words]
                    + (["…"] if len(right) > words else []))


def read_sense_instances(path: str | Path, lemma: str, max_per_sense: int = 50,
                         min_per_sense: int = 1) -> list[SenseExample]:
    """The instances of `lemma` in a sense-labelled JSON-lines file (the format of
    `bertkit.senses.data`), at most `max_per_sense` of each sense, senses with fewer than
    `min_per_sense` left out."""
    found = [e for e in read_examples(path) if e.lemma == lemma]
    counts = Counter(e.synset for e in found)
    kept, taken = [], Counter()
    for e in found:
        if counts[e.synset] >= min_per_sense and taken[e.synset] < max_per_sense:
            kept.append(e)
            taken[e.synset] += 1
    if len(kept) < 3:
        raise UserError(f"{path}: {len(kept)} instances of {lemma!r} (with at least "
                        f"{min_per_sense} per sense); need 3 or more to draw")
    return kept


def project_2d(x: np.ndarray, method: str = "pca",
               seed: int = 0) -> tuple[np.ndarray, tuple[str, str]]:
    """[N, H] -> [N, 2] by PCA (centred SVD) or UMAP (needs umap-learn); returns the points
    and the two axis labels."""
    x = np.asarray(x, np.float64)
    if method == "umap":
        try:  # an optional package, imported only when asked for
            import umap
        except ImportError:
            raise UserError("--method umap needs the umap-learn package "
                            "(pip install umap-learn); PCA needs nothing") from None
        reducer = umap.UMAP(n_components=2, n_neighbors=min(15, len(x) - 1), random_state=seed)
        return reducer.fit_transform(x), ("UMAP 1", "UMAP 2")
    if method != "pca":
        raise ValueError(f"method {method!r} is not pca or umap")
    points, explained = pca(x)
    labels = tuple(f"principal component {k + 1} ({e:.0%} of variance)"
                   for k, e in enumerate(explained))
    return points, labels


def plot_senses(embedder: Embedder, instances: Sequence[SenseExample], out: str | Path, *,
                layers: LayerSpec = "last4", method: str = "pca", standardize: bool = False,
                title_word: str | None = None, annotate: int = 6, seed: int = 0) -> Plot:
    """Scatter one word's contextual vectors across sentences in 2-D, coloured by sense,
    with a few points labelled by their sentence (the seeds' figure of "die").

    data: "points" {sense: [n, 2] the points drawn}, "axes" (the two axis labels)."""
    require_matplotlib(out)
    vectors = embedder.word_vectors([i.text for i in instances],
                                    [(i.start, i.end) for i in instances], layers=layers,
                                    standardize=standardize)
    points, axis = project_2d(vectors, method, seed)
    senses = [s for s, _ in Counter(i.synset for i in instances).most_common()]
    gloss = {i.synset: i.gloss for i in instances}
    fig = new_figure(out, figsize=(10, 7))
    cmap = colormap("tab10" if len(senses) <= 10 else "tab20")
    ax = fig.subplots()
    markers = "osD^v<>ph*"
    drawn = {}
    for k, sense in enumerate(senses):
        rows = [j for j, i in enumerate(instances) if i.synset == sense]
        drawn[sense] = points[rows]
        label = f"{sense}: {textwrap.shorten(gloss[sense], 60)}" if gloss[sense] else sense
        ax.scatter(points[rows, 0], points[rows, 1], s=60, color=cmap(k % cmap.N),
                   marker=markers[k % len(markers)], edgecolor="black", linewidth=0.4,
                   label=f"{label} ({len(rows)})")
    # Label one point of each of the first senses with the words around the target.
    for sense in senses[:annotate]:
        j = next(j for j, i in enumerate(instances) if i.synset == sense)
        ax.annotate(_context(instances[j]), points[j], fontsize=7, alpha=0.85,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(axis[0])
    ax.set_ylabel(axis[1])
    word = title_word or instances[0].text[instances[0].start:instances[0].end]
    layer_name = {"last4": "mean of the last 4 layers"}.get(layers, f"layer {layers}") \
        if isinstance(layers, (str, int)) else f"layers {list(layers)}"
    ax.set_title(f"Contextual vectors of \"{word}\" in {len(instances)} sentences, "
                 f"coloured by sense\n({method.upper()} projection of "
                 f"{layer_name}{', standardized' if standardize else ''})")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5),
              title="sense: gloss (instances)", title_fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, {"points": drawn, "axes": axis})


def _short(path: str) -> str:
    """The last two parts of a path: enough to name a model without a site-packages prefix."""
    parts = Path(path).parts
    return "/".join(parts[-2:]) if parts else path


# Anisotropy -------------------------------------------------------------------------------------

def plot_anisotropy(report: AnisotropyReport, out: str | Path) -> Plot:
    """Per layer: expected cosine before and after standardization, with self-similarity and
    intra-sentence similarity; beside it, the share of the expected cosine that the top rogue
    dimensions carry.

    data: "layers", "lines" {label: one value per layer}, "rogue_share" [k, layers]."""
    layers = [s.layer for s in report.layers]
    lines: dict[str, list[float]] = {}
    fig = new_figure(out, figsize=(13, 5))
    left, right = fig.subplots(1, 2)
    series = [("anisotropy", "expected cosine (anisotropy)", "o", "C3"),
              ("self_similarity", "self-similarity (same word)", "s", "C0"),
              ("intra_sentence", "intra-sentence similarity", "^", "C2")]
    for key, label, marker, color in series:
        raw = lines[f"{label}, raw"] = [getattr(s, key) for s in report.layers]
        std = lines[f"{label}, standardized"] = [getattr(s, key + "_std") for s in report.layers]
        left.plot(layers, raw, marker=marker, color=color, label=f"{label}, raw")
        left.plot(layers, std, marker=marker, color=color, linestyle="--",
                  markerfacecolor="white", label=f"{label}, standardized")
    left.axhline(0, color="grey", linewidth=0.8)
    left.set_xlabel("layer (0 = embedding layer)")
    left.set_ylabel("mean cosine")
    left.set_xticks(layers)
    left.set_title("Cosine between word vectors, before and after standardization\n"
                   f"(standardized with the mean and std of {report.standardized_with})",
                   fontsize=10)
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    left.grid(alpha=0.3)

    k = len(report.layers[0].rogue)
    bottom = np.zeros(len(layers))
    shares = []
    for r in range(k):
        share = np.array([s.rogue[r].share if r < len(s.rogue) else 0 for s in report.layers])
        shares.append(share)
        bars = right.bar(layers, share, bottom=bottom, color=colormap("Oranges")(
            0.8 - 0.5 * r / max(k, 1)), edgecolor="black", linewidth=0.4,
            label=f"rogue dimension #{r + 1}")
        for b, s in zip(bars, report.layers):
            if r < len(s.rogue) and s.rogue[r].share > 0.04:
                right.text(b.get_x() + b.get_width() / 2, b.get_y() + b.get_height() / 2,
                           f"d{s.rogue[r].dim}", ha="center", va="center", fontsize=7)
        bottom += share
    right.set_xlabel("layer (0 = embedding layer)")
    right.set_ylabel("share of the expected cosine (raw vectors)")
    right.set_xticks(layers)
    right.set_ylim(0, max(1.0, float(bottom.max()) * 1.05))
    right.set_title(f"How much of the anisotropy the top {k} dimensions carry")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{_short(report.model)}: {report.words} words from "
                 f"{report.sentences} lines of {Path(report.corpus).name}")
    fig.tight_layout()
    return _save(fig, out, {"layers": layers, "lines": lines, "rogue_share": np.array(shares)})


# Attention ----------------------------------------------------------------------------------------

def attention_probabilities(embedder: Embedder, text: str | tuple[str, str],
                            layer: int = -1) -> tuple[np.ndarray, list[str]]:
    """Attention weights [A, T, T] (row = query token, column = key) of block `layer` (1..L,
    or negative from the last) for one text, and its tokens.

    Re-derived by `bertkit.model.attention.attention_weights` (the norm, rotary turn and mask
    of each block as it runs), so the encoder's fast path (fused SDPA, which never
    materialises the weights) stays as it is.
    """
    L = embedder.config.num_layers
    if not (1 <= layer <= L or -L <= layer <= -1):
        raise UserError(f"layer {layer}: the model has blocks 1..{L} (or -{L}..-1)")
    block_index = layer - 1 if layer > 0 else L + layer
    enc = embedder.tokenize([text])[0]
    cut_warning(int(enc.truncated), 1, embedder.max_length, stacklevel=2)
    ids = torch.from_numpy(enc.ids)[None].to(embedder.device)
    types = torch.from_numpy(enc.type_ids)[None].to(embedder.device)
    probs = attention_weights(embedder.encoder, ids, types)[block_index, 0]  # [A, T, T]
    tokens = [embedder.tokenizer.id_to_token(int(i)) for i in enc.ids]
    return probs.cpu().numpy(), tokens


def plot_attention(embedder: Embedder, text: str, out: str | Path, *, layer: int = -1,
                   head: int | None = None) -> Plot:
    """Heatmap of who attends to whom in one sentence: one head, or every head of the layer in
    a grid.

    data: "weights" {head: [T, T] the matrix drawn}, "tokens"."""
    require_matplotlib(out)
    probs, tokens = attention_probabilities(embedder, text, layer)
    A, T = probs.shape[0], len(tokens)
    if head is not None and not 0 <= head < A:
        raise UserError(f"head {head}: layer has heads 0..{A - 1}")
    heads = [head] if head is not None else list(range(A))
    cols = 1 if len(heads) == 1 else min(4, len(heads))
    rows = -(-len(heads) // cols)
    size = max(4.0, 0.32 * T) if len(heads) == 1 else max(3.0, 0.2 * T)
    fig = new_figure(out, figsize=(size * cols + 1.5, size * rows + 1), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    block = layer if layer > 0 else embedder.config.num_layers + 1 + layer
    image = None
    for ax in axes.flat[len(heads):]:
        ax.axis("off")
    fs = 8 if len(heads) == 1 else 6
    for n, (ax, h) in enumerate(zip(axes.flat, heads)):
        image = ax.imshow(probs[h], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(T), tokens, rotation=90, fontsize=fs)
        ax.set_yticks(range(T), tokens, fontsize=fs)
        # Axis names once per row / column, where they do not collide with the neighbours.
        if n // cols == rows - 1 or n + cols >= len(heads):
            ax.set_xlabel("attended-to token (key)", fontsize=fs + 2)
        if n % cols == 0:
            ax.set_ylabel("attending token (query)", fontsize=fs + 2)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight")
    fig.suptitle(f"Attention in block {block} of {embedder.config.num_layers}"
                 f"{'' if head is None else f', head {head}'}: each row sums to 1\n"
                 f"\"{textwrap.shorten(text, 80)}\"")
    return _save(fig, out, {"weights": {h: probs[h] for h in heads}, "tokens": tokens})


# Scalar mixes -----------------------------------------------------------------------------------

def plot_layer_weights(mixes: dict[str, Sequence[float]], out: str | Path) -> Plot:
    """What each learned scalar mix (ELMo's task-weighted sum, `finetune --layer-mix`) takes
    from every layer: one panel of bars per mix, layer 0 the embeddings, with the even share
    1/(L+1) a fresh mix starts from as a dashed line.

    data: "weights" {name: [L+1] the weights drawn}."""
    if not mixes:
        raise UserError("no layer weights to draw")
    cols = min(4, len(mixes))
    rows = -(-len(mixes) // cols)
    fig = new_figure(out, figsize=(3.4 * cols, 2.6 * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(mixes):]:
        ax.axis("off")
    for ax, (name, weights) in zip(axes.flat, mixes.items()):
        w = np.asarray(weights, dtype=float)
        ax.bar(range(len(w)), w, color="tab:blue")
        ax.axhline(1.0 / len(w), color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(w)), ["emb"] + [str(j) for j in range(1, len(w))], fontsize=8)
        ax.set_title(textwrap.shorten(name, 40), fontsize=10)
        ax.set_ylim(0, max(0.5, float(w.max()) * 1.15))
    for ax in axes[:, 0]:
        ax.set_ylabel("softmax weight")
    fig.supxlabel("layer (emb = the token embeddings)", fontsize=10)
    fig.suptitle("Learned scalar mix of the layers (dashed: the even share it starts from)")
    return _save(fig, out, {"weights": {k: list(map(float, v)) for k, v in mixes.items()}})


__all__ = ["Plot", "read_sense_instances", "project_2d", "plot_senses",
           "plot_anisotropy", "attention_probabilities", "plot_attention", "plot_layer_weights"]
