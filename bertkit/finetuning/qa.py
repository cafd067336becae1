"""Extractive question answering: windows over long contexts, gold positions, best-span decoding,
and the SQuAD 2.0 null answer.

An input is [CLS] question [SEP] context-window [SEP]. A context longer than the room left after
the question is cut into windows of that room, consecutive windows sharing `stride` tokens (the
Hugging Face meaning of stride), so every answer lies whole inside at least one window. Position
0 ([CLS]) stands for "no answer": its start + end score is the null score, and a question is
answered with the empty string when the null score beats the best span by more than a threshold
tuned on dev.

Shapes: N windows, T tokens per window.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from bertkit.files import UserError


@dataclass
class Window:
    """One model input cut from one (question, context) example."""
    example: int
    """Index of the example the window belongs to."""
    input_ids: list[int]
    """[CLS] question [SEP] context[first:first+len] [SEP]."""
    token_type_ids: list[int]
    """0 for [CLS] question [SEP], 1 for the context piece and its [SEP]."""
    context_start: int
    """Position in input_ids of the window's first context token."""
    first: int
    """Index of the window's first token in the whole context."""
    length: int
    """Number of context tokens in the window."""


def window_starts(n_tokens: int, room: int, stride: int) -> list[int]:
    """Starts of windows of `room` tokens over `n_tokens`, each overlapping the last by `stride`.

    The last window ends at the context's end; an empty context still gets one window."""
    if room <= 0:
        raise ValueError("no room for the context")
    if stride >= room:
        raise ValueError(f"stride {stride} must be smaller than the {room} context tokens a "
                         "window holds")
    starts = [0]
    while starts[-1] + room < n_tokens:
        starts.append(starts[-1] + room - stride)
    return starts


def make_windows(example: int, question_ids: list[int], context_ids: list[int], *,
                 max_length: int, stride: int, cls_id: int, sep_id: int,
                 max_question: int | None = None) -> list[Window]:
    """All windows of one example. Raises ValueError when the question leaves no room for the
    context (callers name the file and line)."""
    if max_question is not None:
        question_ids = question_ids[:max_question]
    room = max_length - len(question_ids) - 3
    if room <= stride:
        raise ValueError(f"the question takes {len(question_ids)} of {max_length} tokens, leaving "
                         f"{max(room, 0)} for the context (stride {stride})")
    head = [cls_id, *question_ids, sep_id]
    out = []
    for first in window_starts(len(context_ids), room, stride):
        piece = context_ids[first:first + room]
        out.append(Window(example, head + piece + [sep_id],
                          [0] * len(head) + [1] * (len(piece) + 1),
                          len(head), first, len(piece)))
    return out


def char_span_to_tokens(offsets: list[tuple[int, int]], start_char: int,
                        end_char: int) -> tuple[int, int] | None:
    """(first, last) context token covering characters [start_char, end_char), or None when no
    token overlaps them (an answer inside whitespace)."""
    first = next((i for i, (s, e) in enumerate(offsets) if e > start_char), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end_char), None)
    if first is None or last is None or last < first:
        return None
    return first, last


def target_positions(window: Window, answer: tuple[int, int] | None) -> tuple[int, int]:
    """Start and end positions in the window's input of the answer's tokens (first, last in the
    whole context), or (0, 0) — [CLS] — for no answer or an answer outside this window."""
    if answer is None:
        return 0, 0
    first, last = answer
    if first < window.first or last >= window.first + window.length:
        return 0, 0
    offset = window.context_start - window.first
    return first + offset, last + offset


def best_spans(start: torch.Tensor, end: torch.Tensor, context_start: torch.Tensor,
               context_length: torch.Tensor, max_answer_tokens: int):
    """Best context span of each window under `max_answer_tokens`.

    start, end: [N, T] scores; context_start, context_length: [N]. Returns (score [N], first
    position [N], last position [N], null score [N]) with positions in window coordinates.
    """
    N, T = start.shape
    pos = torch.arange(T, device=start.device)
    in_context = (pos >= context_start[:, None]) & \
        (pos < (context_start + context_length)[:, None])  # [N, T]
    gap = pos[None, :] - pos[:, None]  # [T(start), T(end)]
    legal = (gap >= 0) & (gap < max_answer_tokens)
    pair = start[:, :, None] + end[:, None, :]  # [N, T, T]
    ok = legal & in_context[:, :, None] & in_context[:, None, :]
    pair = pair.float().masked_fill(~ok, float("-inf"))
    score, flat = pair.view(N, -1).max(-1)
    return score, flat // T, flat % T, (start[:, 0] + end[:, 0]).float()


