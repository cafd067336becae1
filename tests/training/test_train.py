"""The shared training loop: schedule, parameter groups, accumulation, logs, outputs, signals,
early stopping, out-of-memory, and that each speed option matches the plain path."""
from __future__ import annotations

import json
import math
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from bertkit.pretraining import objectives
from bertkit.config import ConfigError, EncoderConfig, TrainConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.training import interrupt, loop, resume
from bertkit.training.loop import train
from bertkit.training.optimizer import default_param_groups, lr_factor, micro_batches
from bertkit.training.runlog import loss_curves, plot_loss, read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

# Schedule and optimizer groups ------------------------------------------------------------------

def test_linear_schedule_warms_up_then_decays_to_min():
    cfg = TrainConfig(max_steps=100, warmup_steps=10, min_lr_ratio=0.1)
    f = [lr_factor(cfg, s, 0.0) for s in range(1, 101)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(f[:9], f[1:10]))
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert f[-1] == pytest.approx(0.1 + 0.9 * (1 - 89 / 90), abs=1e-9)


def test_cosine_constant_and_time_schedules():
    cos = TrainConfig(max_steps=100, warmup_steps=0, schedule="cosine")
    assert lr_factor(cos, 1, 0) == pytest.approx(1.0)
    assert lr_factor(cos, 51, 0) == pytest.approx(0.5)
    const = TrainConfig(max_steps=100, warmup_steps=5, schedule="constant")
    assert [lr_factor(const, s, 0) for s in (1, 5, 90)] == pytest.approx([0.2, 1.0, 1.0])
    timed = TrainConfig(max_time=10, warmup_fraction=0.1)
    assert lr_factor(timed, 1, 30) == pytest.approx(0.5)     # half-way through warm-up
    assert lr_factor(timed, 99, 330) == pytest.approx(0.5)   # half-way through the decay


def test_no_weight_decay_on_biases_and_layernorm(tiny):
    model = tiny.model()
    decay, no_decay = default_param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    assert all(names[id(p)].endswith("bias") or ".norm." in names[id(p)]
               or names[id(p)].endswith("norm.weight") for p in no_decay["params"])
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert all(p.ndim == 2 for p in decay["params"])


# The loop end to end ------------------------------------------------------------------------------

def test_train_learns_and_writes_run_directory(tmp_path, tiny):
    from bertkit.model.hub import load_pretraining_model

    model = tiny.model()
    held = [tiny.batch(torch.Generator().manual_seed(99), 8) for _ in range(2)]
    cfg = TrainConfig(max_steps=40, lr=3e-3, warmup_steps=4, log_every=10, eval_every=20)
    result = train(model, objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   evaluate=lambda m: objectives.evaluate_lm(m, held, "mlm"),
                   target_count=objectives.target_count("mlm"), show_progress=False)
    assert result.step == 40 and result.stopped_by == "max_steps"
    assert result.tokens == 40 * 8 * tiny.T
    records = read_metrics(tmp_path / "run/metrics.jsonl")
    train_records = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train_records] == [10, 20, 30, 40]
    assert [r["step"] for r in evals] == [20, 40]
    assert train_records[-1]["loss"] < train_records[0]["loss"] - 0.3
    assert evals[-1]["eval_perplexity"] == pytest.approx(math.exp(evals[-1]["eval_loss"]), rel=1e-5)
    assert all(r["tokens_per_second"] > 0 and "mlm_accuracy" in r and "learning_rate" in r
               for r in train_records)
    assert (tmp_path / "run/loss.png").read_bytes()[:4] == b"\x89PNG"
    curves = plot_loss(tmp_path / "run/metrics.jsonl", tmp_path / "again.png")
    assert list(curves) == ["train loss", "eval_loss"]  # mlm: the loss is its LM part
    assert curves["train loss"] == ([10, 20, 30, 40], [r["loss"] for r in train_records])
    assert curves["eval_loss"] == ([20, 40], [r["eval_loss"] for r in evals])
    loaded = load_pretraining_model(tmp_path / "run")  # the final Hugging Face directory
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_progress_is_a_line_every_few_seconds_and_the_metrics_log_keeps_every_record(
        tmp_path, tiny, capsys):
    """Logged every step, 30 steps of a tiny model take well under the progress's 10 s: one
    line once the first figures are in, the evaluation, and the last line; metrics.jsonl still
    holds all 30 train records."""
    held = [tiny.batch(torch.Generator().manual_seed(99), 8)]
    cfg = TrainConfig(max_steps=30, log_every=1, eval_every=15)
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
          evaluate=lambda m: objectives.evaluate_lm(m, held, "mlm"), save=tiny.no_save)
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if line.startswith("train: ")]
    assert len(progress) == 2, err
    assert progress[0].startswith("train: 1/30 steps (3%), 128 tokens, step 1: loss ")
    assert ", lr " in progress[0] and " tokens/s, " in progress[0] and "ETA" in progress[0]
    assert progress[1].startswith("train: 30/30 steps (100%), 3,840 tokens, step 30: loss ")
    assert "ETA" not in progress[1]
    assert [line.split("  ")[0] for line in err if line.startswith("eval")] == \
        ["eval step 15", "eval step 30"]
    records = read_metrics(tmp_path / "run/metrics.jsonl")
    assert [r["step"] for r in records if r["split"] == "train"] == list(range(1, 31))


