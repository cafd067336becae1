"""The prediction API and the evaluate / predict commands on tiny fine-tuned models:
pipeline-style outputs, entities with character offsets into the original text, answers
located in their context, JSON metrics, JSON-lines predictions, a real `bertkit` process."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.finetuning.predict import TaskModel, answer, classify, tag
from bertkit.finetuning.readers import TaggedSentence
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.tasks import QA, Spans, Tag


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_bert, quick_config, synthetic):
    """Models fine-tuned on the synthetic data (directories "cls", "tag", "spans", "qa" under
    "dir") and the files they were trained and tested on."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("predict")
    files = {"train": synthetic.write_jsonl(d / "train.jsonl", synthetic.sentiment(160, 1)),
             "dev": synthetic.write_jsonl(d / "dev.jsonl", synthetic.sentiment(40, 2)),
             "ner_train": synthetic.write_conll(d / "train.conll", synthetic.ner(120, 3)),
             "ner_dev": synthetic.write_conll(d / "dev.conll", synthetic.ner(30, 4)),
             "squad": synthetic.write_squad(d / "squad.json", synthetic.squad(40, 7))}
    finetune("classify", tiny_bert, files["train"], files["dev"], d / "cls",
             quick_config(epochs=4, batch_size=16))
    finetune("tag", tiny_bert, files["ner_train"], files["ner_dev"], d / "tag",
             quick_config(epochs=6, batch_size=16))
    finetune(Spans(max_width=3), tiny_bert, files["ner_train"], files["ner_dev"], d / "spans",
             quick_config(epochs=6, batch_size=16))
    finetune(QA(stride=8), tiny_bert, files["squad"], None, d / "qa",
             quick_config(epochs=3, batch_size=16, max_length=32, dev_fraction=0.2))
    yield {"dir": d, **files}
    torch.set_num_threads(before)


@pytest.mark.slow
def test_classify_like_a_pipeline(finetuned):
    model = TaskModel.load(finetuned["dir"] / "cls")
    out = model(["the film was great", "so awful a plot"])
    assert [o["label"] for o in out] == ["positive", "negative"]
    for text, o in zip(["the film was great", "so awful a plot"], out):
        with torch.no_grad():
            probs = torch.softmax(model.model(*model.tokenizer([text])), -1)[0]
        assert o["score"] == pytest.approx(float(probs.max()), abs=1e-6)
    single = classify(finetuned["dir"] / "cls", "really good movie")
    assert single["label"] == "positive"


@pytest.mark.slow
def test_length_bucketed_batches_equal_one_at_a_time(finetuned):
    model = TaskModel.load(finetuned["dir"] / "cls", batch_size=4)
    texts = ["good", "the plot was so awful and the film was poor", "fine film",
             "a really great movie and a good plot", "bad", "the movie is fine"]
    batched = model.classify(texts)
    for text, row in zip(texts, batched):
        alone = model.classify(text)
        assert alone["label"] == row["label"]
        assert abs(alone["score"] - row["score"]) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tag", "spans"])
def test_tag_returns_entities_with_offsets_into_the_original_text(finetuned, kind):
    model = TaskModel.load(finetuned["dir"] / kind)
    texts = ["Mary  went to   New York.", "john went to paris ."]
    out = model.tag(texts)
    for text, entities in zip(texts, out):
        for e in entities:
            assert text[e["start"]:e["end"]] == e["text"]
    first = {(e["label"], e["text"]) for e in out[0]}
    assert ("PER", "Mary") in first and ("LOC", "New York") in first
    assert tag(finetuned["dir"] / kind, "alice went to rome .")[0]["label"] == "PER"


@pytest.mark.slow
def test_mean_decoding_gives_one_tag_per_word(finetuned):
    model = TaskModel.load(finetuned["dir"] / "tag")
    sentence = TaggedSentence(["johns", "went", "to", "romeing", "."], [], "")
    first = model.predict([sentence])[0]
    mean = model.with_task(dataclasses.replace(model.task, decode="mean")).predict([sentence])[0]
    assert len(first[0]) == len(mean[0]) == 5
    # a word of one piece: the mean over its pieces is that piece, as in first-piece decoding
    for w in (1, 2, 4):
        assert mean[0][w] == first[0][w] and mean[1][w] == pytest.approx(first[1][w], abs=1e-6)
    assert set(mean[0]) <= set(model.labels)


