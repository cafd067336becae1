"""`predict --long-inputs windows` of tag and spans models: each word of a sentence longer than
the model's max_length labelled from the window where it is most central, as that window run
alone labels it; the plain predictions wherever a sentence fits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.finetuning.inputs import piece_cases
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.tasks import Spans, Tag
from bertkit.text.windows import split

LONG = ("john went to new york . mary went to paris . alice went to rome . "
        "paris went to london . john went to new york .")  # 29 words, one piece each


@pytest.fixture(scope="module")
def taggers(tmp_path_factory, tiny_bert, quick_config, task_files):
    """A tagger (no CRF, so its labels are the argmax of its logits) and a span tagger, of
    max_length 16, trained one short epoch."""
    d = tmp_path_factory.mktemp("tag-windows")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    finetune(Tag(crf=False), tiny_bert, task_files["ner_train"], task_files["ner_dev"],
             d / "tag", quick_config(epochs=1, batch_size=16, max_length=16))
    finetune(Spans(max_width=3), tiny_bert, task_files["ner_train"], task_files["ner_dev"],
             d / "spans", quick_config(epochs=1, batch_size=16, max_length=16))
    torch.set_num_threads(before)
    return d


def _windows_alone(model: TaskModel, words: list[str], **kw):
    """Per window of the sentence: its positions, its first word, and the model's outputs on
    it run alone (words numbered from the window's first)."""
    enc = model.tokenizer.encode(words, is_split_into_words=True)
    ids = np.asarray(enc.ids)
    word_ids = np.array([-1 if w is None else w for w in enc.word_ids])
    cases = np.array(piece_cases(words, word_ids.tolist()))
    windows = split(len(ids), (1, len(ids) - 1), model.task.max_length)
    assert len(windows.positions) == 3
    out = []
    for held in windows.positions:
        first = int(word_ids[held][word_ids[held] >= 0].min())
        local = np.where(word_ids[held] >= 0, word_ids[held] - first, -1)
        t = torch.from_numpy(ids[held])[None]
        case = torch.from_numpy(cases[held])[None] if model.task.case_feature else None
        with torch.inference_mode():
            extra = {"word_ids": torch.from_numpy(local)[None]} if kw.get("spans") else {}
            out.append((held, first, model.model(t, torch.zeros_like(t), torch.ones_like(t),
                                                 case_ids=case, **extra)))
    return windows, word_ids, out


def _predict(model_dir, source, out, *flags):
    assert main(["predict", "--model", str(model_dir), "--input", str(source), "--out",
                 str(out), "--quiet", *flags]) == 0
    return [json.loads(line) for line in out.open()]


def test_each_word_is_tagged_by_its_most_central_window(taggers, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(LONG + "\n")
    row = _predict(taggers / "tag", source, tmp_path / "win.jsonl", "--long-inputs",
                   "windows")[0]
    model = TaskModel.load(taggers / "tag")
    words = LONG.split()
    windows, word_ids, alone = _windows_alone(model, words)
    want = []
    for w in range(len(words)):
        first_piece = int(np.flatnonzero(word_ids == w)[0])
        held, _, logits = alone[windows.owner[first_piece]]
        at = int(np.flatnonzero(held == first_piece)[0])
        want.append(model.labels[int(logits[0, at].argmax())])
    assert row["tokens"] == words and row["tags"] == want
    cut = _predict(taggers / "tag", source, tmp_path / "cut.jsonl")[0]
    assert cut["tags"][14:] == ["O"] * (len(words) - 14)  # cut: the words past 14 pieces


def test_each_span_is_read_from_its_first_word_s_most_central_window(taggers):
    model = TaskModel.load(taggers / "spans")
    words = LONG.split()
    windowed = TaskModel.load(taggers / "spans")
    windowed.windows = True
    found = windowed.tag([LONG])[0]
    windows, word_ids, alone = _windows_alone(model, words, spans=True)
    starts = {e["start"]: e for e in found}
    offsets = np.cumsum([0] + [len(w) + 1 for w in words])
    assert found, "the model found no entity to check"
    for e in found:
        s = int(np.searchsorted(offsets, e["start"]))
        end = int(np.searchsorted(offsets, e["end"] + 1))  # exclusive
        held, first, (logits, _) = alone[windows.owner[int(np.flatnonzero(word_ids == s)[0])]]
        logp = torch.log_softmax(logits[0, s - first, end - 1 - s].float(), -1)
        best = int(logp[1:].argmax()) + 1
        assert e["label"] == model.task.labels[best - 1]
        assert e["score"] == pytest.approx(float(torch.sigmoid(logp[best] - logp[0])),
                                           abs=1e-6)  # the margin over NULL, squashed
    assert len(starts) == len(found)


def test_windows_equal_the_plain_tags_where_every_sentence_fits(taggers, task_files,
                                                                tmp_path):
    for model in ("tag", "spans"):
        cut = _predict(taggers / model, task_files["ner_dev"], tmp_path / "cut.jsonl")
        win = _predict(taggers / model, task_files["ner_dev"], tmp_path / "win.jsonl",
                       "--long-inputs", "windows")
        assert cut == win
