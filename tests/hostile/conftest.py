"""The hostile cases' tools: a command run in-process as the user runs it, the one-line error
it must end with, the previous output it must leave, the temporaries it must not leave, and a
disk that fills up (a file size limit: every write past it fails in the kernel, whichever
library writes, as a full disk does)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import resource
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertkit.cli.main import main
from bertkit.model.create import init_model
from bertkit.pretraining.corpus import prepare
from bertkit.runlock import LOCK_FILE
from bertkit.text.vocab import train_tokenizer

WORDS = ("the cat dog bird sat ran flew on in under mat tree pond sky red blue small big old "
         "happy quiet loud good bad").split()


def cli(capsys, *args) -> tuple[int, str]:
    """(exit status, stderr) of `bertkit ARGS` run in this process."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def assert_one_error(code: int, err: str, *names) -> str:
    """Exit 2, no traceback, exactly one stderr line `error: ...` naming each of `names`."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, err
    for name in names:
        assert str(name) in errors[0], errors[0]
    return errors[0]


def leftovers(root: Path) -> list[Path]:
    """Hidden temporaries under `root`: what bertkit names its temporaries (.NAME.*.tmp,
    .NAME.*.old, a prepare's .DATA.prepare build) and the lock."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if name == LOCK_FILE or (name.startswith(".") and (
                    name.endswith((".tmp", ".old", ".prepare")))):
                found.append(Path(dirpath) / name)
    return found


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` (a file or a directory) with its sha256."""
    root = Path(root)
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def disk_full_after(nbytes: int):
    """Every write that takes a file past `nbytes` fails with EFBIG (RLIMIT_FSIZE; SIGXFSZ
    ignored), as every write fails on a full disk: the model's safetensors, numpy's files,
    the memory map's reservation, the logs."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


@pytest.fixture(scope="session")
def world(tmp_path_factory, tiny):
    """A corpus, its tokenizer, a tiny model initialised from it, a prepared data directory,
    classification files and a text to embed: inputs every hostile case may read."""
    root = tmp_path_factory.mktemp("world")
    corpus = tiny.write_corpus(root / "corpus.txt", documents=40)
    train_tokenizer([corpus], vocab_size=80, out=root / "tok", progress=False)
    init_model("tiny", root / "tok", root / "model", max_positions=32)
    prepare([corpus], root / "tok", root / "data", workers=1, progress=False)
    rng = random.Random(0)
    for split, n in (("train", 24), ("dev", 8)):
        with open(root / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                good = rng.random() < 0.5
                words = rng.sample(WORDS, 4) + ["good" if good else "bad"]
                f.write(json.dumps({"text": " ".join(words),
                                    "label": "positive" if good else "negative"}) + "\n")
    (root / "lines.txt").write_text("".join(f"{' '.join(rng.sample(WORDS, 6))}\n"
                                            for _ in range(12)), encoding="utf-8")
    return root


def finetune_args(world: Path, out: Path) -> list:
    return ["finetune", "classify", "--model", world / "model", "--train", world / "train.jsonl",
            "--dev", world / "dev.jsonl", "--epochs", "1", "--batch-size", "8", "--quiet",
            "--out", out]


def pretrain_args(world: Path, out: Path, steps: int = 2) -> list:
    return ["pretrain", "--data", world / "data", "--preset", "tiny", "--seq-len", "32",
            "--batch-size", "4", "--max-steps", str(steps), "--save-every", "1", "--out", out]


@pytest.fixture(scope="session")
def tools():
    """The helpers above, for the test modules (which never import one another)."""
    return SimpleNamespace(cli=cli, assert_one_error=assert_one_error, leftovers=leftovers,
                           snapshot=snapshot, disk_full_after=disk_full_after,
                           finetune_args=finetune_args, pretrain_args=pretrain_args)
