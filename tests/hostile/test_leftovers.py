"""What a process killed with -9 leaves (a hidden temporary beside its output, its lock) is
swept by the next run into the same place, with a one-line notice: only the names bertkit
gives its temporaries, only when the process that made them no longer runs; never a user's
file, never a live process's temporary. The previous output stays whole meanwhile."""
from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]  # as bertkit.files names it

# Runs `bertkit ARGS` and kills itself with SIGKILL at the chosen point: when the library
# calls MODULE.FUNCTION (the model's safetensors, the embedder's pooling).
_KILLED_AT = textwrap.dedent("""
    import importlib, os, signal, sys
    parts = sys.argv[1].split(".")
    i = len(parts) - 1
    while True:
        try:
            owner = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            i -= 1
    for name in parts[i:-1]:
        owner = getattr(owner, name)
    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    setattr(owner, parts[-1], killed)
    from bertkit.cli.main import main
    main(sys.argv[2:])
""")


def _killed_at(point: str, *args) -> None:
    done = subprocess.run([sys.executable, "-c", _KILLED_AT, point, *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_a_model_save_killed_midway_is_swept_by_the_next_run(tmp_path, world, tools, capsys):
    out = tmp_path / "model"
    init = ["init", "--preset", "tiny", "--tokenizer", world / "tok", "--max-positions", "32",
            "--out", out]
    assert tools.cli(capsys, *init)[0] == 0
    before = tools.snapshot(out)
    _killed_at("bertkit.model.hub.save_file", *init, "--seed", "1")
    left = tools.leftovers(tmp_path)
    assert [p.name for p in left if p.name.startswith(".model.")] and \
        (out / ".bertkit.lock") in left  # a temporary beside it, the lock in it
    assert {k: v for k, v in tools.snapshot(out).items() if k != ".bertkit.lock"} == before
    code, err = tools.cli(capsys, *init, "--seed", "2")
    assert code == 0, err
    notes = [line for line in err.splitlines() if "leftover" in line]
    assert len(notes) == 1 and notes[0].startswith("note: removed 1 leftover temporary"), err
    assert tools.leftovers(tmp_path) == []
    assert tools.snapshot(out) != before and (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_an_embedding_killed_midway_is_swept_by_the_next_run(tmp_path, world, tools, capsys):
    out = tmp_path / "vectors.npy"
    embed = ["embed", "--model", world / "model", "--input", world / "lines.txt", "--out", out]
    assert tools.cli(capsys, *embed)[0] == 0
    before = tools.snapshot(out)
    _killed_at("bertkit.embeddings.embedder.Embedder.pool_groups", *embed)
    assert [p.name for p in tools.leftovers(tmp_path)]  # the memory-mapped .npy, the index
    assert tools.snapshot(out) == before
    code, err = tools.cli(capsys, *embed)
    assert code == 0, err
    assert sum("leftover" in line for line in err.splitlines()) == 2, err  # .npy, index
    assert tools.leftovers(tmp_path) == []


def test_only_dead_processes_temporaries_are_swept(tmp_path, world, tools, capsys, holder):
    """Beside and inside the output: a dead process's temporaries go; a live one's (the
    `holder`), another machine's, and the user's own files of similar names stay."""
    dead = _dead_pid()
    out = tmp_path / "model"
    out.mkdir()
    swept = [tmp_path / f".model.{dead}-{HOST}.ab12CD_9.tmp",
             out / "checkpoints" / f".step-00000002.{dead}-{HOST}.x1y2z3w4.tmp",
             out / f".config.json.{dead}-{HOST}.k9k9k9k9.tmp"]
    kept = [tmp_path / f".model.{holder.pid}-{HOST}.ab12CD_9.tmp",
            tmp_path / f".model.{dead}-000000.ab12CD_9.tmp",
            tmp_path / ".model.backup.tmp", tmp_path / ".model.old", out / "notes.tmp",
            out / f".mine.{dead}.tmp"]
    for path in swept + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.startswith(".model.") or path.name.startswith(".step-"):
            path.mkdir()
            (path / "model.safetensors").write_bytes(b"half")
        else:
            path.write_text("x", encoding="utf-8")
    code, err = tools.cli(capsys, "init", "--preset", "tiny", "--tokenizer", world / "tok",
                          "--max-positions", "32", "--out", out)
    assert code == 0, err
    assert [p for p in swept if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    notes = [line for line in err.splitlines() if "leftover" in line]
    assert len(notes) == 1 and notes[0].startswith("note: removed 3 leftover temporaries"), err


@pytest.mark.slow
def test_a_second_process_on_one_out_is_refused(tmp_path, world, tools, capsys, holder):
    """`holder` owns tmp_path/run: a command writing there gets one line and leaves it be."""
    run = tmp_path / "run"
    (run / "mine.txt").write_text("keep", encoding="utf-8")
    before = tools.snapshot(run)
    for args in (["init", "--preset", "tiny", "--tokenizer", world / "tok"],
                 ["prepare", "--input", world / "corpus.txt", "--tokenizer", world / "tok"],
                 tools.pretrain_args(world, run)[:-2]):
        code, err = tools.cli(capsys, *args, "--out", run)
        line = tools.assert_one_error(code, err, run)
        assert f"is in use by pid {holder.pid}" in line
        assert tools.snapshot(run) == before
        assert tools.leftovers(tmp_path) == [run / ".bertkit.lock"]  # the holder's own
