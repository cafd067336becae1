"""Bit-identity of pretraining across a refactor: for each objective, a fixed-seed 30-step run
of a tiny model on a tiny synthetic corpus (fp32, CPU, one thread), and the sha256 of every
saved weight tensor, of the last checkpoint's model and optimizer tensors, and of the held-out
figures in metrics.jsonl.

    python bench/objective_identity.py            # print the hashes
    python bench/objective_identity.py --write    # keep them in objective_identity.expected.json
    python bench/objective_identity.py --check    # exit 1 on any difference from that file
    python bench/objective_identity.py --old-runs tests/data/old_pretrain_runs

`--old-runs DIR` writes the small run directories that tests/pretraining/test_old_runs.py
resumes (a prepared corpus, a 16-wide model to continue, and a span and an electra run
stopped at step 2), as the code of the day writes them: made once, before a change to
pretraining, they prove that checkpoints written before it still resume after it.

About a minute on a laptop CPU. The corpus, vocabulary and runs are made in a temporary
directory; nothing is read from the network.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["BERTKIT_AUTO_PRECISION"] = "fp32"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

EXPECTED = Path(__file__).with_name("objective_identity.expected.json")
STEPS = 30
RUNS = {  # name: (objective, architecture, more flags)
    "mlm": ("mlm", "modern", ["--whole-word"]),
    "mlm+nsp": ("mlm+nsp", "bert", []),
    "span-bert": ("span", "bert", []),
    "span-modern": ("span", "modern", []),
    "clm": ("clm", "modern", []),
    "electra": ("electra", "bert", ["--generator-fraction", "0.5"]),
}
SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "an", "el", "or"]


def _corpus(path: Path) -> Path:
    """Blank-line separated documents of made-up words, the same for every call."""
    rng = np.random.default_rng(0)
    words = sorted({a + b for a in SYLLABLES for b in SYLLABLES})
    docs = []
    for _ in range(60):
        sentences = [" ".join(words[i] for i in rng.integers(0, len(words), rng.integers(3, 12)))
                     .capitalize() + "." for _ in range(rng.integers(2, 8))]
        docs.append(" ".join(sentences))
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def _digest(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    return {k: hashlib.sha256(v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                              if v.numel() else b"").hexdigest()[:16]
            for k, v in sorted(tensors.items())}


def _run(data: Path, out: Path, objective: str, architecture: str, more: list[str]) -> dict:
    from bertkit.cli.main import main

    args = ["pretrain", "--data", str(data), "--out", str(out), "--objective", objective,
            "--architecture", architecture, "--preset", "tiny", "--seq-len", "32",
            "--batch-size", "8", "--early-fraction", "0", "--max-steps", str(STEPS),
            "--lr", "1e-3", "--warmup-steps", "5", "--eval-every", "15", "--eval-batches", "2",
            "--log-every", "10", "--save-every", "30", "--precision", "fp32", "--device", "cpu",
            "--seed", "3", *more]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if main(args) != 0:
            raise SystemExit(f"{objective}: pretrain failed")
    found = {}
    for f in sorted(out.rglob("*.safetensors")):
        name = str(f.relative_to(out))
        if name.startswith("checkpoints/") and not name.endswith(("model.safetensors",
                                                                  "optimizer.safetensors")):
            continue
        found[name] = _digest(load_file(str(f)))
    figures = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [{k: v for k, v in r.items() if k.startswith("eval_")} for r in figures
             if any(k.startswith("eval_") for k in r)]
    found["eval"] = hashlib.sha256(json.dumps(evals, sort_keys=True).encode()).hexdigest()[:16]
    return found


def measure() -> dict:
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.vocab import train_tokenizer

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = _corpus(root / "corpus.txt")
        with contextlib.redirect_stderr(io.StringIO()):
            train_tokenizer([corpus], vocab_size=150, out=root / "tok", progress=False)
            prepare([corpus], root / "tok", root / "data", heldout_fraction=0.1, workers=1,
                    progress=False)
        result = {"vocab": hashlib.sha256((root / "tok" / "vocab.txt").read_bytes())
                  .hexdigest()[:16]}
        for name, (objective, architecture, more) in RUNS.items():
            result[name] = _run(root / "data", root / name, objective, architecture, more)
            print(f"{name}: {len(result[name])} files hashed", file=sys.stderr)
    return result


def old_runs(root: Path) -> None:
    """The run directories of `--old-runs`: their checkpoints only (the final model at a
    run's top is what resuming writes again), a few hundred KB in all."""
    import shutil

    from bertkit.cli.main import main
    from bertkit.config import preset
    from bertkit.model.heads import ElectraModel, generator_config
    from bertkit.model.encoder import init_weights
    from bertkit.model.create import new_pretraining_model
    from bertkit.model.hub import save_electra, save_model
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.tokenizer import Tokenizer
    from bertkit.text.vocab import train_tokenizer

    torch.set_num_threads(1)
    root.mkdir(parents=True, exist_ok=False)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = _corpus(Path(tmp) / "corpus.txt")
        with contextlib.redirect_stderr(io.StringIO()):
            train_tokenizer([corpus], vocab_size=120, out=Path(tmp) / "tok", progress=False)
            prepare([corpus], Path(tmp) / "tok", root / "data", heldout_fraction=0.1,
                    workers=1, progress=False)
    tokenizer = Tokenizer.load(root / "data" / "tokenizer")
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                 architecture="bert", num_layers=1, hidden_size=16, num_heads=2,
                 intermediate_size=32, max_positions=64)
    save_model(new_pretraining_model(cfg, 0), root / "bert-16", tokenizer=tokenizer)
    with torch.random.fork_rng(devices=[]):
        electra = ElectraModel(cfg, generator_config(cfg, 0.5))
    init_weights(electra, cfg, torch.Generator().manual_seed(0))
    save_electra(electra, root / "electra-16", tokenizer=tokenizer)
    for objective, init in (("span", "bert-16"), ("electra", "electra-16")):
        out = root / f"run-{objective}"
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            code = main(["pretrain", "--data", str(root / "data"), "--out", str(out),
                         "--init", str(root / init), "--objective", objective,
                         "--seq-len", "32", "--batch-size", "4", "--early-fraction", "0",
                         "--max-steps", "2", "--save-every", "2", "--eval-batches", "1",
                         "--precision", "fp32", "--device", "cpu", "--seed", "1"])
        if code != 0:
            raise SystemExit(f"{objective}: pretrain failed")
        for f in out.iterdir():  # the checkpoint and the record stay
            if f.name not in ("checkpoints", "training_args.json", "metrics.jsonl"):
                shutil.rmtree(f) if f.is_dir() else f.unlink()


def _differences(expected: dict, found: dict, where: str = "") -> list[str]:
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return [] if expected == found else [f"{where}: {expected} != {found}"]
    out = []
    for k in sorted(set(expected) | set(found)):
        if k not in found or k not in expected:
            out.append(f"{where}/{k}: {'missing' if k not in found else 'new'}")
        else:
            out += _differences(expected[k], found[k], f"{where}/{k}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="compare with the expected file")
    group.add_argument("--write", action="store_true", help="write the expected file")
    group.add_argument("--old-runs", type=Path, help="Directory for the old run directories")
    args = parser.parse_args()
    if args.old_runs:
        old_runs(args.old_runs)
        return 0
    found = measure()
    if args.write:
        EXPECTED.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    elif args.check:
        diffs = _differences(json.loads(EXPECTED.read_text()), found)
        for line in diffs:
            print(line)
        print("identical" if not diffs else f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    else:
        print(json.dumps(found, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
