"""The shared training loop: schedule, parameter groups, accumulation, logs, outputs, signals,
early stopping, out-of-memory, and that each speed option matches the plain path."""
from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch

from bertkit.pretraining import objectives
from bertkit.config import EncoderConfig, TrainConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.training.loop import default_param_groups, lr_factor, train
from bertkit.training.runlog import plot_loss

V, T = 48, 16


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from more threads, and lose a lot on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**kw) -> EncoderConfig:
    return EncoderConfig(**{**dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2,
                                   intermediate_size=64, max_positions=T, hidden_dropout=0.0,
                                   attention_dropout=0.0), **kw})


def tiny_model(seed: int = 0, **kw) -> PretrainingModel:
    cfg = tiny_config(**kw)
    torch.manual_seed(seed)
    model = PretrainingModel(cfg)
    init_weights(model, cfg)
    return model


def make_batch(g: torch.Generator, B: int) -> dict:
    """The token at position t is 5 + t, or 5 + t + 1 in a random half of the sequences, with
    ~15% masked: the position and the neighbours give the answer, learnable in a few steps."""
    shift = torch.randint(0, 2, (B, 1), generator=g)
    ids = 5 + (torch.arange(T) + shift) % (V - 5)  # [B, T]
    selected = torch.rand(B * T, generator=g) < 0.15
    selected[0] = True  # never an empty selection
    positions = selected.nonzero().squeeze(1)
    labels = ids.reshape(-1)[positions].clone()
    inputs = ids.reshape(-1).clone()
    inputs[positions] = 4
    inputs = inputs.reshape(B, T)
    # Padding entries, as the data side adds to reach a fixed count.
    positions = torch.cat([positions, torch.zeros(3, dtype=torch.long)])
    labels = torch.cat([labels, torch.full((3,), -100)])
    return {"input_ids": inputs, "token_type_ids": torch.zeros_like(inputs),
            "attention_mask": torch.ones_like(inputs), "mlm_positions": positions,
            "mlm_labels": labels, "nsp_labels": torch.randint(0, 2, (B,), generator=g),
            "span_left": (positions - 1).clamp(min=0),
            "span_right": (positions + 1).clamp(max=B * T - 1),
            "span_offset": torch.zeros_like(positions),
            "clm_labels": torch.cat([ids[:, 1:], torch.full((B, 1), -100)], 1),
            "num_tokens": B * T}


def concat(a: dict, b: dict) -> dict:
    """Two batches as one: b's flat positions shift by a's B*T."""
    shift = a["input_ids"].numel()
    out = {}
    for k in a:
        if k == "num_tokens":
            out[k] = a[k] + b[k]
        elif k in ("mlm_positions", "span_left", "span_right"):
            out[k] = torch.cat([a[k], b[k] + shift])
        else:
            out[k] = torch.cat([a[k], b[k]])
    return out


class FakeBatches:
    """Endless deterministic batches with the PretrainingBatches interface (state included)."""

    def __init__(self, B: int = 8, seed: int = 0, limit: int | None = None):
        self.B, self.g, self.n, self.limit = B, torch.Generator().manual_seed(seed), 0, limit

    def state_dict(self) -> dict:
        return {"generator": self.g.get_state(), "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.g.set_state(state["generator"])
        self.n = state["n"]

    def __iter__(self):
        while self.limit is None or self.n < self.limit:
            self.n += 1
            yield make_batch(self.g, self.B)


def no_save(model, path):
    return None


def params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


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


def test_no_weight_decay_on_biases_and_layernorm():
    model = tiny_model()
    decay, no_decay = default_param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    assert all(names[id(p)].endswith("bias") or ".norm." in names[id(p)]
               or names[id(p)].endswith("norm.weight") for p in no_decay["params"])
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert all(p.ndim == 2 for p in decay["params"])


# The loop end to end ------------------------------------------------------------------------------

def test_train_learns_and_writes_run_directory(tmp_path):
    from bertkit.model.hub import load_pretraining_model

    model = tiny_model()
    held = [make_batch(torch.Generator().manual_seed(99), 8) for _ in range(2)]
    cfg = TrainConfig(max_steps=40, lr=3e-3, warmup_steps=4, log_every=10, eval_every=20)
    result = train(model, objectives.mlm_loss, FakeBatches(), cfg, tmp_path / "run",
                   evaluate=lambda m: objectives.evaluate_lm(m, held, "mlm"),
                   target_count=objectives.target_count("mlm"), show_progress=False)
    assert result.step == 40 and result.stopped_by == "max_steps"
    assert result.tokens == 40 * 8 * T
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train_records] == [10, 20, 30, 40]
    assert [r["step"] for r in evals] == [20, 40]
    assert train_records[-1]["loss"] < train_records[0]["loss"] - 0.3
    assert evals[-1]["eval_ppl"] == pytest.approx(math.exp(evals[-1]["eval_loss"]), rel=1e-5)
    assert all(r["tokens_per_s"] > 0 and "mlm_acc" in r for r in train_records)
    assert (tmp_path / "run/loss.png").read_bytes()[:4] == b"\x89PNG"
    curves = plot_loss(tmp_path / "run/metrics.jsonl", tmp_path / "again.png")
    assert list(curves) == ["train loss", "eval_loss"]  # mlm: the loss is its LM part
    assert curves["train loss"] == ([10, 20, 30, 40], [r["loss"] for r in train_records])
    assert curves["eval_loss"] == ([20, 40], [r["eval_loss"] for r in evals])
    loaded = load_pretraining_model(tmp_path / "run")  # the final Hugging Face directory
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_grad_accumulation_equals_one_big_batch(tmp_path):
    g = torch.Generator().manual_seed(5)
    small = [make_batch(g, 4) for _ in range(6)]
    big = [concat(small[i], small[i + 1]) for i in range(0, 6, 2)]
    cfg = TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=1)
    results = []
    for batches, accum in ((big, 1), (small, 2)):
        model = tiny_model()
        train(model, objectives.mlm_loss, batches, cfg.replace(grad_accum=accum),
              tmp_path / f"a{accum}", save=no_save, show_progress=False,
              target_count=objectives.target_count("mlm"))
        results.append(params(model))
    for k in results[0]:
        torch.testing.assert_close(results[0][k], results[1][k], atol=1e-6, rtol=1e-5)


