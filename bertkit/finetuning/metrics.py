"""Evaluation metrics: classification (accuracy, macro-F1, confusion matrix), regression
(Pearson, Spearman), entity-level tagging scores identical to `seqeval`'s default mode, span
sets with nested entities, and SQuAD 1.1 / 2.0 exact match and F1.

Every score is a fraction in [0, 1] (SQuAD's official script prints percentages; multiply by
100 to compare). Undefined ratios (no predictions, no gold) count as 0, as seqeval and sklearn do.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Hashable, Iterable, Mapping, Sequence

import numpy as np

from bertkit.finetuning.tagging import Span, tags_to_spans


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


# --------------------------------------------------------------------------------------------
# classification and regression
# --------------------------------------------------------------------------------------------

def accuracy(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predictions")
    return _ratio(sum(g == p for g, p in zip(gold, pred)), len(gold))


def confusion_matrix(gold: Sequence[Hashable], pred: Sequence[Hashable],
                     labels: Sequence[Hashable]) -> np.ndarray:
    """Counts [L, L]: row = gold label, column = predicted label, in the order of `labels`.
    Pairs with a label outside `labels` are not counted."""
    index = {label: i for i, label in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for g, p in zip(gold, pred):
        if g in index and p in index:
            m[index[g], index[p]] += 1
    return m


def per_label_scores(gold: Sequence[Hashable], pred: Sequence[Hashable],
                     labels: Sequence[Hashable] | None = None) -> dict:
    """{label: {precision, recall, f1, support}} over `labels` (default: all labels seen in gold
    or predictions, sorted)."""
    labels = sorted(set(gold) | set(pred), key=str) if labels is None else list(labels)
    m = confusion_matrix(gold, pred, labels)
    tp, predicted, true = np.diag(m), m.sum(0), m.sum(1)
    out = {}
    for i, label in enumerate(labels):
        p, r = _ratio(tp[i], predicted[i]), _ratio(tp[i], true[i])
        out[label] = {"precision": float(p), "recall": float(r), "f1": _f1(p, r),
                      "support": int(true[i])}
    return out


def macro_f1(gold: Sequence[Hashable], pred: Sequence[Hashable],
             labels: Sequence[Hashable] | None = None) -> float:
    """Unweighted mean of per-label F1 over `labels` (default: labels seen in gold or pred)."""
    scores = per_label_scores(gold, pred, labels)
    return float(np.mean([s["f1"] for s in scores.values()])) if scores else 0.0


def classification_scores(gold: Sequence[str], pred: Sequence[str],
                          labels: Sequence[str]) -> dict:
    """accuracy, macro_f1 (over `labels`), per_label and the confusion matrix as lists."""
    return {"accuracy": accuracy(gold, pred), "macro_f1": macro_f1(gold, pred, labels),
            "per_label": per_label_scores(gold, pred, labels), "labels": list(labels),
            "confusion_matrix": confusion_matrix(gold, pred, labels).tolist()}


def multilabel_scores(gold: Sequence[Iterable[str]], pred: Sequence[Iterable[str]],
                      labels: Sequence[str]) -> dict:
    """Exact-set accuracy, micro P/R/F1 over (example, label) pairs, and macro-F1 over labels."""
    gold = [set(g) for g in gold]
    pred = [set(p) for p in pred]
    tp = sum(len(g & p) for g, p in zip(gold, pred))
    p, r = _ratio(tp, sum(map(len, pred))), _ratio(tp, sum(map(len, gold)))
    per = []
    for label in labels:
        ltp = sum(label in g and label in q for g, q in zip(gold, pred))
        per.append(_f1(_ratio(ltp, sum(label in q for q in pred)),
                       _ratio(ltp, sum(label in g for g in gold))))
    return {"accuracy": accuracy([frozenset(g) for g in gold], [frozenset(q) for q in pred]),
            "precision": p, "recall": r, "f1": _f1(p, r),
            "macro_f1": float(np.mean(per)) if per else 0.0}


def _ranks(x: np.ndarray) -> np.ndarray:
    # average ranks for ties, as Spearman's rho needs
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den else 0.0


def regression_scores(gold: Sequence[float], pred: Sequence[float]) -> dict:
    """pearson, spearman, mse and mae."""
    g, p = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if g.shape != p.shape:
        raise ValueError(f"{len(g)} gold values but {len(p)} predictions")
    return {"pearson": _pearson(g, p), "spearman": _pearson(_ranks(g), _ranks(p)),
            "mse": float(((g - p) ** 2).mean()) if len(g) else 0.0,
            "mae": float(np.abs(g - p).mean()) if len(g) else 0.0}


# --------------------------------------------------------------------------------------------
# entities: tag sequences and span sets
# --------------------------------------------------------------------------------------------

def span_scores(gold: Sequence[Iterable[Span]], pred: Sequence[Iterable[Span]]) -> dict:
    """Exact-match scores of (start, end, type) sets per sentence; nested and overlapping spans
    are fine. Returns precision, recall, f1 (micro over all types), support (gold count),
    predicted, and per_type {type: {precision, recall, f1, support}}."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])  # tp, pred, gold
    for g, p in zip(gold, pred):
        g, p = set(g), set(p)
        for _, _, type_ in g & p:
            counts[type_][0] += 1
        for _, _, type_ in p:
            counts[type_][1] += 1
        for _, _, type_ in g:
            counts[type_][2] += 1
    per_type = {}
    for type_ in sorted(counts):
        tp, n_pred, n_gold = counts[type_]
        pr, rc = _ratio(tp, n_pred), _ratio(tp, n_gold)
        per_type[type_] = {"precision": pr, "recall": rc, "f1": _f1(pr, rc), "support": n_gold}
    tp, n_pred, n_gold = (sum(c[i] for c in counts.values()) for i in range(3))
    pr, rc = _ratio(tp, n_pred), _ratio(tp, n_gold)
    return {"precision": pr, "recall": rc, "f1": _f1(pr, rc), "support": n_gold,
            "predicted": n_pred, "per_type": per_type}


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Entity-level scores of tag sequences, equal to seqeval's default mode (conlleval chunking,
    exact spans, micro average over types), plus token_accuracy."""
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
    # seqeval chunks the sentences joined by an 'O' between them; only the conlleval '.' tag
    # (which neither opens nor closes a chunk) can tell that apart from chunking each sentence
    joined_gold = [t for s in gold for t in (*s, "O")]
    joined_pred = [t for s in pred for t in (*s, "O")]
    scores = span_scores([tags_to_spans(joined_gold)], [tags_to_spans(joined_pred)])
    scores["token_accuracy"] = accuracy([t for s in gold for t in s], [t for s in pred for t in s])
    return scores


# --------------------------------------------------------------------------------------------
# SQuAD 1.1 / 2.0
# --------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """The official normalisation: lowercase, drop punctuation, the articles a/an/the, and
    collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _golds(answers: Sequence[str]) -> list[str]:
    # answers that normalise to nothing do not count; none left means "unanswerable"
    return [a for a in answers if normalize_answer(a)] or [""]


