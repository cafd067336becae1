"""bertkit-torchrun: quiet when every rank failed with bertkit's one-line error, torchrun's
own report for anything else (the runs themselves: tests/pretraining/test_elastic.py)."""
from __future__ import annotations

import signal

import pytest
from torch.distributed.elastic.multiprocessing import api

from bertkit.cli import torchrun
from bertkit.cli.torchrun import quiet_status


@pytest.mark.parametrize("codes,quiet", [
    ([2], 2), ([2, 2], 2), ([2, -15], 2), ([2, 143], 2), ([2, 130], 2),
    ([130, 130], 130), ([130, -15], 130), ([130, 2], None),
    ([1], None), ([-9], None), ([2, 1], None), ([-9, 2], None), ([-15, 2], None), ([], None),
])
def test_only_bertkit_errors_and_interruptions_are_left_quiet(codes, quiet):
    assert quiet_status(codes) == quiet


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_ends_it_with_its_status_and_no_traceback(monkeypatch, signum):
    def stopped(args):  # torchrun's handler, once the workers are stopped
        raise api.SignalException(f"Process 1 got signal: {signum}", sigval=signum)

    monkeypatch.setattr("torch.distributed.run.run", stopped)
    assert torchrun.main(["--standalone", "-m", "bertkit.cli", "pretrain"]) == 128 + signum
