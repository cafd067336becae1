"""Pictures of what an encoder does: anisotropy per layer, attention, the weights a learned mix
gives each layer (word senses in 2-D: bertkit.senses.plots).

Every function writes one PNG (atomically) that explains itself: a title saying what is shown
and how it was made, labelled axes, a legend, and returns a `Plot`: the file, the figure, and
the numbers drawn. Figures are `matplotlib.figure.Figure`s of their own, saved through their
canvas, never pyplot, so no backend is chosen and the caller's open figures are left alone.
matplotlib is an extra (`bertkit.figures`): without it each function fails at once, before any
encoding, with a one-line `UserError`.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from bertkit.embeddings.anisotropy import AnisotropyReport
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.pca import pca
from bertkit.figures import colormap, new_figure, require_matplotlib, save_png
from bertkit.files import UserError
from bertkit.model.attention import attention_weights
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


def save_plot(fig: Figure, out: str | Path, data: dict) -> Plot:
    """Write `fig` to `out` (bertkit.figures.save_png) and return it as a Plot with `data`."""
    return Plot(save_png(fig, out), fig, data)


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
    return save_plot(fig, out, {"layers": layers, "lines": lines, "rogue_share": np.array(shares)})


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
    return save_plot(fig, out, {"weights": {h: probs[h] for h in heads}, "tokens": tokens})


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
    return save_plot(fig, out, {"weights": {k: list(map(float, v)) for k, v in mixes.items()}})


@dataclass(kw_only=True)
class AttentionPlotSettings:
    """Which attention `bertkit plot attention` draws."""

    layer: int = -1
    """Block 1..L, or -1 for the last."""
    head: int | None = None
    """Head 0..A-1; none: all heads in a grid."""

    def plot(self, embedder: Embedder, text: str, out: str | Path) -> Plot:
        """`plot_attention` of this layer and head."""
        return plot_attention(embedder, text, out, layer=self.layer, head=self.head)


__all__ = ["Plot", "AttentionPlotSettings", "project_2d",
           "plot_anisotropy", "attention_probabilities", "plot_attention", "plot_layer_weights"]
