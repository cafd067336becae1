"""Elastic runs: two torchrun agents on loopback equal one process, a worker killed with kill -9
under --max-restarts is restarted and finishes as if nothing happened, a checkpoint of 2 ranks
resumes on 1 and one of 1 on 2 (a resume refused there leaves the run as it was), a rank stuck
in a collective still obeys SIGTERM, and bertkit's one-line errors stay one line under
bertkit-torchrun."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main

pytestmark = [pytest.mark.slow]

PYTHON = sys.executable
STEPS, EVERY = 12, 4
TINY = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--lr", "1e-3",
        "--log-every", "2", "--eval-batches", "2", "--max-steps", str(STEPS),
        "--save-every", str(EVERY), "--keep-checkpoints", "10", "--dist-timeout", "60",
        "--precision", "fp32"]
TOLERANCE = 2e-5
"""Parameters of runs at different world sizes agree to this (absolute): the rows, masks,
schedule and optimiser state are the same, the sums are not taken in the same order (one
rank's backward sums its rows inside the matmuls, two ranks sum halves and then all-reduce).
One optimiser step moves the weights by about lr = 1e-3: far more. In fp32, set whatever
`auto` would choose: bf16's 8-bit mantissa makes sums in another order differ by far more."""


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pretrain(data: Path, out: Path, *more: str) -> list[str]:
    return ["-m", "bertkit.cli", "pretrain", "--data", str(data), "--out", str(out), *TINY,
            *more]


def _one_process(data: Path, out: Path, *more: str) -> None:
    """The run in this process, in the environment a process of its own would get (_env: one
    thread as each rank's, which the command heeds): that process would add seconds of
    start-up (torch) and nothing the comparisons need."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _env().items() - os.environ.items():
            patch.setenv(name, value)
        for name in os.environ.keys() - _env().keys():  # a rank's, were this run in one
            patch.delenv(name)
        torch.set_num_threads(1)
        try:
            assert main(_pretrain(data, out, *more)[2:]) == 0
        finally:
            torch.set_num_threads(threads)


def _standalone(data: Path, out: Path, *more: str, ranks: int = 2) -> None:
    done = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", str(ranks), *_pretrain(data, out, *more)],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def _weights(out: Path, step: int = STEPS) -> dict[str, torch.Tensor]:
    return load_file(str(out / f"checkpoints/step-{step:08d}/model.safetensors"))


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _assert_equal(a: dict, b: dict, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if atol == 0:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


def _cut_back(run: Path, copy: Path, step: int) -> Path:
    """A copy of a finished run as it was when its checkpoint `step` was written."""
    shutil.copytree(run, copy)
    (copy / "model.safetensors").unlink()
    for checkpoint in (copy / "checkpoints").glob("step-*"):
        if int(checkpoint.name.split("-")[1]) > step:
            shutil.rmtree(checkpoint)
    return copy


@pytest.fixture(scope="module")
def one_rank(prepared, tmp_path_factory) -> Path:
    """A finished run of one process, a checkpoint every EVERY steps."""
    out = tmp_path_factory.mktemp("one") / "run"
    _one_process(prepared, out)
    return out


@pytest.fixture(scope="module")
def two_agents(prepared, tmp_path_factory) -> Path:
    """A finished run of two torchrun agents of one rank each, met on loopback (c10d)."""
    out = tmp_path_factory.mktemp("agents") / "run"
    port = _free_port()
    agents = [subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--nnodes", "2",
                                "--nproc_per_node", "1", "--rdzv-backend", "c10d",
                                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "elastic",
                                *_pretrain(prepared, out)],
                               env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True) for _ in range(2)]
    logs = [agent.communicate(timeout=120)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(logs)[-4000:]
    assert "2 ranks on cpu" in "".join(logs)
    # the device every rank uses, not none (each rank chooses its own)
    assert re.search(r"\sdevice=cpu\s", "".join(logs))  # wrapped where the paths put it
    assert json.loads((out / "training_args.json").read_text())["options"]["device"] == "cpu"
    return out


def test_two_agents_on_loopback_equal_one_process(one_rank, two_agents):
    _assert_equal(_weights(two_agents), _weights(one_rank), atol=TOLERANCE)
    # the tolerance has teeth: the last steps moved the weights far more
    last, earlier = _weights(one_rank), _weights(one_rank, STEPS - EVERY)
    assert max((last[k] - earlier[k]).abs().max() for k in last) > 20 * TOLERANCE


def test_a_worker_killed_with_kill_9_is_restarted_and_ends_as_an_uninterrupted_run(
        prepared, two_agents, tmp_path):
    out = tmp_path / "run"
    agent = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node", "2", "--max-restarts", "1",
                              *_pretrain(prepared, out, "--resume")],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        deadline = time.time() + 90
        while not list((out / "checkpoints").glob("step-*")) and time.time() < deadline:
            assert agent.poll() is None, agent.stdout.read()[-3000:]
            time.sleep(0.02)
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(agent.pid)],
                                                  capture_output=True, text=True).stdout.split()]
        assert len(workers) == 2, workers
        for worker in workers:  # freeze them where they are: the run is not over yet
            os.kill(worker, signal.SIGSTOP)
        assert not (out / "model.safetensors").exists()
        os.kill(workers[1], signal.SIGKILL)
        os.kill(workers[0], signal.SIGCONT)
        log = agent.communicate(timeout=120)[0]
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    assert agent.returncode == 0, log[-4000:]
    assert "exitcode: -9" in log and "resumed from" in log, log[-4000:]
    # torchrun's SIGTERM to the rank left: no checkpoint promised that its lost peer prevents
    assert "and saving a checkpoint (" not in log, log[-4000:]
    _assert_equal(_weights(out), _weights(two_agents))  # bit for bit: the same world size


def test_two_ranks_resumed_as_one(prepared, one_rank, two_agents, tmp_path):
    run = _cut_back(two_agents, tmp_path / "run", EVERY)
    _one_process(prepared, run, "--resume")
    assert _steps(run) == sorted(_steps(run)) and _steps(run)[-1] == STEPS
    _assert_equal(_weights(run), _weights(one_rank), atol=TOLERANCE)
    _assert_equal(_weights(run), _weights(two_agents), atol=TOLERANCE)


def test_one_rank_resumed_as_two(prepared, one_rank, two_agents, tmp_path):
    run = _cut_back(one_rank, tmp_path / "run", 2 * EVERY)
    _standalone(prepared, run, "--resume")
    _assert_equal(_weights(run), _weights(one_rank), atol=TOLERANCE)
    _assert_equal(_weights(run), _weights(two_agents), atol=TOLERANCE)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file under `root` with its bytes, and every folder (None)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def test_a_resume_refused_under_torchrun_leaves_the_run_as_it_was(prepared, one_rank,
                                                                    tmp_path):
    run = tmp_path / "run"
    shutil.copytree(one_rank, run)
    before = _tree(run)
    done = subprocess.run([PYTHON, "-m", "bertkit.cli.torchrun", "--standalone",
                           "--nproc_per_node", "2",
                           *_pretrain(prepared, run, "--batch-size", "4", "--max-steps",
                                      str(2 * STEPS), "--resume")],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    # one line for the node: bertkit-torchrun's ranks that fail alike say it once
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "checkpoint was made with batch_size = 8, this run has 4" \
        in lines[0], done.stderr[-3000:]
    assert _tree(run) == before
    assert "settings (" not in done.stderr  # refused before the run says its settings


_STUCK_RANK = """
import os, sys, time, datetime, signal
import torch, torch.distributed as dist
from bertkit import signals

signals.handle(signal.SIGTERM, lambda *a: sys.exit(100), grace=2)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
dist.barrier()
if dist.get_rank() == 1:
    time.sleep(120)  # alive, silent: rank 0 waits in gloo's native code
print("waiting", flush=True)
dist.all_reduce(torch.ones(1))
"""


def test_sigterm_stops_a_rank_waiting_in_a_collective(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK_RANK)
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    ranks = [subprocess.Popen([PYTHON, str(script)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:
        assert ranks[0].stdout.readline() == "waiting\n"
        time.sleep(0.5)
        sent = time.time()
        ranks[0].send_signal(signal.SIGTERM)
        _, err = ranks[0].communicate(timeout=30)
        took = time.time() - sent
    finally:
        for rank in ranks:
            rank.kill()
    assert ranks[0].returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: the main thread is waiting in native code" in err
    assert 1.5 < took < 15  # the grace of 2 s, not gloo's timeout of 120 s


@pytest.mark.parametrize("launcher,wall", [("bertkit.cli.torchrun", False),
                                           ("torch.distributed.run", True)])
def test_a_bertkit_error_on_every_rank_is_one_line_under_bertkit_torchrun(tmp_path, launcher,
                                                                          wall):
    done = subprocess.run([PYTHON, "-m", launcher, "--standalone", "--nproc_per_node", "2",
                           *_pretrain(tmp_path / "missing.txt", tmp_path / "run")],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == (2 if not wall else 1), done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    # the two ranks fail alike: bertkit-torchrun says it once for the node, torchrun twice
    assert len(lines) == (2 if wall else 1) and "missing.txt: does not exist" in lines[0], \
        done.stderr[-3000:]
    assert ("ChildFailedError" in done.stderr) is wall
    assert ("Traceback" in done.stderr) is wall


def test_electra_on_two_ranks_equals_one_process(prepared, tmp_path):
    """ELECTRA's samples are drawn with the global batch's masks: two ranks replace the same
    tokens as one process, and end with its weights (the discriminator and the generator)."""
    _one_process(prepared, tmp_path / "one", "--objective", "electra")
    _standalone(prepared, tmp_path / "two", "--objective", "electra")
    _assert_equal(_weights(tmp_path / "two"), _weights(tmp_path / "one"), atol=TOLERANCE)
    for name in ("model.safetensors", "generator/model.safetensors"):
        _assert_equal(load_file(str(tmp_path / "two" / name)),
                      load_file(str(tmp_path / "one" / name)), atol=TOLERANCE)
