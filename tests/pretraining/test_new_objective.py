"""Adding a pretraining objective with a setting of its own is one module and its line in
OBJECTIVES: the class below is the whole of it, and `pretrain` offers its flag under its own
heading, refuses it for another objective, parses and records it, trains and evaluates with
it, saves the model and resumes only with the same setting, with nothing else changed."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import pytest

import bertkit.pretraining.objectives
from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.model.hub import load_pretraining_model
from bertkit.pretraining.evaluation import heldout_scores
from bertkit.pretraining.objectives import OBJECTIVE_TYPES, MaskedLM

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@dataclass
class LoudSettings:
    loudness: float = 1.0
    """How much the loss is scaled by."""

    def __post_init__(self) -> None:
        if not self.loudness > 0:
            raise UserError(f"--loudness must be positive, got {self.loudness}")


class Loud(MaskedLM):
    """The masked language model, its loss scaled (an objective of the test's own)."""
    name = "loud"
    summary = "the masked language model, louder"
    Settings = LoudSettings

    def loss(self, model, batch):
        loss, metrics = super().loss(model, batch)
        return self.settings.loudness * loss, metrics


@pytest.fixture
def with_loud(monkeypatch):
    """OBJECTIVES with the new objective's line: the one change outside its module."""
    monkeypatch.setattr(bertkit.pretraining.objectives, "OBJECTIVE_TYPES",
                        (*OBJECTIVE_TYPES, Loud))


def _help(capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["pretrain", "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def _pretrain(data, out, *more) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(out), "--preset", "tiny",
                 "--seq-len", "32", "--batch-size", "8", "--early-fraction", "0",
                 "--eval-batches", "2", "--eval-every", "2", "--log-every", "1",
                 "--precision", "fp32", *more])


def test_a_new_objective_gets_its_flag_and_trains_evaluates_saves_and_resumes_with_it(
        with_loud, prepared, tmp_path, capsys):
    text = _help(capsys)
    assert "{mlm,mlm+nsp,span,clm,electra,distill,loud}" in text
    assert ("--objective loud: --loudness LOUDNESS How much the loss is scaled by. "
            "(default: 1.0)") in text
    assert "--objective electra: --generator-fraction" in text  # each its own heading

    assert _pretrain(prepared, tmp_path / "no", "--loudness", "2", "--max-steps", "2") == 2
    assert capsys.readouterr().err == ("error: --loudness is a setting of --objective loud, "
                                       "not of mlm\n")
    assert not (tmp_path / "no").exists()

    out = tmp_path / "loud"
    assert _pretrain(prepared, out, "--objective", "loud", "--loudness", "3.5",
                     "--max-steps", "2") == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "mlm_loss" in r and "loss" in r]
    assert trained and all(r["loss"] == pytest.approx(3.5 * r["mlm_loss"], rel=1e-4)
                           for r in trained)
    assert any("eval_accuracy" in r for r in rows)  # evaluated as a masked LM
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["objective"] == "loud"
    assert record["options"]["loud"] == {"loudness": 3.5}
    assert "--loudness 3.5" in record["command"]
    assert shlex.split(record["command"])[1] == "pretrain"
    model = load_pretraining_model(out)  # saved as the masked LM it is
    figures = heldout_scores(model, prepared, objective=Loud(LoudSettings(3.5)), seq_len=32,
                             batch_size=8, eval_batches=2)  # `evaluate`'s held-out figures
    assert figures["tokens"] > 0 and 0 <= figures["accuracy"] <= 1

    assert _pretrain(prepared, out, "--objective", "loud", "--loudness", "2",
                     "--max-steps", "4", "--resume") == 2
    assert "loudness" in capsys.readouterr().err  # another setting: another run
    assert _pretrain(prepared, out, "--objective", "loud", "--loudness", "3.5",
                     "--max-steps", "4", "--resume") == 0
    steps = [json.loads(line).get("step") for line in
             (out / "metrics.jsonl").read_text().splitlines()]
    assert max(s for s in steps if s is not None) == 4


def test_a_config_file_sets_the_new_setting_in_its_table(with_loud, prepared, tmp_path,
                                                        capsys):
    config = tmp_path / "run.toml"
    config.write_text('objective = "loud"\n[loud]\nloudness = 0\n', encoding="utf-8")
    assert _pretrain(prepared, tmp_path / "o", "--config", str(config),
                     "--max-steps", "1") == 2
    assert capsys.readouterr().err == "error: --loudness must be positive, got 0.0\n"
