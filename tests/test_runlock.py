"""A run directory is owned by one process: a second one is refused with one line, a dead
owner's lock is taken over, and the lock goes away on exit, on an exception and on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.pretraining import objectives
from bertkit.runlock import LOCK_FILE, RunLock
from bertkit.training.loop import train

ROOT = Path(__file__).parent.parent

def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_lock_names_its_owner_and_goes_away_after_the_block(tmp_path):
    with RunLock(tmp_path / "run") as lock:
        held = json.loads((tmp_path / "run" / LOCK_FILE).read_text(encoding="utf-8"))
        assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
        with RunLock(tmp_path / "run"):  # the same process may take it again
            pass
        assert lock.path.exists()  # ... and the inner block does not release it
    assert not (tmp_path / "run").exists()  # the lock made it, and nothing was written there
    (tmp_path / "run").mkdir()
    with pytest.raises(RuntimeError):
        with RunLock(tmp_path / "run"):
            raise RuntimeError("failed midway")
    assert os.listdir(tmp_path / "run") == []  # there before the lock: it stays


@pytest.mark.slow
def test_a_second_live_process_is_refused_with_one_line(tmp_path, holder):
    with pytest.raises(UserError) as e:
        with RunLock(tmp_path / "run"):
            pass
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'run'} is in use by pid {holder.pid} on "
                              f"{socket.gethostname()} (started ")
    assert "\n" not in message
    assert (tmp_path / "run" / LOCK_FILE).exists()  # the owner's lock is left alone


def test_a_dead_owners_lock_is_taken_over_with_a_notice(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    dead = _dead_pid()
    (tmp_path / "run" / LOCK_FILE).write_text(json.dumps(
        {"pid": dead, "host": socket.gethostname(), "started": "then"}), encoding="utf-8")
    with RunLock(tmp_path / "run"):
        held = json.loads((tmp_path / "run" / LOCK_FILE).read_text(encoding="utf-8"))
        assert held["pid"] == os.getpid()
    assert f"taking over the lock of pid {dead}" in capsys.readouterr().err
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_a_lock_from_another_host_or_unreadable_is_not_taken(tmp_path):
    (tmp_path / "run").mkdir()
    lock = tmp_path / "run" / LOCK_FILE
    lock.write_text(json.dumps({"pid": _dead_pid(), "host": "elsewhere.example",
                                "started": "2026-11-23T09:00:00+00:00"}), encoding="utf-8")
    with pytest.raises(UserError, match=r"in use by pid \d+ on elsewhere.example \(started "):
        RunLock(tmp_path / "run").acquire()
    lock.write_text("{torn", encoding="utf-8")
    with pytest.raises(UserError, match="its lock .* cannot be read"):
        RunLock(tmp_path / "run").acquire()
    assert lock.read_text(encoding="utf-8") == "{torn"


@pytest.mark.slow
def test_training_into_a_directory_in_use_is_refused(tmp_path, holder, tiny):
    with pytest.raises(UserError, match=rf"is in use by pid {holder.pid} "):
        train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), TrainConfig(max_steps=2),
              tmp_path / "run", show_progress=False)
    assert sorted(os.listdir(tmp_path / "run")) == [LOCK_FILE]  # nothing written beside it


def test_training_releases_the_lock(tmp_path, tiny):
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), TrainConfig(max_steps=2),
          tmp_path / "run", save=tiny.no_save, show_progress=False)
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    assert (tmp_path / "run" / "metrics.jsonl").exists()


_SLOW_PREPARE = textwrap.dedent("""
    import sys, time
    import bertkit.pretraining.corpus as corpus
    from bertkit.cli.main import main

    def slow(*args, **kwargs):
        print("preparing", flush=True)
        time.sleep(120)

    corpus._prepare = slow
    sys.exit(main(["prepare", "--input", sys.argv[1], "--tokenizer", sys.argv[2],
                   "--out", sys.argv[3]]))
