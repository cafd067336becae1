"""How far a long job has come: one live bar on a terminal, plain lines every few seconds in a
log. The one progress reporter of bertkit: training, preparing shards, vocabularies, word
vectors, embedding and translating all report through it.

    bar = Progress("prepare", total=corpus_bytes, unit="MB", scale=1e6, counts=("tokens",))
    for chunk in chunks:
        ...
        bar.update(add=len(chunk_bytes), tokens=n)
        bar.say("a line for the reader")    # above the bar on a terminal
    bar.finish()

On a terminal (the stream's `isatty()`) it draws one bar with tqdm, redrawn a few times a
second, and `say` writes its lines above it. Anywhere else (a log file, a pipe) it prints the
same figures as a plain line at most every `every` seconds (10: an hour's run writes a few
hundred lines, not thousands), and once more at `finish()`:

    prepare: 12.0/48.2 MB (25%), 6.1 MB/s, 2,481,006 tokens, 1,262,512 tokens/s, elapsed 0:02,
    ETA 0:06

The job is measured in one unit (`done` of `total`: tokens, bytes, lines, steps); the rate and
the ETA come from it, so measure in what the time goes into: an embedder counts tokens, not
texts, because its batches go longest first and texts/s would start slow. Other counts
(texts, tokens beside bytes) are shown with their rates; `note` carries figures the caller
computes (a training run's loss and tokens/s), kept until the next note. Without a total, or
with a time budget (`time_limit`), the ETA is the budget left, whichever ends first.
`elapsed=` lets a caller supply its own clock (a training run counts training time only,
evaluations left out); `clock` is the time source, injectable for tests.

Why tqdm: it is the bar transformers' Trainer and sentence-transformers draw (what people
expect on a terminal), it is one small pure-Python package with no dependencies, and it keeps
the bar below lines written through it (`tqdm.write`). It only draws: every figure is
computed here, so the bar and the plain lines say the same thing.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Callable, Mapping, Sequence, TextIO

REDRAW = 0.25
"""Seconds between redraws of a live bar."""


def counted(n: int, noun: str) -> str:
    """"1 rank", "2 ranks", "1,745 words": a count and its noun, as every message says one."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """`what: done/total unit (pct%), note, rate unit/s, counts, elapsed, ETA`: a live bar on
    a terminal, a line at most every `every` seconds elsewhere, the last at `finish()`;
    no progress when not `enabled` (`say` still writes)."""

    def __init__(self, what: str, total: float | None = None, unit: str = "", *,
                 done: float = 0, scale: float = 1.0,
                 counts: Sequence[str] | Mapping[str, int | None] = (),
                 time_limit: float | None = None, enabled: bool = True, every: float = 10.0,
                 rate: bool = True, stream: TextIO | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        """done: where the job starts (a resumed run), so that the rate counts only this run's
        work. scale: shown numbers are divided by it (1e6 with unit "MB" for bytes).
        counts: names of further counts to show, or name -> total. rate: show the rate of
        `unit` (a training run shows its tokens/s in the note instead of steps/s).
        stream: where to write (None: sys.stderr at each write); live: draw a bar (None: when
        the stream is a terminal)."""
        self.what, self.total, self.unit, self.scale = what, total, unit, scale
        self.done = self.first = done
        self.counts = {name: 0 for name in counts}
        self.count_totals = dict(counts) if isinstance(counts, Mapping) else {}
        self.time_limit, self.enabled, self.every, self.rate = time_limit, enabled, every, rate
        self.stream, self.live, self.clock = stream, live, clock
        self.start = clock()
        self.last = float("-inf")
        self.seconds: float | None = None
        self.note = ""
        self.bar = None

    def elapsed(self) -> float:
        return self.seconds if self.seconds is not None else self.clock() - self.start

    def update(self, done: float | None = None, *, add: float = 0, elapsed: float | None = None,
               note: str | None = None, **counts: float) -> None:
        """Set `done` (or `add` to it), add to the named counts, replace the note; redraw the
        bar, or print a line when `every` seconds have passed since the last one."""
        if done is not None:
            self.done = done
        self.done += add
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        if elapsed is not None:
            self.seconds = elapsed
        if note is not None:
            self.note = note
        if not self.enabled:
            return
        if not self._live() and self.total is not None and self.done >= self.total:
            return  # the end: finish() says it, once
        now = self.clock()
        if now - self.last >= (REDRAW if self._live() else self.every):
            self.last = now
            if self._live():
                self._draw()
            else:
                self._write(self.line())

    def say(self, text: str) -> None:
        """A line of the job's own (an evaluation's figures): above a live bar, else as is."""
        if self.bar is not None:
            self.bar.write(text, file=self._out())
            self._out().flush()
        else:
            self._write(text)

    def finish(self, note: str | None = None, done: float | None = None) -> None:
        """The last line: the totals and the time taken, no ETA; a live bar stays drawn.
        `done`: where the job ended, if updates stopped before it."""
        if note is not None:
            self.note = note
        if done is not None:
            self.done = done
        if not self.enabled:
            return
        if self._live():
            self._draw(final=True)
            self.bar.close()
            self.bar = None
        else:
            self._write(self.line(final=True))

    def close(self) -> None:
        """Leave a live bar where it is (a job stopped by an error), without a final line."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def line(self, *, final: bool = False, note: str | None = None) -> str:
        """The figures as one line: `what: ` and `figures()`."""
        return f"{self.what}: {self.figures(final=final, note=note)}"

    def figures(self, *, final: bool = False, note: str | None = None,
                percent: bool = True) -> str:
        """done/total unit (pct%), note, rate, counts, elapsed, ETA; `percent` False where a
        bar shows it."""
        seconds = max(self.elapsed(), 1e-9)
        rate = (self.done - self.first) / seconds
        unit = f" {self.unit}" if self.unit else ""
        done = self._number(self.done)
        if self.total is not None:
            done += f"/{self._number(self.total)}"
        parts = [f"{done}{unit}" + (f" ({100 * self.done / self.total:.0f}%)"
                                    if self.total and percent else "")]
        note = self.note if note is None else note
        if note:
            parts.append(note)
        if self.rate:
            parts.append(f"{self._rate(rate)}{unit}/s")
        for name, n in self.counts.items():
            of = self.count_totals.get(name)
            parts.append(f"{n:,.0f}{f'/{of:,.0f}' if of is not None else ''} {name}, "
                         f"{self._rate(n / seconds, 1.0)} {name}/s")
        parts.append(f"elapsed {clock(seconds)}")
        if not final and (eta := self.eta(rate, seconds)) is not None:
            parts.append(f"ETA {clock(eta)}")
        return ", ".join(parts)

    def eta(self, rate: float, seconds: float) -> float | None:
        """Seconds left: the work left at this rate, or the time budget left, the sooner."""
        eta = None
        if self.total is not None:
            eta = max(self.total - self.done, 0) / max(rate, 1e-9)
        if self.time_limit is not None:
            left = self.time_limit - seconds
            eta = left if eta is None else min(eta, left)
        return eta

    # Writing ----------------------------------------------------------------------------------

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def drawing(self) -> bool:
        """Whether this shows a live bar (its stream is a terminal), not periodic lines."""
        return self._live()

    def _live(self) -> bool:
        if self.live is None:
            isatty = getattr(self._out(), "isatty", None)
            self.live = bool(isatty and isatty())
        return self.live

    def _size(self) -> tuple[int, int]:
        """The terminal's columns and lines; where it says 0, $COLUMNS / $LINES or 80 x 24."""
        try:
            columns, lines = os.get_terminal_size(self._out().fileno())
        except (AttributeError, OSError, ValueError):
            columns = lines = 0
        fallback = shutil.get_terminal_size()
        return columns or fallback.columns, lines or fallback.lines

    def _write(self, text: str) -> None:
        # one write per line: two ranks' lines never interleave within one
        out = self._out()
        out.write(text + "\n")
        out.flush()

    def _draw(self, final: bool = False) -> None:
        if self.bar is None:
            from tqdm import tqdm  # imported when a terminal shows a bar

            self.bar = tqdm(total=self.total or None, file=self._out(), leave=True,
                            mininterval=0, miniters=0, desc=self.what)
        # followed as the terminal is resized; a size of 0 (a pseudo-terminal that has none)
        # would make tqdm draw nothing
        self.bar.ncols, self.bar.nrows = self._size()
        # the figures are ours, tqdm draws the bar: both modes say the same
        figures = self.figures(final=final, percent=False).replace("{", "{{").replace("}", "}}")
        self.bar.bar_format = ("{desc}: {percentage:3.0f}%|{bar}| " if self.total
                               else "{desc}: ") + figures
        self.bar.n = min(self.done, self.total) if self.total else self.done
        self.bar.refresh()

    def _number(self, x: float) -> str:
        return f"{x / self.scale:,.1f}" if self.scale != 1 else f"{x:,.0f}"

    def _rate(self, x: float, scale: float | None = None) -> str:
        x /= self.scale if scale is None else scale
        return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


__all__ = ["Progress", "clock"]