def test_between_log_steps_the_progress_moves_and_its_figures_say_which_step_they_are_from(
        tmp_path, tiny, capsys, monkeypatch):
    """The loss and tokens/s are read from the device at log steps only (no host sync in a
    step): a line between them says the step they come from, and the tokens counted on the
    host since move on with the step."""
    import functools

    from bertkit.progress import Progress

    # the run's progress is made where its step to resume from is known
    monkeypatch.setattr(resume, "Progress", functools.partial(Progress, every=0))  # every line
    cfg = TrainConfig(max_steps=6, log_every=4)
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
          save=tiny.no_save)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train: ")]
    # none before the first figures; a line each step from then, the last finish's
    assert [line.split(" (")[0] for line in lines] == [f"train: {n}/6 steps" for n in (4, 5, 6)]
    tokens = [int(line.split(", ")[1].split(" ")[0].replace(",", "")) for line in lines]
    assert tokens[0] < tokens[1] < tokens[2] and " tokens, " in lines[1]
    assert [line.split(", ")[2].split(":")[0] for line in lines] == \
        ["step 4", "step 4", "step 6"]
    assert lines[0].split("step 4: ")[1].split(", elapsed")[0] == \
        lines[1].split("step 4: ")[1].split(", elapsed")[0]  # the same figures, said as old


def test_a_run_stopped_by_its_time_budget_logs_the_steps_since_its_last_log_line(
        tmp_path, tiny, capsys):
    """A time budget ends on a step that is rarely a log step: its last window is logged
    there, so that the last progress line says the steps it ran (not `train: 0 steps`, what a
    short `finetune --max-time` printed after 29 steps at log_every 50) and metrics.jsonl and
    loss.png hold the training loss."""
    cfg = TrainConfig(max_time=1e-9, log_every=50)
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   save=tiny.no_save)
    assert result.stopped_by == "max_time" and result.step == 1
    progress = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("train: ")]
    assert progress[-1].startswith("train: 1 steps, "), progress
    assert ", step 1: loss " in progress[-1], progress
    records = read_metrics(tmp_path / "run/metrics.jsonl")
    assert [(r["step"], r["split"]) for r in records] == [(1, "train")]
    assert records[0]["loss"] > 0 and records[0]["tokens_per_second"] > 0
    assert result.train_metrics["loss"] == records[0]["loss"]
    assert (tmp_path / "run/loss.png").is_file()


def test_the_summary_gives_the_whole_runs_tokens_per_second_not_its_last_windows(tmp_path, tiny):
    """A last window holding a stall (on a GPU: the recompile when the rows grow) read 973
    tokens/s in a summary of a run that trained 122,000 a second: the summary's figure is the
    run's, metrics.jsonl keeps each window's."""
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        if len(calls) == 4:
            time.sleep(0.5)
        return objectives.mlm_loss(model, batch)
    result = train(tiny.model(), loss_fn, tiny.FakeBatches(), TrainConfig(max_steps=4, log_every=2),
                   tmp_path / "run", save=tiny.no_save)
    records = read_metrics(tmp_path / "run/metrics.jsonl")
    last = records[-1]["tokens_per_second"]
    summary = result.summary()["train_tokens_per_second"]
    assert summary == pytest.approx(result.tokens / result.train_seconds)
    assert result.train_metrics["tokens_per_second"] == last and summary > 1.5 * last


