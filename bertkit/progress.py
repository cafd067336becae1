"""How far a long job has come, one line on stderr every few seconds.

    bar = Progress("prepare", total=corpus_bytes, unit="MB", scale=1e6, counts=("tokens",))
    for chunk in chunks:
        ...
        bar.update(add=len(chunk_bytes), tokens=n)
    bar.finish()

prints lines such as

    prepare: 12.0/48.2 MB (25%), 6.1 MB/s, 2,481,006 tokens, 1,262,512 tokens/s, elapsed 0:02,
    ETA 0:06

The job is measured in one unit (`done` of `total`: tokens, bytes, lines, steps); the rate and
the ETA come from it, so measure in what the time goes into: an embedder counts tokens, not
texts, because its batches go longest first and texts/s would start slow. Other counts
(texts, tokens beside bytes) are shown with their rates. Without a total, or with a time budget
(`time_limit`), the ETA is the budget left, whichever ends first. `elapsed=` lets a caller
supply its own clock (a training run counts training time only, evaluations left out), and
`line()` gives the text for a caller that writes it elsewhere (a run log).
"""
from __future__ import annotations

import sys
import time
from typing import Mapping, Sequence


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """`what: done/total unit (pct%), rate unit/s, counts, elapsed, ETA`, at most every `every`
    seconds and once more at `finish()`; prints nothing when not `enabled`."""

    def __init__(self, what: str, total: float | None = None, unit: str = "", *,
                 done: float = 0, scale: float = 1.0,
                 counts: Sequence[str] | Mapping[str, int | None] = (),
                 time_limit: float | None = None, enabled: bool = True, every: float = 2.0):
        """done: where the job starts (a resumed run), so that the rate counts only this run's
        work. scale: shown numbers are divided by it (1e6 with unit "MB" for bytes).
        counts: names of further counts to show, or name -> total."""
        self.what, self.total, self.unit, self.scale = what, total, unit, scale
        self.done = self.first = done
        self.counts = {name: 0 for name in counts}
        self.count_totals = dict(counts) if isinstance(counts, Mapping) else {}
        self.time_limit, self.enabled, self.every = time_limit, enabled, every
        self.start = time.perf_counter()
        self.last = float("-inf")
        self.seconds: float | None = None

    def elapsed(self) -> float:
        return self.seconds if self.seconds is not None else time.perf_counter() - self.start

    def update(self, done: float | None = None, *, add: float = 0, elapsed: float | None = None,
               note: str = "", **counts: float) -> None:
        """Set `done` (or `add` to it) and add to the named counts; print a line when `every`
        seconds have passed since the last one."""
        if done is not None:
            self.done = done
        self.done += add
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        if elapsed is not None:
            self.seconds = elapsed
        now = time.perf_counter()
        if self.enabled and now - self.last >= self.every:
            self.last = now
            print(self.line(note=note), file=sys.stderr, flush=True)

    def finish(self, note: str = "") -> None:
        """The last line: the totals and the time taken, no ETA."""
        if self.enabled:
            print(self.line(final=True, note=note), file=sys.stderr, flush=True)

    def line(self, *, final: bool = False, note: str = "") -> str:
        seconds = max(self.elapsed(), 1e-9)
        rate = (self.done - self.first) / seconds
        done = self._number(self.done)
        if self.total is not None:
            done += f"/{self._number(self.total)}"
        parts = [f"{self.what}: {done}{f' {self.unit}' if self.unit else ''}"
                 + (f" ({100 * self.done / self.total:.0f}%)" if self.total else "")]
        if note:
            parts.append(note)
        parts.append(f"{self._rate(rate)}{f' {self.unit}' if self.unit else ''}/s")
        for name, n in self.counts.items():
            of = self.count_totals.get(name)
            parts.append(f"{n:,.0f}{f'/{of:,.0f}' if of is not None else ''} {name}, "
                         f"{self._rate(n / seconds, 1.0)} {name}/s")
        parts.append(f"elapsed {clock(seconds)}")
        if not final:
            eta = None
            if self.total is not None:
                eta = max(self.total - self.done, 0) / max(rate, 1e-9)
            if self.time_limit is not None:
                left = self.time_limit - seconds
                eta = left if eta is None else min(eta, left)
            if eta is not None:
                parts.append(f"ETA {clock(eta)}")
        return ", ".join(parts)

    def _number(self, x: float) -> str:
        return f"{x / self.scale:,.1f}" if self.scale != 1 else f"{x:,.0f}"

    def _rate(self, x: float, scale: float | None = None) -> str:
        x /= self.scale if scale is None else scale
        return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


__all__ = ["Progress", "clock"]
