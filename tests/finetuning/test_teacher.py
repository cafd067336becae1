"""`finetune TASK --teacher DIR`: a student of N of a fine-tuned teacher's layers (copied
exactly), trained on the teacher's outputs over the training file and unlabelled texts, saved
as a task directory that predict and evaluate read unchanged; bad input in one line before
training; a resumed run equals an uninterrupted one."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.finetuning import recipe
from bertkit.finetuning.distillation import Distillation
from bertkit.finetuning.heads import load_task_weights
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.tasks import QA, Classify, Embed, Spans, Tag
from bertkit.finetuning.teacher import Teacher, copy_layers
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

from tests.finetuning.conftest import WORDS

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = dict(epochs=3, batch_size=8, lr=3e-3, head_lr=3e-3, precision="fp32", seed=0)


@pytest.fixture(scope="module")
def deep_bert(tmp_path_factory) -> Path:
    """A random 4-layer BERT over the synthetic words (a teacher with layers to choose)."""
    path = tmp_path_factory.mktemp("deep")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    cfg = EncoderConfig(vocab_size=len(vocab), hidden_size=32, num_layers=4, num_heads=2,
                        intermediate_size=64, max_positions=64, hidden_dropout=0.0,
                        attention_dropout=0.0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
    hub.save_model(encoder, path / "bert", tokenizer=Tokenizer.from_vocab(path / "vocab.txt"))
    return path / "bert"


@pytest.fixture(scope="module")
def teacher_dir(deep_bert, task_files, quick_config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "out"
    finetune("classify", deep_bert, task_files["train"], task_files["dev"], out,
             quick_config(**{**SETTINGS, "epochs": 8}))
    return out


def _teacher(teacher_dir, **settings) -> Teacher:
    return Teacher.load(Distillation(teacher=str(teacher_dir), **settings), Classify())


def test_a_student_starts_from_evenly_spaced_layers_copied_exactly(teacher_dir):
    teacher = _teacher(teacher_dir, student_layers=2)
    task = teacher.task
    student = teacher.student().build(task, seed=0)
    whole = load_task_weights(task.make_model(Encoder(hub.load_config(teacher_dir))),
                              teacher_dir)
    assert len(student.encoder.blocks) == 2
    mine, theirs = student.state_dict(), whole.state_dict()
    for i, k in enumerate([0, 3]):  # the first and the last of 4
        for name, value in student.encoder.blocks[i].state_dict().items():
            assert torch.equal(value, theirs[f"encoder.blocks.{k}.{name}"]), name
    for name in mine:
        if not name.startswith("encoder.blocks."):  # embeddings, pooler, head: as they are
            assert torch.equal(mine[name], theirs[name]), name


def test_copy_layers_renumbers_and_leaves_the_rest_out():
    state = {f"encoder.blocks.{k}.w": torch.full((1,), float(k)) for k in range(4)}
    state["classifier.weight"] = torch.ones(2)
    out = copy_layers(state, [1, 3])
    assert sorted(out) == ["classifier.weight", "encoder.blocks.0.w", "encoder.blocks.1.w"]
    assert float(out["encoder.blocks.0.w"]) == 1 and float(out["encoder.blocks.1.w"]) == 3


def _cli(teacher_dir, task_files, out, *more) -> list[str]:
    return ["finetune", "classify", "--teacher", str(teacher_dir), "--train",
            str(task_files["train"]), "--dev", str(task_files["dev"]), "--out", str(out),
            "--epochs", "3", "--batch-size", "8", "--lr", "3e-3", "--head-lr", "3e-3",
            "--warmup", "0", "--precision", "fp32", "--quiet", *more]


def test_cli_distils_a_student_that_predict_and_evaluate_read(teacher_dir, task_files,
                                                              tmp_path, capsys):
    texts = tmp_path / "more.txt"
    texts.write_text("the movie was good\nthe plot was awful\nso bad a film\n")
    out = tmp_path / "student"
    assert main(_cli(teacher_dir, task_files, out, "--student-layers", "2",
                     "--unlabeled", str(texts), "--temperature", "2", "--alpha", "0.7",
                     "--hidden-weight", "0.5")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dev_accuracy"] >= 0.9  # the teacher's labels are easy to learn
    assert hub.load_config(out).num_layers == 2
    args = json.loads((out / "training_args.json").read_text())["options"]
    assert args["teacher"] == str(teacher_dir) and args["student_layers"] == 2
    assert main(["evaluate", "--model", str(out), "--input", str(task_files["dev"]),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(
        summary["dev_accuracy"])
    assert main(["predict", "--model", str(out), "--input", str(texts)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in rows] == ["positive", "negative", "negative"]


def test_a_student_of_another_model_learns_through_its_own_tokenizer(
        teacher_dir, tiny_bert, task_files, quick_config, tmp_path):
    """--model: any encoder; the tiny BERT's 2 layers, a new head, the labels the
    teacher's order."""
    teacher = _teacher(teacher_dir)
    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "out", quick_config(**SETTINGS), teacher=teacher)
    assert result.task.labels == teacher.task.labels
    assert result.dev_metrics["accuracy"] > 0.8