def _sigterm_at_step(n: int):
    """An MLM loss that sends this process SIGTERM during step `n`."""
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGTERM)
        return objectives.mlm_loss(model, batch)
    return loss_fn


def test_a_run_interrupted_between_log_steps_says_the_step_it_stopped_at(tmp_path, tiny, capsys):
    """Its last window is left to the resume (the records equal an unbroken run's), but the
    last progress line says the step reached, not the last logged one."""
    loss_fn = _sigterm_at_step(3)
    result = train(tiny.model(), loss_fn, tiny.FakeBatches(),
                   TrainConfig(max_steps=50, log_every=50), tmp_path / "run")
    assert result.stopped_by == "interrupted" and result.step == 3
    progress = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("train: ")]
    assert progress[-1].startswith("train: 3/50 steps (6%)"), progress
    assert not (tmp_path / "run/metrics.jsonl").read_text().strip()


def test_train_gives_the_callers_generators_back(tmp_path, tiny):
    """The run seeds torch's generator for dropout; the caller's stream is left where it was."""
    model = tiny.model(hidden_dropout=0.1)  # (seeds torch itself: before ours)
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    train(model, objectives.mlm_loss, tiny.FakeBatches(),
          TrainConfig(max_steps=2), tmp_path / "r", save=tiny.no_save, show_progress=False)
    assert torch.equal(torch.rand(3), expected)


def test_loss_curves_show_the_lm_part_of_a_loss_of_several_parts():
    records = [{"step": 2, "split": "train", "loss": 5.0, "mlm_loss": 4.0},
               {"step": 4, "split": "train", "loss": 4.5, "mlm_loss": 3.8},
               {"step": 4, "split": "eval", "eval_loss": 3.9}]
    assert loss_curves(records) == {"train loss": ([2, 4], [5.0, 4.5]),
                                    "train mlm_loss": ([2, 4], [4.0, 3.8]),
                                    "eval_loss": ([4], [3.9])}
    assert loss_curves([{"step": 1, "split": "eval", "eval_loss": 1.0}]) == {}


def test_grad_accumulation_equals_one_big_batch(tmp_path, tiny):
    g = torch.Generator().manual_seed(5)
    small = [tiny.batch(g, 4) for _ in range(6)]
    big = [tiny.concat(small[i], small[i + 1]) for i in range(0, 6, 2)]
    cfg = TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=1)
    results = []
    for batches, accum in ((big, 1), (small, 2)):
        model = tiny.model()
        train(model, objectives.mlm_loss, batches, cfg.replace(grad_accum=accum),
              tmp_path / f"a{accum}", save=tiny.no_save, show_progress=False,
              target_count=objectives.target_count("mlm"))
        results.append(tiny.params(model))
    for k in results[0]:
        torch.testing.assert_close(results[0][k], results[1][k], atol=1e-6, rtol=1e-5)


