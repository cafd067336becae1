"""Signals handled in Python: a handler that runs in time decides; a main thread stuck in
native code past the grace period exits with the signal's status (the stuck case itself, a
rank in a gloo collective, is tests/pretraining/test_elastic.py)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from bertkit import signals

STUCK = """
import ctypes, signal
from bertkit import signals
signals.handle(signal.SIGUSR1, lambda *a: print("handled", flush=True), grace=2)
print("ready", flush=True)
# a native wait that outlives the signal: glibc's system() waits for its child again when a
# signal interrupts it, and no bytecode runs in the main thread meanwhile
ctypes.CDLL(None).system(b"exec sleep 8 >/dev/null 2>&1")
"""

def test_a_handler_that_runs_in_time_keeps_the_process():
    seen = []
    previous = signals.handle(signal.SIGUSR1, lambda signum, frame: seen.append(signum),
                              grace=0.5)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(1.0)  # the watch would have ended the process by now
    finally:
        signals.restore(signal.SIGUSR1, previous)
    assert seen == [signal.SIGUSR1]


@pytest.mark.slow
def test_a_main_thread_stuck_in_native_code_exits_after_the_grace_period(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.3)
        sent = time.time()
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGUSR1, err
    assert "handled" not in out and "SIGUSR1: the main thread is waiting in native code" in err
    assert 1.5 < time.time() - sent < 5  # the grace of 2 s, not the 8 s sleep


FORKED = """
import multiprocessing, os, signal, time
from bertkit import signals
PARENT = os.getpid()


def handler(*args):
    if os.getpid() != PARENT:
        os._exit(0)  # the child: gone at once
    print("parent handled", flush=True)


signals.handle(signal.SIGTERM, handler, grace=1)
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
child.start()
time.sleep(0.3)
child.terminate()  # SIGTERM to the child, whose handler it inherited
child.join()
time.sleep(2)  # past the grace: the parent's watch must not take the child's signal as its own
print("parent alive", flush=True)
"""


@pytest.mark.slow
def test_a_signal_to_a_forked_child_is_not_the_parents(tmp_path):
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "parent alive" in done.stdout, done.stderr
    assert "parent handled" not in done.stdout


def _two_gloo_ranks(timeout: float):
    """Two gloo process groups of one process (threads make both: each waits for the other)."""
    import datetime
    import threading

    import torch.distributed as dist

    store, groups = dist.HashStore(), {}

    def join(rank):
        groups[rank] = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=timeout))

    threads = [threading.Thread(target=join, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return groups


def test_a_rank_waiting_for_rank_0_alone_runs_its_handlers_and_keeps_the_timeout():
    """A barrier waited for in Python: the handler of a signal that comes meanwhile runs at once
    (blocked in native code it would not until the wait ended, and the watch would end the
    process), and a peer that never comes still fails the wait at the group's timeout."""
    groups = _two_gloo_ranks(timeout=3)
    seen = []
    previous = signals.handle(signal.SIGUSR1, lambda signum, frame: seen.append(time.time()),
                              grace=5)
    try:
        sent = time.time()
        subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -USR1 {os.getpid()}"])
        with pytest.raises(RuntimeError, match="Timed out waiting"):
            signals.wait(groups[0].barrier())  # rank 1 is busy: it never comes
        assert 2.5 < time.time() - sent < 10
    finally:
        signals.restore(signal.SIGUSR1, previous)
    assert len(seen) == 1 and seen[0] - sent < 1.5


ORPHAN = """
import os, signal, subprocess, sys, time
from bertkit import signals
if sys.argv[1] == "parent":
    subprocess.Popen([sys.executable, __file__, "child"], start_new_session=True)
    time.sleep(60)
else:
    signal.signal(signal.SIGTERM, lambda *a: (print("SIGTERM", flush=True), sys.exit(0)))
    signals.end_with_parent()
    print(os.getpid(), flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_launcher_is_killed_gets_sigterm(tmp_path):
    """torchrun's workers run in sessions of their own: a launcher killed with -9 left them
    training on (an orphan holding the run's lock)."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    out = open(tmp_path / "child.out", "w")
    parent = subprocess.Popen([sys.executable, str(script), "parent"], stdout=out,
                              env=dict(os.environ))
    child_output = tmp_path / "child.out"
    deadline = time.time() + 30
    while not child_output.read_text().strip() and time.time() < deadline:
        time.sleep(0.1)
    child = int(child_output.read_text().split()[0])
    parent.kill()
    parent.wait()
    while time.time() < deadline and "SIGTERM" not in child_output.read_text():
        time.sleep(0.1)
    try:
        assert "SIGTERM" in child_output.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
