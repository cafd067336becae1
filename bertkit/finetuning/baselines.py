"""What a trivial predictor scores, fitted on the training data: the figure a fine-tuned model
has to beat, saved beside its own dev scores. Each task's `baseline` picks one.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

import numpy as np

from bertkit.finetuning import metrics
from bertkit.finetuning.tagging import has_entities


def majority_class(train: Sequence, test: Sequence, labels: Sequence[str]) -> dict:
    """Always the most frequent training label (`.label` of each example)."""
    counts = [ex.label for ex in train]
    top = max(set(counts), key=counts.count)
    return metrics.classification_scores([ex.label for ex in test], [top] * len(test), labels)


def majority_label_set(train: Sequence, test: Sequence, labels: Sequence[str]) -> dict:
    """Multi-label: always the most frequent training set of labels."""
    sets = [tuple(ex.label) for ex in train]
    top = list(max(set(sets), key=sets.count))
    return metrics.multilabel_scores([ex.label for ex in test], [top] * len(test), labels)


def mean_value(train: Sequence, test: Sequence) -> dict:
    """Regression: always the mean training value."""
    mean = float(np.mean([ex.label for ex in train]))
    return metrics.regression_scores([ex.label for ex in test], [mean] * len(test))


def most_frequent_tag(train: Sequence, test: Sequence) -> dict:
    """Per word type, the most frequent tag of that word in training; unseen words the most
    frequent tag overall. Entity scores when the tags mark entities, else token accuracy."""
    counts: dict[str, Counter] = {}
    for s in train:
        for w, t in zip(s.tokens, s.tags):
            counts.setdefault(w, Counter())[t] += 1
    overall: Counter = Counter()
    for c in counts.values():
        overall.update(c)
    default = max(overall, key=overall.get)
    pred = [[max(counts[w], key=counts[w].get) if w in counts else default for w in s.tokens]
            for s in test]
    if has_entities(overall):
        return metrics.entity_scores([s.tags for s in test], pred)
    return {"accuracy": metrics.accuracy([t for s in test for t in s.tags],
                                         [t for s in pred for t in s])}


def no_answer(test: Sequence) -> dict:
    """QA: always "no answer" (exact on unanswerable questions only); with unanswerable
    questions also the best null thresholds, which the QA task selects by."""
    nulls = {ex.id: 0.0 for ex in test} if any(ex.is_impossible for ex in test) else None
    return metrics.squad_scores({ex.id: "" for ex in test},
                                {ex.id: [a.text for a in ex.answers] for ex in test}, nulls)


def baseline_comparison(scores: dict, baseline: dict | None,
                        selection: Callable[[dict], float], name: str = "selection"
                        ) -> tuple[str, float, float] | None:
    """(name of the selection metric, the model's value, the baseline's) on the same dev set;
    None without a baseline or when the baseline lacks the figure. The name is the key of
    `scores` that holds the selected value, else `name` (a figure no key holds)."""
    if not baseline:
        return None
    try:
        model, trivial = float(selection(scores)), float(selection(baseline))
    except (KeyError, TypeError, ValueError):
        return None
    usual = ("f1", "accuracy", "pearson", "macro_f1", "exact_match")  # what tasks select by
    keys = [k for k in usual if k in scores] + [k for k in scores if k not in usual]
    name = next((k for k in keys if isinstance(scores[k], float) and scores[k] == model), name)
    return name, model, trivial


def baseline_report(comparison: tuple[str, float, float],
                    predictor: str | None = None) -> tuple[str, str | None]:
    """The line that sets the model's dev figure beside the baseline's (`predictor`: what the
    baseline is, its "predictor" entry; None: a trivial predictor), and a warning line when
    the model does not beat it (None when it does)."""
    name, model, trivial = comparison
    predictor = predictor or "a trivial predictor"
    line = f"dev {name} {model:.4f}, baseline {trivial:.4f} ({predictor})"
    if model > trivial:
        return line, None
    return line, (f"warning: the model does not beat the baseline on dev ({name} {model:.4f} "
                  f"<= {trivial:.4f}, {predictor}): train longer (--epochs) or at another "
                  f"--lr, on more data, or check the labels")


__all__ = ["baseline_comparison", "baseline_report", "majority_class", "majority_label_set", "mean_value", "most_frequent_tag",
           "no_answer"]