def test_batch_growth_takes_more_micro_batches_as_the_run_goes(tmp_path, tiny):
    """grad_accum_final: 1 micro-batch at the start, growing linearly to 4 by the end; each
    step equals one step on the concatenation of its micro-batches."""
    cfg = TrainConfig(max_steps=10, lr=1e-3, warmup_steps=0, log_every=1, grad_accum_final=4)
    counts = [micro_batches(cfg, step, 0.0) for step in range(1, 11)]
    assert counts == [1, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    timed = cfg.replace(max_steps=None, max_time=10.0)
    assert [micro_batches(timed, 99, 60 * m) for m in (0, 5, 9.99, 10, 20)] == [1, 2, 3, 4, 4]
    assert micro_batches(cfg.replace(grad_accum_final=None, grad_accum=2), 9, 0.0) == 2
    batches = tiny.FakeBatches(B=4)
    train(tiny.model(), objectives.mlm_loss, batches, cfg, tmp_path / "grow",
          save=tiny.no_save, show_progress=False, target_count=objectives.target_count("mlm"))
    assert batches.n == sum(counts)
    g = torch.Generator().manual_seed(5)
    small = [tiny.batch(g, 4) for _ in range(3)]
    grown, flat = tiny.model(), tiny.model()
    two = TrainConfig(max_steps=2, lr=1e-3, warmup_steps=0, log_every=1, grad_accum_final=3)
    assert [micro_batches(two, s, 0.0) for s in (1, 2)] == [1, 2]
    train(grown, objectives.mlm_loss, small, two, tmp_path / "g", save=tiny.no_save,
          show_progress=False, target_count=objectives.target_count("mlm"))
    train(flat, objectives.mlm_loss, [small[0], tiny.concat(small[1], small[2])],
          two.replace(grad_accum_final=None), tmp_path / "f", save=tiny.no_save,
          show_progress=False, target_count=objectives.target_count("mlm"))
    for k, v in tiny.params(grown).items():
        torch.testing.assert_close(v, tiny.params(flat)[k], atol=1e-6, rtol=1e-5)
    with pytest.raises(ConfigError, match="at least grad_accum"):
        TrainConfig(max_steps=1, grad_accum=4, grad_accum_final=2)


def test_batches_that_change_during_the_run_are_told_how_far_it_is(tmp_path, tiny):
    class Told(tiny.FakeBatches):
        def set_progress(self, fraction):
            told.append((fraction, self.n))  # before the step's batches are drawn

    told: list = []
    cfg = TrainConfig(max_steps=4, lr=1e-3, warmup_steps=0, log_every=1, grad_accum=2)
    train(tiny.model(), objectives.mlm_loss, Told(B=4), cfg, tmp_path / "told",
          save=tiny.no_save, show_progress=False)
    assert told == [(0.0, 0), (0.25, 2), (0.5, 4), (0.75, 6)]


def test_sigterm_finishes_the_step_saves_and_stops(tmp_path, tiny):
    loss_fn = _sigterm_at_step(3)
    result = train(tiny.model(), loss_fn, tiny.FakeBatches(),
                   TrainConfig(max_steps=50, log_every=5),
                   tmp_path / "run", show_progress=False)
    assert result.stopped_by == "interrupted" and result.step == 3
    assert (tmp_path / "run/checkpoints/step-00000003/manifest.json").is_file()
    assert not (tmp_path / "run/model.safetensors").exists()  # no final model for a cut run
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or \
        signal.getsignal(signal.SIGTERM) != signal.SIG_IGN


@pytest.mark.parametrize("mine,peers,stopped_by", [(None, None, "interrupted"),
                                                     (signal.SIGTERM, None, "interrupted"),
                                                     (None, "time", "max_time")])
def test_ranks_agree_on_why_they_stop(monkeypatch, mine, peers, stopped_by):
    """A SIGTERM that reached another rank alone stops this one as interrupted too (it took
    the stop for max_time: it evaluated while the others checkpointed, and all hung)."""
    cfg = TrainConfig(max_steps=100, log_every=10, max_time=1.0)

    def sent(signum, seconds: float, reduce) -> tuple[torch.Tensor, str | None]:
        """What a rank with `signum` after `seconds` of training sends to the all-reduce."""
        state = SimpleNamespace(step=10, train_seconds=seconds, stopped_by=None)
        tensors = []
        monkeypatch.setattr(loop.dist, "all_reduce", lambda t, op=None: (tensors.append(
            t.clone()), reduce(t)))
        loop._check_stop(SimpleNamespace(distributed=True, cfg=cfg, device=torch.device("cpu")), state,
                         SimpleNamespace(signum=signum))
        return tensors[0], state.stopped_by

    theirs, _ = sent(signal.SIGTERM if peers is None else None, 61.0 if peers else 0.0,
                     lambda t: None)
    _, stopped = sent(mine, 0.0, lambda t: t.copy_(torch.maximum(t, theirs)))
    assert stopped == stopped_by


@pytest.mark.parametrize("first,second,aborts", [
    (signal.SIGINT, signal.SIGINT, True), (signal.SIGTERM, signal.SIGINT, True),
    (signal.SIGINT, signal.SIGTERM, True),  # torchrun's launcher passes a second Ctrl-C so
    (signal.SIGTERM, signal.SIGTERM, False)])  # the scheduler's and the launcher's SIGTERM
def test_a_second_ctrl_c_aborts(first, second, aborts):
    stop = interrupt.StopSignal(announce=False)
    stop._handle(first, None)
    if aborts:
        with pytest.raises(KeyboardInterrupt):
            stop._handle(second, None)
    else:
        stop._handle(second, None)
        assert stop.signum == second


@pytest.mark.parametrize("last,promise", [
    (None, "finishing this step and saving a checkpoint (Ctrl-C again to abort)"),
    (lambda: 8, "finishing this step, then saving a checkpoint if no rank has left the run "
                "(else the latest stays step 8's; Ctrl-C again to abort)"),
    (lambda: -1, "finishing this step, then saving a checkpoint if no rank has left the run "
                 "(else there is none yet; Ctrl-C again to abort)")])
def test_a_signal_promises_a_checkpoint_only_where_it_can_be_kept(capsys, last, promise):
    """A rank of several saves with the others: torchrun's SIGTERM after a peer's kill -9
    reaches a rank that cannot, and must not have been told it would."""
    stop = interrupt.StopSignal(announce=True, last_checkpoint=last)
    stop._handle(signal.SIGTERM, None)
    assert capsys.readouterr().err == f"\nSIGTERM: {promise}\n"


def test_early_stopping_keeps_the_best_weights(tmp_path, tiny):
    scores = iter([0.1, 0.5, 0.4, 0.3, 0.2, 0.1])
    snapshots = {}

    def evaluate(model):
        snapshots[len(snapshots) + 1] = tiny.params(model)
        return {"dev_accuracy": next(scores)}

    model = tiny.model()
    cfg = TrainConfig(max_steps=100, lr=1e-3, eval_every=2, log_every=2, best_metric="dev_accuracy",
                      best_mode="max", patience=2)
    result = train(model, objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   evaluate=evaluate, save=tiny.no_save, show_progress=False)
    assert result.stopped_by == "early_stop" and result.step == 8
    assert result.best_value == 0.5 and result.best_step == 4
    for k, v in snapshots[2].items():  # the model handed back is the step-4 model
        assert torch.equal(model.state_dict()[k], v), k


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to "
                                                           "allocate 2.00 GiB"), MemoryError()])
