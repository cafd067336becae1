"""The prediction API and the evaluate / predict commands on tiny fine-tuned models:
pipeline-style outputs, entities with character offsets into the original text, answers
located in their context, JSON metrics, JSON-lines predictions, a real `bertkit` process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.predict import TaskModel, answer, classify, tag
from bertkit.finetuning.inputs import encode_sentences
from bertkit.finetuning.readers import TaggedSentence

sys.path.insert(0, str(Path(__file__).parent))
from test_finetune import FAST, ner, sentiment, squad, tiny_bert, write_conll, write_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("predict")
    bert = tiny_bert(d)
    files = {"train": write_jsonl(d / "train.jsonl", sentiment(160, 1)),
             "dev": write_jsonl(d / "dev.jsonl", sentiment(40, 2)),
             "ner_train": write_conll(d / "train.conll", ner(120, 3)),
             "ner_dev": write_conll(d / "dev.conll", ner(30, 4))}
    (d / "squad.json").write_text(json.dumps(squad(40, 7)))
    finetune("classify", bert, files["train"], files["dev"], d / "cls",
             FinetuneConfig(epochs=4, batch_size=16, **FAST))
    finetune("tag", bert, files["ner_train"], files["ner_dev"], d / "tag",
             FinetuneConfig(epochs=6, batch_size=16, **FAST))
    finetune("spans", bert, files["ner_train"], files["ner_dev"], d / "spans",
             FinetuneConfig(epochs=6, batch_size=16, max_span_width=3, **FAST))
    finetune("qa", bert, d / "squad.json", None, d / "qa",
             FinetuneConfig(epochs=3, batch_size=16, max_length=32, stride=8, dev_fraction=0.2,
                            **FAST))
    yield {"dir": d, **files}
    torch.set_num_threads(before)


def test_classify_like_a_pipeline(models):
    model = TaskModel.load(models["dir"] / "cls")
    out = model(["the film was great", "so awful a plot"])
    assert [o["label"] for o in out] == ["positive", "negative"]
    assert all(0.5 < o["score"] <= 1.0 for o in out)
    single = classify(models["dir"] / "cls", "really good movie")
    assert single["label"] == "positive"


def test_length_bucketed_batches_equal_one_at_a_time(models):
    model = TaskModel.load(models["dir"] / "cls", batch_size=4)
    texts = ["good", "the plot was so awful and the film was poor", "fine film",
             "a really great movie and a good plot", "bad", "the movie is fine"]
    batched = model.classify(texts)
    for text, row in zip(texts, batched):
        alone = model.classify(text)
        assert alone["label"] == row["label"]
        assert abs(alone["score"] - row["score"]) < 1e-5


@pytest.mark.parametrize("kind", ["tag", "spans"])
def test_tag_returns_entities_with_offsets_into_the_original_text(models, kind):
    model = TaskModel.load(models["dir"] / kind)
    texts = ["Mary  went to   New York.", "john went to paris ."]
    out = model.tag(texts)
    for text, entities in zip(texts, out):
        for e in entities:
            assert text[e["start"]:e["end"]] == e["text"]
    first = {(e["label"], e["text"]) for e in out[0]}
    assert ("PER", "Mary") in first and ("LOC", "New York") in first
    assert tag(models["dir"] / kind, "alice went to rome .")[0]["label"] == "PER"


def test_mean_decoding_gives_one_tag_per_word(models):
    model = TaskModel.load(models["dir"] / "tag")
    sentence = TaggedSentence(["johns", "went", "to", "romeing", "."], [], "")
    first = model.predict_sentences([sentence])[0]
    model.task["decode"] = "mean"
    mean = model.predict_sentences([sentence])[0]
    assert len(first[0]) == len(mean[0]) == 5
    assert all(0.0 < p <= 1.0 for p in mean[1])
    assert set(mean[0]) <= set(model.labels)


def test_answer_points_into_the_context(models):
    model = TaskModel.load(models["dir"] / "qa")
    context = "alice went to rome . the sky is blue ."
    got = answer(model, "where did alice go ?", context)
    assert set(got) >= {"answer", "start", "end", "score"}
    if got["answer"]:
        assert context[got["start"]:got["end"]] == got["answer"]
    else:
        assert got["start"] == -1


def test_evaluate_json_and_predict_jsonl(models, tmp_path, capsys):
    d = models["dir"]
    assert main(["evaluate", "--model", str(d / "cls"), "--input", str(models["dev"]),
                 "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"accuracy", "macro_f1", "confusion_matrix"} <= set(scores)
    assert main(["evaluate", "--model", str(d / "tag"), "--input", str(models["ner_dev"]),
                 "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"precision", "recall", "f1", "per_type", "token_accuracy"} <= set(scores)
    assert main(["evaluate", "--model", str(d / "qa"), "--input", str(d / "squad.json"),
                 "--json"]) == 0
    assert {"exact", "f1", "has_ans_exact", "no_ans_exact"} <= set(
        json.loads(capsys.readouterr().out))
    # plain text in, JSON lines out
    texts = tmp_path / "in.txt"
    texts.write_text("the movie was good\n\nawful plot\n")
    assert main(["predict", "--model", str(d / "cls"), "--input", str(texts),
                 "--out", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").open()]
    assert [r["text"] for r in rows] == ["the movie was good", "awful plot"]
    assert {"label", "score"} <= set(rows[0])
    # CoNLL in for a tagger: one line per sentence with its words' tags
    assert main(["predict", "--model", str(d / "tag"), "--input", str(models["ner_dev"]),
                 "--out", str(tmp_path / "tags.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "tags.jsonl").open()]
    assert len(rows) == 30 and all(len(r["tokens"]) == len(r["tags"]) for r in rows)


def test_evaluate_on_a_bad_file_exits_2(models, tmp_path, capsys):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "good", "label": "positive"},
                                               {"text": "fine", "label": "meh"}])
    assert main(["evaluate", "--model", str(models["dir"] / "cls"), "--input", str(bad)]) == 2
    assert "bad.jsonl:2: unknown label 'meh'" in capsys.readouterr().err


def test_the_installed_command_predicts(models, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "great film"}, {"text": "poor movie"}])
    run = subprocess.run([str(Path(sys.executable).parent / "bertkit"), "predict", "--model",
                          str(models["dir"] / "cls"), "--input", str(src)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["label"] for r in rows] == ["positive", "negative"]


def test_subword_labels_align_on_a_real_tokenizer(minilm_dir):
    from bertkit.text.tokenizer import Tokenizer
    tok = Tokenizer.load(minilm_dir)
    sentence = TaggedSentence(["Empire", "Statesmanship", "rocks", "!"],
                              ["B-fac", "I-fac", "O", "O"], "")
    labels = ["O", "B-fac", "I-fac"]
    task = {"task": "tag", "labels": labels, "max_length": 32, "alignment": "copy"}
    item = encode_sentences(tok, [sentence], task)[0]
    pieces = [tok.id_to_token(i) for i in item.ids]
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    named = [labels[t] if t >= 0 else None for t in item.target]
    # every piece of a word carries its word's label, B- continued as I- on later pieces
    for piece, word, label in zip(pieces, item.word_ids, named):
        if word < 0:
            assert label is None
        elif word == 1:
            assert label == "I-fac"
        elif word == 0:
            assert label == ("B-fac" if not piece.startswith("##") else "I-fac")
        else:
            assert label == "O"
    assert item.word_ids.count(1) > 1  # "statesmanship" is split into several pieces
    first = encode_sentences(tok, [sentence], {**task, "alignment": "first"})[0]
    assert sum(t >= 0 for t in first.target) == 4  # one label per word
