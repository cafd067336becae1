"""Fine-tuning end to end on a tiny random BERT and synthetic data: every task trains, beats its
baseline where the data allow, saves a directory transformers loads with no missing keys and
equal outputs; freezing, early stopping and the best checkpoint; bad input named by file and
line."""
from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch

from bertkit.model import hub
from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.model.encoder import Encoder, init_weights
from bertkit.finetuning.predict import TaskModel
from bertkit.text.tokenizer import Tokenizer

POSITIVE, NEGATIVE = ["good", "great", "fine"], ["bad", "awful", "poor"]
FILLER = ["the", "movie", "film", "was", "is", "plot", "really", "and", "a", "so"]
PEOPLE, CITIES = ["john", "mary", "alice"], ["paris", "london", "rome"]
WORDS = POSITIVE + NEGATIVE + FILLER + PEOPLE + CITIES + [
    "went", "to", "new", "york", "where", "did", "go", "who", "what", "colour", "sky", "blue",
    ".", ",", "?", "##s", "##ing"]
FAST = dict(lr=1e-2, head_lr=1e-2, warmup=0.0, show_progress=False, patience=None)


def tiny_bert(path: Path) -> Path:
    """A random 2-layer BERT with a vocabulary of the synthetic words, saved as a directory."""
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = Tokenizer.from_vocab(path / "vocab.txt")
    cfg = EncoderConfig(vocab_size=len(vocab), hidden_size=32, num_layers=2, num_heads=2,
                        intermediate_size=64, max_positions=64, hidden_dropout=0.0,
                        attention_dropout=0.0)
    torch.manual_seed(0)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg)
    hub.save_model(encoder, path / "bert", tokenizer=tokenizer)
    return path / "bert"


def sentiment(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        positive = rng.random() < 0.6
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if positive else NEGATIVE)]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": "positive" if positive else "negative",
                     "score": 2.0 if positive else -2.0})
    return rows