""")


@pytest.mark.slow
def test_sigterm_releases_the_lock_and_leaves_the_previous_output(tmp_path):
    from bertkit.text.vocab import train_tokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"The cat sat on mat {i}.\n\n" for i in range(50)),
                      encoding="utf-8")
    train_tokenizer([corpus], vocab_size=60, out=tmp_path / "tok")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("keep me", encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-c", _SLOW_PREPARE, str(corpus),
                                str(tmp_path / "tok"), str(tmp_path / "data")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT)
    assert process.stdout.readline() == "preparing\n"
    assert (tmp_path / "data" / LOCK_FILE).exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM, process.stderr.read()
    assert os.listdir(tmp_path / "data") == ["mine.txt"]
    assert "Traceback" not in process.stderr.read()


@pytest.mark.slow
def test_two_pretrain_runs_on_one_out(tmp_path, capsys):
    """The second `bertkit pretrain` into a directory a live one trains in gets one line and
    exit 2; SIGTERM stops the first cleanly, and its lock goes with it."""
    from bertkit.cli.main import main
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.vocab import train_tokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"The cat {i} sat on the mat.\nIt ran to the pond.\n\n"
                              for i in range(80)), encoding="utf-8")
    train_tokenizer([corpus], vocab_size=80, out=tmp_path / "tok", progress=False)
    prepare([corpus], tmp_path / "tok", tmp_path / "data", workers=1, progress=False)
    run = tmp_path / "run"

    args = ["pretrain", "--data", str(tmp_path / "data"), "--preset", "tiny",
                   "--seq-len", "32", "--batch-size", "4", "--max-steps", "100000", "--out",
                   str(run)]
    first = subprocess.Popen([sys.executable, "-m", "bertkit.cli", *args],
                             stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (run / LOCK_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.poll() is None, first.stderr.read()
        capsys.readouterr()
        # the second in this process: another process all the same, without a start-up
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1].startswith(
            f"error: {run} is in use by pid {first.pid} on {socket.gethostname()} (started ")
        assert "Traceback" not in err
        # training, not still setting up (a SIGTERM then exits 143 with nothing to save)
        while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 130, first.stderr.read()  # stopped, checkpoint saved
    finally:
        first.kill()
        first.wait()
    assert not (run / LOCK_FILE).exists()
    assert list((run / "checkpoints").iterdir())  # SIGTERM saved a checkpoint


@pytest.mark.slow
def test_every_command_that_writes_a_directory_locks_it(tmp_path, holder, capsys):
    from bertkit.cli.main import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
    run = str(tmp_path / "run")
    for argv in (["tokenizer", "train", "--input", str(corpus), "--vocab-size", "40",
                  "--out", run],
                 ["static", "train", "--input", str(corpus), "--out", run]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == f"error: {run} is in use by pid {holder.pid} on {socket.gethostname()}" \
                      f" (started {err.split('(started ')[1]}", err
    assert os.listdir(run) == [LOCK_FILE]


def test_the_lock_of_an_earlier_round_of_the_same_torchrun_job_is_taken_on_any_host(
        tmp_path, monkeypatch, capsys):
    """After a restart rank 0 may be on another node: the lock of the earlier round's rank 0,
    killed there, is taken over; another job's lock from elsewhere is not, nor one of
    torchrun's default --rdzv-id "none", which names no job."""
    (tmp_path / "run").mkdir()
    lock = tmp_path / "run" / LOCK_FILE
    for mine, theirs, taken in (("mini-0427", "base-0427", False), ("mini-0427", None, False),
                                ("none", "none", False), ("mini-0427", "mini-0427", True)):
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", mine)
        lock.write_text(json.dumps({"pid": 4242, "host": "node1.example", "started": "then",
                                    "job": theirs}), encoding="utf-8")
        if not taken:
            with pytest.raises(UserError, match="in use by pid 4242 on node1.example"):
                RunLock(tmp_path / "run").acquire()
            continue
        with RunLock(tmp_path / "run"):
            assert json.loads(lock.read_text(encoding="utf-8"))["job"] == "mini-0427"
    assert ("taking over the lock of pid 4242 on node1.example, a worker of this torchrun "
            "job's earlier round") in capsys.readouterr().err
