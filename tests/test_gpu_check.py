"""bench/gpu_check.sh, the GPU check, as its CPU dry run: every step runs at toy sizes on data
and a model made here, and the summary says so; bad options are one line."""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.sh"
WORDS = ("the a film story was good bad long short we they saw read it and but very quite "
         "river bank money water light dark house garden night morning").split()
STEPS = ["env", "tests", "pretrain-bert", "pretrain-bert-compiled", "pretrain-modern",
         "pretrain-modern-compiled", "recipe", "heldout", "finetune", "embed", "long"]
COMPILED = {"pretrain-bert-compiled", "pretrain-modern-compiled"}  # not in a dry run
# a dry run's pretrain-bert step runs both architectures' tables in one process
TOGETHER = {"pretrain-modern": "skipped: dry run: run in pretrain-bert's process"}


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def _data(root: Path) -> Path:
    """A folder laid out as ../shared/data: a gzipped corpus, four sentiment files."""
    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choices(WORDS, k=rng.randint(5, 16))) + "."  # noqa: E731
    (root / "corpus").mkdir(parents=True)
    with gzip.open(root / "corpus" / "english_books.txt.gz", "wt", encoding="utf-8") as f:
        for doc in range(40):
            f.write("\n".join(sentence() for _ in range(30)) + "\n\n")
    (root / "sentiment").mkdir()
    for name in ("movie.train", "movie.dev", "nyt.train", "nyt.dev"):
        rows = [{"text": sentence(), "label": rng.choice(["positive", "negative"])}
                for _ in range(80)]
        (root / "sentiment" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def _tiny_bert(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."]
                                              + WORDS) + "\n")
    cfg = EncoderConfig(vocab_size=6 + len(WORDS), hidden_size=32, num_layers=2, num_heads=4,
                        intermediate_size=64, max_positions=128)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(0))
    return hub.save_model(encoder, path / "bert",
                          tokenizer=Tokenizer.from_vocab(path / "vocab.txt"))


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_one_folder(tmp_path):
    out = tmp_path / "check"
    result = _run("--dry-run", "--out", str(out), "--data", str(_data(tmp_path / "data")),
                  "--minilm", str(_tiny_bert(tmp_path / "model")), "--budget", "900")
    summary = (out / "summary.md").read_text()
    assert result.returncode == 0, summary + result.stderr[-2000:]
    for n, step in enumerate(STEPS, 1):
        if step in COMPILED:
            assert f"| {step} | skipped: dry run" in summary
        elif step in TOGETHER:
            assert f"| {step} | {TOGETHER[step]} |" in summary
        else:
            assert f"| {step} | ok |" in summary
            assert (out / f"{n:02d}-{step}.log").is_file()
    assert "dry run on the CPU" in summary and "0 step(s) not ok" in summary
    speed = (out / "03-pretrain-bert.log").read_text()
    assert "bertkit" in speed and "transformers" in speed and "MFU" in speed
    tables = speed.split("model: tiny (modern)")  # bert's table, then modern's
    assert len(tables) == 2 and "model: tiny (bert)" in tables[0]
    for table in tables:
        assert "mlm       fp32  bertkit" in table and "mlm       fp32  transformers" in table
    assert speed.count("matmul limit: fp32") == 1  # measured once for both
    assert (out / "recipe" / "model.safetensors").is_file()
    heldout = (out / "08-heldout.log").read_text()
    assert "accuracy" in heldout and heldout.count("bertkit.cli evaluate") == 2
    long = (out / "11-long.log").read_text()
    assert "blocked" in long and "cosine to transformers" in long


def test_only_runs_the_steps_it_names(tmp_path):
    out = tmp_path / "check"
    result = _run("--dry-run", "--out", str(out), "--data", str(tmp_path / "none"),
                  "--only", "env,recipe", timeout=120)
    summary = (out / "summary.md").read_text()
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert "| env | ok |" in summary and (out / "01-env.log").is_file()
    assert "| recipe | skipped: no corpus" in summary  # asked for, but --data has none
    for step in set(STEPS) - {"env", "recipe"}:
        assert f"| {step} | skipped: not in --only |" in summary, step


@pytest.mark.parametrize("args,message", [
    (["--minutes", "x"], "error: --minutes x: not a whole number"),
    (["--budget", "-1"], "error: --budget -1: not a whole number"),
    (["--frobnicate"], "error: bench/gpu_check.sh: unknown option --frobnicate (see --help)"),
])
def test_a_bad_option_is_one_line(args, message, tmp_path):
    result = _run(*args, "--out", str(tmp_path / "o"), timeout=60)
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_asks_for_the_dry_run(tmp_path):
    result = _run("--out", str(tmp_path / "o"), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("torch sees no CUDA GPU (--dry-run runs the steps "
                                          "on the CPU)")