def test_out_of_memory_is_one_clear_line_and_leaves_nothing(tmp_path, error, tiny):
    def loss_fn(model, batch):
        raise error

    with pytest.raises(UserError, match="out of memory for a batch of 8 x 16 tokens: lower"):
        train(tiny.model(), loss_fn, tiny.FakeBatches(), TrainConfig(max_steps=5), tmp_path / "run",
              show_progress=False)
    assert not (tmp_path / "run").exists()


def test_a_real_cpu_allocation_failure_is_one_clear_line(tmp_path, tiny):
    """torch's CPU allocator raises a plain RuntimeError; it is still out of memory."""
    def loss_fn(model, batch):
        torch.empty(10 ** 14, dtype=torch.uint8)  # 100 TB: refused at once

    with pytest.raises(UserError, match="out of memory for a batch of 8 x 16 tokens"):
        train(tiny.model(), loss_fn, tiny.FakeBatches(), TrainConfig(max_steps=5), tmp_path / "run",
              show_progress=False)


def test_other_runtime_errors_are_not_taken_for_out_of_memory(tmp_path, tiny):
    def loss_fn(model, batch):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        train(tiny.model(), loss_fn, tiny.FakeBatches(), TrainConfig(max_steps=5), tmp_path / "run",
              show_progress=False)


def test_empty_data_is_refused(tmp_path, tiny):
    with pytest.raises(UserError, match="no batches"):
        train(tiny.model(), objectives.mlm_loss, [], TrainConfig(max_steps=5), tmp_path / "r",
              show_progress=False)


def test_finite_batches_are_iterated_again_as_epochs(tmp_path, tiny):
    data = [tiny.batch(torch.Generator().manual_seed(i), 4) for i in range(3)]
    result = train(tiny.model(), objectives.mlm_loss, data, TrainConfig(max_steps=7),
                   tmp_path / "r", save=tiny.no_save, show_progress=False)
    assert result.step == 7


# Speed options give the plain path's results ---------------------------------------------------

def _run(tiny, tmp_path, name, device="cpu", **cfg_changes):
    model = tiny.model()
    cfg = TrainConfig(max_steps=4, lr=1e-3, warmup_steps=0, log_every=4).replace(**cfg_changes)
    result = train(model, objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / name,
                   save=tiny.no_save, show_progress=False, device=device)
    return tiny.params(model), result


