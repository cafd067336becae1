"""`pretrain --batch-size auto`: measured on a GPU (here on the CPU, the measure made up),
recorded as the run's batch and kept by a resume; 16 elsewhere; a given batch measures
nothing."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from bertkit.cli.main import main
from bertkit.cli.options import command_line
from bertkit.cli.pretraining import PRETRAIN
from bertkit.peaks import published_peak
from bertkit.pretraining import batch_choice, plan
from bertkit.pretraining.options import PretrainOptions

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--preset", "tiny", "--seq-len", "32", "--log-every", "1", "--eval-batches", "1",
        "--precision", "fp32"]


def _pretrain(prepared, out, *more) -> int:
    return main(["pretrain", "--data", str(prepared), "--out", str(out), *TINY, *more])


def _recorded(out) -> dict:
    return json.loads((out / "training_args.json").read_text())


@pytest.fixture
def no_measure(monkeypatch):
    monkeypatch.setattr(batch_choice, "timed_steps",
                        lambda *a, **k: pytest.fail("the batch was measured"))


@pytest.fixture
def gpu_like(monkeypatch):
    """This device measures its batch, as a CUDA GPU does."""
    monkeypatch.setattr(plan, "measures_batch", lambda device: True)


def test_auto_off_a_gpu_is_16_and_measures_nothing(prepared, tmp_path, no_measure):
    out = tmp_path / "run"
    assert _pretrain(prepared, out, "--max-steps", "1") == 0
    assert _recorded(out)["options"]["batch_size"] == 16
    assert "--batch-size 16" in _recorded(out)["command"]


def test_a_given_batch_measures_nothing_even_where_auto_would(prepared, tmp_path, no_measure,
                                                             gpu_like):
    out = tmp_path / "run"
    assert _pretrain(prepared, out, "--max-steps", "1", "--batch-size", "8") == 0
    assert _recorded(out)["options"]["batch_size"] == 8


def test_auto_measures_records_the_batch_and_a_resume_keeps_it(prepared, tmp_path, monkeypatch,
                                                               gpu_like, capsys):
    rates = {16: 1000.0, 32: 3000.0, 64: 3050.0}
    asked = []

    def timed(model, loss_fn, batches_of, cfg, device):
        assert cfg.precision == "fp32"
        assert next(iter(batches_of(32)))["input_ids"].shape == (32, 32)  # the run's rows

        def measure(size):
            asked.append(size)
            return rates[size]
        return measure

    monkeypatch.setattr(batch_choice, "timed_steps", timed)
    out = tmp_path / "run"
    assert _pretrain(prepared, out, "--max-steps", "1") == 0
    assert asked == [16, 16, 32, 64]
    err = capsys.readouterr().err
    assert ("batch 32 sequences, measured before training (16: 1,000 tokens/s, 32: 3,000 "
            "tokens/s, 64: 3,050 tokens/s): 64 was not 5% faster") in err
    assert "32 x 32 tokens per batch" in err
    assert _recorded(out)["options"]["batch_size"] == 32
    assert "--batch-size 32" in _recorded(out)["command"]

    monkeypatch.setattr(batch_choice, "timed_steps",
                        lambda *a, **k: pytest.fail("a resume measured again"))
    assert _pretrain(prepared, out, "--max-steps", "2", "--resume") == 0
    assert "32 x 32 tokens per batch" in capsys.readouterr().err
    assert _recorded(out)["options"]["batch_size"] == 32
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in steps if r["split"] == "train"] == [32 * 32, 2 * 32 * 32]
    # another batch given to the resume is another run's: refused in one line
    assert _pretrain(prepared, out, "--max-steps", "3", "--resume", "--batch-size", "16") == 2


def _read(*argv) -> PretrainOptions:
    parser = argparse.ArgumentParser(prog="pretrain")
    PRETRAIN.add_flags(parser)
    return PRETRAIN.read(parser.parse_args(list(argv)))[0]


def test_auto_is_spelled_on_the_command_line_in_config_files_and_the_help(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('data = "d"\nout = "o"\nbatch_size = "auto"\n[train]\nmax_steps = 1\n',
                      encoding="utf-8")
    assert _read("--config", str(config)).batch_size is None
    assert _read("--data", "d", "--out", "o", "--batch-size", "auto",
                 "--max-steps", "1").batch_size is None
    assert _read("--data", "d", "--out", "o", "--batch-size", "64",
                 "--max-steps", "1").batch_size == 64
    assert "--batch-size auto" in command_line(PRETRAIN, [PretrainOptions(data="d", out="o")])
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    assert "(default: auto)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_auto_measures_the_batch_and_the_mfu_is_against_the_specification(
        prepared, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(prepared), "--out", str(out), "--preset", "tiny",
                 "--seq-len", "32", "--max-steps", "2", "--log-every", "1", "--eval-batches",
                 "1", "--device", "cuda", "--no-compile"]) == 0
    err = capsys.readouterr().err
    size = _recorded(out)["options"]["batch_size"]
    assert f"batch {size} sequences, measured before training (16: " in err
    assert size in (16, 32, 64, 128, 256, 512)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["mfu"] < 1 for r in records if r["split"] == "train")
    if published_peak(torch.cuda.get_device_name()) is not None:
        assert "(specification); " in err and "matmul rate measured here" in err
