"""Word-sense disambiguation with sense embeddings (Jurafsky & Martin's 1-nearest-neighbour algorithm,
and a stronger default that also reads the glosses and the sense frequencies).

Training passes every sense-labelled instance through a model and averages the vectors of
each sense's instances into a sense embedding (eq. 11.8):

    v_s = 1/n sum_i v_i    over the n training instances of sense s

A new instance t of a lemma is labelled with the candidate sense of highest score, the
candidates being the senses the training data showed for that lemma (and part of speech).

  method "1nn"          score = cos(t, v_s)                                  (eq. 11.9)
  method "gloss-prior"  score = cos(t, v_s) + a cos(sent(t), sent(gloss_s)) + b log prior(s)

The default "gloss-prior" adds what the data carries beside the instances: the sense's
definition (the sentence vector of "lemma: gloss", as in LMMS-style gloss embeddings,
compared with the sentence vector of the instance's text) and how frequent the sense is
(prior(s) = 1 / sense_rank, or the training count when ranks are missing). The weights a and
b are tuned by leave-one-out over the training instances themselves (each instance scored
against sense embeddings built without it), so no test data is ever looked at.

A lemma seen in training only with another part of speech falls back to its most frequent
sense (lowest sense_rank, then highest count); a lemma never seen gets no prediction.
Optional standardization (Jurafsky & Martin's eqs 11.10-11.12) z-scores the target vectors with the
mean and standard deviation of the training instances before any cosine.

Vectors come from a contextual model (word vectors: the last four layers averaged, where the
textbook sums them: a sum is 4x the mean, and the cosines that compare them ignore scale, so
the senses chosen are the same; subword pieces averaged; sentence vectors: mean over the last layer) or from a static one (the
target's vector is the mean static vector of the words around it, a text's the mean of its
words): the same code measures both.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from bertkit.embeddings.standardize import STANDARDIZER_FILE, Standardizer, unit_rows
from bertkit.files import UserError, atomic_dir, read_json
from bertkit.senses.data import SenseExample

METHODS = ("gloss-prior", "1nn")
DEFAULT_METHOD = "gloss-prior"
INDEX_FILE = "index.json"
SENSES_FILE = "senses.safetensors"
_WEIGHT_GRID = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)


@dataclass
class WsdOptions:
    method: str = field(default=DEFAULT_METHOD, metadata={"choices": METHODS})
    """"gloss-prior" (default) or "1nn" (Jurafsky & Martin's nearest sense embedding)."""
    standardize: bool = False
    """z-score target vectors with the training instances' mean and std before cosines."""
    use_pos: bool = True
    """Candidates are the senses of the lemma *with the instance's part of speech*."""
    layers: str = "last4"
    """Layers of a contextual model whose mean is the word vector."""
    subword_pool: Literal["mean", "first"] = "mean"
    """A word's vector from its pieces: "mean" or "first"."""
    window: int = 5
    """Static models: words on each side of the target whose vectors are averaged."""
    gloss_weight: float | None = None
    """a: weight of the gloss similarity; none: tuned on the training data."""
    prior_weight: float | None = None
    """b: weight of the log prior; none: tuned on the training data."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"unknown WSD method {self.method!r}: use one of {', '.join(METHODS)}")


# The sense inventory -----------------------------------------------------------------------------

@dataclass
class Sense:
    lemma: str
    pos: str
    synset: str
    gloss: str | None
    count: int
    """Training instances."""
    rank: int | None
    """sense_rank (1 = most frequent), when the data gave one."""


@dataclass
class SenseInventory:
    senses: list[Sense]
    centroids: np.ndarray
    """[S, H] unit-length mean (standardized) target vector of each sense's instances."""
    glosses: np.ndarray | None
    """[S, H'] unit-length sentence vector of "lemma: gloss" (gloss-prior only)."""
    options: WsdOptions
    model: str
    """The model directory the vectors came from."""
    kind: str
    """"contextual" or "static"."""
    standardizer: Standardizer | None = None
    tuning: dict = field(default_factory=dict)
    """How the weights were chosen: leave-one-out accuracy on training, grid, instances."""

    def __post_init__(self) -> None:
        self.by_key: dict[tuple[str, str], list[int]] = {}
        self.by_lemma: dict[str, list[int]] = {}
        for i, s in enumerate(self.senses):
            self.by_key.setdefault((s.lemma, s.pos), []).append(i)
            self.by_lemma.setdefault(s.lemma, []).append(i)
        # Most frequent first: lowest rank (unknown ranks last), then most instances.
        order = sorted(range(len(self.senses)), key=lambda i: (
            self.senses[i].rank or 10**9, -self.senses[i].count, self.senses[i].synset))
        self.mfs_order = np.empty(len(self.senses), dtype=np.int64)
        self.mfs_order[order] = np.arange(len(self.senses))
        self.prior, self.prior_by_count = _log_prior(self.senses)

    def key(self, e: SenseExample) -> tuple[str, str]:
        return (e.lemma, e.pos if self.options.use_pos else "")

    def candidates(self, examples: Sequence[SenseExample]):
        """Flattened (row, sense) candidate pairs, and per row whether it fell back to the
        most frequent sense (lemma known only with another part of speech) or is unknown."""
        rows, senses, fallback = [], [], np.zeros(len(examples), dtype=bool)
        for r, e in enumerate(examples):
            c = self.by_key.get(self.key(e))
            if c is None and e.lemma in self.by_lemma:
                c, fallback[r] = self.by_lemma[e.lemma], True
            for s in c or ():
                rows.append(r)
                senses.append(s)
        return np.array(rows, dtype=np.int64), np.array(senses, dtype=np.int64), fallback

    # Saving -----------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """A directory: senses.safetensors (vectors), index.json (lemma -> pos -> senses with
        counts, ranks, glosses and their vector row; model, method, options, tuning) and, when
        standardizing, standardize.safetensors."""
        lemmas: dict[str, dict[str, list]] = {}
        for row, s in enumerate(self.senses):
            lemmas.setdefault(s.lemma, {}).setdefault(s.pos, []).append(
                {"synset": s.synset, "count": s.count, "rank": s.rank, "gloss": s.gloss,
                 "row": row})
        index = {"format": "bertkit-wsd", "model": self.model, "kind": self.kind,
                 "method": self.options.method, "options": asdict(self.options),
                 "tuning": self.tuning, "senses": len(self.senses), "lemmas": lemmas}
        arrays = {"centroids": np.ascontiguousarray(self.centroids, dtype=np.float32)}
        if self.glosses is not None:
            arrays["glosses"] = np.ascontiguousarray(self.glosses, dtype=np.float32)
        with atomic_dir(path) as tmp:
            save_file(arrays, str(tmp / SENSES_FILE))
            if self.standardizer is not None:
                self.standardizer.save(tmp / STANDARDIZER_FILE)
            (tmp / INDEX_FILE).write_text(json.dumps(index, ensure_ascii=False, indent=1) + "\n",
                                          encoding="utf-8")
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "SenseInventory":
        p = Path(path)
        if not (p / INDEX_FILE).is_file() or not (p / SENSES_FILE).is_file():
            raise UserError(f"{p}: not a WSD directory (no {INDEX_FILE} and {SENSES_FILE}; "
                            f"make one with `bertkit wsd train`)")
        index = read_json(p / INDEX_FILE, "bertkit WSD index", format="bertkit-wsd")
        try:
            rows = {s["row"]: Sense(lemma, pos, s["synset"], s["gloss"], s["count"], s["rank"])
                    for lemma, by_pos in index["lemmas"].items()
                    for pos, senses in by_pos.items() for s in senses}
            options = WsdOptions(**index["options"])
            model, kind, tuning = index["model"], index["kind"], index.get("tuning", {})
        except (KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{p / INDEX_FILE}: malformed WSD index ({type(e).__name__}: {e})") \
                from None
        try:
            with safe_open(str(p / SENSES_FILE), "np") as f:
                arrays = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p / SENSES_FILE}: unreadable sense vectors ({e})") from None
        if "centroids" not in arrays or sorted(rows) != list(range(len(arrays["centroids"]))):
            raise UserError(f"{p}: the index and the sense vectors do not match")
        # The index says whether to standardize: a file left from an earlier run into the
        # same directory must not switch it on.
        standardizer = Standardizer.load(p / STANDARDIZER_FILE) if options.standardize else None
        return cls([rows[i] for i in range(len(rows))], arrays["centroids"],
                   arrays.get("glosses"), options, model, kind, standardizer, tuning)


def _log_prior(senses: Sequence[Sense]) -> tuple[np.ndarray, np.ndarray]:
    """log prior of each sense: -log(rank) when every sense of its lemma has a rank, else
    log(count) (and which of the two it is). Constant offsets per lemma do not change the
    argmax."""
    by_lemma: dict[str, list[int]] = {}
    for i, s in enumerate(senses):
        by_lemma.setdefault(s.lemma, []).append(i)
    out, by_count = np.zeros(len(senses)), np.zeros(len(senses), dtype=bool)
    for members in by_lemma.values():
        ranked = all(senses[i].rank for i in members)
        for i in members:
            out[i] = -np.log(senses[i].rank) if ranked else np.log(senses[i].count)
            by_count[i] = not ranked
    return out, by_count


def _best_per_row(rows: np.ndarray, scores: np.ndarray, tiebreak: np.ndarray,
                  n_rows: int) -> np.ndarray:
    """For each row, the index (into the pair arrays) of its highest score; ties go to the
    lowest `tiebreak`. Rows without pairs get -1."""
    best = np.full(n_rows, -1, dtype=np.int64)
    if len(rows) == 0:
        return best
    order = np.lexsort((tiebreak, -scores, rows))
    first = np.r_[True, rows[order][1:] != rows[order][:-1]]
    best[rows[order][first]] = order[first]
    return best


# Training ----------------------------------------------------------------------------------------

def train_wsd(examples: Sequence[SenseExample], source, options: WsdOptions | None = None,
              model_name: str = "", progress: bool = True) -> SenseInventory:
    """Build a sense inventory from labelled examples with vectors from `source` (a
    `senses.ContextualSource` or `senses.StaticSource`; see `senses.load_source`)."""
    options = options or WsdOptions()
    if not examples:
        raise UserError("no training examples")
    vectors = source.targets(examples)
    standardizer = None
    if options.standardize:
        standardizer = Standardizer.fit([vectors], [-1], source="WSD training targets")
        vectors = standardizer.transform(vectors)
    keys: dict[tuple, int] = {}
    members: list[list[int]] = []
    own = np.empty(len(examples), dtype=np.int64)  # each example's sense
    for i, e in enumerate(examples):
        if e.synset is None:
            raise UserError(f"{e.where or f'example {i + 1}'}: no synset to train on")
        own[i] = keys.setdefault((e.lemma, e.pos if options.use_pos else "", e.synset),
                                 len(members))
        if own[i] == len(members):
            members.append([])
        members[own[i]].append(i)
    senses, sums = [], np.zeros((len(members), vectors.shape[1]), dtype=np.float64)
    for (lemma, pos, synset), j in keys.items():
        group = [examples[i] for i in members[j]]
        ranks = [e.sense_rank for e in group if e.sense_rank is not None]
        glosses = [e.gloss for e in group if e.gloss]
        senses.append(Sense(lemma, pos, synset, glosses[0] if glosses else None, len(group),
                            min(ranks) if ranks else None))
        sums[j] = vectors[members[j]].sum(0)
    counts = np.array([s.count for s in senses], dtype=np.float64)
    glosses = None
    if options.method == "gloss-prior":
        glosses = unit_rows(source.sentences([
            f"{s.lemma.replace('_', ' ')}: {s.gloss}" if s.gloss else s.lemma.replace("_", " ")
            for s in senses]), np.float32)
    inventory = SenseInventory(senses, unit_rows(sums / counts[:, None], np.float32), glosses,
                               options, model_name, source.kind, standardizer)
    if options.method == "gloss-prior" and (options.gloss_weight is None
                                            or options.prior_weight is None):
        sentences = unit_rows(source.sentences([e.text for e in examples]), np.float32)
        inventory.tuning = _tune(inventory, examples, vectors, sentences, sums, counts, own,
                                 progress)
        inventory.options = replace(options, gloss_weight=inventory.tuning["gloss_weight"],
                                    prior_weight=inventory.tuning["prior_weight"])
    return inventory


def _tune(inv: SenseInventory, examples, vectors, sentences, sums, counts, own,
          progress: bool) -> dict:
    """Choose the gloss and prior weights by leave-one-out accuracy on the training data.

    Every instance whose sense has another training instance is scored against sense
    embeddings in which its own sense is the mean of the *other* instances (and its count
    one less), which is what a held-out instance meets. Coordinate ascent over a grid.
    vectors: [N, H] (standardized) target vectors; sums: [S, H] their per-sense sums.
    """
    rows, senses, fallback = inv.candidates(examples)
    keep = (counts[own] >= 2)[rows] & ~fallback[rows]
    rows, senses = rows[keep], senses[keep]
    given = [inv.options.gloss_weight, inv.options.prior_weight]
    if len(rows) == 0:
        return {"gloss_weight": given[0] or 0.0, "prior_weight": given[1] or 0.0,
                "instances": 0, "note": "no sense has two training instances: nothing to tune on"}
    mine = senses == own[rows]  # the pair of each row with its gold sense
    centroid = sums[senses] / counts[senses, None]
    centroid[mine] = (sums[senses[mine]] - vectors[rows[mine]]) / (counts[senses[mine], None] - 1)
    instance = (unit_rows(centroid, np.float32) * unit_rows(vectors, np.float32)[rows]).sum(1)
    gloss = (inv.glosses[senses] * sentences[rows]).sum(1)
    prior = inv.prior[senses].copy()
    by_count = inv.prior_by_count[senses] & mine
    prior[by_count] = np.log(counts[senses[by_count]] - 1)
    n_rows = int(rows.max()) + 1
    scored = np.unique(rows).size

    def accuracy(a: float, b: float) -> float:
        best = _best_per_row(rows, instance + a * gloss + b * prior, inv.mfs_order[senses],
                             n_rows)
        return float(mine[best[best >= 0]].sum()) / scored

    base = accuracy(0.0, 0.0)
    weights = [w or 0.0 for w in given]
    best_acc = accuracy(*weights)
    for _ in range(2):
        for which in (i for i in (0, 1) if given[i] is None):
            for value in _WEIGHT_GRID:
                trial = list(weights)
                trial[which] = value
                acc = accuracy(*trial)
                if acc > best_acc + 1e-12:
                    best_acc, weights = acc, trial
    if progress:
        print(f"tuned on {scored} held-out training instances (leave-one-out): gloss weight "
              f"{weights[0]}, prior weight {weights[1]}, accuracy {base:.3f} -> {best_acc:.3f}",
              file=sys.stderr)
    return {"gloss_weight": weights[0], "prior_weight": weights[1], "instances": scored,
            "loo_accuracy_1nn": base, "loo_accuracy": best_acc, "grid": list(_WEIGHT_GRID)}


# Predicting and evaluating -----------------------------------------------------------------------

@dataclass
class Prediction:
    synset: str | None
    """The chosen sense; None when the lemma was never seen in training."""
    score: float | None
    candidates: int
    """Senses it was chosen among."""
    fallback: str | None
    """Why the method was not used: "most frequent sense" or "unknown lemma"; None if it was."""


def score_pairs(inv: SenseInventory, rows: np.ndarray, senses: np.ndarray,
                targets: np.ndarray, sentences: np.ndarray | None,
                method: str | None = None) -> np.ndarray:
    """The score of each (row, sense) candidate pair under `method` (default: the
    inventory's). targets: [N, H] target vectors (standardized already when the inventory
    standardizes); sentences: [N, H'] vectors of the instances' texts (gloss-prior only)."""
    score = (inv.centroids[senses] * unit_rows(targets, np.float32)[rows]).sum(1)
    if (method or inv.options.method) == "gloss-prior":
        score += inv.options.gloss_weight * (inv.glosses[senses]
                                             * unit_rows(sentences, np.float32)[rows]).sum(1)
        score += inv.options.prior_weight * inv.prior[senses]
    return score


def predict(inv: SenseInventory, examples: Sequence[SenseExample], source,
            method: str | None = None) -> list[Prediction]:
    """Label each example with a sense from the inventory (see the module docstring).

    `method` overrides the inventory's: "1nn" scores a gloss-prior inventory by its sense
    embeddings alone (the same centroids), "mfs" gives the most-frequent-sense baseline."""
    method = method or inv.options.method
    if method not in METHODS + ("mfs",):
        raise UserError(f"unknown WSD method {method!r}: use one of {', '.join(METHODS)}, mfs")
    if method == "gloss-prior" and inv.glosses is None:
        raise UserError("these senses were built with --method 1nn: they have no gloss "
                        "vectors for gloss-prior")
    rows, senses, fallback = inv.candidates(examples)
    n = len(examples)
    if method == "mfs" or len(rows) == 0:
        scores = np.zeros(len(rows))
    else:
        targets = source.targets(examples)
        if inv.standardizer is not None:
            targets = inv.standardizer.transform(targets)
        sentences = source.sentences([e.text for e in examples]) \
            if method == "gloss-prior" else None
        scores = score_pairs(inv, rows, senses, targets, sentences, method)
        # A lemma seen only with another part of speech: its most frequent sense.
        scores[fallback[rows]] = 0.0
    best = _best_per_row(rows, scores, inv.mfs_order[senses], n)
    n_candidates = np.bincount(rows, minlength=n)
    out = []
    for r in range(n):
        if best[r] < 0:
            out.append(Prediction(None, None, 0, "unknown lemma"))
            continue
        s = inv.senses[senses[best[r]]]
        out.append(Prediction(s.synset, float(scores[best[r]]), int(n_candidates[r]),
                              "most frequent sense" if fallback[r] else None))
    return out


@dataclass
class WsdReport:
    method: str
    instances: int
    correct: int
    accuracy: float
    mfs_correct: int
    mfs_accuracy: float
    """The most-frequent-sense baseline on the same instances."""
    average_candidates: float
    """Mean number of candidate senses over instances whose lemma is known."""
    unknown_lemmas: int
    """Instances whose lemma the inventory never saw (counted wrong)."""
    fallbacks: int
    """Instances answered with the most frequent sense (lemma seen with another POS)."""
    by_pos: dict = field(default_factory=dict)
    """pos -> {"instances", "accuracy", "mfs_accuracy"}."""

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"method {self.method}: accuracy {self.accuracy:.4f} ({self.correct}/"
                 f"{self.instances}); most frequent sense {self.mfs_accuracy:.4f} "
                 f"({self.mfs_correct}/{self.instances})",
                 f"average candidate senses {self.average_candidates:.2f}; unknown lemmas "
                 f"{self.unknown_lemmas}; most-frequent-sense fallbacks {self.fallbacks}"]
        for pos, r in sorted(self.by_pos.items()):
            lines.append(f"  {pos or '(no pos)'}: {r['instances']} instances, accuracy "
                         f"{r['accuracy']:.4f}, most frequent sense {r['mfs_accuracy']:.4f}")
        return "\n".join(lines)


def evaluate(inv: SenseInventory, examples: Sequence[SenseExample], source,
             method: str | None = None) -> WsdReport:
    """Accuracy of the inventory's method (or `method`, see `predict`) and of the
    most-frequent-sense baseline."""
    predicted = predict(inv, examples, source, method)
    baseline = predict(inv, examples, source, method="mfs")
    gold = [e.synset for e in examples]
    hit = np.array([p.synset == g for p, g in zip(predicted, gold)])
    mfs_hit = np.array([p.synset == g for p, g in zip(baseline, gold)])
    known = [p.candidates for p in predicted if p.candidates]
    by_pos: dict[str, dict] = {}
    for pos in sorted({e.pos for e in examples}):
        m = np.array([e.pos == pos for e in examples])
        by_pos[pos] = {"instances": int(m.sum()), "accuracy": float(hit[m].mean()),
                       "mfs_accuracy": float(mfs_hit[m].mean())}
    n = len(examples)
    return WsdReport(method or inv.options.method, n, int(hit.sum()), float(hit.mean()),
                     int(mfs_hit.sum()), float(mfs_hit.mean()),
                     float(np.mean(known)) if known else 0.0,
                     sum(p.fallback == "unknown lemma" for p in predicted),
                     sum(p.fallback == "most frequent sense" for p in predicted), by_pos)


__all__ = ["METHODS", "DEFAULT_METHOD", "WsdOptions", "Sense", "SenseInventory", "train_wsd",
           "score_pairs", "predict", "Prediction", "WsdReport", "evaluate"]
