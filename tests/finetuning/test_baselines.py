"""The model's dev figure beside the trivial baseline's, and the warning when it is not beaten."""
from __future__ import annotations

import pytest

from bertkit.finetuning.baselines import baseline_comparison, baseline_report, no_answer
from bertkit.finetuning.readers import Answer, QAExample
from bertkit.finetuning.tasks.qa import QA


def test_the_comparison_names_the_selected_figure():
    scores = {"precision": 0.75, "recall": 0.6, "f1": 0.75, "per_type": {}}
    baseline = {"precision": 0.5, "recall": 0.2, "f1": 0.4}
    assert baseline_comparison(scores, baseline, lambda s: s["f1"]) == ("f1", 0.75, 0.4)
    # QA selects by a mean of two figures: no key holds it
    qa = baseline_comparison({"best_f1": 0.5, "has_ans_f1": 0.3}, {"best_f1": 0.2},
                             lambda s: (s["best_f1"] + s.get("has_ans_f1", 0.0)) / 2)
    assert qa == ("selection", 0.4, 0.1)


def test_a_qa_run_names_its_selected_figure_in_the_baseline_line():
    """`finetune qa` said `dev selection 0.2222, baseline 0.2222` and `"selection":
    "selection"`: the task names the mean it selects by."""
    task = QA()
    scores = {"f1": 0.3, "best_f1": 0.5, "has_ans_f1": 0.3}
    name, _, _ = baseline_comparison(scores, {"best_f1": 0.2}, task.selection,
                                     task.selection_name(scores))
    assert name == "(best_f1 + has_ans_f1) / 2"
    assert baseline_report((name, 0.4, 0.1))[0].startswith("dev (best_f1 + has_ans_f1) / 2 0.4000")
    assert task.selection_name({"f1": 0.3}) == "f1"  # SQuAD 1.1: selected by F1 alone


def test_the_no_answer_baseline_is_selected_by_the_figure_qa_models_are():
    # SQuAD 2.0: a model is chosen by (best F1 + HasAns F1) / 2; the trivial "no answer"
    # predictor must be measured the same way, not by its plain F1 (twice as large)
    dev = [QAExample("a", "q?", "Paris is big.", [Answer("Paris", 0)]),
           QAExample("b", "q?", "Paris is big.", []), QAExample("c", "q?", "It is.", [])]
    trivial = no_answer(dev)
    assert QA().selection(trivial) == (2 / 3 + 0.0) / 2
    model = {"f1": 2 / 3, "best_f1": 2 / 3, "has_ans_f1": 0.5}
    _, ours, theirs = baseline_comparison(model, trivial, QA().selection)
    assert (ours, theirs) == (pytest.approx(7 / 12), pytest.approx(1 / 3))


def test_no_baseline_or_a_baseline_without_the_figure_gives_no_comparison():
    assert baseline_comparison({"f1": 0.5}, None, lambda s: s["f1"]) is None
    assert baseline_comparison({"f1": 0.5}, {"accuracy": 0.3}, lambda s: s["f1"]) is None


def test_the_report_warns_only_when_the_model_does_not_beat_the_baseline():
    line, warning = baseline_report(("accuracy", 0.9, 0.6))
    assert line == "dev accuracy 0.9000, baseline 0.6000 (a trivial predictor)"
    assert warning is None
    for model in (0.6, 0.5):
        _, warning = baseline_report(("accuracy", model, 0.6))
        assert warning.startswith("warning: the model does not beat the baseline on dev "
                                  "(accuracy ")
