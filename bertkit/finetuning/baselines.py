"""What a trivial predictor scores, fitted on the training data: the figure a fine-tuned model
has to beat, saved beside its own dev scores. Each task's `baseline` picks one.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

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
    """QA: always "no answer" (exact on unanswerable questions only)."""
    return metrics.squad_scores({ex.id: "" for ex in test},
                                {ex.id: [a.text for a in ex.answers] for ex in test})


__all__ = ["majority_class", "majority_label_set", "mean_value", "most_frequent_tag",
           "no_answer"]