def _exact(pred: str, gold: str) -> float:
    return float(normalize_answer(pred) == normalize_answer(gold))


def _token_f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match(pred: str, answers: Sequence[str]) -> float:
    """1.0 when `pred` equals one of `answers` after normalisation; empty `answers` (an
    unanswerable question) matches only an empty prediction."""
    return max(_exact(pred, g) for g in _golds(answers))


def answer_f1(pred: str, answers: Sequence[str]) -> float:
    """Best bag-of-tokens F1 of `pred` against `answers`, as exact_match for unanswerable."""
    return max(_token_f1(pred, g) for g in _golds(answers))


def best_null_threshold(raw: Mapping[str, float], null_scores: Mapping[str, float],
                        has_answer: Mapping[str, bool], predictions: Mapping[str, str]
                        ) -> tuple[float, float]:
    """(best score, threshold) when a question is answered "" iff its null score > threshold.

    Starts from "every question unanswered" (right exactly on the unanswerable ones) and
    un-nulls questions in rising order of null score, keeping the best running total, as the
    official SQuAD 2.0 script's find_best_thresh does; `raw` holds each prediction's score
    (EM or F1) before thresholding.
    """
    best = current = sum(1 for q in raw if not has_answer[q])
    threshold = 0.0
    for q in sorted(null_scores, key=lambda q: null_scores[q]):
        if q not in raw:
            continue
        if has_answer[q]:
            current += raw[q]
        elif predictions[q]:
            current -= 1  # an unanswerable question that now gets a non-empty answer
        if current > best:
            best, threshold = current, null_scores[q]
    return _ratio(best, len(raw)), threshold


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                 null_scores: Mapping[str, float] | None = None,
                 null_threshold: float | None = None) -> dict:
    """exact_match and f1 over `references` (question id -> gold answer texts, empty for
    unanswerable), split into has_ans / no_ans. A missing prediction scores 0.

    With `null_scores` (higher = more likely unanswerable), best_exact_match / best_f1 and
    their thresholds are searched; with `null_threshold` too, predictions whose null score is above
    it count as "".
    """
    exact, f1 = {}, {}
    for q, answers in references.items():
        pred = predictions.get(q)
        if pred is None:
            exact[q] = f1[q] = 0.0
            continue
        exact[q], f1[q] = exact_match(pred, answers), answer_f1(pred, answers)
    has_answer = {q: bool(a) for q, a in references.items()}
    final_exact, final_f1 = dict(exact), dict(f1)
    if null_scores is not None and null_threshold is not None:
        for q in references:
            if null_scores.get(q, 0.0) > null_threshold:
                final_exact[q] = final_f1[q] = float(not has_answer[q])

    def mean(values: dict, keep) -> float:
        chosen = [v for q, v in values.items() if keep(q)]
        return _ratio(sum(chosen), len(chosen))

    out = {"exact_match": mean(final_exact, lambda q: True),
           "f1": mean(final_f1, lambda q: True),
           "total": len(references)}
    for name, want in (("has_ans", True), ("no_ans", False)):
        n = sum(1 for q in references if has_answer[q] == want)
        if n:
            out[f"{name}_exact_match"] = mean(final_exact, lambda q: has_answer[q] == want)
            out[f"{name}_f1"] = mean(final_f1, lambda q: has_answer[q] == want)
            out[f"{name}_total"] = n
    if null_scores is not None:
        preds = {q: predictions.get(q, "") for q in references}
        out["best_exact_match"], out["best_exact_match_threshold"] = best_null_threshold(
            exact, null_scores, has_answer, preds)
        out["best_f1"], out["best_f1_threshold"] = best_null_threshold(
            f1, null_scores, has_answer, preds)
    return out
