"""Data-parallel training under `torchrun`: the device each rank takes, joining the process
group torchrun describes in its environment (gloo on the CPU, NCCL on GPUs), and the one-line
error for a collective whose peer is gone. Pretraining starts here; any recipe that trains
data-parallel can.

    with process_group(rank_device(options.device), timeout) as joined:
        ...   # the run, every rank; a peer that leaves ends it in one line
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys

import torch
import torch.distributed as dist

from bertkit import signals
from bertkit.files import SaidElsewhere, UserError
from bertkit.runtime import parse_device


def rank_info() -> tuple[int, int]:
    """(this process's rank, the number of ranks): (0, 1) outside a process group."""
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def rank_device(requested: str | None) -> torch.device:
    """The run's device: "cuda" (or none, given a GPU) is this rank's LOCAL_RANK GPU under
    torchrun; one GPU named for every rank of a node is refused (NCCL: "Duplicate GPU")."""
    local = int(os.environ.get("LOCAL_RANK", 0))
    if requested in (None, "auto"):
        return torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    device = parse_device(requested)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", local)
    if device.type == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > 1:
        raise UserError(f"--device {requested}: every rank on this node would use that one GPU; "
                        f"give --device cuda (each rank takes its LOCAL_RANK GPU)")
    return device


def start_distributed(device: torch.device, timeout: float = 600.0) -> bool:
    """Join the process group `torchrun` describes in the environment; False when alone.
    `timeout`: seconds any collective waits for its peers before it fails (gloo raises; NCCL's
    watchdog ends the process, with the TORCH_NCCL_ASYNC_ERROR_HANDLING=1 torchrun sets)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's worker: stop when its agent dies
        signals.end_with_parent()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    wait = datetime.timedelta(seconds=timeout)
    store = restart_store(os.environ, wait)
    # device_id: NCCL connects now, while every rank is here (not inside the first collective,
    # a native wait a signal cannot stop), and barriers know the rank's GPU
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=wait,
                            **({"device_id": device} if device.type == "cuda" else {}),
                            **({} if store is None else dict(
                                store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))))
    return True


def restart_store(env, timeout: datetime.timedelta):
    """The store a restarted torchrun worker must meet its peers in, or None for torch's own.

    torchrun (torch 2.13) keeps one TCPStore, its agent's, for every restart of a job, and
    its workers join it under no prefix of their round: a restarted worker reads the
    addresses the dead round left there, connects to a port nobody listens on, and its peer
    waits for it in native code (issue 43's hang after kill -9). With one agent, its restart
    count is the round: a prefix of it keeps the rounds apart. With several agents the
    counts differ (an agent that restarts for another's failure counts none): there only the
    launcher can, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (bertkit-torchrun sets it), and
    rank 0 says so."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if int(env.get("GROUP_WORLD_SIZE", "1")) > 1:
        if env.get("RANK") == "0" and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
            print("warning: torchrun keeps one TCPStore across restarts: a restarted run can "
                  "hang at start; set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for torchrun, or "
                  "launch with bertkit-torchrun", file=sys.stderr)
        return None
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False,
                          timeout=timeout)
    return dist.PrefixStore(f"bertkit/restart-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}",
                            store)


@contextlib.contextmanager
def process_group(device: torch.device, timeout: float = 600.0):
    """Under torchrun, the process group joined for the block (`start_distributed`) and left
    after it, a collective whose peer is gone ending in one line (`peer_failure`); in one
    process, nothing. Yields whether it joined. A peer that leaves while the group is being
    joined (a fast rank refusing the data while gloo still connects the others) ends in the
    same line."""
    joined = False
    try:
        joined = start_distributed(device, timeout)
        yield joined
    except (RuntimeError, dist.DistError) as e:
        alone = int(os.environ.get("WORLD_SIZE", "1")) <= 1
        rank = int(os.environ.get("RANK", "0"))
        if alone or (error := peer_failure(e, rank, timeout)) is None:
            raise
        raise error from None
    finally:
        if joined:
            dist.destroy_process_group()


def peer_failure(e: BaseException, rank: int, timeout: float) -> UserError | None:
    """The one-line error for a collective that failed because another rank is gone or
    silent, or None for any other error. gloo says so only in its message (a RuntimeError).
    A rank whose peer's process ended says nothing under bertkit-torchrun (`SaidElsewhere`):
    that rank printed why it left (its `error: ...` line, its traceback) or torchrun's report
    names its kill, and a second line would only repeat that something failed."""
    text = str(e)
    if "Connection closed by peer" in text or "Connection reset by peer" in text:
        line = (f"rank {rank}: another rank left the run (its process ended: its own output "
                f"or the launcher's log says why)")
        quiet = os.environ.get(SaidElsewhere.launcher) == "1"
        return SaidElsewhere(line) if quiet else UserError(line)
    if "Timed out waiting" in text or (isinstance(e, dist.DistError) and "imeout" in text):
        return UserError(f"rank {rank}: the other ranks did not answer within --dist-timeout "
                         f"{timeout:g} s (a rank or node died, hangs, or waits longer on rank 0)")
    return None


__all__ = ["rank_device", "rank_info", "start_distributed", "process_group", "restart_store",
           "peer_failure"]
