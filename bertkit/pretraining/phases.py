"""Context phases: a pretraining run cut into phases of growing sequence length, each with its
share of the run and, for a "modern" model, the rotary base of its global layers (and of its
local layers).

BERT pretrained 90% of its steps at 128 tokens and the rest at 512; ModernBERT trained at
1,024 tokens with a rotary base of 10,000, then extended its context to 8,192 tokens at a base
of 160,000 (Warner et al. 2024, "Smarter, Better, Faster, Longer"). Short rows cost less
attention per token and, early on, learn as much; the larger base turns the far positions
slowly enough to tell them apart.

    phases = parse_phases(["1024:10000@0.9", "8192:160000@0.1"])
    schedule = ContextSchedule([short, long], phases, rope=set_base)  # the batches of each
    schedule.set_progress(0.95); next(iter(schedule))                 # a long batch, base 160k

The training loop tells the schedule how far the run is (`set_progress`, by steps or by the
clock); the schedule hands out the batches of the phase that share of the run falls in and,
on entering a phase, gives its rotary bases to `rope` before its first batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

from bertkit.files import UserError

SPELLING = "LENGTH[:BASE[/LOCAL]]@FRACTION"
MIN_SEQ_LEN = 8


@dataclass(frozen=True)
class ContextPhase:
    """One phase of a run: its rows' length, its share of the run, its rotary base."""
    seq_len: int
    """Tokens per sequence, special tokens included."""
    fraction: float
    """Share of the run (steps, or the clock for a time budget)."""
    rope_base: float | None = None
    """Base of the global layers' rotary frequencies ("modern"); none: the phase before's
    (the first phase's: the model's own)."""
    local_rope_base: float | None = None
    """Base of the local layers' rotary frequencies ("modern" with local attention); none:
    the phase before's (the first phase's: the model's own)."""

    @property
    def based(self) -> bool:
        """Whether the phase gives a rotary base, either."""
        return self.rope_base is not None or self.local_rope_base is not None

    def spelled(self) -> str:
        """As --phases takes it: "1024:10000@0.9", "8192:160000/10000@0.1"."""
        bases = ("" if self.rope_base is None else f"{self.rope_base:.12g}") + (
            "" if self.local_rope_base is None else f"/{self.local_rope_base:.12g}")
        return f"{self.seq_len}{':' + bases if bases else ''}@{self.fraction:.12g}"


def parse_phases(texts: Iterable[str]) -> list[ContextPhase]:
    """The phases of --phases: each text one or more LENGTH[:BASE[/LOCAL]]@FRACTION, comma
    separated; lengths that never shrink, positive bases, fractions above 0 that sum to 1.
    Anything else is one UserError naming the phase."""
    phases = [_phase(part.strip()) for text in texts for part in str(text).split(",")
              if part.strip()]
    if not phases:
        raise UserError(f"--phases needs at least one phase, {SPELLING}")
    for before, after in zip(phases, phases[1:]):
        if after.seq_len < before.seq_len:
            raise UserError(f"--phases: each phase is at least as long as the one before "
                            f"({after.spelled()} follows {before.spelled()})")
    total = math.fsum(p.fraction for p in phases)
    if abs(total - 1.0) > 1e-6:
        raise UserError(f"--phases: the fractions must sum to 1 (they sum to {total:g})")
    return phases


def _phase(text: str) -> ContextPhase:
    """One LENGTH[:BASE[/LOCAL]]@FRACTION."""
    head, at, share = text.partition("@")
    if not at:
        raise UserError(f"--phases: {text!r} has no @FRACTION ({SPELLING})")
    length, colon, bases = head.partition(":")
    base, slash, local = bases.partition("/")
    try:
        phase = ContextPhase(int(length), float(share), float(base) if base else None,
                             float(local) if slash else None)
    except ValueError:
        raise UserError(f"--phases: {text!r} is not {SPELLING} (e.g. 1024:10000@0.9)") from None
    if phase.seq_len < MIN_SEQ_LEN:
        raise UserError(f"--phases: {text!r}: a phase's length must be at least {MIN_SEQ_LEN}")
    if not (math.isfinite(phase.fraction) and 0.0 < phase.fraction <= 1.0):
        raise UserError(f"--phases: {text!r}: a phase's fraction must be above 0 and at most 1")
    for value in (phase.rope_base, phase.local_rope_base):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"--phases: {text!r}: a rotary base must be a positive number")
    return phase


