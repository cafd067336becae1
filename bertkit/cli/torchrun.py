"""`bertkit-torchrun`: torchrun, with bertkit's one-line errors left as one line.

    bertkit-torchrun --standalone --nproc_per_node 2 -m bertkit.cli pretrain --data D ...

takes every argument torchrun takes and runs torchrun's own launcher. Two things differ. Each
restart of the workers meets in a store of its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, unless
set): torch 2.13's shared store hands restarted workers the dead round's addresses. And when
the ranks failed with bertkit's error exit (2: bad input, a peer that left, a collective past
--dist-timeout; each rank has printed its `error: ...` line) and no rank crashed, it exits 2
quietly, where torchrun prints its ChildFailedError wall (a traceback of the launcher and a
table of the failures) under the error. Any other failure (a traceback, a kill) is reported as
torchrun reports it. torchrun itself cannot be told: it raises the wall for any non-zero exit.

torchrun --max-restarts N restarts the workers after any failure, bertkit's errors too: bad
input then fails N + 1 times alike before the run ends.
"""
from __future__ import annotations

import logging
import os
import sys

USER_ERROR = 2
"""The exit status of a bertkit command that printed one `error: ...` line."""
STOPPED = {130, 128 + 15, -15}
"""A rank that torchrun stopped after another failed: interrupted, or SIGTERM's status."""


def bertkit_errors_only(exitcodes: list[int]) -> bool:
    """Whether the failures of a run are bertkit's errors: the first to fail exited 2, the
    others exited 2 or were stopped by torchrun when the first failed."""
    return bool(exitcodes) and exitcodes[0] == USER_ERROR and all(
        code == USER_ERROR or code in STOPPED for code in exitcodes[1:])


class _NoBertkitErrorLine(logging.Filter):
    """Drops torchrun's "failed (exitcode: 2)" log line, the start of its wall."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg.startswith("failed (exitcode: %s)")
                    and record.args and record.args[0] == USER_ERROR)


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.run import parse_args, run

    # torch 2.13's torchrun keeps one TCPStore across restarts, where restarted workers of
    # several nodes read the addresses of the dead round (bertkit.pretraining.recipe.restart_store)
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    args = parse_args(argv)
    api.logger.addFilter(_NoBertkitErrorLine())
    try:
        run(args)
    except ChildFailedError as e:
        failures = sorted(e.failures.values(), key=lambda f: f.timestamp)
        if bertkit_errors_only([f.exitcode for f in failures]):
            return USER_ERROR
        return record(_raise)(e)  # torchrun's report: the error files and the table
    return 0


def _raise(e: BaseException):
    raise e


if __name__ == "__main__":
    sys.exit(main())
