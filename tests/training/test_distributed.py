"""The device of each rank under torchrun and how it joins NCCL, on a machine without a GPU:
torch.cuda and init_process_group mocked."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bertkit.files import UserError
from bertkit.training import distributed


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


@pytest.fixture
def rank_1_of_2(monkeypatch):
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
                        "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)


@pytest.mark.parametrize("given", [None, "auto", "cuda"])
def test_under_torchrun_each_rank_takes_its_local_rank_gpu(four_gpus, rank_1_of_2, given):
    """--device cuda as auto, the default (or None, from the library): torch.cuda.set_device refuses "cuda" without an index,
    and without one every rank would share GPU 0."""
    assert distributed.rank_device(given) == torch.device("cuda", 1)


def test_one_gpu_for_every_rank_of_a_node_is_refused(four_gpus, rank_1_of_2):
    with pytest.raises(UserError, match="--device cuda:2: every rank on this node"):
        distributed.rank_device("cuda:2")


def test_nccl_is_joined_on_the_ranks_gpu(four_gpus, rank_1_of_2, monkeypatch):
    """device_id: NCCL connects inside init_process_group, and barriers use the rank's GPU."""
    calls = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set", d))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group",
                        lambda backend, **kw: calls.update(backend=backend, **kw))
    assert distributed.start_distributed(torch.device("cuda", 1), timeout=5)
    assert calls["set"] == torch.device("cuda", 1) and calls["backend"] == "nccl"
    assert calls["device_id"] == torch.device("cuda", 1)


def test_a_peer_gone_while_the_group_is_joined_ends_in_one_line(rank_1_of_2, monkeypatch):
    """A rank that refuses its data and exits while gloo still connects the others: their
    init_process_group fails, and that failure reads as a peer gone, not a traceback."""
    def closed(backend, **kw):
        raise RuntimeError("Gloo connectFullMesh failed with [pair.cc:553] Connection closed "
                           "by peer [127.0.0.1]:45494")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", closed)
    monkeypatch.delenv(distributed.SaidElsewhere.launcher, raising=False)
    with pytest.raises(UserError, match="rank 1: another rank left the run"):
        with distributed.process_group(torch.device("cpu"), timeout=5):
            pass


def test_any_other_failure_to_join_is_raised_as_it_is(rank_1_of_2, monkeypatch):
    def broken(backend, **kw):
        raise RuntimeError("address already in use")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", broken)
    with pytest.raises(RuntimeError, match="address already in use"):
        with distributed.process_group(torch.device("cpu"), timeout=5):
            pass