def test_fused_adamw_equals_foreach(tmp_path, monkeypatch, tiny):
    import bertkit.training.loop as train_module

    fused, _ = _run(tiny, tmp_path, "fused")
    plain_adamw = torch.optim.AdamW

    def no_fused(groups, fused=False, **kw):
        return plain_adamw(groups, foreach=False, **kw)

    monkeypatch.setattr(train_module, "make_optimizer", lambda g, cfg, dev: no_fused(
        g, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay))
    plain, _ = _run(tiny, tmp_path, "plain")
    for k in fused:
        torch.testing.assert_close(fused[k], plain[k], atol=1e-6, rtol=1e-5)


def test_bf16_autocast_tracks_fp32(tmp_path, tiny):
    fp32, r32 = _run(tiny, tmp_path, "fp32")
    bf16, r16 = _run(tiny, tmp_path, "bf16", precision="bf16")
    assert r16.train_metrics["loss"] == pytest.approx(r32.train_metrics["loss"], rel=2e-2)
    start = tiny.params(tiny.model())
    for k in fp32:  # the updates agree in direction and size to bf16's precision
        d32, d16 = fp32[k] - start[k], bf16[k] - start[k]
        if d32.norm() > 0:
            assert (d32 - d16).norm() <= 0.1 * d32.norm(), k


@pytest.mark.skipif(not os.environ.get("BERTKIT_TEST_COMPILE"),
                    reason="torch.compile takes a minute on CPU; set BERTKIT_TEST_COMPILE=1")
def test_compile_equals_eager(tmp_path, tiny):
    eager, _ = _run(tiny, tmp_path, "eager")
    compiled, _ = _run(tiny, tmp_path, "compiled", compile=True)
    for k in eager:
        torch.testing.assert_close(eager[k], compiled[k], atol=1e-5, rtol=1e-4)


