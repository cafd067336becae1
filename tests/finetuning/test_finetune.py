"""Fine-tuning end to end on a tiny random BERT and synthetic data: every task trains, beats its
baseline where the data allow, saves a directory transformers loads with no missing keys and
equal outputs; freezing, early stopping and the best checkpoint; bad input named by file and
line."""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from bertkit.cli.main import main
from bertkit.files import UserError, read_jsonl
from bertkit.finetuning import metrics
from bertkit.finetuning.heads import SequenceClassifier
from bertkit.finetuning.inputs import Item
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.task import Defaults, Task, model_inputs
from bertkit.finetuning.tasks import QA, TASKS, Classify, Pair, Regress, Spans, Tag
from bertkit.model import hub
from bertkit.text.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _hf_logits(cls_name: str, path: Path, batch):
    transformers = pytest.importorskip("transformers")
    ref, info = getattr(transformers, cls_name).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        return ref.eval()(**batch)


@pytest.mark.slow
def test_classify_learns_saves_and_round_trips(tiny_bert, task_files, quick_config, tmp_path):
    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "out", quick_config(epochs=4, batch_size=16))
    out = tmp_path / "out"
    assert result.dev_metrics["accuracy"] >= 0.9
    assert result.dev_metrics["accuracy"] > result.dev_metrics["baseline"]["accuracy"]
    assert not (out / "checkpoints").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["problem_type"] == "single_label_classification"
    task = json.loads((out / "bertkit_task.json").read_text())
    assert task["text_column"] == "text" and task["label_column"] == "label"
    runner = TaskModel.load(out)
    batch = runner.tokenizer(["the movie was good", "so awful and poor plot"])
    ours = runner.model(*batch)
    theirs = _hf_logits("BertForSequenceClassification", out, batch._asdict())
    torch.testing.assert_close(ours, theirs.logits, atol=1e-5, rtol=0)
    # the CLI evaluates with the remembered columns
    assert runner.evaluate(runner.task.read(task_files["dev"]))["accuracy"] == \
        pytest.approx(result.dev_metrics["accuracy"])


@pytest.mark.slow
def test_modern_encoder_fine_tunes_and_round_trips(tiny_modern, task_files, quick_config,
                                                    tmp_path):
    """A "modern" model takes every kind of head; the saved directory is a ModernBertModel
    (transformers has no place for bertkit's heads on ModernBERT: they sit beside it)."""
    result = finetune("classify", tiny_modern, task_files["train"], task_files["dev"],
                      tmp_path / "c", quick_config(epochs=4, batch_size=16))
    assert result.dev_metrics["accuracy"] >= 0.9
    runner = TaskModel.load(tmp_path / "c")
    assert runner.model.encoder.config.architecture == "modern"
    batch = runner.tokenizer(["the movie was good", "so awful and poor plot"])
    again = TaskModel.load(tmp_path / "c")
    torch.testing.assert_close(runner.model(*batch), again.model(*batch))
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertModel"] and config["model_type"] == "modernbert"
    hf = _hf_logits("ModernBertModel", tmp_path / "c",
                    {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})
    ours = runner.model.encoder(batch.input_ids, None, batch.attention_mask)
    keep = batch.attention_mask.bool()
    torch.testing.assert_close(ours.last_hidden_state[keep], hf.last_hidden_state[keep],
                               atol=1e-5, rtol=1e-5)
    tagged = finetune("tag", tiny_modern, task_files["ner_train"], task_files["ner_dev"],
                      tmp_path / "t", quick_config(epochs=6, batch_size=16))
    assert tagged.dev_metrics["f1"] > tagged.dev_metrics["baseline"]["f1"]
    TaskModel.load(tmp_path / "t")
    finetune(QA(stride=8), tiny_modern, task_files["squad"], None, tmp_path / "q",
             quick_config(epochs=1, batch_size=16, max_length=32, dev_fraction=0.2))
    start, end = TaskModel.load(tmp_path / "q").model(
        *TaskModel.load(tmp_path / "q").tokenizer(["where did john go ?"], ["john went to rome ."]))
    assert start.shape == end.shape


