"""pretrain's recorded device under torchrun, on a machine without a GPU."""
from __future__ import annotations

import pytest
import torch

from bertkit.pretraining import options, plan


@pytest.mark.parametrize("given,chosen,said", [
    (None, torch.device("cuda", 1), "cuda"), ("cuda", torch.device("cuda", 1), "cuda"),
    ("auto", torch.device("cuda", 1), "cuda"), ("auto", torch.device("cpu"), "cpu"),
    (None, torch.device("cpu"), "cpu"), ("cpu", torch.device("cpu"), "cpu")])
def test_the_settings_under_torchrun_name_the_device_every_rank_uses(given, chosen, said):
    """Not auto (the rank's GPU is chosen per rank) and not rank 0's cuda:0 (refused for two
    ranks): the --device that the recorded command gives every rank again."""
    opts = options.PretrainOptions(data="d", out="o", device=given, train=options.PretrainSchedule(
        max_steps=1, precision="fp32", compile=False))
    resolved, _ = plan.resolve(opts, chosen, world=2)
    assert resolved.device == said
    alone = str(chosen) if given in (None, "auto") else given
    assert plan.resolve(opts, chosen, world=1)[0].device == alone