def test_sigterm_finishes_the_step_saves_and_stops(tmp_path):
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return objectives.mlm_loss(model, batch)

    result = train(tiny_model(), loss_fn, FakeBatches(), TrainConfig(max_steps=50, log_every=5),
                   tmp_path / "run", show_progress=False)
    assert result.stopped_by == "interrupted" and result.step == 3
    assert (tmp_path / "run/checkpoints/step-00000003/manifest.json").is_file()
    assert not (tmp_path / "run/model.safetensors").exists()  # no final model for a cut run
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or \
        signal.getsignal(signal.SIGTERM) != signal.SIG_IGN


def test_early_stopping_keeps_the_best_weights(tmp_path):
    scores = iter([0.1, 0.5, 0.4, 0.3, 0.2, 0.1])
    snapshots = {}

    def evaluate(model):
        snapshots[len(snapshots) + 1] = params(model)
        return {"dev_acc": next(scores)}

    model = tiny_model()
    cfg = TrainConfig(max_steps=100, lr=1e-3, eval_every=2, log_every=2, best_metric="dev_acc",
                      best_mode="max", patience=2)
    result = train(model, objectives.mlm_loss, FakeBatches(), cfg, tmp_path / "run",
                   evaluate=evaluate, save=no_save, show_progress=False)
    assert result.stopped_by == "early_stop" and result.step == 8
    assert result.best_value == 0.5 and result.best_step == 4
    for k, v in snapshots[2].items():  # the model handed back is the step-4 model
        assert torch.equal(model.state_dict()[k], v), k


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to "
                                                           "allocate 2.00 GiB"), MemoryError()])
def test_out_of_memory_is_one_clear_line_and_leaves_nothing(tmp_path, error):
    def loss_fn(model, batch):
        raise error

    with pytest.raises(UserError, match="out of memory for a batch of 8 x 16 tokens: lower"):
        train(tiny_model(), loss_fn, FakeBatches(), TrainConfig(max_steps=5), tmp_path / "run",
              show_progress=False)
    assert not (tmp_path / "run").exists()


def test_empty_data_is_refused(tmp_path):
    with pytest.raises(UserError, match="no batches"):
        train(tiny_model(), objectives.mlm_loss, [], TrainConfig(max_steps=5), tmp_path / "r",
              show_progress=False)


def test_finite_batches_are_iterated_again_as_epochs(tmp_path):
    data = [make_batch(torch.Generator().manual_seed(i), 4) for i in range(3)]
    result = train(tiny_model(), objectives.mlm_loss, data, TrainConfig(max_steps=7),
                   tmp_path / "r", save=no_save, show_progress=False)
    assert result.step == 7


# Speed options give the plain path's results ---------------------------------------------------

def _run(tmp_path, name, **cfg_changes):
    model = tiny_model()
    cfg = TrainConfig(max_steps=4, lr=1e-3, warmup_steps=0, log_every=4).replace(**cfg_changes)
    result = train(model, objectives.mlm_loss, FakeBatches(), cfg, tmp_path / name,
                   save=no_save, show_progress=False)
    return params(model), result


def test_fused_adamw_equals_foreach(tmp_path, monkeypatch):
    import bertkit.training.loop as train_module

    fused, _ = _run(tmp_path, "fused")
    plain_adamw = torch.optim.AdamW

    def no_fused(groups, fused=False, **kw):
        return plain_adamw(groups, foreach=False, **kw)

    monkeypatch.setattr(train_module, "make_optimizer", lambda g, cfg, dev: no_fused(
        g, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay))
    plain, _ = _run(tmp_path, "plain")
    for k in fused:
        torch.testing.assert_close(fused[k], plain[k], atol=1e-6, rtol=1e-5)


def test_bf16_autocast_tracks_fp32(tmp_path):
    fp32, r32 = _run(tmp_path, "fp32")
    bf16, r16 = _run(tmp_path, "bf16", precision="bf16")
    assert r16.train_metrics["loss"] == pytest.approx(r32.train_metrics["loss"], rel=2e-2)
    start = params(tiny_model())
    for k in fp32:  # the updates agree in direction and size to bf16's precision
        d32, d16 = fp32[k] - start[k], bf16[k] - start[k]
        if d32.norm() > 0:
            assert (d32 - d16).norm() <= 0.1 * d32.norm(), k


@pytest.mark.skipif(not os.environ.get("BERTKIT_TEST_COMPILE"),
                    reason="torch.compile takes a minute on CPU; set BERTKIT_TEST_COMPILE=1")
def test_compile_equals_eager(tmp_path):
    eager, _ = _run(tmp_path, "eager")
    compiled, _ = _run(tmp_path, "compiled", compile=True)
    for k in eager:
        torch.testing.assert_close(eager[k], compiled[k], atol=1e-5, rtol=1e-4)
