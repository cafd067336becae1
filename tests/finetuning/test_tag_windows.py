"""`predict --long-inputs windows` of tag and spans models: each word of a sentence longer than
the model's max_length labelled from the window where it is most central, as that window run
alone labels it; the plain predictions wherever a sentence fits."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.finetuning.inputs import piece_cases
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.readers import TaggedSentence
from bertkit.finetuning.tasks import Spans, Tag
from bertkit.finetuning.tasks.spans import decode_spans
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
    windowed = TaskModel.load(taggers / "spans", windows=True)
    # a margin below 0, so that a model one epoch old finds entities to check
    windowed = windowed.with_task(dataclasses.replace(windowed.task, span_margin=-3.0))
    found = windowed.predict([TaggedSentence(words, [], LONG)])[0]
    windows, word_ids, alone = _windows_alone(model, words, spans=True)
    rows = []
    for w in range(len(words)):  # span logits [L, K] from the start word's central window
        held, first, (logits, _) = alone[windows.owner[int(np.flatnonzero(word_ids == w)[0])]]
        rows.append(logits[0, w - first])
    want = decode_spans(torch.stack(rows)[None], torch.ones(1, len(words), dtype=torch.bool),
                        -3.0, model.task.nested)[0]
    assert found, "the model found no entity to check"
    assert [(s, e, label) for s, e, label, _ in found] == \
        [(s, e + 1, model.task.labels[t - 1]) for s, e, t, _ in want]
    np.testing.assert_allclose([sc for *_, sc in found], [sc for *_, sc in want], atol=1e-5)


def test_windows_equal_the_plain_tags_where_every_sentence_fits(taggers, task_files,
                                                                tmp_path):
    for model in ("tag", "spans"):
        cut = _predict(taggers / model, task_files["ner_dev"], tmp_path / "cut.jsonl")
        win = _predict(taggers / model, task_files["ner_dev"], tmp_path / "win.jsonl",
                       "--long-inputs", "windows")
        assert cut == win
