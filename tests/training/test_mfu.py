"""Model FLOP utilisation in the training loop: each log window's figure is its tokens/s times
the FLOPs per token over the device's rate, written into metrics.jsonl and shown; the rate is
the published peak where the device has one, else the matmul rate measured at start."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.config import TrainConfig
from bertkit.model.flops import model_flops_per_token
from bertkit.model.heads import IGNORE_INDEX
from bertkit.pretraining import objectives
from bertkit.pretraining.objective import lm_batch_flops
from bertkit.pretraining.objectives import objective_named
from bertkit.training import mfu
from bertkit.training.loop import train
from bertkit.training.mfu import FlopMeter, ceiling, flop_meter
from bertkit.training.runlog import progress_note

pytestmark = pytest.mark.usefixtures("one_thread")

MEASURED_GFLOPS = 40.0
FLOPS_PER_TOKEN = 3.0e6


@pytest.fixture
def measured(monkeypatch):
    """The matmul rate fixed, so that the figures are exact: no timing in the test."""
    monkeypatch.setattr(mfu, "measured_matmul", lambda device, precision: MEASURED_GFLOPS)


def test_a_gpu_in_the_table_is_set_against_its_published_peak_and_others_the_measured_rate():
    h200 = ceiling("NVIDIA H200", "bf16", 700.0)
    assert h200.published and h200.flops_per_second == 989e12
    words = h200.words(494.5e12)
    assert "50.0% MFU of the NVIDIA H200's 989 TFLOP/s bf16" in words
    assert "of the 700 GFLOP/s bf16 matmul rate measured here" in words  # both rates
    cpu = ceiling(None, "bf16", 80.0)
    assert not cpu.published and cpu.flops_per_second == 80e9
    assert cpu.words(40e9) == "50.0% of the 80 GFLOP/s bf16 matmul rate measured here"
    unknown = ceiling("NVIDIA GeForce RTX 9090", "bf16", 300.0)
    assert not unknown.published and unknown.flops_per_second == 300e9
    v100_bf16 = ceiling("Tesla V100-SXM2-16GB", "bf16", 20.0)  # no bf16 in its table row
    assert not v100_bf16.published and v100_bf16.flops_per_second == 20e9
    assert ceiling(None, "fp32", None) is None


def test_a_devices_rate_is_found_by_the_name_torch_gives_it(measured, monkeypatch):
    cpu = mfu.device_ceiling(torch.device("cpu"), "bf16")  # no CPU publishes a peak here
    assert not cpu.published and cpu.flops_per_second == MEASURED_GFLOPS * 1e9
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    gpu = mfu.device_ceiling(torch.device("cuda", 0), "bf16")
    assert gpu.published and gpu.flops_per_second == 989e12
    assert gpu.measured_gflops == MEASURED_GFLOPS  # the measured rate said beside it
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA B999")
    other = mfu.device_ceiling(torch.device("cuda", 0), "bf16")
    assert not other.published and other.flops_per_second == MEASURED_GFLOPS * 1e9


def test_the_matmul_rate_is_measured_once_a_process_for_half_a_second(monkeypatch):
    calls = []

    def limit(dtype, device, seconds):
        calls.append((dtype, device, seconds))
        return 12.5
    monkeypatch.setattr(mfu, "matmul_limit", limit)
    mfu.measured_matmul.cache_clear()
    try:
        assert mfu.measured_matmul("cpu", "bf16") == mfu.measured_matmul("cpu", "bf16") == 12.5
        assert calls == [(torch.bfloat16, "cpu", 0.5)]
    finally:
        mfu.measured_matmul.cache_clear()  # no made-up rate left for the next test


def test_the_meter_is_the_window_flops_over_its_seconds_and_the_rate_per_rank():
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "num_tokens": 8}
    meter = FlopMeter(lambda b: b["num_tokens"] * 1e6, ceiling(None, "fp32", 1.0), world=2)
    meter.count([batch, batch])  # 16 tokens here, 32 over the two ranks
    assert meter.window(2.0) == pytest.approx(32e6 / 2.0 / (2 * 1e9))
    meter.count([batch])
    assert meter.window(1.0) == pytest.approx(16e6 / 1.0 / 2e9)
    assert meter.run_mfu == pytest.approx(48e6 / 3.0 / 2e9)
    assert meter.run_words() == f"{48e6 / 3.0 / 2 / 1e9:.1%} of the 1 GFLOP/s fp32 matmul " \
                                f"rate measured here"


def test_each_log_window_writes_tokens_per_second_times_flops_per_token_over_the_rate(
        tiny, tmp_path, measured):
    cfg = TrainConfig(max_steps=6, log_every=2, precision="fp32", warmup_steps=0)

    def flops(batch):
        return batch["num_tokens"] * FLOPS_PER_TOKEN

    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   save=tiny.no_save, show_progress=False, flops=flops)
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text(
        ).splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [2, 4, 6]
    for r in train_records:  # by hand: tokens/s x FLOPs per token / the measured rate
        assert r["mfu"] == pytest.approx(
            r["tokens_per_second"] * FLOPS_PER_TOKEN / (MEASURED_GFLOPS * 1e9), rel=1e-9)
    summary = result.summary()
    assert summary["train_mfu"] == pytest.approx(
        round(result.tokens * FLOPS_PER_TOKEN / result.train_seconds / 40e9, 4), abs=2e-4)
    assert summary["train_utilisation"].endswith(
        "of the 40 GFLOP/s fp32 matmul rate measured here")


def test_without_declared_flops_there_is_no_mfu_and_nothing_is_measured(tiny, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(mfu, "measured_matmul", lambda *a: pytest.fail("measured"))
    cfg = TrainConfig(max_steps=2, log_every=1, precision="fp32")
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   save=tiny.no_save, show_progress=False)
    assert all("mfu" not in json.loads(line)
               for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines())
    assert "train_mfu" not in result.summary()
    assert flop_meter(None, torch.device("cpu"), "fp32", 1) is None


def test_the_progress_shows_the_windows_mfu_beside_its_tokens_per_second():
    note = progress_note(100, {"loss": 2.0, "learning_rate": 1e-3, "tokens_per_second": 1234.0,
                               "mfu": 0.3141}, logged_at=4)
    assert note.endswith("1,234 tokens/s, MFU 31.4%")
    assert "mfu" not in note


def test_a_pretraining_batchs_flops_are_its_tokens_times_the_per_token_count(tiny):
    cfg = tiny.config(architecture="modern")
    g = torch.Generator().manual_seed(0)
    batch = tiny.batch(g, 4)
    batch["attention_mask"][1, -3:] = 0  # padding: not a token the model is credited for
    batch["num_tokens"] = int(batch["attention_mask"].sum())
    predicted = int((batch["mlm_labels"] != IGNORE_INDEX).sum())
    tokens, T = batch["num_tokens"], batch["input_ids"].shape[1]
    H, I, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.vocab_size
    # by hand: per layer q/k/v + attention scores, output projection + gated FFN (modern);
    # the last block's projection and FFN and the head only at the predicted share
    f = predicted / tokens
    per_layer = 2 * 3 * H * H + 4 * T * H + 2 * (H * H + 3 * H * I)
    forward = L * per_layer - (1 - f) * 2 * (H * H + 3 * H * I) + f * (2 * H * H + 2 * H * V)
    expected = tokens * 3 * forward
    assert cfg.architecture == "modern"
    assert lm_batch_flops(cfg, "mlm_labels", batch) == pytest.approx(expected, rel=1e-12)
    assert lm_batch_flops(cfg, "mlm_labels", batch) == pytest.approx(
        tokens * model_flops_per_token(cfg, T, f), rel=1e-12)
    assert objective_named("mlm").flops(cfg)(batch) == lm_batch_flops(cfg, "mlm_labels", batch)
    clm = objective_named("clm").flops(cfg)(batch)  # every next token predicted: more head
    assert clm > lm_batch_flops(cfg, "mlm_labels", batch)


def test_objectives_that_run_more_than_the_model_count_no_flops(tiny):
    assert objective_named("electra").flops(tiny.config()) is None
    assert objective_named("distill").flops(tiny.config()) is None


def test_pretrain_writes_mfu_into_its_metrics_and_says_it_at_the_end(prepared, tmp_path,
                                                                       measured, capsys):
    from bertkit.cli.main import main

    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(prepared), "--out", str(out), "--preset", "tiny",
                 "--seq-len", "32", "--batch-size", "8", "--max-steps", "2", "--log-every",
                 "1", "--eval-batches", "1", "--precision", "fp32"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert len(train_records) == 2 and all(0 < r["mfu"] < 1 for r in train_records)
    captured = capsys.readouterr()
    assert "model FLOP utilisation: " in captured.err
    assert "of the 40 GFLOP/s fp32 matmul rate measured here" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert 0 < summary["train_mfu"] < 1
