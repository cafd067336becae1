"""`bertkit-torchrun`: torchrun, with bertkit's one-line errors left as one line.

    bertkit-torchrun --standalone --nproc_per_node 2 -m bertkit.cli pretrain --data D ...

takes every argument torchrun takes and runs torchrun's own launcher. Three things differ. Each
restart of the workers meets in a store of its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, unless
set): torch 2.13's shared store hands restarted workers the dead round's addresses. Unless
OMP_NUM_THREADS is set, the ranks of a machine share its physical cores, where torchrun gives
each one thread. And when
the ranks failed with bertkit's error exit (2: bad input, a collective past --dist-timeout;
each such rank has printed its `error: ...` line) and no rank crashed, it exits 2 quietly, where
torchrun prints its ChildFailedError wall (a traceback of the launcher and a table of the
failures) under the error. A rank whose peer's process ended (a full disk on rank 0, a kill)
prints nothing under this launcher and exits 3: the rank that left said why, or torchrun's
wall reports its kill; a node whose ranks all exited 3 lost a rank of another node, and says
that in one line (exit 2). A run stopped by Ctrl-C or SIGTERM ends quietly too,
where torchrun adds its traceback or wall: sent to the launcher, it exits 128 + the signal's
number; sent to one worker, every rank saves, stops and exits 130, and so does it. Any other failure (a traceback, a kill) is reported as
torchrun reports it. torchrun itself cannot be told: it raises the wall for any non-zero exit.
The ranks of a machine that fail with the same line (every rank reads the same command line)
print it once: the launcher names a folder where the first to say a line marks it said.

torchrun --max-restarts N restarts the workers after any failure, bertkit's errors too: bad
input then fails N + 1 times alike before the run ends.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile

from bertkit.files import SaidElsewhere

USER_ERROR = 2
"""The exit status of a bertkit command that printed one `error: ...` line."""
PEER_LEFT = SaidElsewhere.status
"""The exit status of a rank, silent, whose collective failed as another rank's process ended
(that rank printed why, or torchrun reports its kill)."""
INTERRUPTED = 130
"""The exit status of a run stopped by Ctrl-C or SIGTERM after it saved a checkpoint."""
STOPPED = {130, 128 + 15, -15}
"""A rank that torchrun stopped after another failed: interrupted, or SIGTERM's status."""
ELSEWHERE = ("error: a rank on another node left the run (its process ended: that node's "
             "output says why)")
"""The line for a node whose ranks all failed because a rank of another node left."""


def quiet_status(exitcodes: list[int]) -> int | None:
    """The status to exit with, quietly, when the failures of a run are bertkit's own: the
    first to fail printed its error line (2) or saved and stopped (130), the others did the
    same, were stopped by torchrun when the first failed, or lost it as a peer (3, in any
    order: the peer may end first). Every failure a lost peer: 2 (the cause is on another
    node, `ELSEWHERE`). None: torchrun's report."""
    own = [code for code in exitcodes if code != PEER_LEFT]
    if exitcodes and not own:
        return USER_ERROR
    if not own or own[0] not in (USER_ERROR, INTERRUPTED):
        return None
    first = own[0]
    if all(code == first or code in STOPPED for code in own[1:]):
        return first
    return None


class _NoBertkitErrorLine(logging.Filter):
    """Drops torchrun's "failed (exitcode: 2)" log line (and 3's and 130's), the start of its
    wall."""

    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg.startswith("Sending process %s closing signal"):
            # torchrun stops the other ranks before it logs why: whether the line belongs
            # to a crash's report or to bertkit's error is known when the run ends (`report`)
            self.held.append(record)
            return False
        return not (record.msg.startswith("failed (exitcode: %s)")
                    and record.args and record.args[0] in (USER_ERROR, PEER_LEFT, INTERRUPTED))

    def report(self, logger: logging.Logger) -> None:
        """The held lines, where torchrun's report of a failure follows them."""
        logger.removeFilter(self)
        for record in self.held:
            logger.handle(record)


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.run import determine_local_world_size, parse_args, run

    from bertkit.runtime import physical_cores

    # torch 2.13's torchrun keeps one TCPStore across restarts, where restarted workers of
    # several nodes read the addresses of the dead round (bertkit.training.distributed.restart_store)
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    args = parse_args(argv)
    if "OMP_NUM_THREADS" not in os.environ:
        # torchrun gives every rank 1 thread when it starts several, and a rank cannot tell
        # that 1 from the user's: the physical cores shared among the local ranks, as one
        # process takes them all (bertkit.cli.pretraining.tune_runtime)
        local = determine_local_world_size(args.nproc_per_node)
        os.environ["OMP_NUM_THREADS"] = str(max(1, physical_cores() // local))
    quiet = _NoBertkitErrorLine()
    api.logger.addFilter(quiet)
    os.environ[SaidElsewhere.launcher] = "1"  # this launcher reports a rank whose peer left
    try:
        with tempfile.TemporaryDirectory(prefix="bertkit-torchrun-") as lines:
            os.environ[SaidElsewhere.lines] = lines  # one error line a node, not one a rank
            run(args)
    except api.SignalException as e:
        # Ctrl-C or SIGTERM to the launcher: torchrun passed it to the workers, which saved a
        # checkpoint and said so (or, stuck, exited); torchrun would add its traceback
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        failures = sorted(e.failures.values(), key=lambda f: f.timestamp)
        codes = [f.exitcode for f in failures]
        status = quiet_status(codes)
        if status is not None:
            if set(codes) == {PEER_LEFT}:
                print(ELSEWHERE, file=sys.stderr, flush=True)
            return status
        quiet.report(api.logger)
        return record(_raise)(e)  # torchrun's report: the error files and the table
    finally:
        api.logger.removeFilter(quiet)  # main again in one process (the tests) adds its own
    return 0


def _raise(e: BaseException):
    raise e


if __name__ == "__main__":
    sys.exit(main())