def ner(n: int, seed: int) -> list[list[tuple[str, str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        city = [("new", "B-LOC"), ("york", "I-LOC")] if rng.random() < 0.3 else \
            [(rng.choice(CITIES), "B-LOC")]
        # a city name can be a person too, so tagging needs context, not a word list
        person = rng.choice(PEOPLE + CITIES)
        out.append([(person, "B-PER"), ("went", "O"), ("to", "O"), *city,
                    (".", "O")])
    return out


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_conll(path: Path, sentences) -> Path:
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n")
    return path


def squad(n: int, seed: int) -> dict:
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(n):
        person, city = rng.choice(PEOPLE), rng.choice(CITIES)
        context = f"{person} went to {city} . the sky is blue ."
        qas = [{"id": f"q{len(paragraphs)}a", "question": f"where did {person} go ?",
                "answers": [{"text": city, "answer_start": context.index(city)}],
                "is_impossible": False},
               {"id": f"q{len(paragraphs)}b", "question": "what colour is the movie ?",
                "answers": [], "is_impossible": True}]
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on a shared CPU: one thread avoids OpenMP threads waiting on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("data")
    pairs = [{"premise": r["text"], "hypothesis": s["text"],
              "label": "same" if r["label"] == s["label"] else "different"}
             for r, s in zip(sentiment(160, 5), sentiment(160, 6))]
    (d / "squad.json").write_text(json.dumps(squad(40, 7)))
    return {"train": write_jsonl(d / "train.jsonl", sentiment(160, 1)),
            "dev": write_jsonl(d / "dev.jsonl", sentiment(50, 2)),
            "pairs": write_jsonl(d / "pairs.jsonl", pairs),
            "ner_train": write_conll(d / "train.conll", ner(120, 3)),
            "ner_dev": write_conll(d / "dev.conll", ner(40, 4)),
            "squad": d / "squad.json", "dir": d}


def _hf_logits(cls_name: str, path: Path, batch):
    transformers = pytest.importorskip("transformers")
    ref, info = getattr(transformers, cls_name).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        return ref.eval()(**batch)


def test_classify_learns_saves_and_round_trips(bert, data, tmp_path):
    result = finetune("classify", bert, data["train"], data["dev"], tmp_path / "out",
                      FinetuneConfig(epochs=4, batch_size=16, **FAST))
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
    assert runner.evaluate(runner_examples(runner, data["dev"]))["accuracy"] == \
        pytest.approx(result.dev_metrics["accuracy"])


def runner_examples(runner, path):
    from bertkit.finetuning.recipe import read_examples
    return read_examples(runner.task, path)


def test_pair_and_regression_heads(bert, data, tmp_path):
    pair = finetune("pair", bert, data["pairs"], None, tmp_path / "pair",
                    FinetuneConfig(epochs=1, batch_size=32, **FAST))
    assert pair.task["text_column"] == "premise" and pair.task["pair_column"] == "hypothesis"
    runner = TaskModel.load(tmp_path / "pair")
    batch = runner.tokenizer(["good movie"], ["bad film"])
    assert batch.token_type_ids[0].tolist().count(1) == 3  # "bad film [SEP]" in segment B
    theirs = _hf_logits("BertForSequenceClassification", tmp_path / "pair", batch._asdict())
    torch.testing.assert_close(runner.model(*batch), theirs.logits, atol=1e-5, rtol=0)

    reg = finetune("regress", bert, data["train"], data["dev"], tmp_path / "reg",
                   FinetuneConfig(epochs=3, batch_size=16, label_column="score", **FAST))
    assert reg.dev_metrics["pearson"] > 0.8
    config = json.loads((tmp_path / "reg" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config.get("num_labels", 1) == 1
    score = TaskModel.load(tmp_path / "reg").classify("really good film")
    assert score["score"] > 0.5


def test_multi_label(bert, tmp_path):
    rows = [{"text": r["text"], "label": [r["label"]] + (["film"] if "film" in r["text"] else [])}
            for r in sentiment(120, 9)]
    path = write_jsonl(tmp_path / "multi.jsonl", rows)
    result = finetune("classify", bert, path, None, tmp_path / "m",
                      FinetuneConfig(epochs=4, batch_size=16, multi_label=True, **FAST))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert result.task["labels"] == ["film", "negative", "positive"]
    assert result.dev_metrics["f1"] > 0.7
    got = TaskModel.load(tmp_path / "m").classify("a good film")
    assert set(got["labels"]) <= {"film", "negative", "positive"}


@pytest.mark.parametrize("crf,alignment,decode", [(False, "copy", "first"), (True, "copy", "first"),
                                                  (False, "first", "first"),
                                                  (False, "copy", "mean")])
def test_tagging_learns_and_round_trips(bert, data, tmp_path, crf, alignment, decode):
    result = finetune("tag", bert, data["ner_train"], data["ner_dev"], tmp_path / "t",
                      FinetuneConfig(epochs=6, batch_size=16, crf=crf, alignment=alignment,
                                     decode=decode, **FAST))
    assert result.task["decode"] == decode
    assert result.dev_metrics["f1"] >= 0.9
    assert result.dev_metrics["f1"] > result.dev_metrics["baseline"]["f1"]
    assert (tmp_path / "t" / "task_head.safetensors").is_file() == crf
    runner = TaskModel.load(tmp_path / "t")
    assert runner.task["head"]["crf"] == crf
    batch = runner.tokenizer(["mary went to new york ."])
    theirs = _hf_logits("BertForTokenClassification", tmp_path / "t", batch._asdict())
    torch.testing.assert_close(runner.model(*batch), theirs.logits, atol=1e-5, rtol=0)


def test_bioes_scheme_is_trained_and_scored_per_entity(bert, data, tmp_path):
    result = finetune("tag", bert, data["ner_train"], data["ner_dev"], tmp_path / "t",
                      FinetuneConfig(epochs=6, batch_size=16, scheme="BIOES", crf=True, **FAST))
    assert "S-PER" in result.task["labels"] and "E-LOC" in result.task["labels"]
    assert result.dev_metrics["f1"] >= 0.9


def test_span_ner(bert, data, tmp_path):
    result = finetune("spans", bert, data["ner_train"], data["ner_dev"], tmp_path / "s",
                      FinetuneConfig(epochs=6, batch_size=16, max_span_width=3, **FAST))
    assert result.task["labels"] == ["LOC", "PER"] and result.task["nested"] is False
    assert result.dev_metrics["f1"] >= 0.8
    assert (tmp_path / "s" / "task_head.safetensors").is_file()
    transformers = pytest.importorskip("transformers")
    _, info = transformers.BertModel.from_pretrained(tmp_path / "s", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_span_ner_with_nested_entities(bert, tmp_path):
    rows = []
    for s in ner(100, 11):
        words = [w for w, _ in s]
        ents = [[0, 1, "PER"]] + ([[3, 5, "LOC"], [3, 4, "WORD"]] if words[3] == "new"
                                  else [[3, 4, "LOC"]])
        rows.append({"tokens": words, "entities": ents})
    path = write_jsonl(tmp_path / "nested.jsonl", rows)
    result = finetune("spans", bert, path, None, tmp_path / "n",
                      FinetuneConfig(epochs=8, batch_size=16, max_span_width=3, dev_fraction=0.3,
                                     **FAST))
    assert result.task["nested"] is True
    assert result.dev_metrics["f1"] >= 0.8
    assert "baseline" not in result.dev_metrics  # no tags to count


def test_qa_with_unanswerable_questions(bert, data, tmp_path):
    result = finetune("qa", bert, data["squad"], None, tmp_path / "q",
                      FinetuneConfig(epochs=1, batch_size=16, max_length=32, dev_fraction=0.2,
                                     stride=8, **FAST))
    task = json.loads((tmp_path / "q" / "bertkit_task.json").read_text())
    assert "null_threshold" in task and task["max_length"] == 32
    assert result.dev_metrics["no_ans_total"] > 0 and result.dev_metrics["has_ans_total"] > 0
    assert 0.0 <= result.dev_metrics["f1"] <= 1.0
    runner = TaskModel.load(tmp_path / "q")
    batch = runner.tokenizer(["where did john go ?"], ["john went to rome ."])
    theirs = _hf_logits("BertForQuestionAnswering", tmp_path / "q", batch._asdict())
    start, end = runner.model(*batch)
    torch.testing.assert_close(start, theirs.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(end, theirs.end_logits, atol=1e-5, rtol=0)


def test_frozen_encoder_stays_put(bert, data, tmp_path):
    finetune("classify", bert, data["train"], data["dev"], tmp_path / "f",
             FinetuneConfig(epochs=1, batch_size=32, train_layers=0, **FAST))
    before = hub.load_weights(bert)
    after = hub.load_weights(tmp_path / "f")
    for name, tensor in before.items():
        if name.startswith("encoder.") or name.startswith("embeddings."):
            torch.testing.assert_close(after["bert." + name], tensor, atol=0, rtol=0, msg=name)
    assert not torch.equal(after["classifier.weight"], torch.zeros_like(after["classifier.weight"]))


def test_early_stopping_keeps_the_best_checkpoint(bert, data, tmp_path):
    # A huge learning rate wrecks the model after the first epoch: training stops early and
    # the saved model is the best one, not the last.
    cfg = FinetuneConfig(epochs=8, batch_size=16, lr=3e-3, head_lr=1e-2, warmup=0.0,
                         show_progress=False, patience=2, evals_per_epoch=1)
    result = finetune("classify", bert, data["train"], data["dev"], tmp_path / "e", cfg)
    records = [json.loads(line) for line in (tmp_path / "e" / "metrics.jsonl").open()]
    evals = [r["dev_accuracy"] for r in records if r["split"] == "eval"]
    assert result.dev_metrics["accuracy"] == pytest.approx(max(evals))
    if result.stopped_by == "early_stop":
        assert len(evals) < 8
    cfg = FinetuneConfig(epochs=8, batch_size=16, lr=1e-12, head_lr=1e-12, warmup=0.0,
                         show_progress=False, patience=2)
    frozen = finetune("classify", bert, data["train"], data["dev"], tmp_path / "e2", cfg)
    assert frozen.stopped_by == "early_stop" and frozen.steps == 3 * 10


# Bad input ---------------------------------------------------------------------------------------

def test_missing_label_column_names_the_file_and_line(bert, tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "good film", "sentiment": "positive"}])
    with pytest.raises(UserError, match=r"t\.jsonl:1: no label column"):
        finetune("classify", bert, path, None, tmp_path / "o", FinetuneConfig(**FAST))
    with pytest.raises(UserError, match=r"t\.jsonl:1: no column 'polarity'"):
        finetune("classify", bert, path, None, tmp_path / "o",
                 FinetuneConfig(label_column="polarity", **FAST))


def test_unknown_dev_label_names_its_line(bert, data, tmp_path):
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": "good", "label": "positive"},
                                               {"text": "meh", "label": "neutral"}])
    with pytest.raises(UserError, match=r"dev\.jsonl:2: unknown label 'neutral'"):
        finetune("classify", bert, data["train"], dev, tmp_path / "o", FinetuneConfig(**FAST))


def test_conll_token_without_tag_names_its_line(bert, data, tmp_path, capsys):
    bad = tmp_path / "bad.conll"
    bad.write_text("john\tB-PER\nwent\tO\nto\n\nmary\tB-PER\n")
    code = main(["finetune", "tag", "--model", str(bert), "--train", str(bad),
                 "--dev", str(data["ner_dev"]), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "bad.conll:3" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_empty_sentence_in_span_data(bert, tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [{"tokens": ["john"], "entities": [[0, 1, "PER"]]},
                                              {"tokens": [], "entities": []}])
    with pytest.raises(UserError, match=r"s\.jsonl:2: empty sentence"):
        finetune("spans", bert, path, None, tmp_path / "o", FinetuneConfig(**FAST))


def test_squad_answer_not_at_offset_is_skipped_with_a_count(bert, data, tmp_path):
    doc = squad(10, 1)
    para = doc["data"][0]["paragraphs"][0]
    para["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "sq.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune("qa", bert, tmp_path / "sq.json", None, tmp_path / "o",
                 FinetuneConfig(epochs=1, max_length=32, stride=8, dev_fraction=0.3, **FAST))
    assert any("skipped 1 answers not at their offset" in str(w.message) for w in caught)


def test_question_leaving_no_room_for_the_context(bert, data, tmp_path):
    doc = squad(10, 1)
    long_q = "where did " + "john " * 40 + "go ?"
    doc["data"][0]["paragraphs"][0]["qas"][0]["question"] = long_q
    (tmp_path / "sq.json").write_text(json.dumps(doc))
    # training skips it with a count ...
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune("qa", bert, tmp_path / "sq.json", None, tmp_path / "o",
                 FinetuneConfig(epochs=1, max_length=32, stride=8, dev_fraction=0.3, **FAST))
    assert any("skipped 1 questions with no room" in str(w.message) for w in caught)
    # ... while evaluating on it is an error naming the file and line
    runner = TaskModel.load(tmp_path / "o")
    runner.task["max_question"] = None
    with pytest.raises(UserError, match=r"sq\.json:\d+: question q0a: the question takes"):
        runner.evaluate(runner_examples(runner, tmp_path / "sq.json"))


def test_time_budget_without_epochs_follows_the_clock(bert, data, tmp_path):
    result = finetune("classify", bert, data["train"], data["dev"], tmp_path / "t",
                      FinetuneConfig(max_time=0.01, batch_size=16, **FAST))
    assert result.stopped_by == "max_time" and result.steps >= 1
    assert (tmp_path / "t" / "model.safetensors").is_file()
