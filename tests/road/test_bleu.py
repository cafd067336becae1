"""BLEU and chrF equal to sacrebleu's corpus_bleu and corpus_chrf (its default settings)."""
from __future__ import annotations

import json

import pytest

from bertkit.road.bleu import corpus_bleu, corpus_chrf, tokenize_13a

sacrebleu = pytest.importorskip("sacrebleu")

CASES = {
    "exact": (["The cat sat on the mat."], ["The cat sat on the mat."]),
    "short output": (["the cat", "a b c d ."], ["the cat sat", "x y z w ."]),
    "no match at all": (["alpha beta"], ["gamma delta epsilon"]),
    "no 4-gram match": (["he said to them, go now"], ["he said to him, go and see"]),
    "numbers and dashes": (["In 3.5 days, 1-2 men & women (10,000) came."],
                           ["In 3.5 days 1 - 2 men and women, 10,000, came!"]),
    "curly quotes": (["He said, “Has God really said?”"], ["He said, \u201cHas God said?\u201d"]),
    "empty output": (["", "one two three four five"], ["a b c", "one two three four five six"]),
    "longer output": (["a a a a a a a a the the"], ["the a"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bleu_and_chrf_equal_sacrebleu(name):
    hyps, refs = CASES[name]
    assert corpus_bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score,
                                                    abs=1e-9)
    assert corpus_chrf(hyps, refs) == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score,
                                                    abs=1e-9)


def test_13a_tokenization_splits_punctuation_but_not_decimals():
    assert tokenize_13a("In 3.5 days, 1-2 men.") == ["In", "3.5", "days", ",", "1", "-", "2",
                                                     "men", "."]


def test_a_perfect_corpus_scores_100_and_lengths_must_agree():
    refs = ["And God said, Let there be light: and there was light."]
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_chrf(refs, refs) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        corpus_bleu(["a"], ["a", "b"])


def test_real_verses_equal_sacrebleu(shared_data):
    """KJV verses scored against the WEB (the copy-the-source baseline) and a shuffled pairing."""
    rows = [json.loads(line) for line in
            (shared_data / "seq2seq" / "kjv_web.dev.jsonl").read_text(encoding="utf-8").splitlines()]
    hyps, refs = [r["source"] for r in rows[:400]], [r["target"] for r in rows[:400]]
    for h in (hyps, hyps[1:] + hyps[:1]):
        assert corpus_bleu(h, refs) == pytest.approx(sacrebleu.corpus_bleu(h, [refs]).score,
                                                     abs=1e-9)
        assert corpus_chrf(h, refs) == pytest.approx(sacrebleu.corpus_chrf(h, [refs]).score,
                                                     abs=1e-9)
