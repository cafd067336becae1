"""The one progress reporter: what its line says, how often, and nothing when disabled."""
from __future__ import annotations

import pytest

from bertkit.progress import Progress, clock


def test_clock():
    assert [clock(s) for s in (0, 59.9, 61, 3600 + 62, -5)] == ["0:00", "0:59", "1:01",
                                                                  "1:01:02", "0:00"]


def test_line_says_done_rate_counts_and_eta():
    bar = Progress("embed", 1000, "tokens", counts={"texts": 40}, enabled=False)
    bar.update(add=250, texts=10, elapsed=5.0)
    assert bar.line() == ("embed: 250/1,000 tokens (25%), 50 tokens/s, 10/40 texts, "
                          "2 texts/s, elapsed 0:05, ETA 0:15")
    bar.update(add=750, texts=30, elapsed=10.0)
    assert bar.line(final=True) == ("embed: 1,000/1,000 tokens (100%), 100 tokens/s, "
                                    "40/40 texts, 4 texts/s, elapsed 0:10")


def test_scaled_units_a_resumed_start_and_a_note():
    bar = Progress("prepare", 10e6, "MB", done=4e6, scale=1e6, counts=("tokens",),
                   enabled=False)
    bar.update(6e6, tokens=500_000, elapsed=2.0, note="")
    # the rate counts this run's 2 MB only, not the 4 MB done before it resumed
    assert bar.line(note="shard 3") == ("prepare: 6.0/10.0 MB (60%), shard 3, 1 MB/s, "
                                        "500,000 tokens, 250,000 tokens/s, elapsed 0:02, "
                                        "ETA 0:04")


def test_a_time_budget_bounds_the_eta():
    bar = Progress("train", 1000, "steps", time_limit=60.0, enabled=False)
    bar.update(10, elapsed=30.0)  # 1000 steps at this rate would take 50 minutes
    assert bar.line().endswith("elapsed 0:30, ETA 0:30")
    unbounded = Progress("train", None, "steps", time_limit=60.0, enabled=False)
    unbounded.update(10, elapsed=45.0)
    assert unbounded.line() == "train: 10 steps, 0.222 steps/s, elapsed 0:45, ETA 0:15"


def test_prints_at_most_every_few_seconds_and_once_at_the_end(capsys):
    bar = Progress("lines", 100, "lines", every=3600)
    for _ in range(10):
        bar.update(add=10)
    bar.finish()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("lines: 10/100 lines (10%)")
    assert err[1].startswith("lines: 100/100 lines (100%)") and "ETA" not in err[1]
    quiet = Progress("lines", 100, "lines", enabled=False)
    quiet.update(add=100)
    quiet.finish()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("rate, shown", [(0.5, "0.5"), (12.345, "12.3"), (1234.5, "1,234")])
def test_rates_keep_three_digits_below_a_hundred(rate, shown):
    bar = Progress("x", None, "u", enabled=False)
    bar.update(rate * 10, elapsed=10.0)
    assert f", {shown} u/s," in bar.line()
