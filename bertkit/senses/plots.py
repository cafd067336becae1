"""Word senses in 2-D: one word's contextual vectors across sentences, coloured by sense (the
seeds' figure of "die"), from a sense-labelled file (bertkit.senses.data). The figure explains
itself as every picture of bertkit.embeddings.plots does, and is returned as a `Plot`.
"""
from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from bertkit.embeddings.embedder import Embedder, LayerSpec
from bertkit.embeddings.plots import Plot, project_2d, save_plot
from bertkit.embeddings.standardize import Standardizer
from bertkit.figures import colormap, new_figure, require_matplotlib
from bertkit.files import UserError
from bertkit.senses.data import SenseExample, read_examples


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


def plot_senses(embedder: Embedder, instances: Sequence[SenseExample], out: str | Path, *,
                layers: LayerSpec = "last4", method: str = "pca", standardize: bool = False,
                title_word: str | None = None, annotate: int = 6, seed: int = 0) -> Plot:
    """Scatter one word's contextual vectors across sentences in 2-D, coloured by sense,
    with a few points labelled by their sentence (Jurafsky & Martin's figure of "die").

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
    return save_plot(fig, out, {"points": drawn, "axes": axis})


@dataclass(kw_only=True)
class SensePlotSettings:
    """How `bertkit plot senses` picks a word's instances and draws them."""

    method: Literal["pca", "umap"] = "pca"
    """Projection: PCA, or UMAP (needs umap-learn installed)."""
    layers: str = "-1"
    """Hidden layers: a number, a comma-separated list, "last4" or "all"."""
    standardize: bool = False
    """z-score with the model's fitted standardizer first."""
    standardizer: Path | None = None
    """Standardizer file (implies --standardize)."""
    max_per_sense: int = 50
    """Instances shown per sense at most."""
    min_per_sense: int = 1
    """Leave out senses with fewer instances."""

    def instances(self, path: str | Path, lemma: str) -> list[SenseExample]:
        """The instances of `lemma` in `path`, as many per sense as these settings allow."""
        return read_sense_instances(path, lemma, self.max_per_sense, self.min_per_sense)

    def plot(self, embedder: Embedder, instances: Sequence[SenseExample], out: str | Path,
             lemma: str) -> Plot:
        """`plot_senses` with these settings; `standardizer` (a fitted file) replaces the
        embedder's own and implies `standardize`."""
        if self.standardizer:
            embedder.standardizer = Standardizer.load(self.standardizer)
        return plot_senses(embedder, instances, out, layers=self.layers, method=self.method,
                           standardize=self.standardize or bool(self.standardizer),
                           title_word=lemma)


__all__ = ["read_sense_instances", "plot_senses", "SensePlotSettings"]