@pytest.mark.parametrize("flags, message", [
    (["--student-layers", "5"], "--student-layers must be between 1 and the teacher's 4 "
                                "layers, got 5"),
    (["--student-layers", "2", "--model", "{bert}"], "--student-layers makes the student of "
                                                      "the teacher's layers: give no --model "
                                                      "with it"),
    ([], "--model is required (or --teacher DIR --student-layers N)"),
])
def test_bad_input_is_one_line_before_training(teacher_dir, deep_bert, task_files, tmp_path,
                                               capsys, flags, message):
    flags = [f.replace("{bert}", str(deep_bert)) for f in flags]
    out = tmp_path / "out"
    assert main(_cli(teacher_dir, task_files, out, *flags)) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not out.exists()


def test_a_teacher_of_another_task_is_refused(teacher_dir, deep_bert, task_files, tmp_path,
                                              capsys):
    out = tmp_path / "out"
    args = ["finetune", "tag", "--teacher", str(teacher_dir), "--student-layers", "2",
            "--train", str(task_files["ner_train"]), "--out", str(out), "--quiet"]
    assert main(args) == 2
    assert capsys.readouterr().err == (f"error: {teacher_dir}: a fine-tuned classify model, "
                                       f"not a tag one (--teacher)\n")
    assert main(["finetune", "classify", "--teacher", str(deep_bert), "--student-layers", "2",
                 "--train", str(task_files["train"]), "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"error: {deep_bert}: a BERT encoder, not a fine-tuned "
                                       f"classify model (--teacher)\n")
    assert main(["finetune", "classify", "--student-layers", "2", "--model", str(deep_bert),
                 "--train", str(task_files["train"]), "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == \
        "error: --student-layers is read with --teacher DIR, which is not given\n"
    assert not out.exists()


@pytest.mark.slow
def test_a_resumed_student_equals_an_uninterrupted_one(teacher_dir, task_files, quick_config,
                                                       tmp_path, monkeypatch):
    """SIGTERM mid-epoch, then --resume: the teacher's outputs are computed again, alike."""
    teacher = _teacher(teacher_dir, student_layers=2, hidden_weight=0.5)
    cfg = quick_config(**SETTINGS)
    full = tmp_path / "full"
    finetune("classify", teacher.path, task_files["train"], task_files["dev"], full, cfg,
             backbone=teacher.student(), teacher=teacher)
    taken = [0]

    class Signalling(recipe.EpochBatches):
        def __iter__(self):
            for b in super().__iter__():
                taken[0] += 1
                if taken[0] == 5:
                    os.kill(os.getpid(), signal.SIGTERM)
                yield b

    out = tmp_path / "cut"
    with monkeypatch.context() as patch:
        patch.setattr(recipe, "EpochBatches", Signalling)
        cut = finetune("classify", teacher.path, task_files["train"], task_files["dev"], out,
                       cfg, backbone=teacher.student(), teacher=teacher)
    assert cut.stopped_by == "interrupted"
    resumed = _teacher(teacher_dir, student_layers=2, hidden_weight=0.5)
    finetune("classify", resumed.path, task_files["train"], task_files["dev"], out,
             quick_config(**SETTINGS, resume=True), backbone=resumed.student(), teacher=resumed)
    a, b = load_file(str(full / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # another teacher setting is another run: refused, not mixed in
    other = _teacher(teacher_dir, student_layers=2, hidden_weight=0.5, alpha=0.9)
    with monkeypatch.context() as patch:
        patch.setattr(recipe, "EpochBatches", Signalling)
        taken[0] = 0
        finetune("classify", other.path, task_files["train"], task_files["dev"], out,
                 cfg, backbone=other.student(), teacher=other)
    with pytest.raises(Exception, match="alpha"):
        finetune("classify", teacher.path, task_files["train"], task_files["dev"], out,
                 quick_config(**SETTINGS, resume=True), backbone=teacher.student(),
                 teacher=teacher)


def test_a_crf_tagger_distils_with_unlabelled_texts_split_into_words(
        tiny_bert, task_files, quick_config, tmp_path):
    teacher_dir = tmp_path / "teacher"
    cfg = quick_config(epochs=2, batch_size=16, precision="fp32")
    finetune(Tag(crf=True), tiny_bert, task_files["ner_train"], task_files["ner_dev"],
             teacher_dir, cfg)
    texts = tmp_path / "more.txt"
    texts.write_text("mary went to rome .\njohn went to new york .\n")
    teacher = Teacher.load(Distillation(teacher=str(teacher_dir), student_layers=1,
                                        unlabeled=texts), Tag(crf=True))
    lesson = teacher.lesson(Tag(crf=True))
    assert [s.tokens for s in lesson.unlabeled] == [["mary", "went", "to", "rome", "."],
                                                    ["john", "went", "to", "new", "york", "."]]
    result = finetune(Tag(crf=True), teacher_dir, task_files["ner_train"],
                      task_files["ner_dev"], tmp_path / "student", cfg,
                      backbone=teacher.student(), teacher=teacher)
    assert hub.load_config(tmp_path / "student").num_layers == 1
    assert result.task.labels == teacher.task.labels and result.dev_metrics["f1"] > 0.5


def test_an_embed_student_learns_a_sentence_encoders_vectors(tiny_bert, task_files,
                                                            quick_config, tmp_path):
    """A sentence-transformers directory (what `finetune embed` writes) is an embed teacher;
    another kind of model is not."""
    pairs = tmp_path / "pairs.jsonl"
    rows = [json.loads(line) for line in task_files["pairs"].read_text().splitlines()]
    pairs.write_text("".join(json.dumps({"anchor": r["premise"], "positive": r["hypothesis"]})
                             + "\n" for r in rows[:64]))
    cfg = quick_config(epochs=1, batch_size=16, precision="fp32")
    finetune(Embed(), tiny_bert, pairs, None, tmp_path / "teacher", cfg)
    teacher = Teacher.load(Distillation(teacher=str(tmp_path / "teacher"), student_layers=1),
                           Embed())
    result = finetune(Embed(), teacher.path, pairs, None, tmp_path / "student", cfg,
                      backbone=teacher.student(), teacher=teacher)
    assert "ndcg@10" in result.dev_metrics
    assert (tmp_path / "student" / "modules.json").is_file()
    with pytest.raises(UserError, match="a BERT encoder, not a fine-tuned classify model"):
        Teacher.load(Distillation(teacher=str(tmp_path / "student")), Classify())


@pytest.mark.parametrize("task, data", [(Spans(), ("ner_train", "ner_dev")),
                                        (QA(stride=8), ("squad", None))],
                         ids=["spans", "qa"])
def test_spans_and_qa_students_learn_their_teachers_distributions(
        task, data, tiny_bert, task_files, quick_config, tmp_path):
    train, dev = (None if d is None else task_files[d] for d in data)
    cfg = quick_config(epochs=1, batch_size=16, precision="fp32")
    finetune(task, tiny_bert, train, dev, tmp_path / "teacher", cfg)
    teacher = Teacher.load(Distillation(teacher=str(tmp_path / "teacher"), student_layers=1),
                           task)
    result = finetune(task, teacher.path, train, dev, tmp_path / "student", cfg,
                      backbone=teacher.student(), teacher=teacher)
    assert result.stopped_by == "epochs" and "f1" in result.dev_metrics
    assert hub.load_config(tmp_path / "student").num_layers == 1


def test_a_narrower_student_learns_through_a_projection_left_out_of_its_directory(
        teacher_dir, task_files, quick_config, tmp_path):
    """A --model student of width 16 under a teacher of 32: the hidden-state loss compares
    them through a learned projection, trained with the model and not saved with it."""
    from bertkit.finetuning.predict import TaskModel
    from bertkit.finetuning.teacher import ProjectedEncoder

    narrow = tmp_path / "narrow"
    narrow.mkdir()
    (narrow / "vocab.txt").write_text((teacher_dir / "vocab.txt").read_text())
    cfg = EncoderConfig(vocab_size=len((narrow / "vocab.txt").read_text().split()),
                        hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                        max_positions=64, hidden_dropout=0.0, attention_dropout=0.0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(cfg)
        init_weights(encoder, cfg)
    hub.save_model(encoder, narrow / "bert",
                   tokenizer=Tokenizer.from_vocab(narrow / "vocab.txt"))
    teacher = _teacher(teacher_dir, hidden_weight=0.5)
    backbone = teacher.student_of(narrow / "bert")
    assert isinstance(backbone, ProjectedEncoder)
    model = backbone.build(teacher.task, seed=0)
    assert model.teacher_projection.weight.shape == (32, 16)
    out = tmp_path / "student"
    result = finetune("classify", narrow / "bert", task_files["train"], task_files["dev"], out,
                      quick_config(**SETTINGS), backbone=backbone, teacher=teacher)
    assert result.stopped_by == "epochs"
    saved = [k for f in out.glob("*.safetensors") for k in load_file(str(f))]
    assert saved and not any("projection" in k for k in saved)
    assert TaskModel.load(out).classify("a good film")["label"] in ("positive", "negative")
