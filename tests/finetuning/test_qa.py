"""Extractive QA on crafted cases: windows with stride cover every answer, gold positions,
best span under the length limit equal to brute force, null answers and their threshold."""
from __future__ import annotations

import math

import pytest
import torch

from bertkit.finetuning.tasks import qa


@pytest.mark.parametrize("n,room,stride", [(0, 5, 2), (5, 5, 2), (6, 5, 2), (23, 7, 3),
                                           (100, 10, 9)])
def test_windows_cover_the_context_with_the_given_overlap(n, room, stride):
    starts = qa.window_starts(n, room, stride)
    assert starts[0] == 0
    assert starts[-1] + room >= n  # the end is covered
    for a, b in zip(starts, starts[1:]):
        assert a + room - b == stride  # consecutive windows share `stride` tokens
    # every answer of up to stride + 1 tokens lies whole inside some window
    for first in range(n):
        for last in range(first, min(n, first + stride + 1)):
            assert any(s <= first and last < s + room for s in starts)


def test_window_arguments_are_checked():
    with pytest.raises(ValueError):
        qa.window_starts(10, 4, 4)
    with pytest.raises(ValueError, match="leaving"):
        qa.make_windows(0, list(range(10)), [1, 2, 3], max_length=14, stride=2, cls_id=101,
                        sep_id=102)


def test_make_windows_layout_and_targets():
    question, context = [7, 8], list(range(20, 32))  # 12 context tokens
    windows = qa.make_windows(0, question, context, max_length=10, stride=2, cls_id=1, sep_id=2)
    room = 10 - 2 - 3
    assert [w.first for w in windows] == qa.window_starts(12, room, 2)
    for w in windows:
        assert w.input_ids[:4] == [1, 7, 8, 2] and w.input_ids[-1] == 2
        assert w.input_ids[w.context_start:w.context_start + w.length] == \
            context[w.first:w.first + w.length]
        assert w.token_type_ids == [0] * 4 + [1] * (w.length + 1)
        assert len(w.input_ids) <= 10
    # an answer on context tokens 4..5 maps into the windows that hold it, else to [CLS]
    for w in windows:
        s, e = qa.target_positions(w, (4, 5))
        if w.first <= 4 and 5 < w.first + w.length:
            assert w.input_ids[s] == context[4] and w.input_ids[e] == context[5]
        else:
            assert (s, e) == (0, 0)
    assert qa.target_positions(windows[0], None) == (0, 0)


def test_char_span_to_tokens():
    offsets = [(0, 3), (4, 9), (9, 10), (11, 16)]  # "The house, again"
    assert qa.char_span_to_tokens(offsets, 4, 9) == (1, 1)
    assert qa.char_span_to_tokens(offsets, 4, 10) == (1, 2)
    assert qa.char_span_to_tokens(offsets, 5, 12) == (1, 3)  # partial words widen to tokens
    assert qa.char_span_to_tokens(offsets, 10, 11) is None  # only whitespace


def test_best_spans_equal_brute_force():
    g = torch.Generator().manual_seed(0)
    N, T, max_len = 5, 12, 3
    start, end = torch.randn(N, T, generator=g), torch.randn(N, T, generator=g)
    cs = torch.tensor([3, 4, 1, 5, 3])
    cl = torch.tensor([8, 6, 10, 2, 1])
    score, first, last, null, probability = qa.best_spans(start, end, cs, cl, max_len)
    for n in range(N):
        best = max((start[n, i] + end[n, j], i, j)
                   for i in range(cs[n], cs[n] + cl[n]) for j in range(i, cs[n] + cl[n])
                   if j - i < max_len)
        assert torch.isclose(score[n], best[0])
        assert (first[n].item(), last[n].item()) == (best[1], best[2])
        assert torch.isclose(null[n], start[n, 0] + end[n, 0])
        # the pipeline's score: a softmax over [CLS] and the context, for the start and the end
        candidates = [0, *range(cs[n], cs[n] + cl[n])]
        p_start = {i: math.exp(start[n, i]) / sum(math.exp(start[n, k]) for k in candidates)
                   for i in candidates}
        p_end = {i: math.exp(end[n, i]) / sum(math.exp(end[n, k]) for k in candidates)
                 for i in candidates}
        assert probability[n, 0].item() == pytest.approx(p_start[best[1]] * p_end[best[2]])
        assert probability[n, 1].item() == pytest.approx(p_start[0] * p_end[0])


def _window(example, first, length, context_start=3):
    n = context_start + length + 1
    return qa.Window(example, [0] * n, [0] * n, context_start, first, length)


def test_decode_picks_the_best_window_and_applies_the_null_threshold():
    context = "aa bb cc dd ee"
    offsets = [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)]
    windows = [_window(0, 0, 3), _window(0, 2, 3)]  # context tokens 0-2 and 2-4
    scores = torch.tensor([1.0, 4.0])
    firsts = torch.tensor([3, 4])  # window coordinates: context_start 3
    lasts = torch.tensor([4, 5])   # second window: context tokens 3..4
    nulls = torch.tensor([2.0, 3.5])
    probabilities = torch.tensor([[0.1, 0.3], [0.6, 0.2]])  # [span, null] per window
    outputs = (windows, scores, firsts, lasts, nulls, probabilities, [context], [offsets])
    pred = qa.decode_answers(*outputs, None)[0]
    assert pred.text == "dd ee" and pred.char_start == 9
    assert pred.null_score == 2.0 and pred.null_margin == pytest.approx(-2.0)
    # the best span's window's probability; the null's of the window with the least null score
    assert pred.probability == pytest.approx(0.6) and pred.null_probability == pytest.approx(0.3)
    kept = qa.decode_answers(*outputs, -3.0)[0]
    assert kept.text == ""  and kept.span_text == "dd ee"  # null - best = -2 > -3: no answer
    assert kept.probability == pytest.approx(0.3)
    answered = qa.decode_answers(*outputs, -1.0)[0]
    assert answered.text == "dd ee"


