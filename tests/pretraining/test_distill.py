"""Task-agnostic distillation during pretraining (`pretrain --objective distill --teacher DIR`):
MiniLM v2's attention-relation loss and the hidden-state loss against plain loops, the layer
walk against the encoder and its attention maps, a tiny teacher taught to a tiny student from
the command line, its refusals, its resume after kill -9 and under two ranks."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.model.attention import attention_weights
from bertkit.model.create import init_model
from bertkit.model.encoder import Encoder, init_weights
from bertkit.model.hub import load_pretraining_model
from bertkit.pretraining.distillation import DistillSettings, relation_kl, states_mse
from bertkit.pretraining.objectives import Distill
from bertkit.pretraining.objectives.distill import layer_states

TINY = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--lr", "1e-3",
        "--log-every", "1", "--eval-batches", "2", "--precision", "fp32",
        "--early-fraction", "0"]


# The losses against plain loops --------------------------------------------------------------

def _plain_relation_kl(student, teacher, heads, mask):
    """MiniLM v2's relation KL written out: per relation head, per real query, a softmax over
    the real keys of the scaled dot products, and KL(teacher || student)."""
    B, T, _ = student.shape
    total, count = 0.0, 0
    for b in range(B):
        real = [j for j in range(T) if mask[b, j]]
        for r in range(heads):
            def head(x):
                d = x.shape[-1] // heads
                return x[b, :, r * d:(r + 1) * d].double(), d
            (s, ds), (t, dt) = head(student), head(teacher)
            for i in real:
                def softmax(x, d):
                    logits = [float(x[i] @ x[j]) / math.sqrt(d) for j in real]
                    top = max(logits)
                    e = [math.exp(v - top) for v in logits]
                    return [v / sum(e) for v in e]
                p, q = softmax(t, dt), softmax(s, ds)
                total += sum(pj * (math.log(pj) - math.log(qj)) for pj, qj in zip(p, q))
                count += 1
    return total / count


def test_the_attention_relation_loss_equals_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 12, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    for heads in (1, 2, 4):
        got = relation_kl(student, teacher, heads, mask)
        assert float(got) == pytest.approx(_plain_relation_kl(student, teacher, heads, mask),
                                           rel=1e-5)
    assert float(relation_kl(teacher, teacher, 4, mask)) == pytest.approx(0.0, abs=1e-6)
    full = torch.ones(2, 6, dtype=torch.long)
    assert float(relation_kl(student, teacher, 2)) == pytest.approx(
        _plain_relation_kl(student, teacher, 2, full), rel=1e-5)  # no mask: every token real
    student.requires_grad_(True)
    relation_kl(student, teacher, 2, mask).backward()
    assert torch.isfinite(student.grad).all() and student.grad[1, 4:].abs().sum() == 0


def test_the_hidden_state_loss_equals_a_plain_loop():
    g = torch.Generator().manual_seed(1)
    student, teacher = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    squares = [float(student[b, t, h] - teacher[b, t, h]) ** 2
               for b in range(2) for t in range(5) if mask[b, t] for h in range(4)]
    assert float(states_mse(student, teacher, mask)) == pytest.approx(
        sum(squares) / len(squares), rel=1e-6)
    assert float(states_mse(student, teacher)) == pytest.approx(
        float(((student - teacher) ** 2).mean()), rel=1e-6)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_the_layer_walk_gives_the_encoders_states_and_attention(architecture):
    cfg = EncoderConfig(vocab_size=50, hidden_size=16, num_layers=3, num_heads=4,
                        intermediate_size=32, max_positions=64, architecture=architecture)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(2))
    encoder.eval()
    ids = torch.randint(5, 50, (2, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    batch = {"input_ids": ids, "attention_mask": mask}
    out = encoder(ids, attention_mask=mask, output_hidden_states=True)
    maps = attention_weights(encoder, ids, attention_mask=mask)  # [L, B, A, T, T]
    for layer in range(3):
        (q, k, _), h = layer_states(encoder, batch, layer)
        torch.testing.assert_close(h, out.hidden_states[layer + 1], atol=1e-5, rtol=1e-5)
        heads = lambda x: x.view(2, 7, 4, 4).transpose(1, 2)  # noqa: E731 [B, A, T, D]
        scores = heads(q) @ heads(k).transpose(-1, -2) / 2.0
        probs = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf")).softmax(-1)
        torch.testing.assert_close(probs, maps[layer], atol=1e-5, rtol=1e-5)


# The objective from the command line ----------------------------------------------------------

@pytest.fixture(scope="module")
def teachers(prepared, tmp_path_factory):
    """Tiny teachers with the data's tokenizer (one as wide as the tiny student, one wider,
    one of 16 positions) and one with another tokenizer."""
    from bertkit.text.vocab import train_tokenizer

    root = tmp_path_factory.mktemp("teachers")
    init_model("tiny", prepared / "tokenizer", root / "same", seed=7)
    init_model("tiny", prepared / "tokenizer", root / "wide", seed=8, hidden_size=192,
               num_heads=6, intermediate_size=384, num_layers=3)
    corpus = root / "other.txt"
    corpus.write_text("\n".join(f"another text number {i} of words" for i in range(50)),
                      encoding="utf-8")
    train_tokenizer([corpus], vocab_size=60, out=root / "othertok", progress=False)
    init_model("tiny", root / "othertok", root / "other", seed=9)
    init_model("tiny", prepared / "tokenizer", root / "short", seed=10, max_positions=16)
    return root


def _pretrain(data, out, teacher, *more) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(out), "--objective", "distill",
                 "--teacher", str(teacher), *TINY, *more])


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_a_tiny_teacher_teaches_a_tiny_student(prepared, teachers, tmp_path, capsys):
    out = tmp_path / "student"
    assert _pretrain(prepared, out, teachers / "wide", "--hidden-weight", "1",
                     "--teacher-layer", "2", "--max-steps", "30", "--eval-every", "15",
                     "--schedule", "constant", "--warmup-steps", "0") == 0
    err = capsys.readouterr().err
    assert "distill: teacher" in err and "its layer 2's" in err and "projection" in err
    train = [r for r in _records(out) if r.get("split") == "train"]
    for name in ("relation_loss", "hidden_loss"):
        first, last = (sum(r[name] for r in rows) / 5 for rows in (train[:5], train[-5:]))
        assert last < 0.8 * first, (name, first, last)
    for r in train:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["relation_loss"] + r["hidden_loss"],
                                          rel=1e-4)
    evals = [r for r in _records(out) if r.get("split") == "eval"]
    assert evals and {"eval_relation_loss", "eval_hidden_loss", "eval_accuracy"} <= set(evals[-1])
    assert evals[-1]["eval_relation_loss"] < evals[0]["eval_relation_loss"]
    saved = load_file(str(out / "model.safetensors"))
    assert not any("to_teacher" in k for k in saved)  # the projection is no part of the model
    checkpoint = sorted((out / "checkpoints").glob("step-*"))[-1]
    kept = load_file(str(checkpoint / "model.safetensors"))
    assert kept["to_teacher.weight"].shape == (192, 128)  # ... but it resumes with the run
    assert not any(k.startswith("teacher") for k in kept)  # the teacher is not checkpointed
    load_pretraining_model(out)  # a masked LM as any other
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["distill"]["hidden_weight"] == 1.0
    assert "--teacher" in record["command"]


def test_the_loss_is_the_mlm_loss_plus_the_weighted_relation_loss_of_the_teacher(prepared,
                                                                                   teachers):
    """The objective's loss on one batch, against the losses of the teacher's own layers."""
    from bertkit.pretraining.examples import PretrainingBatches

    objective = Distill(DistillSettings(teacher=teachers / "same", relation_weight=0.5,
                                        relation_heads=4))
    model = objective.fit(load_pretraining_model(teachers / "wide"), None, 0)  # eval: no dropout
    batch = next(iter(PretrainingBatches(prepared, batch_size=4, seq_len=32, seed=0,
                                         objective=objective, prefetch=0)))
    loss, metrics = objective.loss(model, batch)
    teacher = objective.teacher(torch.device("cpu"))
    mask = batch.get("attention_mask")
    with torch.no_grad():
        t = layer_states(teacher, batch, 1)[0]
        student = layer_states(model.encoder, batch, 2)[0]
        want = sum(relation_kl(s, x, 4, mask) for s, x in zip(student, t))
    assert float(metrics["relation_loss"]) == pytest.approx(float(want), rel=1e-5)
    assert float(loss.detach()) == pytest.approx(float(metrics["mlm_loss"]) + 0.5 * float(want),
                                        rel=1e-5)
    assert model.to_teacher is None  # no hidden-state loss: no projection


def _help(capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["pretrain", "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_pretrain_help_lists_the_teacher_flags_under_the_objective(capsys):
    text = _help(capsys)
    section = text[text.index("--objective distill:"):]
    for flag in ("--teacher TEACHER", "--teacher-layer TEACHER_LAYER",
                 "--relation-heads RELATION_HEADS", "--relation-weight RELATION_WEIGHT",
                 "--hidden-weight HIDDEN_WEIGHT"):
        assert flag in section, flag
    assert "MiniLM v2" in section


def _error(capsys, code: int) -> str:
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    return err.strip()


@pytest.mark.usefixtures("one_thread")
def test_a_teacher_of_another_tokenizer_is_refused_before_training(prepared, teachers,
                                                                   tmp_path, capsys):
    out = tmp_path / "no"
    err = _error(capsys, _pretrain(prepared, out, teachers / "other", "--max-steps", "2"))
    assert "tokenizer does not match the data" in err and str(teachers / "other") in err
    assert not (out / "metrics.jsonl").exists() and not list(out.glob("checkpoints/*"))


@pytest.mark.usefixtures("one_thread")
def test_other_bad_teachers_and_settings_are_one_line(prepared, teachers, tmp_path, capsys):
    out = tmp_path / "no"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "--teacher: " in _error(capsys, _pretrain(prepared, out, empty, "--max-steps", "1"))
    assert not out.exists()
    prepared_copy = tmp_path / "notmodel"
    prepared_copy.mkdir()
    (prepared_copy / "config.json").write_text('{"model_type": "gpt2"}', encoding="utf-8")
    assert "--teacher: " in _error(capsys, _pretrain(prepared, out, prepared_copy,
                                                     "--max-steps", "1"))
    err = _error(capsys, main(["pretrain", "--data", str(prepared), "--out", str(out),
                               "--objective", "distill", *TINY, "--max-steps", "1"]))
    assert "needs --teacher DIR" in err
    err = _error(capsys, main(["pretrain", "--data", str(prepared), "--out", str(out),
                               "--teacher", str(teachers / "same"), *TINY, "--max-steps", "1"]))
    assert err == "error: --teacher is a setting of --objective distill, not of mlm"
    assert "does not divide" in _error(capsys, _pretrain(
        prepared, out, teachers / "wide", "--relation-heads", "5", "--max-steps", "1"))
    assert "the teacher has 3 layers" in _error(capsys, _pretrain(
        prepared, out, teachers / "wide", "--teacher-layer", "4", "--max-steps", "1"))
    assert "both 0" in _error(capsys, _pretrain(
        prepared, out, teachers / "same", "--relation-weight", "0", "--max-steps", "1"))
    assert not out.exists()
    assert "longer than the teacher's 16 positions" in _error(capsys, _pretrain(
        prepared, out, teachers / "short", "--max-steps", "1"))
    assert not (out / "model.safetensors").exists()


def test_evaluate_sends_a_distilled_model_to_the_masked_lm_figures(prepared, teachers,
                                                                   capsys):
    """`evaluate` has no teacher to run: --objective distill is refused in one line, and the
    student is judged as the masked LM it is."""
    args = ["evaluate", "--model", str(teachers / "same"), "--input", str(prepared),
            "--seq-len", "32", "--pretrain-batch-size", "8", "--eval-batches", "2"]
    err = _error(capsys, main(args + ["--objective", "distill"]))
    assert "evaluate with --objective mlm" in err
    assert main(args + ["--objective", "mlm"]) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_a_resume_with_another_teacher_is_refused(prepared, teachers, tmp_path, capsys):
    out = tmp_path / "run"
    assert _pretrain(prepared, out, teachers / "same", "--max-steps", "2",
                     "--save-every", "2") == 0
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in (teachers / "same").iterdir():  # the same teacher elsewhere resumes
        if f.is_file():
            (moved / f.name).write_bytes(f.read_bytes())
    (moved / "tokenizer").mkdir(exist_ok=True)
    capsys.readouterr()
    err = _error(capsys, _pretrain(prepared, out, teachers / "wide", "--max-steps", "4",
                                   "--resume"))
    assert "teacher" in err and "not the bytes it was made from" in err
    assert _pretrain(prepared, out, moved, "--max-steps", "4", "--resume") == 0
    assert "resumed from" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_kill_9_then_resume_equals_an_uninterrupted_run(prepared, teachers, tmp_path,
                                                         monkeypatch):
    args = ["pretrain", "--data", str(prepared), "--objective", "distill", "--teacher",
            str(teachers / "wide"), "--hidden-weight", "0.5", "--max-steps", "10",
            "--save-every", "3", "--eval-every", "5", *TINY]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    cut = tmp_path / "cut"
    command = [sys.executable, "-m", "bertkit.cli", *args, "--out", str(cut)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not list((cut / "checkpoints").glob("step-*")) and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGSTOP)
    assert proc.poll() is None and not (cut / "model.safetensors").exists()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(command + ["--resume"], env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stderr
    a = load_file(str(tmp_path / "full" / "model.safetensors"))
    b = load_file(str(cut / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_two_ranks_under_torchrun_train_every_weight(prepared, teachers, tmp_path):
    """DDP refuses a weight without a gradient: the projection and every block are used, and
    the teacher is no part of what it wraps."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    out = tmp_path / "ddp"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "bertkit.cli", "pretrain", "--data",
                           str(prepared), "--objective", "distill", "--teacher",
                           str(teachers / "wide"), "--hidden-weight", "1", "--max-steps", "3",
                           "--out", str(out), *TINY],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 ranks" in done.stderr
    train = [r for r in _records(out) if r.get("split") == "train"]
    assert [r["step"] for r in train] == [1, 2, 3] and all("hidden_loss" in r for r in train)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_all_minilm_teaches_a_student_on_text_prepared_with_its_tokenizer(minilm_dir, tiny,
                                                                          prepared, tmp_path,
                                                                          capsys):
    """A real teacher (all-MiniLM-L6-v2: 6 layers, 384 wide, 12 heads) and a text --data
    without --tokenizer: prepared with the teacher's WordPiece, not a vocabulary of its own;
    data of another tokenizer is refused."""
    err = _error(capsys, _pretrain(prepared, tmp_path / "no", minilm_dir, "--max-steps", "1"))
    assert "tokenizer does not match the data" in err
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "student"
    assert _pretrain(corpus, out, minilm_dir, "--hidden-weight", "1", "--max-steps", "6",
                     "--eval-every", "6") == 0
    assert "WordPiece" not in capsys.readouterr().err  # no vocabulary trained on the text
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 30522
    train = [r for r in _records(out) if r.get("split") == "train"]
    assert len(train) == 6 and all(math.isfinite(r["relation_loss"]) and
                                   math.isfinite(r["hidden_loss"]) for r in train)
    evals = [r for r in _records(out) if r.get("split") == "eval"]
    assert "eval_relation_loss" in evals[-1] and "eval_hidden_loss" in evals[-1]
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["vocab_size"] == 30522  # the teacher's, not a default


@pytest.mark.usefixtures("one_thread")
def test_the_library_call_trains_with_the_settings_given(prepared, teachers, tmp_path):
    from bertkit.pretraining.recipe import PretrainOptions, PretrainSchedule, pretrain

    out = tmp_path / "api"
    result = pretrain(PretrainOptions(
        data=prepared, out=out, preset="tiny", objective="distill", seq_len=32, batch_size=8,
        eval_batches=2, early_fraction=0,
        distill=DistillSettings(teacher=str(teachers / "wide"), relation_heads=8,
                                relation_weight=0.5, hidden_weight=2.0),
        train=PretrainSchedule(max_steps=3, precision="fp32", log_every=1)))
    assert result.step == 3 and "eval_hidden_loss" in result.eval_metrics
    train = [r for r in _records(out) if r.get("split") == "train"]
    assert all(r["loss"] == pytest.approx(r["mlm_loss"] + 0.5 * r["relation_loss"]
                                          + 2.0 * r["hidden_loss"], rel=1e-4) for r in train)
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["distill"]["relation_heads"] == 8