@pytest.mark.slow
def test_pair_and_regression_heads(tiny_bert, task_files, quick_config, tmp_path):
    pair = finetune("pair", tiny_bert, task_files["pairs"], None, tmp_path / "pair",
                    quick_config(epochs=1, batch_size=32))
    assert pair.task.text_column == "premise" and pair.task.pair_column == "hypothesis"
    runner = TaskModel.load(tmp_path / "pair")
    batch = runner.tokenizer(["good movie"], ["bad film"])
    assert batch.token_type_ids[0].tolist().count(1) == 3  # "bad film [SEP]" in segment B
    theirs = _hf_logits("BertForSequenceClassification", tmp_path / "pair", batch._asdict())
    torch.testing.assert_close(runner.model(*batch), theirs.logits, atol=1e-5, rtol=0)

    reg = finetune(Regress(label_column="score"), tiny_bert, task_files["train"],
                   task_files["dev"], tmp_path / "reg", quick_config(epochs=3, batch_size=16))
    assert reg.dev_metrics["pearson"] > 0.8
    config = json.loads((tmp_path / "reg" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config.get("num_labels", 1) == 1
    score = TaskModel.load(tmp_path / "reg").classify("really good film")
    assert score["score"] > 0.5


@pytest.mark.slow
def test_multi_label(tiny_bert, quick_config, synthetic, tmp_path):
    rows = [{"text": r["text"], "label": [r["label"]] + (["film"] if "film" in r["text"] else [])}
            for r in synthetic.sentiment(120, 9)]
    path = synthetic.write_jsonl(tmp_path / "multi.jsonl", rows)
    result = finetune(Classify(multi_label=True), tiny_bert, path, None, tmp_path / "m",
                      quick_config(epochs=4, batch_size=16))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert result.task.labels == ("film", "negative", "positive")
    assert result.dev_metrics["f1"] > 0.7
    got = TaskModel.load(tmp_path / "m").classify("a good film")
    assert set(got["labels"]) <= {"film", "negative", "positive"}


@pytest.mark.parametrize("crf,alignment,decode", [(False, "copy", "first"), (True, "copy", "first"),
                                                  (False, "first", "first"),
                                                  (False, "copy", "mean")])
@pytest.mark.slow
def test_tagging_learns_and_round_trips(tiny_bert, task_files, quick_config, tmp_path, crf,
                                       alignment, decode):
    result = finetune(Tag(crf=crf, alignment=alignment, decode=decode, case_feature=False),
                      tiny_bert, task_files["ner_train"], task_files["ner_dev"],
                      tmp_path / "t", quick_config(epochs=6, batch_size=16))
    assert result.task.decode == decode
    assert result.dev_metrics["f1"] >= 0.9
    assert result.dev_metrics["f1"] > result.dev_metrics["baseline"]["f1"]
    assert (tmp_path / "t" / "task_head.safetensors").is_file() == crf
    runner = TaskModel.load(tmp_path / "t")
    assert runner.task.crf == crf
    batch = runner.tokenizer(["mary went to new york ."])
    theirs = _hf_logits("BertForTokenClassification", tmp_path / "t", batch._asdict())
    torch.testing.assert_close(runner.model(*batch), theirs.logits, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_bioes_scheme_is_trained_and_scored_per_entity(tiny_bert, task_files, quick_config,
                                                       tmp_path):
    result = finetune(Tag(scheme="BIOES", crf=True), tiny_bert, task_files["ner_train"],
                      task_files["ner_dev"], tmp_path / "t", quick_config(epochs=6, batch_size=16))
    assert "S-PER" in result.task.labels and "E-LOC" in result.task.labels
    assert result.dev_metrics["f1"] >= 0.9


@pytest.mark.slow
def test_span_ner(tiny_bert, task_files, quick_config, tmp_path):
    result = finetune(Spans(max_width=3), tiny_bert, task_files["ner_train"],
                      task_files["ner_dev"], tmp_path / "s", quick_config(epochs=6, batch_size=16))
    assert result.task.labels == ("LOC", "PER") and result.task.nested is False
    assert result.dev_metrics["f1"] >= 0.8
    assert (tmp_path / "s" / "task_head.safetensors").is_file()
    transformers = pytest.importorskip("transformers")
    _, info = transformers.BertModel.from_pretrained(tmp_path / "s", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.slow
def test_span_ner_with_nested_entities(tiny_bert, quick_config, synthetic, tmp_path):
    rows = []
    for s in synthetic.ner(100, 11):
        words = [w for w, _ in s]
        ents = [[0, 1, "PER"]] + ([[3, 5, "LOC"], [3, 4, "WORD"]] if words[3] == "new"
                                  else [[3, 4, "LOC"]])
        rows.append({"tokens": words, "entities": ents})
    path = synthetic.write_jsonl(tmp_path / "nested.jsonl", rows)
    result = finetune(Spans(max_width=3), tiny_bert, path, None, tmp_path / "n",
                      quick_config(epochs=8, batch_size=16, dev_fraction=0.3))
    assert result.task.nested is True
    assert result.dev_metrics["f1"] >= 0.8
    assert "baseline" not in result.dev_metrics  # no tags to count


@pytest.mark.slow
def test_qa_with_unanswerable_questions(tiny_bert, task_files, quick_config, tmp_path):
    result = finetune(QA(stride=8), tiny_bert, task_files["squad"], None, tmp_path / "q",
                      quick_config(epochs=1, batch_size=16, max_length=32, dev_fraction=0.2))
    task = json.loads((tmp_path / "q" / "bertkit_task.json").read_text())
    assert "null_threshold" in task and task["max_length"] == 32
    assert result.dev_metrics["no_ans_total"] > 0 and result.dev_metrics["has_ans_total"] > 0
    # the tuned threshold is at least as good on dev as never answering (a threshold it tries)
    assert task["null_threshold"] is not None
    assert result.dev_metrics["f1"] >= result.dev_metrics["baseline"]["f1"] - 1e-9
    runner = TaskModel.load(tmp_path / "q")
    batch = runner.tokenizer(["where did john go ?"], ["john went to rome ."])
    theirs = _hf_logits("BertForQuestionAnswering", tmp_path / "q", batch._asdict())
    start, end = runner.model(*batch)
    torch.testing.assert_close(start, theirs.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(end, theirs.end_logits, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_frozen_encoder_stays_put(tiny_bert, task_files, quick_config, tmp_path):
    finetune("classify", tiny_bert, task_files["train"], task_files["dev"], tmp_path / "f",
             quick_config(epochs=1, batch_size=32, train_layers=0))
    before = hub.load_weights(tiny_bert)
    after = hub.load_weights(tmp_path / "f")
    for name, tensor in before.items():
        if name.startswith("encoder.") or name.startswith("embeddings."):
            torch.testing.assert_close(after["bert." + name], tensor, atol=0, rtol=0, msg=name)
    assert not torch.equal(after["classifier.weight"], torch.zeros_like(after["classifier.weight"]))


@pytest.mark.slow
def test_early_stopping_keeps_the_best_checkpoint(tiny_bert, task_files, quick_config, tmp_path):
    # A huge learning rate wrecks the model after the first epoch: training stops early and
    # the saved model is the best one, not the last.
    cfg = quick_config(epochs=8, batch_size=16, lr=3e-3, head_lr=1e-2, warmup=0.0,
                       show_progress=False, patience=2, evals_per_epoch=1)
    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "e", cfg)
    records = [json.loads(line) for line in (tmp_path / "e" / "metrics.jsonl").open()]
    evals = [r["dev_accuracy"] for r in records if r["split"] == "eval"]
    assert result.dev_metrics["accuracy"] == pytest.approx(max(evals))
    if result.stopped_by == "early_stop":
        assert len(evals) < 8
    cfg = quick_config(epochs=8, batch_size=16, lr=1e-12, head_lr=1e-12, warmup=0.0,
                       show_progress=False, patience=2)
    frozen = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "e2", cfg)
    assert frozen.stopped_by == "early_stop" and frozen.steps == 3 * 10


# Bad input ---------------------------------------------------------------------------------------

def test_missing_label_column_names_the_file_and_line(tiny_bert, quick_config, synthetic,
                                                      tmp_path):
    path = synthetic.write_jsonl(tmp_path / "t.jsonl",
                                 [{"text": "good film", "sentiment": "positive"}])
    with pytest.raises(UserError, match=r"t\.jsonl:1: no label column"):
        finetune("classify", tiny_bert, path, None, tmp_path / "o", quick_config())
    with pytest.raises(UserError, match=r"t\.jsonl:1: no column 'polarity'"):
        finetune(Classify(label_column="polarity"), tiny_bert, path, None, tmp_path / "o",
                 quick_config())


def test_unknown_dev_label_names_its_line(tiny_bert, task_files, quick_config, synthetic,
                                          tmp_path):
    dev = synthetic.write_jsonl(tmp_path / "dev.jsonl", [{"text": "good", "label": "positive"},
                                                         {"text": "meh", "label": "neutral"}])
    with pytest.raises(UserError, match=r"dev\.jsonl:2: unknown label 'neutral'"):
        finetune("classify", tiny_bert, task_files["train"], dev, tmp_path / "o",
                 quick_config())


def test_conll_token_without_tag_names_its_line(tiny_bert, task_files, tmp_path, capsys):
    bad = tmp_path / "bad.conll"
    bad.write_text("john\tB-PER\nwent\tO\nto\n\nmary\tB-PER\n")
    code = main(["finetune", "tag", "--model", str(tiny_bert), "--train", str(bad),
                 "--dev", str(task_files["ner_dev"]), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "bad.conll:3" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_empty_sentence_in_span_data(tiny_bert, quick_config, synthetic, tmp_path):
    path = synthetic.write_jsonl(tmp_path / "s.jsonl",
                                 [{"tokens": ["john"], "entities": [[0, 1, "PER"]]},
                                  {"tokens": [], "entities": []}])
    with pytest.raises(UserError, match=r"s\.jsonl:2: empty sentence"):
        finetune("spans", tiny_bert, path, None, tmp_path / "o", quick_config())


@pytest.mark.slow
def test_squad_answer_not_at_offset_is_skipped_with_a_count(tiny_bert, quick_config, synthetic,
                                                            tmp_path):
    doc = synthetic.squad(10, 1)
    para = doc["data"][0]["paragraphs"][0]
    para["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "sq.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune(QA(stride=8), tiny_bert, tmp_path / "sq.json", None, tmp_path / "o",
                 quick_config(epochs=1, max_length=32, dev_fraction=0.3))
    assert any("skipped 1 answers not at their offset" in str(w.message) for w in caught)


@pytest.mark.slow
def test_question_leaving_no_room_for_the_context(tiny_bert, quick_config, synthetic, tmp_path):
    doc = synthetic.squad(10, 1)
    long_q = "where did " + "john " * 40 + "go ?"
    doc["data"][0]["paragraphs"][0]["qas"][0]["question"] = long_q
    (tmp_path / "sq.json").write_text(json.dumps(doc))
    # training skips it with a count ...
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune(QA(stride=8), tiny_bert, tmp_path / "sq.json", None, tmp_path / "o",
                 quick_config(epochs=1, max_length=32, dev_fraction=0.3))
    assert any("skipped 1 questions with no room" in str(w.message) for w in caught)
    # ... while evaluating on it is an error naming the file and line
    runner = TaskModel.load(tmp_path / "o")
    runner = runner.with_task(replace(runner.task, max_question=None))
    with pytest.raises(UserError, match=r"sq\.json:\d+: question q0a: the question takes"):
        runner.evaluate(runner.task.read(tmp_path / "sq.json"))


@pytest.mark.slow
def test_time_budget_without_epochs_follows_the_clock(tiny_bert, task_files, quick_config,
                                                      tmp_path):
    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"], tmp_path / "t",
                      quick_config(max_time=0.01, batch_size=16))
    assert result.stopped_by == "max_time" and result.steps >= 1
    assert (tmp_path / "t" / "model.safetensors").is_file()
    # the schedule follows the clock: no epochs are filled in for a re-run to follow instead
    options = json.loads((tmp_path / "t" / "training_args.json").read_text())["options"]
    assert options["epochs"] is None and options["max_time"] == 0.01


# What a run says and records ------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_records_settings_reports_the_baseline_and_its_command_reproduces_the_run(
        tiny_bert, synthetic, tmp_path, capsys):
    import shlex

    from bertkit.finetuning.tasks import task_type

    # Every dev example has the training data's most frequent label: the majority baseline
    # is perfect there, and no model beats it.
    rows = synthetic.sentiment(120, 1)
    train = synthetic.write_jsonl(tmp_path / "train.jsonl", rows)
    dev = synthetic.write_jsonl(tmp_path / "dev.jsonl",
                                [r for r in synthetic.sentiment(40, 2) if r["label"] == "positive"])
    out = tmp_path / "out"
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--out", str(out), "--epochs", "1", "--lr", "1e-2"]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0].startswith("settings (bertkit ")  # the resolved settings come first
    assert any("finished its epochs" in line for line in err)
    assert not any("max_steps" in line for line in err)
    assert any(line.startswith("dev accuracy ") and "baseline 1.0000" in line for line in err)
    assert any(line.startswith("warning: the model does not beat the baseline") for line in err)
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["stopped_by"] == "epochs" and summary["selection"] == "accuracy"
    assert summary["baseline_accuracy"] == 1.0 and "dev_accuracy" in summary
    assert "train_loss" in summary and "train_learning_rate" in summary

    record = json.loads((out / "training_args.json").read_text())
    defaults = task_type("classify").defaults
    options = record["options"]
    assert (options["epochs"], options["batch_size"], options["head_lr"]) == \
        (1, defaults.batch_size, defaults.head_lr)  # the task's defaults filled in
    assert options["max_length"] is not None and record["task"] == "classify"
    argv = shlex.split(record["command"])
    assert argv[:3] == ["bertkit", "finetune", "classify"]
    assert argv[argv.index("--batch-size") + 1] == str(defaults.batch_size)
    argv[argv.index("--out") + 1] = str(tmp_path / "again")
    assert main(argv[1:]) == 0
    first = json.loads((out / "dev_metrics.json").read_text())
    assert json.loads((tmp_path / "again" / "dev_metrics.json").read_text()) == first


def test_a_run_from_stdin_or_rows_records_them_not_the_file_they_were_staged_in(
        tiny_bert, task_files, quick_config, tmp_path, monkeypatch):
    import io
    import shlex

    monkeypatch.setattr("sys.stdin", io.StringIO(task_files["train"].read_text()))
    out = tmp_path / "stdin"
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train", "-", "--dev",
                 str(task_files["dev"]), "--out", str(out), "--epochs", "1", "--quiet"]) == 0
    record = json.loads((out / "training_args.json").read_text())
    assert (record["train"], record["dev"]) == ("<stdin>", str(task_files["dev"]))
    argv = shlex.split(record["command"])
    assert argv[argv.index("--train") + 1] == "-"
    rows = [obj for _, obj in read_jsonl(task_files["train"])]
    finetune("classify", tiny_bert, rows, None, tmp_path / "rows", quick_config(epochs=1))
    record = json.loads((tmp_path / "rows" / "training_args.json").read_text())
    assert (record["train"], record["dev"]) == ("<rows>", None)


def test_a_run_from_stdin_names_it_in_its_warnings_not_the_file_it_was_staged_in(
        tiny_bert, task_files, quick_config, tmp_path, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(task_files["train"].read_text()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune("classify", tiny_bert, "-", None, tmp_path / "out",
                 quick_config(epochs=1, max_length=6))  # every text cut
    said = [str(w.message) for w in caught]
    assert any(re.match(r"<stdin>: \d+ of \d+ texts were longer than 6 tokens", s) for s in said)
    assert any(s.startswith("<stdin> (its dev part): ") for s in said), said
    assert not any("bertkit-input-" in s for s in said), said


# A new task is one class ----------------------------------------------------------------------

@dataclass(frozen=True)
class Praise(Task):
    """A toy task written against the protocol alone: does a text (JSON lines, "text") hold a
    word of praise? The label comes from the text itself."""
    name: ClassVar[str] = "praise"
    defaults: ClassVar[Defaults] = Defaults(epochs=4, batch_size=16, max_length=32)

    def read(self, path):
        return [obj["text"] for _, obj in read_jsonl(path)]

    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False):
        enc = tokenizer.encode_batch(list(examples), max_length=self.max_length,
                                     truncation="longest_first", with_offsets=False)
        return [Item(i, e.ids, e.type_ids, target=int(_praises(text)))
                for i, (text, e) in enumerate(zip(examples, enc))]

    def make_model(self, encoder):
        return SequenceClassifier(encoder, 2)

    def infer(self, model, batch, items):
        return model(*model_inputs(batch)).argmax(-1).tolist()

    def decode_outputs(self, outputs, items, examples):
        return [bool(o) for o in outputs]

    def score(self, examples, predictions):
        return {"accuracy": metrics.accuracy([_praises(t) for t in examples], predictions)}

    def selection(self, scores):
        return scores["accuracy"]

    def pipeline(self, runner, texts):
        return [{"praise": p} for p in runner.predict(list(texts))]


def _praises(text: str) -> bool:
    return any(w in ("good", "great", "fine") for w in text.split())


@pytest.mark.slow
def test_a_task_defined_in_one_class_fine_tunes_and_predicts(tiny_bert, task_files,
                                                              quick_config, tmp_path):
    result = finetune(Praise, tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "p", quick_config(batch_size=16))
    assert result.task == Praise(max_length=32)
    assert result.dev_metrics["accuracy"] >= 0.9
    saved = json.loads((tmp_path / "p" / "bertkit_task.json").read_text())
    assert saved["task"] == "praise" and saved["max_length"] == 32
    with pytest.raises(UserError, match="unknown task 'praise'"):
        TaskModel.load(tmp_path / "p")  # the saved name is looked up among the known tasks
    runner = TaskModel.load(tmp_path / "p", task_types=(*TASKS, Praise))
    assert runner.task == result.task
    assert runner(["a really good film", "so awful a plot"]) == [{"praise": True},
                                                                  {"praise": False}]
    assert runner.evaluate(runner.task.read(task_files["dev"]))["accuracy"] == \
        pytest.approx(result.dev_metrics["accuracy"])


# Defaults keyed to the model's size ----------------------------------------------------------------

def test_sentence_tasks_give_a_small_model_more_epochs():
    from bertkit.config import preset
    from bertkit.finetuning.task import SMALL_MODEL_WEIGHTS
    from bertkit.finetuning.tasks import task_type

    classify, tag = task_type("classify").defaults, task_type("tag").defaults
    mini = preset("mini", architecture="modern").block_weights
    minilm = preset("mini", num_layers=6, hidden_size=384, num_heads=6,
                    intermediate_size=1536).block_weights
    assert mini < SMALL_MODEL_WEIGHTS <= minilm
    assert classify.epochs_for(mini) == classify.small_model_epochs > classify.epochs
    assert classify.epochs_for(minilm) == classify.epochs == classify.epochs_for(None)
    assert tag.epochs_for(mini) == tag.epochs_for(minilm) == tag.epochs


def test_a_tiny_model_runs_the_small_model_epochs_and_records_them(tiny_bert, task_files,
                                                                   quick_config, tmp_path):
    from bertkit.finetuning.tasks import task_type

    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "t", quick_config(patience=1))
    options = json.loads((tmp_path / "t" / "training_args.json").read_text())["options"]
    assert options["epochs"] == task_type("classify").defaults.small_model_epochs
    assert result.steps <= options["epochs"] * 5  # 160 rows at batch 32


def test_a_small_model_trains_at_a_higher_encoder_rate_and_records_it(tiny_bert, task_files,
                                                                      quick_config, tmp_path):
    from bertkit.config import preset
    from bertkit.finetuning.tasks import task_type

    mini = preset("mini", architecture="modern").block_weights
    minilm = preset("mini", num_layers=6, hidden_size=384, num_heads=6,
                    intermediate_size=1536).block_weights
    for name in ("tag", "classify", "pair", "spans", "regress"):
        defaults = task_type(name).defaults
        assert defaults.lr_for(mini) == defaults.small_model_lr == 2e-4
        assert defaults.lr_for(minilm) == defaults.lr_for(None) == 5e-5
    assert task_type("qa").defaults.lr_for(mini) == 5e-5  # no usable spans at either rate
    runs = (("tag", "ner_train", "ner_dev", None, 2e-4),
            ("tag", "ner_train", "ner_dev", 1e-3, 1e-3),
            ("classify", "train", "dev", None, 2e-4))
    for name, train, dev, given, recorded in runs:
        out = tmp_path / f"{name}-{given}"
        finetune(name, tiny_bert, task_files[train], task_files[dev], out,
                 quick_config(lr=given, epochs=1))
        options = json.loads((out / "training_args.json").read_text())["options"]
        assert options["lr"] == recorded


def _cased_names(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """Sentences whose entities are told apart by their capitals alone: any word may be a
    NAME, and is one exactly when it is Capitalised."""
    import random

    from tests.finetuning.conftest import CITIES, FILLER, PEOPLE

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(FILLER + PEOPLE + CITIES) for _ in range(5)]
        named = [rng.random() < 0.3 for _ in words]
        out.append([(w.capitalize(), "B-NAME") if c else (w, "O") for w, c in zip(words, named)])
    return out


@pytest.mark.slow
def test_the_case_feature_sees_the_capitals_a_lowercasing_tokenizer_drops(
        tiny_bert, synthetic, quick_config, tmp_path):
    train = synthetic.write_conll(tmp_path / "train.conll", _cased_names(160, 1))
    dev = synthetic.write_conll(tmp_path / "dev.conll", _cased_names(40, 2))
    assert Tokenizer.load(tiny_bert).do_lower_case
    on = finetune("tag", tiny_bert, train, dev, tmp_path / "on",
                  quick_config(epochs=6, batch_size=16))  # default: on, as the tokenizer lowercases
    off = finetune(Tag(case_feature=False), tiny_bert, train, dev, tmp_path / "off",
                   quick_config(epochs=6, batch_size=16))
    assert on.task.case_feature and not off.task.case_feature
    # the choice is spelled out in the run's settings, so its command line reruns it
    options = json.loads((tmp_path / "on" / "training_args.json").read_text())["options"]
    assert options["case_feature"] is True
    assert on.dev_metrics["f1"] >= 0.95 and off.dev_metrics["f1"] < 0.6
    # saved as a BertModel with the head beside it, and loaded back to the same outputs
    config = json.loads((tmp_path / "on" / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    assert json.loads((tmp_path / "on" / "bertkit_task.json").read_text())["case_feature"]
    runner = TaskModel.load(tmp_path / "on")
    assert runner.task.case_feature and runner.model.word_case is not None
    got = runner.tag(["Mary went to paris .", "mary went to Paris ."])
    assert [[e["text"] for e in ents] for ents in got] == [["Mary"], ["Paris"]]
    rows = list(read_jsonl(_predict_file(tmp_path, dev, "on")))
    assert len(rows) == 40


def test_tag_trains_evaluates_and_predicts_from_json_lines_of_tokens_and_tags(
        tiny_bert, task_files, tmp_path, capsys):
    from bertkit.finetuning.readers import read_conll

    def as_json_lines(conll: Path, name: str) -> Path:  # the shape `datasets` writes
        rows = [{"tokens": s.tokens, "ner_tags": s.tags} for s in read_conll(conll)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return tmp_path / name

    train = as_json_lines(task_files["ner_train"], "train.jsonl")
    dev = as_json_lines(task_files["ner_dev"], "dev.jsonl")
    out = tmp_path / "ner"
    assert main(["finetune", "tag", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--out", str(out), "--epochs", "1", "--quiet"]) == 0
    trained = json.loads(capsys.readouterr().out)
    scores = []
    for data in (dev, task_files["ner_dev"]):  # the same sentences: the same figures
        assert main(["evaluate", "--model", str(out), "--input", str(data), "--json"]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0] == scores[1] and scores[0]["f1"] == pytest.approx(trained["dev_f1"])
    assert main(["predict", "--model", str(out), "--input", str(dev),
                 "--out", str(tmp_path / "p.jsonl")]) == 0
    rows = [row for _, row in read_jsonl(tmp_path / "p.jsonl")]
    sentences = read_conll(task_files["ner_dev"])
    assert [r["tokens"] for r in rows] == [s.tokens for s in sentences]
    assert [r["gold"] for r in rows] == [s.tags for s in sentences]
    # the span task reads BIO tags from the same lines as from CoNLL
    spans = [Spans().read(path) for path in (train, task_files["ner_train"])]
    assert [(s.tokens, s.tags) for s in spans[0]] == [(s.tokens, s.tags) for s in spans[1]]


def _predict_file(tmp_path: Path, data: Path, model: str) -> Path:
    out = tmp_path / f"{model}.pred.jsonl"
    assert main(["predict", "--model", str(tmp_path / model), "--input", str(data),
                 "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_the_case_feature_is_refused_where_no_word_has_a_case(tiny_bert, task_files,
                                                              quick_config, tmp_path, capsys):
    # a setting of the tag and spans tasks only: classify has no such field, nor flag
    with pytest.raises(TypeError, match="case_feature"):
        Classify(case_feature=True)
    with pytest.raises(SystemExit) as stop:
        main(["finetune", "classify", "--model", str(tiny_bert), "--train",
              str(task_files["train"]), "--out", str(tmp_path / "c2"), "--case-feature",
              "--epochs", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --case-feature is a setting of tag, spans, not of classify"]
    assert not (tmp_path / "c2").exists()


@pytest.mark.slow
def test_sentence_heads_pool_by_mean_for_a_modern_encoder_and_by_cls_for_bert(
        tiny_bert, tiny_modern, task_files, quick_config, tmp_path, capsys):
    modern = finetune("classify", tiny_modern, task_files["train"], task_files["dev"],
                      tmp_path / "m", quick_config(epochs=4, batch_size=16))
    bert = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                    tmp_path / "b", quick_config(epochs=1, batch_size=16))
    assert (modern.task.pooling, bert.task.pooling) == ("mean", "cls")
    assert modern.dev_metrics["accuracy"] > 0.9
    runner = TaskModel.load(tmp_path / "m")
    assert runner.model.pooling == "mean" and runner.classify("a really good film")["label"] \
        == "positive"
    options = json.loads((tmp_path / "m" / "training_args.json").read_text())["options"]
    assert options["pooling"] == "mean"
    # asked for: a BERT encoder pools by mean too (saved as a BertModel, the head beside it)
    mean = finetune(Pair(pooling="mean"), tiny_bert, task_files["pairs"], None, tmp_path / "p",
                    quick_config(epochs=1, batch_size=16))
    assert mean.task.pooling == "mean"
    config = json.loads((tmp_path / "p" / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    # and refused, in one line, where there is no sentence to pool
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["finetune", "tag", "--model", str(tiny_bert), "--train",
              str(task_files["ner_train"]), "--out", str(tmp_path / "t"), "--pooling", "mean"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --pooling is a setting of classify, pair, regress, embed, not of tag"]


@pytest.mark.parametrize("flag, value, message", [
    ("--epochs", "0", "--epochs must be at least 1, got 0"),  # was: the default 3 epochs
    ("--batch-size", "0", "--batch-size must be at least 1, got 0"),
    ("--max-length", "0", "--max-length must be at least 1, got 0"),
    ("--evals-per-epoch", "0", "--evals-per-epoch must be at least 1, got 0"),
    ("--patience", "0", "--patience must be at least 1, got 0"),  # was: a traceback, late
    ("--save-every", "0", "--save-every must be at least 1, got 0"),
    ("--lr", "-1", "--lr must be positive, got -1.0"),
    ("--head-lr", "0", "--head-lr must be positive, got 0.0"),
    ("--max-time", "0", r"--max-time 0: not a duration \(e\.g\. 90s, 10m, 1\.5h, or minutes as a "
                        r"number\)"),  # as "30s" was not
    ("--warmup", "2", r"--warmup must be in \[0, 1\], got 2.0"),  # was: no warm-up at all
    ("--weight-decay", "-0.1", "--weight-decay must be at least 0, got -0.1"),
    ("--dev-fraction", "1.5", r"--dev-fraction must be in \(0, 1\), got 1.5"),  # IndexError
    ("--train-layers", "-1", "--train-layers must be at least 0, got -1"),
])
def test_training_settings_out_of_range_are_one_line_before_anything_is_read(
        flag, value, message, tmp_path, capsys):
    # neither the model nor the data exist: the settings are refused first
    argv = ["finetune", "classify", "--model", str(tmp_path / "no-model"), "--train",
            str(tmp_path / "no.jsonl"), "--out", str(tmp_path / "out"), flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(f"error: {message}$", err), err
    assert not (tmp_path / "out").exists()


# The model card ---------------------------------------------------------------------------------

SOURCE_CARD = ("---\nlicense: mit\ntags: [tiny]\nlibrary_name: sentence-transformers\n"
               "pipeline_tag: sentence-similarity\n---\n# Tiny BERT\n\nA random BERT for tests.\n")
SOURCE_BODY = "# Tiny BERT\n\nA random BERT for tests.\n"


def _with_card(tiny_bert: Path, where: Path, card: bytes) -> Path:
    """A copy of `tiny_bert` whose README.md holds `card`."""
    import shutil

    shutil.copytree(tiny_bert, where)
    (where / "README.md").write_bytes(card)
    return where


def _score_rows(card: str) -> dict[str, list[str]]:
    """The card's table of dev figures: {figure: [cells]}."""
    rows = [line.strip("|").split("|") for line in card.splitlines()
            if line.startswith("| ") and not line.startswith("| figure")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_the_saved_model_has_a_card_with_its_dev_scores_below_the_source_card(
        tiny_bert, task_files, quick_config, tmp_path, monkeypatch):
    base = _with_card(tiny_bert, tmp_path / "base", SOURCE_CARD.encode())
    cards = []
    for run in ("a", "b"):  # the same run twice (OUT as given the same): the same card
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        finetune("classify", str(base), task_files["train"], task_files["dev"], "model",
                 quick_config(epochs=1, lr=1e-3, precision="fp32"))  # not auto's choice
        cards.append((tmp_path / run / "model" / "README.md").read_bytes())
    assert cards[0] == cards[1]
    card = cards[0].decode()
    # the source's front matter, but for the fields the hub files a classifier by
    assert card.startswith('---\nlicense: mit\ntags: [tiny]\nlibrary_name: "transformers"\n'
                           'pipeline_tag: "text-classification"\n---\n\n'
                           + SOURCE_BODY + "\n## Fine-tuned with bertkit\n")
    assert f"fine-tuned version of `{base}`" in card and "`train.jsonl`" in card
    assert "`dev.jsonl`" in card and "bertkit predict --model model --input dev.jsonl" in card
    for setting in ("epochs: 1", "learning rate: 0.001", "batch size: 32", "seed: 0",
                    "precision: fp32"):
        assert setting in card
    scores = json.loads((tmp_path / "a" / "model" / "dev_metrics.json").read_text())
    rows = _score_rows(card)
    assert set(rows) == {"accuracy", "macro_f1"}
    for name, (model, baseline) in rows.items():
        assert (model, baseline) == (f"{scores[name]:.4f}", f"{scores['baseline'][name]:.4f}")


@pytest.mark.parametrize("chosen", ["bf16", "fp32"])
def test_auto_precision_is_the_one_recorded_whichever_the_machine_picks(
        chosen, tiny_bert, task_files, tmp_path, monkeypatch, capsys):
    """Both of auto's choices run on every machine (the environment settles it as a CPU with
    or without bf16 would), and the card and the settings record the precision that ran."""
    monkeypatch.setenv("BERTKIT_AUTO_PRECISION", chosen)
    out = tmp_path / "m"
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train",
                 str(task_files["train"]), "--dev", str(task_files["dev"]), "--out", str(out),
                 "--epochs", "1", "--quiet"]) == 0
    assert f"precision: {chosen}" in (out / "README.md").read_text()
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["precision"] == record["environment"]["precision"] == chosen
    scores = json.loads((out / "dev_metrics.json").read_text())
    assert 0 <= scores["accuracy"] <= 1
    monkeypatch.setenv("BERTKIT_AUTO_PRECISION", "fp8")  # refused before anything is written
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train",
                 str(task_files["train"]), "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: BERTKIT_AUTO_PRECISION=fp8: not a precision (fp32 or bf16)")
    assert not (tmp_path / "bad").exists()


def test_a_model_without_a_card_gets_the_section_alone(tiny_bert, task_files, quick_config,
                                                       tmp_path):
    finetune("tag", tiny_bert, task_files["ner_train"], None, tmp_path / "ner",
             quick_config(epochs=1))
    card = (tmp_path / "ner" / "README.md").read_text()
    assert card.startswith('---\nlibrary_name: "transformers"\npipeline_tag: '
                           '"token-classification"\n---\n\n## Fine-tuned with bertkit\n\n'
                           'This model is a fine-tuned version')
    assert "10% of `train.conll` held out" in card and "card above" not in card
    scores = json.loads((tmp_path / "ner" / "dev_metrics.json").read_text())
    assert _score_rows(card)["f1"] == [f"{scores['f1']:.4f}", f"{scores['baseline']['f1']:.4f}"]
    assert _score_rows(card)["support"][0] == str(scores["support"])


def test_a_source_card_that_is_not_utf8_is_one_error_before_any_training(
        tiny_bert, task_files, tmp_path, capsys, monkeypatch):
    base = _with_card(tiny_bert, tmp_path / "base", b"# Caf\xe9 BERT\n")
    monkeypatch.setattr("bertkit.finetuning.recipe.train",
                        lambda *a, **k: pytest.fail("trained before the card was read"))
    assert main(["finetune", "classify", "--model", str(base), "--train",
                 str(task_files["train"]), "--dev", str(task_files["dev"]), "--out",
                 str(tmp_path / "out"), "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {base / 'README.md'}: the model card is not UTF-8 text (byte 5)\n"
    assert not (tmp_path / "out").exists()