def test_windowing_on_a_real_tokenizer(minilm_dir):
    from bertkit.finetuning.readers import Answer, QAExample
    from bertkit.text.tokenizer import Tokenizer
    tok = Tokenizer.load(minilm_dir)
    context = " ".join(f"word{i}" for i in range(150)) + " The capital is Paris ."
    start = context.index("Paris")
    ex = QAExample("q1", "What is the capital?", context, [Answer("Paris", start)])
    items = qa.QA(max_length=64, stride=16, max_question=64).encode(tok, [ex], training=True)
    assert len(items) > 5
    found = [it for it in items if it.target != (0, 0)]
    assert found, "the answer lies in some window"
    for it in found:
        s, e = it.target
        assert tok.decode(it.ids[s:e + 1]) == "paris"
    assert all(len(it.ids) <= 64 for it in items)


# Tuning and scoring dev at the end of a run ----------------------------------------------------

def _hand_made_squad() -> dict:
    """SQuAD 2.0 by hand: contexts longer than one 32-token window, answers in the first and
    the last window, and unanswerable questions."""
    trip = ("john went to paris . the sky is blue . mary went to rome and the film was good . "
            "alice went to london . the movie was awful and the plot was poor . so the sky is "
            "blue and the film is fine . mary went to new york .")
    short = "alice went to rome . the sky is blue ."
    qas = [("where did john go ?", "paris", 0), ("where did alice go ?", "london", 0),
           ("where did mary go ?", "rome", 0), ("what colour is the sky ?", "blue", 0),
           ("what colour is the movie ?", None, 0), ("who went to new york ?", "mary", 1),
           ("where did alice go ?", "rome", 2), ("what colour is the film ?", None, 2)]
    paragraphs = [{"context": trip, "qas": []}, {"context": trip.replace("john", "alice"),
                                                 "qas": []}, {"context": short, "qas": []}]
    for n, (question, answer, p) in enumerate(qas):
        context = paragraphs[p]["context"]
        at = context.rindex(answer) if answer == "mary" else \
            context.index(answer) if answer else -1
        paragraphs[p]["qas"].append({
            "id": f"q{n}", "question": question, "is_impossible": answer is None,
            "answers": [{"text": answer, "answer_start": at}] if answer else []})
    return {"version": "v2.0", "data": [{"title": "hand", "paragraphs": paragraphs}]}


# What the three runs of the model (tuning: untuned and tuned; the final scores) gave before
# one run served all three, with the model below on _hand_made_squad().
THRESHOLD = -0.37550175189971924
FINAL = {"exact_match": 0.5, "f1": 0.5, "total": 8, "has_ans_exact_match": 1 / 3,
         "has_ans_f1": 1 / 3, "has_ans_total": 6, "no_ans_exact_match": 1.0, "no_ans_f1": 1.0,
         "no_ans_total": 2, "best_exact_match": 0.5, "best_exact_match_threshold": THRESHOLD,
         "best_f1": 0.5, "best_f1_threshold": THRESHOLD}


def test_the_end_of_a_run_tunes_and_scores_dev_from_one_pass(tiny_bert, quick_config,
                                                             synthetic, tmp_path):
    """The null threshold is tuned and the final dev scores decoded from one run of the model
    over the dev windows, and they are what three runs gave."""
    from bertkit.finetuning.predict import TaskModel
    from bertkit.finetuning.recipe import DevScores, finetune, plan_run, read_data

    trained = tmp_path / "trained"  # a model that answers some questions and not others
    finetune(qa.QA(stride=8), tiny_bert, synthetic.write_squad(tmp_path / "train.json",
                                                               synthetic.squad(40, 7)),
             None, trained, quick_config(epochs=3, batch_size=16, max_length=32,
                                         dev_fraction=0.2, precision="fp32"))
    data = synthetic.write_squad(tmp_path / "dev.json", _hand_made_squad())
    plan = plan_run(qa.QA(stride=8), tiny_bert, data, data, tmp_path / "out",
                    quick_config(max_length=32), None)
    task, train, dev = read_data(plan)
    model = TaskModel.load(trained).model
    runner = TaskModel(model, plan.backbone.tokenizer, task, skip_no_room=True,
                       report_cut=False, batch_size=4)
    batches = -(-len(task.encode(plan.backbone.tokenizer, dev)) // 4)
    forward, calls = model.forward, []
    model.forward = lambda *args, **kwargs: calls.append(1) or forward(*args, **kwargs)
    scores = DevScores(plan, runner, train, dev)
    scores.save(model, tmp_path / "model")
    assert batches > 1 and len(calls) == batches  # one pass over the windows, not three
    assert scores.runner.task.null_threshold == pytest.approx(THRESHOLD, rel=1e-5)
    assert {k: v for k, v in scores.final.items() if k != "baseline"} == \
        pytest.approx(FINAL, rel=1e-5)
