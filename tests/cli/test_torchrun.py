"""bertkit-torchrun: quiet when every rank failed with bertkit's one-line error, torchrun's
own report for anything else (the runs themselves: tests/pretraining/test_elastic.py)."""
from __future__ import annotations

import contextlib
import os
import signal

import pytest
from torch.distributed.elastic.multiprocessing import api

from bertkit.cli import torchrun
from bertkit.cli.torchrun import quiet_status


@pytest.mark.parametrize("codes,quiet", [
    ([2], 2), ([2, 2], 2), ([2, -15], 2), ([2, 143], 2), ([2, 130], 2),
    ([130, 130], 130), ([130, -15], 130), ([130, 2], None),
    ([1], None), ([-9], None), ([2, 1], None), ([-9, 2], None), ([-15, 2], None), ([], None),
    # 3: a rank whose peer left, silent: a consequence, in any order; all of them: 2
    ([2, 3], 2), ([3, 2], 2), ([3, 2, -15], 2), ([130, 3], 130), ([3, 3], 2), ([3], 2),
    ([-9, 3], None), ([3, -9], None), ([3, 1], None),
])
def test_only_bertkit_errors_and_interruptions_are_left_quiet(codes, quiet):
    assert quiet_status(codes) == quiet


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_ends_it_with_its_status_and_no_traceback(monkeypatch, signum):
    def stopped(args):  # torchrun's handler, once the workers are stopped
        raise api.SignalException(f"Process 1 got signal: {signum}", sigval=signum)

    monkeypatch.setattr("torch.distributed.run.run", stopped)
    assert torchrun.main(["--standalone", "-m", "bertkit.cli", "pretrain"]) == 128 + signum


@pytest.mark.parametrize("given,threads", [(None, "8"), ("3", "3")])
def test_the_ranks_of_a_machine_share_its_cores_unless_omp_num_threads_says(monkeypatch, given,
                                                                            threads):
    """torchrun gives every rank of several 1 thread, which a rank cannot tell from the user's."""
    seen = []
    monkeypatch.setenv("OMP_NUM_THREADS", "x")  # put back after the test
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS")
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    monkeypatch.setattr("bertkit.runtime.physical_cores", lambda: 16)
    monkeypatch.setattr("torch.distributed.run.run",
                        lambda args: seen.append(os.environ["OMP_NUM_THREADS"]))
    assert torchrun.main(["--standalone", "--nproc_per_node", "2", "-m", "bertkit.cli"]) == 0
    assert seen == [threads]


def _failed(monkeypatch, *codes):
    """torchrun's run, as it ends when the workers failed with `codes`, in that order."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(args):
        assert os.environ["BERTKIT_TORCHRUN"] == "1"  # the workers leave the peer's line out
        raise ChildFailedError("bertkit.cli", {rank: ProcessFailure(rank, 100 + rank, code, "")
                                               for rank, code in enumerate(codes)})

    monkeypatch.setenv("BERTKIT_TORCHRUN", "0")  # put back after the test
    monkeypatch.setattr("torch.distributed.run.run", failed)
    return torchrun.main(["--standalone", "--nproc_per_node", str(len(codes)), "-m",
                          "bertkit.cli"])


def test_a_rank_that_said_why_and_one_whose_peer_left_end_in_its_line_alone(monkeypatch,
                                                                              capsys):
    assert _failed(monkeypatch, 2, 3) == 2
    assert capsys.readouterr().err == ""  # the rank's line was its own output


def test_a_node_whose_ranks_all_lost_a_peer_says_that_it_was_elsewhere(monkeypatch, capsys):
    assert _failed(monkeypatch, 3, 3) == 2
    assert capsys.readouterr().err.splitlines() == [torchrun.ELSEWHERE]


def test_the_ranks_of_a_node_print_one_error_line_once(monkeypatch, capsys, tmp_path):
    """Every rank reads the same command line, so bad input fails each alike: under
    bertkit-torchrun the first rank of a node to fail says it, the others exit 2 silent."""
    from bertkit.cli.main import main

    bad = ["pretrain", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "o")]
    monkeypatch.setenv("BERTKIT_TORCHRUN_LINES", str(tmp_path))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert [main(bad), main(bad)] == [2, 2]  # rank 0, rank 1
    first = capsys.readouterr().err.splitlines()
    assert len(first) == 1 and first[0].startswith("error: ")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # a restart says it again
    assert [main(bad), main(bad)] == [2, 2]
    assert capsys.readouterr().err.splitlines() == first
    other = ["pretrain", "--data", str(tmp_path / "d"), "--max-steps", "0"]
    assert main(other) == 2  # another line is said, whatever came before
    assert capsys.readouterr().err.startswith("error: ")
    monkeypatch.delenv("BERTKIT_TORCHRUN_LINES")  # plain torchrun: every rank says it
    assert [main(bad), main(bad)] == [2, 2]
    assert capsys.readouterr().err.splitlines() == first * 2


def test_the_launcher_gives_its_workers_a_folder_for_their_lines_and_removes_it(monkeypatch):
    seen = []

    def run(args):
        folder = os.environ["BERTKIT_TORCHRUN_LINES"]
        seen.append((folder, os.path.isdir(folder)))

    monkeypatch.setenv("BERTKIT_TORCHRUN_LINES", "x")  # put back after the test
    monkeypatch.setattr("torch.distributed.run.run", run)
    assert torchrun.main(["--standalone", "-m", "bertkit.cli"]) == 0
    (folder, existed), = seen
    assert existed and not os.path.exists(folder)


@pytest.mark.parametrize("codes,said", [((2, -15), False), ((-9, -15), True)])
def test_torchruns_line_on_the_ranks_it_stops_goes_with_its_report_alone(monkeypatch, codes,
                                                                          said):
    """torchrun logs "Sending process N closing signal SIGTERM" before it knows why the first
    rank failed: kept for a crash's report, left out under bertkit's one-line error."""
    import logging

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(args):
        api.logger.warning("Sending process %s closing signal %s", 101, "SIGTERM")
        raise ChildFailedError("bertkit.cli", {rank: ProcessFailure(rank, 100 + rank, code, "")
                                               for rank, code in enumerate(codes)})

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    api.logger.addHandler(handler)
    monkeypatch.setattr("torch.distributed.run.run", failed)
    monkeypatch.setattr(torchrun, "record", lambda f: f, raising=False)
    try:
        with pytest.raises(ChildFailedError) if said else contextlib.nullcontext():
            torchrun.main(["--standalone", "--nproc_per_node", "2", "-m", "bertkit.cli"])
    finally:
        api.logger.removeHandler(handler)
    assert seen == (["Sending process 101 closing signal SIGTERM"] if said else [])