@pytest.mark.gpu
def test_on_a_gpu_compile_equals_eager(tmp_path, tiny):
    """What `pretrain` runs on a GPU by default (compiled) trains as the eager model does."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cuda = torch.device("cuda")
    eager, _ = _run(tiny, tmp_path, "eager", device=cuda)
    compiled, _ = _run(tiny, tmp_path, "compiled", device=cuda, compile=True)
    for k in eager:
        torch.testing.assert_close(eager[k], compiled[k], atol=1e-5, rtol=1e-4)


def test_without_matplotlib_a_run_skips_its_loss_plot_with_one_warning(tmp_path, tiny, capsys,
                                                                       no_matplotlib):
    cfg = TrainConfig(max_steps=4, lr=1e-3, warmup_steps=1, log_every=2)
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   target_count=objectives.target_count("mlm"), show_progress=False)
    assert result.step == 4
    assert not (tmp_path / "run/loss.png").exists()
    assert (tmp_path / "run/metrics.jsonl").is_file()
    assert ("warning: matplotlib not installed (pip install 'bertkit[plot]', or pip install -e "
            "'.[plot]' in a checkout); skipping loss.png" in capsys.readouterr().err.splitlines())


# A finished run can be extended -------------------------------------------------------------------

def test_a_finished_run_leaves_a_checkpoint_and_extends_to_more_steps(tmp_path, tiny):
    """No --save-every: the run still ends with a checkpoint; resume with a larger max_steps
    does the steps left, and a constant schedule makes 4 + 2 steps equal 6 in one go."""
    cfg = TrainConfig(max_steps=4, lr=1e-3, warmup_steps=0, schedule="constant", log_every=2)
    model = tiny.model()
    first = train(model, objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "ext",
                  save=tiny.no_save, show_progress=False)
    assert first.step == 4
    assert [p.name for p in (tmp_path / "ext/checkpoints").glob("step-*")] == ["step-00000004"]
    after_four = tiny.params(model)
    with pytest.raises(UserError, match="extended by --resume with a larger --max-steps"):
        train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "ext",
              save=tiny.no_save, show_progress=False)

    extended_model = tiny.model()
    extended = train(extended_model, objectives.mlm_loss, tiny.FakeBatches(),
                     cfg.replace(max_steps=6, resume=True), tmp_path / "ext",
                     save=tiny.no_save, show_progress=False)
    assert (extended.step, extended.stopped_by) == (6, "max_steps")
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "ext/metrics.jsonl").read_text().splitlines()]
    assert steps == [2, 4, 6]  # two more steps, logged once
    whole_model = tiny.model()
    train(whole_model, objectives.mlm_loss, tiny.FakeBatches(), cfg.replace(max_steps=6),
          tmp_path / "whole", save=tiny.no_save, show_progress=False)
    extended_params, whole = tiny.params(extended_model), tiny.params(whole_model)
    assert any(not torch.equal(extended_params[k], after_four[k]) for k in after_four)
    for k in whole:
        assert torch.equal(extended_params[k], whole[k]), k


# What a run records -------------------------------------------------------------------------------

def test_settings_are_written_as_training_args_json(tmp_path, tiny):
    from bertkit.training.settings import run_settings, settings_block

    cfg = TrainConfig(max_steps=2, lr=1e-3, precision="auto")
    record = run_settings({"options": cfg}, device="cpu", precision="auto",
                          command="bertkit x --lr 0.001")
    block = settings_block(record)
    assert block.startswith("settings (bertkit ") and "lr=0.001" in block
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "r",
          save=tiny.no_save, show_progress=False, settings=record)
    written = json.loads((tmp_path / "r/training_args.json").read_text())
    assert written["command"] == "bertkit x --lr 0.001"
    assert written["options"]["lr"] == 1e-3 and written["options"]["betas"] == [0.9, 0.999]
    env = written["environment"]
    assert env["precision"] in ("fp32", "bf16")  # "auto" as the loop resolved it
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    assert {"bertkit", "python", "cpu"} <= env.keys()


def test_tensorboard_scalars(tmp_path, tiny):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    held = [tiny.batch(torch.Generator().manual_seed(99), 8)]
    cfg = TrainConfig(max_steps=4, lr=1e-3, log_every=2, eval_every=2, tensorboard=True)
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "tb",
          evaluate=lambda m: objectives.evaluate_lm(m, held, "mlm"), save=tiny.no_save,
          show_progress=False)
    events = EventAccumulator(str(tmp_path / "tb/tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/mlm_loss", "train/learning_rate", "train/tokens_per_second",
            "eval/loss", "eval/accuracy", "eval/perplexity"} <= tags, tags
    assert [e.step for e in events.Scalars("train/loss")] == [2, 4]
    assert [e.step for e in events.Scalars("eval/loss")] == [2, 4]


def test_tensorboard_missing_is_one_line_naming_the_package(tmp_path, tiny, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(UserError, match="pip install tensorboard"):
        train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(),
              TrainConfig(max_steps=2, tensorboard=True), tmp_path / "none",
              save=tiny.no_save, show_progress=False)
    assert not (tmp_path / "none").exists()


def test_a_run_asked_for_bf16_on_a_cpu_that_emulates_it_warns_first(tmp_path, tiny, monkeypatch,
                                                                     capsys):
    from bertkit import runtime

    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": 0.01)
    _run(tiny, tmp_path, "slow", precision="bf16", max_steps=1)
    err = capsys.readouterr().err
    assert err.count("warning: bf16 matmul runs at 0.01x fp32") == 1 and "crawl" in err
    monkeypatch.setattr(runtime, "bf16_speedup", lambda device="cpu": 2.0)
    _run(tiny, tmp_path, "fast", precision="bf16", max_steps=1)
    assert "crawl" not in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat")
def test_a_run_on_cores_another_process_keeps_busy_says_so_once(tmp_path, tiny, capsys,
                                                                  monkeypatch):
    import functools
    import subprocess
    import sys
    import time

    from bertkit.training import loop
    from bertkit.runtime import SharedCores

    class SlowBatches(tiny.FakeBatches):  # steps that leave the cores to the other process
        def __iter__(self):
            for batch in super().__iter__():
                time.sleep(0.03)
                yield batch

    # measured every 0.1 s (a log window, 2 steps, takes about that): 16 steps make 4 or more
    # measurements that would each warn, of which only the first may
    monkeypatch.setattr(loop, "SharedCores", functools.partial(SharedCores, every=0.1))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        train(tiny.model(), objectives.mlm_loss, SlowBatches(),
              TrainConfig(max_steps=16, lr=1e-3, log_every=2), tmp_path / "run",
              save=tiny.no_save, show_progress=False)
    finally:
        child.kill()
        child.wait()
        torch.set_num_threads(threads)
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning: other processes kept")]
    assert len(warnings) == 1 and "OMP_NUM_THREADS=1" in warnings[0], warnings

