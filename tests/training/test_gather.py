"""Rows gathered from every rank with their gradients (`bertkit.training.gather`), on two gloo
processes: a loss over the batch's other items (MNRL both ways, CoSENT) computed on the
gathered vectors gives every rank the loss and, averaged as DDP averages, the gradients of one
process's whole batch, for shares of unequal size and for a rank with no row."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

from bertkit.embeddings.losses import cosent_loss, multiple_negatives_ranking_loss
from bertkit.training.gather import gather_rows

pytestmark = [pytest.mark.slow]

PYTHON = sys.executable


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env

_GATHER = """
import sys, torch, torch.distributed as dist
from bertkit.embeddings.losses import cosent_loss, multiple_negatives_ranking_loss
from bertkit.training.gather import gather_rows

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shares = [[int(i) for i in part.split(",") if i] for part in sys.argv[1].split("/")]
torch.manual_seed(0)
layer = torch.nn.Linear(6, 5)
inputs, scores = torch.randn(5, 2, 6), torch.rand(5)
mine = shares[rank] or [0]  # a rank without a row runs a stand-in
rows = len(shares[rank])
a, p = layer(inputs[mine, 0]), layer(inputs[mine, 1])
a, p, s = gather_rows(a, rows), gather_rows(p, rows), gather_rows(scores[mine], rows)
loss = multiple_negatives_ranking_loss(a, p, symmetric=True) + cosent_loss(a, p, s)
(loss * rows * world / 5).backward()  # the loop's weights: they sum to the ranks' number
for param in layer.parameters():  # DDP's average
    dist.all_reduce(param.grad)
    param.grad /= world
torch.save({"loss": loss.detach(), "grads": [q.grad for q in layer.parameters()]},
           sys.argv[2] + f"/rank{rank}.pt")
dist.barrier()
dist.destroy_process_group()  # gloo's threads left running abort the interpreter's exit
"""


@pytest.mark.parametrize("shares", ["0,1,2/3,4", "/0,1,2,3,4"])
def test_gathered_rows_give_the_loss_and_gradients_of_the_whole_batch(shares, tmp_path):
    """MNRL (both ways) and CoSENT over vectors gathered from two gloo processes, shares of
    3 and 2 rows or of 0 (a stand-in) and 5: every rank's loss and the averaged gradients are
    those of one process's batch of 5."""
    script = tmp_path / "gather.py"
    script.write_text(_GATHER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    ranks = [subprocess.Popen([PYTHON, str(script), shares, str(tmp_path)],
                              env=dict(env, RANK=str(r)), stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for rank in ranks:
        assert rank.wait(timeout=120) == 0, rank.stderr.read()[-3000:]
    torch.manual_seed(0)
    layer = torch.nn.Linear(6, 5)
    inputs, scores = torch.randn(5, 2, 6), torch.rand(5)
    a, p = layer(inputs[:, 0]), layer(inputs[:, 1])
    loss = multiple_negatives_ranking_loss(a, p, symmetric=True) + cosent_loss(a, p, scores)
    loss.backward()
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=True)
        torch.testing.assert_close(got["loss"], loss.detach(), atol=1e-6, rtol=0)
        for mine, whole in zip(got["grads"], layer.parameters()):
            torch.testing.assert_close(mine, whole.grad, atol=1e-5, rtol=1e-5)
    assert float(layer.weight.grad.abs().max()) > 1e-3  # the gradients are not all zero


def test_outside_a_process_group_the_rows_are_returned_as_they_are():
    rows = torch.randn(4, 3)
    assert torch.equal(gather_rows(rows), rows) and torch.equal(gather_rows(rows, 2), rows[:2])