def question_windows(tokenizer, examples, task: dict, *, training: bool = False,
                     skip_no_room: bool | None = None):
    """(window, target) pairs of every example and each context's token offsets.

    `examples` are tasks.QAExample; `task` gives max_length, stride and max_question. With
    `training` the first answer is located (target positions, (0, 0) outside the window),
    else targets are None. Questions that leave no room for the context are skipped with a
    warning counting them when `skip_no_room` (default: when training), else a UserError names
    the file and line.
    """
    skip_no_room = training if skip_no_room is None else skip_no_room
    q = tokenizer.encode_batch([ex.question for ex in examples], add_special_tokens=False,
                               with_offsets=False)
    c = tokenizer.encode_batch([ex.context for ex in examples], add_special_tokens=False)
    out, offsets, skipped, first = [], [], 0, ""
    for i, (ex, qe, ce) in enumerate(zip(examples, q, c)):
        offsets.append(ce.offsets)
        try:
            windows = make_windows(i, qe.ids, ce.ids, max_length=task["max_length"],
                                   stride=task["stride"], cls_id=tokenizer.cls_id,
                                   sep_id=tokenizer.sep_id, max_question=task.get("max_question"))
        except ValueError as e:
            message = f"{ex.source or f'question {ex.id}'}: question {ex.id}: {e}"
            if not skip_no_room:
                raise UserError(message + "; raise --max-length") from None
            skipped += 1
            first = first or message
            continue
        answer = None
        if training and ex.answers:
            a = ex.answers[0]
            answer = char_span_to_tokens(ce.offsets, a.start, a.start + len(a.text))
        out += [(w, target_positions(w, answer) if training else None) for w in windows]
    if skipped:
        warnings.warn(f"skipped {skipped} questions with no room for their context (first: "
                      f"{first})", stacklevel=3)
    return out, offsets


@dataclass
class Prediction:
    text: str
    """The answer, "" for no answer."""
    char_start: int
    """Offset of the answer in the context (-1 for no answer)."""
    span_score: float
    """Best span's start + end score over the example's windows."""
    null_score: float
    """Smallest [CLS] score over the windows (the most confident a window is of an answer)."""
    span_text: str
    """The best span's text even when the null answer wins (for tuning the threshold)."""

    @property
    def null_margin(self) -> float:
        """null - best span: answered when this is at most the threshold."""
        return self.null_score - self.span_score


def decode_answers(windows: list[Window], scores, firsts, lasts, nulls,
                   contexts: list[str], offsets: list[list[tuple[int, int]]],
                   null_threshold: float | None) -> list[Prediction]:
    """One Prediction per example from its windows' best spans.

    `null_threshold` None never answers "" (SQuAD 1.1); otherwise an example is unanswered when
    null score - best span score > threshold.
    """
    best: dict[int, tuple[float, int, int]] = {}
    null: dict[int, float] = {}
    rows = zip(windows, scores.tolist(), firsts.tolist(), lasts.tolist(), nulls.tolist())
    for w, score, first, last, null_score in rows:
        null[w.example] = min(null.get(w.example, float("inf")), null_score)
        if score > best.get(w.example, (float("-inf"),))[0]:
            shift = w.first - w.context_start
            best[w.example] = (score, first + shift, last + shift)
    out = []
    for i, context in enumerate(contexts):
        score, first, last = best.get(i, (float("-inf"), -1, -1))
        if first >= 0:
            start_char, end_char = offsets[i][first][0], offsets[i][last][1]
            text = context[start_char:end_char]
        else:
            start_char, text = -1, ""
        pred = Prediction(text, start_char, score, null.get(i, float("inf")), text)
        if null_threshold is not None and pred.null_margin > null_threshold or first < 0:
            pred.text, pred.char_start = "", -1
        out.append(pred)
    return out


__all__ = ["Window", "window_starts", "make_windows", "char_span_to_tokens", "target_positions",
           "question_windows",
           "best_spans", "Prediction", "decode_answers"]
