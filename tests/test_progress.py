"""The one progress reporter: what its line says, how often, and nothing when disabled."""
from __future__ import annotations

import io

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


class _Clock:
    """A clock the test moves by hand: no sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_come_every_few_seconds_not_every_few_updates():
    clock, log = _Clock(), io.StringIO()
    bar = Progress("train", 800, "steps", every=10.0, stream=log, clock=clock)
    for step in range(1, 801):  # a step every 1/8 s: 100 s in all
        clock.now += 0.125
        bar.update(step, note=f"loss {1 / step:.3g}")
    bar.finish()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    # the first update, then one every 10 s (80 steps); the 800th is finish's alone
    assert [line.split(" (")[0] for line in lines] == \
        [f"train: {n}/800 steps" for n in (1, 81, 161, 241, 321, 401, 481, 561, 641, 721, 800)]
    assert lines[1] == "train: 81/800 steps (10%), loss 0.0123, 8 steps/s, elapsed 0:10, " \
                       "ETA 1:29"
    assert lines[-1] == "train: 800/800 steps (100%), loss 0.00125, 8 steps/s, elapsed 1:40"


def test_a_terminal_gets_one_live_bar_with_the_same_figures_and_lines_above_it():
    clock, screen, log = _Clock(), _Terminal(), io.StringIO()
    live = Progress("train", 100, "steps", stream=screen, clock=clock)
    plain = Progress("train", 100, "steps", stream=log, clock=clock, every=0)
    for step in range(1, 51):
        clock.now += 0.5
        for bar in (live, plain):
            bar.update(step, note="loss 2.5")
    live.say("eval step 50  eval_loss 2.4")
    live.finish()
    drawn = screen.getvalue()
    # redrawn in place (carriage returns), not a line per update
    assert drawn.count("\n") == 2 and drawn.count("\r") >= 50
    assert "train:  50%|" in drawn and "eval step 50  eval_loss 2.4\n" in drawn
    # the bar carries the plain line's figures (its percentage drawn by the bar)
    last_plain = log.getvalue().splitlines()[-1]
    assert last_plain == "train: 50/100 steps (50%), loss 2.5, 2 steps/s, elapsed 0:25, ETA 0:25"
    assert "| 50/100 steps, loss 2.5, 2 steps/s, elapsed 0:25, ETA 0:25" in drawn
    assert drawn.rstrip("\n").endswith("| 50/100 steps, loss 2.5, 2 steps/s, elapsed 0:25")


def test_say_writes_lines_as_they_are_without_a_bar_and_nothing_when_disabled_but_lines():
    log = io.StringIO()
    bar = Progress("x", 10, "u", stream=log, enabled=False)
    bar.update(5)
    bar.say("an evaluation")
    bar.finish()
    assert log.getvalue() == "an evaluation\n"
