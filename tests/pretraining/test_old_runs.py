"""Checkpoints written by an earlier bertkit still resume: the run directories in
tests/data/old_pretrain_runs were written before pretraining was cut into one module per
objective (bench/objective_identity.py --old-runs made them), and a run of today continues
each (its fingerprint, its model's names and shapes, the span head, ELECTRA's generator)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main

pytestmark = pytest.mark.slow  # two short pretraining runs

OLD = Path(__file__).resolve().parents[1] / "data" / "old_pretrain_runs"


@pytest.mark.parametrize("objective,init", [("span", "bert-16"), ("electra", "electra-16")])
def test_a_checkpoint_written_before_the_objectives_were_modules_resumes(
        tmp_path, capsys, objective, init):
    root = tmp_path / "old"
    shutil.copytree(OLD, root)
    out = root / f"run-{objective}"
    before = load_file(str(out / "checkpoints" / "step-00000002" / "model.safetensors"))
    assert main(["pretrain", "--data", str(root / "data"), "--out", str(out), "--init",
                 str(root / init), "--objective", objective, "--seq-len", "32",
                 "--batch-size", "4", "--early-fraction", "0", "--max-steps", "4",
                 "--save-every", "2", "--eval-batches", "1", "--precision", "fp32",
                 "--device", "cpu", "--seed", "1", "--resume"]) == 0
    assert "resum" in capsys.readouterr().err.lower()
    after = load_file(str(out / "checkpoints" / "step-00000004" / "model.safetensors"))
    assert after.keys() == before.keys()
    assert any(not torch.equal(after[k], before[k]) for k in before)  # it trained on
    steps = [json.loads(line).get("step") for line in
             (out / "metrics.jsonl").read_text().splitlines()]
    assert max(s for s in steps if s is not None) == 4
    assert (out / "config.json").is_file()
    assert (out / "sbo.safetensors").is_file() == (objective == "span")
    assert (out / "generator" / "config.json").is_file() == (objective == "electra")
