"""Metrics against references: seqeval (default mode) on random tag sequences, sklearn for
classification, hand-computed official SQuAD values, scipy for correlations."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from bertkit.finetuning import metrics
from bertkit.finetuning.tagging import spans_to_tags, tags_to_spans


def _random_sentence(rng: random.Random, scheme: str, length: int) -> list[str]:
    types = ["PER", "LOC", "ORG", "geo-loc"]  # a type with '-' in it, as WNUT has
    if scheme == "ill":  # any prefix anywhere: I-X after O, E-X without B-X, type changes
        return [rng.choice(["O", "O", "O"] + [f"{p}-{t}" for p in "BIES" for t in types])
                for _ in range(length)]
    if scheme == "odd":  # bare prefixes and dotted tags, which conlleval still reads
        return [rng.choice(["O", "B", "I", "E", "S", ".", "B-PER", "I-PER", "I-"])
                for _ in range(length)]
    spans, i = [], 0
    while i < length:
        if rng.random() < 0.35:
            n = rng.randint(1, min(4, length - i))
            spans.append((i, i + n, rng.choice(types)))
            i += n + (0 if scheme != "IO" else 1)
        else:
            i += 1
    return spans_to_tags(spans, length, scheme)


@pytest.mark.parametrize("scheme", ["IO", "BIO", "BIOES", "ill", "odd"])
def test_entity_scores_equal_seqeval_default_mode(scheme):
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support
    rng = random.Random(hash(scheme) % 1000)
    for trial in range(60):
        lengths = [rng.randint(1, 12)] + [rng.randint(0, 12) for _ in range(rng.randint(0, 24))]
        gold = [_random_sentence(rng, scheme, n) for n in lengths]
        if rng.random() < 0.5:  # predictions: the gold with some tags changed
            pred = [[t if rng.random() < 0.8 else rng.choice(["O", "B-PER", "I-PER", "I-LOC",
                                                               "E-ORG", "S-geo-loc"])
                     for t in s] for s in gold]
        else:
            pred = [_random_sentence(rng, scheme, n) for n in lengths]
        ours = metrics.entity_scores(gold, pred)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, pred), abs=1e-9)
            assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, pred),
                                                      abs=1e-9)
            assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, pred), abs=1e-9)
            assert ours["token_accuracy"] == pytest.approx(seqeval.accuracy_score(gold, pred),
                                                           abs=1e-9)
            report = seqeval.classification_report(gold, pred, output_dict=True)
            p, r, f, s = precision_recall_fscore_support(gold, pred, average=None)
        types = sorted(t for t in report if not t.endswith(" avg"))
        assert types == sorted(ours["per_type"])
        for k, t in enumerate(types):
            got = ours["per_type"][t]
            assert (got["precision"], got["recall"], got["f1"], got["support"]) == \
                pytest.approx((p[k], r[k], f[k], s[k]), abs=1e-9)


def test_chunking_matches_seqeval_get_entities():
    from seqeval.metrics.sequence_labeling import get_entities
    rng = random.Random(0)
    for _ in range(3000):
        scheme = rng.choice(["IO", "BIO", "BIOES", "ill", "odd"])
        tags = _random_sentence(rng, scheme, rng.randint(0, 10))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = [(s, e + 1, t) for t, s, e in get_entities(tags)]
        assert tags_to_spans(tags) == expected, tags


def test_span_scores_with_nested_entities():
    gold = [{(0, 3, "ORG"), (1, 2, "LOC"), (5, 6, "PER")}, set()]
    pred = [{(0, 3, "ORG"), (1, 2, "PER"), (5, 6, "PER")}, {(0, 1, "LOC")}]
    s = metrics.span_scores(gold, pred)
    assert (s["precision"], s["recall"]) == (pytest.approx(2 / 4), pytest.approx(2 / 3))
    assert s["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert s["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert s["per_type"]["PER"]["precision"] == 0.5 and s["per_type"]["PER"]["recall"] == 1.0
    assert metrics.span_scores([[]], [[]])["f1"] == 0.0


def test_classification_against_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    labels = ["a", "b", "c", "d"]
    for _ in range(30):
        n = int(rng.integers(1, 60))
        gold = list(rng.choice(labels[:3], n))
        pred = list(rng.choice(labels, n))  # "d" only ever predicted
        assert metrics.accuracy(gold, pred) == pytest.approx(sk.accuracy_score(gold, pred))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert metrics.macro_f1(gold, pred) == pytest.approx(
                sk.f1_score(gold, pred, average="macro"), abs=1e-12)
            assert metrics.macro_f1(gold, pred, labels) == pytest.approx(
                sk.f1_score(gold, pred, average="macro", labels=labels), abs=1e-12)
        assert (metrics.confusion_matrix(gold, pred, labels)
                == sk.confusion_matrix(gold, pred, labels=labels)).all()
    s = metrics.classification_scores(["x", "y", "y"], ["x", "y", "x"], ["x", "y"])
    assert s["confusion_matrix"] == [[1, 0], [1, 1]] and s["accuracy"] == pytest.approx(2 / 3)


def test_multilabel_and_regression():
    s = metrics.multilabel_scores([["a", "b"], ["c"], []], [["a"], ["c"], ["b"]], ["a", "b", "c"])
    assert s["accuracy"] == pytest.approx(1 / 3)
    assert (s["precision"], s["recall"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    gold = rng.integers(1, 6, 200).astype(float)  # many ties, as SICK relatedness has
    pred = gold + rng.normal(0, 1.5, 200)
    r = metrics.regression_scores(gold, pred)
    assert r["pearson"] == pytest.approx(stats.pearsonr(gold, pred)[0], abs=1e-12)
    assert r["spearman"] == pytest.approx(stats.spearmanr(gold, pred)[0], abs=1e-12)
    assert r["mse"] == pytest.approx(((gold - pred) ** 2).mean())


# SQuAD: values worked out by hand with the official script's definitions

def test_squad_normalisation_and_single_scores():
    assert metrics.normalize_answer("  The  Eiffel-Tower, in Paris! ") == "eiffeltower in paris"
    assert metrics.normalize_answer("An apple a day") == "apple day"
    assert metrics.normalize_answer("theater") == "theater"  # articles only as words
    assert metrics.exact_match("the Normans", ["Normans", "Vikings"]) == 1.0
    # "in the 10th century" vs "10th and 11th centuries": common {10th}: p=1/3, r=1/4
    assert metrics.answer_f1("in the 10th century", ["10th and 11th centuries"]) == \
        pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))
    # the max over gold answers
    assert metrics.answer_f1("10th century", ["10th and 11th centuries", "10th century"]) == 1.0
    # unanswerable: only the empty prediction scores
    assert metrics.exact_match("", []) == 1.0 and metrics.answer_f1("", []) == 1.0
    assert metrics.exact_match("France", []) == 0.0 and metrics.answer_f1("France", []) == 0.0
    assert metrics.answer_f1("", ["France"]) == 0.0
    # a gold answer that normalises to nothing does not count
    assert metrics.exact_match("", ["the", "."]) == 1.0
    # repeated tokens count with multiplicity
    assert metrics.answer_f1("x y y", ["y y z"]) == pytest.approx(2 / 3)


def test_squad_scores_split_and_best_threshold():
    refs = {"q1": ["France"], "q2": ["10th century"], "q3": [], "q4": []}
    preds = {"q1": "France", "q2": "the 10th", "q3": "", "q4": "Rollo"}
    s = metrics.squad_scores(preds, refs)
    # EM: 1, 0, 1, 0; F1: 1, 2/3 (p=1, r=1/2), 1, 0
    assert s["exact_match"] == pytest.approx(0.5) and s["f1"] == pytest.approx((1 + 2 / 3 + 1) / 4)
    assert (s["has_ans_exact_match"], s["has_ans_f1"], s["has_ans_total"]) == \
        (pytest.approx(0.5), pytest.approx((1 + 2 / 3) / 2), 2)
    assert (s["no_ans_exact_match"], s["no_ans_total"]) == (pytest.approx(0.5), 2)
    assert "best_exact_match" not in s

    null = {"q1": 0.1, "q2": 0.7, "q3": 0.5, "q4": 0.9}
    s = metrics.squad_scores(preds, refs, null)
    # all null: 2 right (q3, q4). Rising null score: q1 (+1 -> 3, thresh .1), q3 (pred "" -> 0),
    # q2 (+0 EM / +2/3 F1), q4 (pred "Rollo", unanswerable -> -1)
    assert (s["best_exact_match"], s["best_exact_match_threshold"]) == (pytest.approx(3 / 4), 0.1)
    assert (s["best_f1"], s["best_f1_threshold"]) == (pytest.approx((3 + 2 / 3) / 4), 0.7)
    # applying a threshold: q4 (0.9 > 0.8) becomes "" -> right
    s = metrics.squad_scores(preds, refs, null, null_threshold=0.8)
    assert s["exact_match"] == pytest.approx(3 / 4) and s["no_ans_exact_match"] == 1.0
    # a missing prediction scores 0
    assert metrics.squad_scores({}, {"q1": ["x"]})["exact_match"] == 0.0


def test_best_threshold_against_the_definition():
    """Brute force: score every threshold (below all null scores, and each one) directly. The
    official sweep also stops inside a group of tied null scores, where no threshold can split
    them, so with ties it may report more than any threshold gives, never less."""
    rng = random.Random(4)
    for _ in range(300):
        n = rng.randint(1, 8)
        refs = {f"q{i}": ([] if rng.random() < 0.4 else ["x y"]) for i in range(n)}
        preds = {q: rng.choice(["", "x y", "x", "z"]) for q in refs}
        null = {q: rng.choice([0.1, 0.2, 0.5, 0.9, -1.0]) for q in refs}
        s = metrics.squad_scores(preds, refs, null)
        by_threshold = {t: metrics.squad_scores(preds, refs, null, null_threshold=t)["f1"]
                        for t in [min(null.values()) - 1, *null.values()]}
        if len(set(null.values())) == len(null):
            assert s["best_f1"] == pytest.approx(max(by_threshold.values()))
            if s["best_f1_threshold"] in by_threshold:
                assert by_threshold[s["best_f1_threshold"]] == pytest.approx(s["best_f1"])
        else:
            assert s["best_f1"] >= max(by_threshold.values()) - 1e-12


def test_best_threshold_counts_a_nonempty_prediction_as_wrong_like_the_official_script():
    # "a" normalises to "" (an article), yet the official sweep charges -1 for un-nulling a
    # non-empty prediction on an unanswerable question
    s = metrics.squad_scores({"q1": "a", "q2": "x"}, {"q1": [], "q2": ["x"]},
                             {"q1": 0.1, "q2": 0.2})
    assert s["exact_match"] == 1.0
    assert (s["best_exact_match"], s["best_exact_match_threshold"]) == (pytest.approx(0.5), 0.0)
