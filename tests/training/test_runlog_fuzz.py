"""Property test of the run log: a mutated metrics.jsonl reads as records the loss plots can
draw, or raises a one-line UserError naming the file; nothing else escapes."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.training.runlog import loss_curves, read_metrics

VALID = "".join(json.dumps(r) + "\n" for r in [
    {"step": 1, "split": "train", "tokens": 64, "seconds": 0.5, "loss": 5.1, "mlm_loss": 4.9},
    {"step": 2, "split": "train", "tokens": 128, "seconds": 1.0, "loss": 4.2, "mlm_loss": 4.0},
    {"step": 2, "split": "eval", "seconds": 1.0, "eval_loss": 4.4},
]).encode()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_mutated_run_logs_read_or_fail_naming_the_file(fuzz, data):
    path = fuzz.dir / "metrics.jsonl"
    path.write_bytes(fuzz.mutated(data, VALID))
    records = fuzz.reads_or_names(read_metrics, path)
    if records is not None:
        for xs, ys in loss_curves(records).values():
            assert len(xs) == len(ys)


def test_the_valid_log_reads(fuzz):
    path = fuzz.dir / "valid-metrics.jsonl"
    path.write_bytes(VALID)
    assert set(loss_curves(read_metrics(path))) == {"train loss", "train mlm_loss", "eval_loss"}