@pytest.mark.slow
def test_answer_points_into_the_context(finetuned):
    model = TaskModel.load(finetuned["dir"] / "qa")
    context = "alice went to rome . the sky is blue ."
    got = answer(model, "where did alice go ?", context)
    assert set(got) >= {"answer", "start", "end", "score"}
    assert 0.0 < got["score"] <= 1.0  # a probability, the pipeline's, not a sum of logits
    if got["answer"]:
        assert context[got["start"]:got["end"]] == got["answer"]
    else:
        assert got["start"] == -1


@pytest.mark.slow
def test_evaluate_json_and_predict_jsonl(finetuned, tmp_path, capsys):
    d = finetuned["dir"]
    assert main(["evaluate", "--model", str(d / "cls"), "--input", str(finetuned["dev"]),
                 "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"accuracy", "macro_f1", "confusion_matrix"} <= set(scores)
    assert main(["evaluate", "--model", str(d / "tag"), "--input", str(finetuned["ner_dev"]),
                 "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"precision", "recall", "f1", "per_type", "token_accuracy"} <= set(scores)
    assert main(["evaluate", "--model", str(d / "qa"), "--input", str(finetuned["squad"]),
                 "--json"]) == 0
    assert {"exact_match", "f1", "has_ans_exact_match", "no_ans_exact_match"} <= set(
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
    assert main(["predict", "--model", str(d / "tag"), "--input", str(finetuned["ner_dev"]),
                 "--out", str(tmp_path / "tags.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "tags.jsonl").open()]
    assert len(rows) == 30 and all(len(r["tokens"]) == len(r["tags"]) for r in rows)


def test_bf16_predictions_run_under_autocast_and_agree_with_fp32(finetuned, tmp_path):
    """`precision="bf16"` runs the model's matmuls in bf16 (seen at a Linear's output) and
    gives back fp32 scores close to the exact ones; `predict --precision bf16` is that."""
    texts = ["the film was great", "so awful a plot", "a good film", "the plot was poor"]
    exact = TaskModel.load(finetuned["dir"] / "cls").classify(texts)
    fast = TaskModel.load(finetuned["dir"] / "cls", precision="bf16")
    seen = []
    linear = next(m for m in fast.model.modules() if isinstance(m, torch.nn.Linear))
    hook = linear.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    rows = fast.classify(texts)
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert [r["label"] for r in rows] == [r["label"] for r in exact]
    assert [r["score"] for r in rows] == pytest.approx([r["score"] for r in exact], abs=0.03)
    given = tmp_path / "in.txt"
    given.write_text("\n".join(texts) + "\n")
    assert main(["predict", "--model", str(finetuned["dir"] / "cls"), "--input", str(given),
                 "--precision", "bf16", "--out", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").open()]
    assert [r["score"] for r in written] == pytest.approx([r["score"] for r in rows], abs=1e-6)
    with pytest.raises(ValueError, match="precision 'fp16'"):
        dataclasses.replace(fast, precision="fp16")


@pytest.mark.slow
def test_predict_writes_conll_for_taggers(finetuned, tmp_path, capsys):
    d = finetuned["dir"]
    assert main(["predict", "--model", str(d / "tag"), "--input", str(finetuned["ner_dev"]),
                 "--format", "conll", "--out", str(tmp_path / "tags.conll")]) == 0
    written = (tmp_path / "tags.conll").read_text()
    rows = [json.loads(r) for r in _jsonl(d / "tag", finetuned["ner_dev"], tmp_path)]
    sentences = written.split("\n\n")
    assert written.endswith("\n\n") and len(sentences) == 31 and sentences[-1] == ""
    gold = finetuned["ner_dev"].read_text().split("\n\n")
    for block, row, original in zip(sentences, rows, gold):
        lines = [line.split("\t") for line in block.splitlines()]
        assert lines == [[w, g, t] for w, g, t in zip(row["tokens"], row["gold"], row["tags"])]
        assert [[x[0], x[1]] for x in lines] == [line.split() for line in original.splitlines()]
    # untagged text in: word TAB predicted tag
    texts = tmp_path / "in.txt"
    texts.write_text("mary went to rome .\n")
    assert main(["predict", "--model", str(d / "tag"), "--input", str(texts),
                 "--format", "conll"]) == 0
    out = capsys.readouterr().out
    assert [line.split("\t")[0] for line in out.splitlines() if line] == \
        ["mary", "went", "to", "rome", "."]
    assert all(len(line.split("\t")) == 2 for line in out.splitlines() if line)
    assert main(["predict", "--model", str(d / "cls"), "--input", str(texts),
                 "--format", "conll"]) == 2
    assert "--format conll writes tags: a classify model has none" in capsys.readouterr().err


def _jsonl(model, path, tmp_path) -> list[str]:
    assert main(["predict", "--model", str(model), "--input", str(path),
                 "--out", str(tmp_path / "rows.jsonl")]) == 0
    return (tmp_path / "rows.jsonl").read_text().splitlines()


@pytest.mark.slow
def test_evaluate_on_a_bad_file_exits_2(finetuned, synthetic, tmp_path, capsys):
    bad = synthetic.write_jsonl(tmp_path / "bad.jsonl", [{"text": "good", "label": "positive"},
                                                         {"text": "fine", "label": "meh"}])
    assert main(["evaluate", "--model", str(finetuned["dir"] / "cls"), "--input", str(bad)]) == 2
    assert "bad.jsonl:2: unknown label 'meh'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_installed_command_predicts(finetuned, synthetic, tmp_path):
    src = synthetic.write_jsonl(tmp_path / "in.jsonl",
                                [{"text": "great film"}, {"text": "poor movie"}])
    run = subprocess.run([str(Path(sys.executable).parent / "bertkit"), "predict", "--model",
                          str(finetuned["dir"] / "cls"), "--input", str(src)],
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
    task = Tag(labels=tuple(labels), max_length=32, alignment="copy")
    item = task.encode(tok, [sentence])[0]
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
    first = dataclasses.replace(task, alignment="first").encode(tok, [sentence])[0]
    assert sum(t >= 0 for t in first.target) == 4  # one label per word


@pytest.mark.slow
def test_predict_files_of_every_kind(finetuned, synthetic, tmp_path):
    d = finetuned["dir"]
    texts = tmp_path / "in.txt"
    texts.write_text("mary went to rome .\njohn went to new york .\n")
    # spans over CoNLL: the same row as over text, offsets into the words joined by spaces
    assert main(["predict", "--model", str(d / "spans"), "--input", str(finetuned["ner_dev"]),
                 "--out", str(tmp_path / "spans.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "spans.jsonl").open()]
    assert len(rows) == 30
    for row in rows:
        assert list(row) == ["text", "tokens", "tags", "entities", "gold"]
        assert row["text"] == " ".join(row["tokens"])
        assert len(row["tags"]) == len(row["gold"]) == len(row["tokens"])
        for e in row["entities"]:
            assert row["text"][e["start"]:e["end"]] == e["text"] and e["label"] in ("LOC", "PER")
        assert sum(t.startswith("B-") for t in row["tags"]) == len(row["entities"])
    assert sum(len(r["entities"]) for r in rows) >= 30  # a person in every sentence
    # a tagger over plain text: entities with character offsets
    for kind in ("tag", "spans"):
        assert main(["predict", "--model", str(d / kind), "--input", str(texts),
                     "--out", str(tmp_path / f"{kind}.txt.jsonl")]) == 0
        rows = [json.loads(line) for line in (tmp_path / f"{kind}.txt.jsonl").open()]
        assert [r["text"] for r in rows] == texts.read_text().splitlines()
        assert all(list(r) == ["text", "tokens", "tags", "entities"] for r in rows)
        assert rows[0]["tokens"] == ["mary", "went", "to", "rome", "."]
        alone = TaskModel.load(d / kind).tag(rows[0]["text"])
        assert [{**e, "score": pytest.approx(e["score"], abs=1e-5)} for e in rows[0]["entities"]] \
            == alone
    # QA over JSON lines with question and context
    src = synthetic.write_jsonl(tmp_path / "q.jsonl", [
        {"id": "a", "question": "where did mary go ?", "context": "mary went to rome ."},
        {"question": "where did john go ?", "context": "john went to paris ."}])
    assert main(["predict", "--model", str(d / "qa"), "--input", str(src),
                 "--out", str(tmp_path / "qa.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "qa.jsonl").open()]
    assert [r["id"] for r in rows] == ["a", "2"]
    assert all({"answer", "start", "end", "score", "null_margin"} <= set(r) for r in rows)


@pytest.mark.slow
def test_a_model_serves_only_its_own_verb(finetuned):
    model = TaskModel.load(finetuned["dir"] / "cls")
    with pytest.raises(UserError, match="a classify model cannot tag; call it as "
                                        "TaskModel.classify"):
        model.tag("good film")


@pytest.mark.slow
def test_rows_in_memory_and_stdin_are_read_as_files_are(finetuned, monkeypatch, capsys):
    import io

    model = TaskModel.load(finetuned["dir"] / "cls")
    rows = [json.loads(line) for line in finetuned["dev"].open()]
    on_file = model.evaluate(finetuned["dev"])
    assert model.evaluate(rows) == on_file

    class Dataset:  # datasets.Dataset, duck-typed
        def to_list(self):
            return rows

    assert model.evaluate(Dataset()) == on_file
    texts = ["the movie was good", "awful plot"]
    assert [r["label"] for r in model.predict_rows(texts)] == \
        [r["label"] for r in model.classify(texts)]
    assert [r["text"] for r in model.predict_rows([{"text": t} for t in texts])] == texts
    # the commands: --input - reads standard input
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(texts) + "\n"))
    assert main(["predict", "--model", str(finetuned["dir"] / "cls"), "--input", "-"]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == texts
    monkeypatch.setattr("sys.stdin", io.StringIO(finetuned["ner_dev"].read_text()))
    assert main(["evaluate", "--model", str(finetuned["dir"] / "tag"), "--input", "-",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == \
        TaskModel.load(finetuned["dir"] / "tag").evaluate(finetuned["ner_dev"])


@pytest.mark.slow
def test_finetune_takes_rows_in_memory(tiny_bert, quick_config, synthetic, tmp_path):
    rows = synthetic.sentiment(40, 11)
    result = finetune("classify", tiny_bert, rows, rows[:10], tmp_path / "m",
                      quick_config(epochs=1, batch_size=16))
    assert result.steps > 0
    assert TaskModel.load(tmp_path / "m").labels == ["negative", "positive"]


@pytest.mark.slow
def test_predict_and_evaluate_show_progress_on_stderr(finetuned, capsys):
    """Not on a terminal: progress lines on stderr as training writes them, with examples/s;
    the predictions on stdout as with --quiet, which shows no progress."""
    model, squad = str(finetuned["dir"] / "qa"), str(finetuned["squad"])
    assert main(["predict", "--model", model, "--input", squad, "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert main(["predict", "--model", model, "--input", squad]) == 0
    shown = capsys.readouterr()
    assert shown.out == quiet.out and len(shown.out.splitlines()) == 80
    lines = [line for line in shown.err.splitlines() if line.startswith("predict: ")]
    assert lines and "tokens/s" in lines[-1] and "80/80 examples" in lines[-1] \
        and "examples/s" in lines[-1]
    assert "predict: " not in quiet.err
    assert main(["evaluate", "--model", model, "--input", squad, "--json"]) == 0
    shown = capsys.readouterr()
    assert [line for line in shown.err.splitlines() if line.startswith("evaluate: ")]
    assert json.loads(shown.out)["total"] == 80


def test_fine_tuning_shows_its_evaluations_progress(tiny_bert, quick_config, synthetic,
                                                    tmp_path, capsys):
    data = synthetic.write_squad(tmp_path / "squad.json", synthetic.squad(20, 7))
    finetune(QA(stride=8), tiny_bert, data, None, tmp_path / "qa",
             quick_config(epochs=1, batch_size=16, max_length=32, dev_fraction=0.2,
                          show_progress=True))
    err = capsys.readouterr().err.splitlines()
    # the evaluation at the end of the epoch, and the one that tunes and scores dev at the end
    assert len([line for line in err if line.startswith("evaluate: ")]) == 2
    quiet = tmp_path / "quiet"
    finetune(QA(stride=8), tiny_bert, data, None, quiet,
             quick_config(epochs=1, batch_size=16, max_length=32, dev_fraction=0.2))
    assert "evaluate: " not in capsys.readouterr().err