def phase_batch_size(phase: ContextPhase, longest: int, batch_size: int) -> int:
    """Sequences per batch of `phase`: about the tokens of a `batch_size` batch of the
    longest phase's `longest` tokens, in rows of the phase's length."""
    if phase.seq_len >= longest:
        return batch_size
    return max(1, round(batch_size * longest / phase.seq_len))


def phase_ends(phases: list[ContextPhase]) -> list[float]:
    """Where each phase but the last ends, as a share of the run."""
    ends, total = [], 0.0
    for phase in phases[:-1]:
        total += phase.fraction
        ends.append(total)
    return ends


class ContextSchedule:
    """The batches of each phase in turn: those of phase i until the run is past its end
    (`phase_ends`), then the next phase's (see the module docstring). Each phase's batches are
    of the same corpus; give each its own seed, so that it draws its own order and cut points
    rather than replaying the first batches at another length.

    `rope(phase)`: told each phase that gives a base, before the phase's first batch (the
    plan gives every phase its bases where any does). A resume restores every phase's
    position, and the loop's progress picks the phase again, and its base.
    """

    def __init__(self, batches: list, phases: list[ContextPhase],
                 rope: Callable[[ContextPhase], None] | None = None):
        if len(batches) != len(phases) or len(phases) < 2:
            raise UserError("a context schedule needs two phases or more, and batches for each")
        self.ends = phase_ends(phases)
        if not all(0.0 < end < 1.0 for end in self.ends):
            raise UserError(f"the switch to long sequences must come inside the run "
                            f"(0 < fraction < 1), got {self.ends}")
        self.batches, self.phases, self.rope = batches, phases, rope
        self.progress = 0.0

    def set_progress(self, fraction: float) -> None:
        self.progress = fraction
        for batches in self.batches:
            batches.set_progress(fraction)

    def __iter__(self):
        for i, end in enumerate(self.ends):
            if self.progress >= end:
                continue
            self._enter(i)
            rows = iter(self.batches[i])
            try:
                for batch in rows:
                    yield batch
                    if self.progress >= end:
                        break
            finally:
                rows.close()  # stops its prefetching thread
        self._enter(len(self.ends))
        yield from self.batches[-1]

    def first_batches(self) -> list[dict]:
        """A batch of each phase, every position left where it was: the shapes a compiled
        run compiles for before its clock starts (`training.loop`), so that a phase change
        compiles nothing inside the timed run."""
        made = []
        for batches in self.batches:
            saved = batches.state_dict()
            rows = iter(batches)
            try:
                made.append(next(rows))
            finally:
                rows.close()
            batches.load_state_dict(saved)
        return made

    def _enter(self, i: int) -> None:
        """Phase i begins: its rotary bases to the model."""
        if self.rope is not None and self.phases[i].based:
            self.rope(self.phases[i])

    def state_dict(self) -> dict:
        states = [batches.state_dict() for batches in self.batches]
        if len(states) == 2:  # as short-then-long runs saved it: their checkpoints resume
            return {"early": states[0], "late": states[1]}
        return {"phases": states}

    def load_state_dict(self, state: dict) -> None:
        states = state["phases"] if "phases" in state else [state["early"], state["late"]]
        if len(states) != len(self.batches):
            raise UserError(f"the data position was saved with {len(states)} context phases, "
                            f"this run has {len(self.batches)}")
        for batches, saved in zip(self.batches, states):
            batches.load_state_dict(saved)


__all__ = ["ContextPhase", "ContextSchedule", "parse_phases", "phase_batch_size",
           "phase_ends", "SPELLING"]
