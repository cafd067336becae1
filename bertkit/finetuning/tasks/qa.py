"""Extractive question answering: windows over long contexts, gold positions, best-span decoding,
and the SQuAD 2.0 null answer.

An input is [CLS] question [SEP] context-window [SEP]. A context longer than the room left after
the question is cut into windows of that room, consecutive windows sharing `stride` tokens (the
Hugging Face meaning of stride), so every answer lies whole inside at least one window. Position
0 ([CLS]) stands for "no answer": its start + end score is the null score, and a question is
answered with the empty string when the null score beats the best span by more than a threshold
tuned on dev.

The task reads SQuAD 1.1 / 2.0 JSON and scores with the official SQuAD metrics; the model is
BertForQuestionAnswering.

Shapes: N windows, T tokens per window.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

import torch

from bertkit.files import UserError, read_jsonl
from bertkit.finetuning import baselines, distillation, metrics
from bertkit.finetuning.heads import Parts, QuestionAnswerer
from bertkit.finetuning.inputs import Item, pad_inputs
from bertkit.finetuning.readers import QAExample, detect_format, read_squad
from bertkit.finetuning.task import Defaults, Task, fitted, model_inputs


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
    position [N], last position [N], null score [N], probabilities [N, 2]) with positions in
    window coordinates. A span is chosen by its start + end score, as BERT's SQuAD script
    chooses; its probability is P(start) x P(end), each a softmax over the window's context
    and [CLS] (transformers' question-answering pipeline's score), beside that of the null
    answer, P(start = end = [CLS]).
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
    first, last = flat // T, flat % T
    candidates = in_context | (pos == 0)  # [N, T]: what an answer can start or end at
    log_p_start = start.float().masked_fill(~candidates, float("-inf")).log_softmax(-1)
    log_p_end = end.float().masked_fill(~candidates, float("-inf")).log_softmax(-1)
    rows = torch.arange(N, device=start.device)
    span = log_p_start[rows, first] + log_p_end[rows, last]
    null = log_p_start[:, 0] + log_p_end[:, 0]
    return score, first, last, (start[:, 0] + end[:, 0]).float(), \
        torch.stack([span, null], -1).exp()


def question_windows(tokenizer, examples, *, max_length: int, stride: int,
                     max_question: int | None = None, training: bool = False,
                     skip_no_room: bool | None = None):
    """(window, target) pairs of every example and each context's token offsets.

    `examples` are readers.QAExample; windows are cut per make_windows. With
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
            windows = make_windows(i, qe.ids, ce.ids, max_length=max_length, stride=stride,
                                   cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                                   max_question=max_question)
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
class AnswerPrediction:
    """The answer found for one question."""
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
    span_probability: float
    """P(start) x P(end) of the best span in its window (best_spans)."""
    null_probability: float
    """P(no answer) of the window most confident of an answer, as null_score's."""

    @property
    def probability(self) -> float:
        """The answer's probability: the span's, or for "" the null answer's."""
        return self.span_probability if self.text else self.null_probability

    @property
    def null_margin(self) -> float:
        """null - best span: answered when this is at most the threshold."""
        return self.null_score - self.span_score


def decode_answers(windows: list[Window], scores, firsts, lasts, nulls, probabilities,
                   contexts: list[str], offsets: list[list[tuple[int, int]]],
                   null_threshold: float | None) -> list[AnswerPrediction]:
    """One AnswerPrediction per example from its windows' best spans (best_spans' outputs).

    `null_threshold` None never answers "" (SQuAD 1.1); otherwise an example is unanswered when
    null score - best span score > threshold.
    """
    best: dict[int, tuple[float, int, int, float]] = {}
    null: dict[int, tuple[float, float]] = {}
    rows = zip(windows, scores.tolist(), firsts.tolist(), lasts.tolist(), nulls.tolist(),
               probabilities.tolist())
    for w, score, first, last, null_score, (p_span, p_null) in rows:
        null[w.example] = min(null.get(w.example, (float("inf"), 1.0)), (null_score, p_null))
        if score > best.get(w.example, (float("-inf"),))[0]:
            shift = w.first - w.context_start
            best[w.example] = (score, first + shift, last + shift, p_span)
    out = []
    for i, context in enumerate(contexts):
        score, first, last, p_span = best.get(i, (float("-inf"), -1, -1, 0.0))
        if first >= 0:
            start_char, end_char = offsets[i][first][0], offsets[i][last][1]
            text = context[start_char:end_char]
        else:
            start_char, text = -1, ""
        null_score, p_null = null.get(i, (float("inf"), 1.0))
        pred = AnswerPrediction(text, start_char, score, null_score, text, p_span, p_null)
        if null_threshold is not None and pred.null_margin > null_threshold or first < 0:
            pred.text, pred.char_start = "", -1
        out.append(pred)
    return out


# The task -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QA(Task):
    """Extractive question answering, SQuAD 1.1 or 2.0 (unanswerable questions)."""
    name: ClassVar[str] = "qa"
    reads_windows: ClassVar[bool | None] = None  # its contexts' windows, `stride` apart
    defaults: ClassVar[Defaults] = Defaults(epochs=3, batch_size=16, max_length=384,
                                            small_model_lr=None)
    verb: ClassVar[str] = "answer"
    pipeline_tag: ClassVar[str] = "question-answering"

    max_length: int = fitted(384)
    stride: int = 128
    """Tokens shared by consecutive windows of a long context."""
    max_answer_tokens: int = 30
    """Longest answer in tokens."""
    max_question: int | None = fitted(None)
    """Questions are cut to this many tokens (None: never; fine-tuning cuts them at 64)."""
    null_threshold: float | None = fitted(None)
    """Answer "" when the null score beats the best span by more than this (None: always
    answer, SQuAD 1.1)."""

    def configure(self, train_path: Path) -> "QA":
        return dataclasses.replace(self, max_question=64)

    @classmethod
    def from_transformers(cls, config: dict) -> "QA | None":
        return cls() if (config.get("architectures") or [""])[0] == \
            "BertForQuestionAnswering" else None

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[QAExample]:
        return read_squad(path)

    def read_inputs(self, path) -> list[QAExample]:
        """SQuAD JSON, or JSON lines with "question" and "context" (and optionally "id")."""
        p = Path(path)
        if detect_format(p) == "squad":
            return read_squad(p)
        examples = []
        for n, obj in read_jsonl(p):
            if not isinstance(obj.get("question"), str) or not isinstance(obj.get("context"), str):
                raise UserError(f"{p}:{n}: expected \"question\" and \"context\" strings")
            examples.append(QAExample(str(obj.get("id", n)), obj["question"], obj["context"],
                                      [], source=f"{p}:{n}"))
        return examples

    def groups(self, examples) -> list:
        """Whole articles, or whole paragraphs of a single article."""
        if len({ex.title for ex in examples}) > 1:
            return [ex.title for ex in examples]
        return [ex.context for ex in examples]

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        """Windows as items; training targets are the first answer's (start, end) positions."""
        windows, offsets = question_windows(
            tokenizer, examples, max_length=self.max_length, stride=self.stride,
            max_question=self.max_question, training=training,
            skip_no_room=skip_no_room or training)
        return [Item(w.example, w.input_ids, w.token_type_ids, target=target,
                     extra=(w, offsets[w.example])) for w, target in windows]

    def collate(self, items) -> dict:
        batch = pad_inputs(items)
        if items[0].target is not None:
            batch["start_positions"] = torch.tensor([it.target[0] for it in items])
            batch["end_positions"] = torch.tensor([it.target[1] for it in items])
        return batch

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> QuestionAnswerer:
        return QuestionAnswerer(encoder, Parts(layer_mix=layer_mix))

    def loss(self, model, batch) -> torch.Tensor:
        return model.loss(model(*model_inputs(batch)), batch["start_positions"],
                          batch["end_positions"])

    def teacher_outputs(self, model, batch, items) -> list:
        """(start logits, end logits) [T] each per window."""
        start, end = model(*model_inputs(batch))
        return [(start[row, :len(it.ids)].float().cpu(), end[row, :len(it.ids)].float().cpu())
                for row, it in enumerate(items)]

    def taught_loss(self, model, batch, settings, project=None) -> torch.Tensor:
        """KL of the start and of the end distributions, summed as the labels' two terms."""
        start, end = model(*model_inputs(batch))
        starts, ends = (t.to(start.device) for t in batch["teacher"])
        t = settings.temperature
        taught = distillation.soft_kl(start, starts, t) + distillation.soft_kl(end, ends, t)
        labels = model.loss((start, end), batch["start_positions"], batch["end_positions"]) \
            if "start_positions" in batch else None
        return distillation.mixed(settings.alpha, taught, labels)

    def infer(self, model, batch, items) -> list:
        """(best span score, first, last, null score, [span, null probability]) per window."""
        start, end = model(*model_inputs(batch))
        windows = [it.extra[0] for it in items]
        cs = torch.tensor([w.context_start for w in windows], device=start.device)
        cl = torch.tensor([w.length for w in windows], device=start.device)
        return list(zip(*(t.cpu().tolist() for t in best_spans(
            start, end, cs, cl, self.max_answer_tokens))))

    def decode_outputs(self, outputs, items, examples) -> list[AnswerPrediction]:
        columns = (torch.tensor(col) for col in zip(*outputs)) if outputs else \
            (*(torch.zeros(0),) * 4, torch.zeros(0, 2))
        offsets = {it.example: it.extra[1] for it in items}
        return decode_answers([it.extra[0] for it in items], *columns,
                              [ex.context for ex in examples], offsets, self.null_threshold)

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        """Exact and F1 (with HasAns / NoAns); with unanswerable questions also the best
        null thresholds."""
        refs = {ex.id: [a.text for a in ex.answers] for ex in examples}
        out = metrics.squad_scores({ex.id: p.text for ex, p in zip(examples, predictions)}, refs)
        if any(ex.is_impossible for ex in examples):
            raw = metrics.squad_scores(
                {ex.id: p.span_text for ex, p in zip(examples, predictions)}, refs,
                {ex.id: p.null_margin for ex, p in zip(examples, predictions)})
            out.update({k: raw[k] for k in ("best_exact_match", "best_exact_match_threshold",
                                            "best_f1", "best_f1_threshold")})
        return out

    def selection(self, scores: dict) -> float:
        if "best_f1" not in scores:
            return scores["f1"]
        # For many evaluations answering nothing is the best threshold: best F1 sits at the
        # "no answer" rate, moved only by a lucky answer or two, while the spans improve.
        # Models are chosen by best F1 and the span quality (HasAns F1) alike.
        return (scores["best_f1"] + scores.get("has_ans_f1", 0.0)) / 2

    def selection_name(self, scores: dict) -> str:
        return "(best_f1 + has_ans_f1) / 2" if "best_f1" in scores else "f1"

    def baseline(self, train, test, start) -> dict:
        return baselines.no_answer(test)

    def tune(self, runner, dev) -> "QA":
        """The SQuAD 2.0 null threshold that maximises dev F1 (None without unanswerable
        questions). The model runs over dev once; each threshold only decodes its spans."""
        if not any(ex.is_impossible for ex in dev):
            return self
        items, outputs = runner.outputs(dev, "evaluate")

        def scores(task: QA) -> dict:
            return task.score(dev, task.decode_outputs(outputs, items, dev))

        untuned = scores(dataclasses.replace(self, null_threshold=None))
        tuned = dataclasses.replace(self, null_threshold=untuned["best_f1_threshold"])
        if scores(tuned)["f1"] < untuned["best_f1"] - 1e-9:
            # The best is to answer nothing: the search reports that as threshold 0.
            tuned = dataclasses.replace(self, null_threshold=-1e9)
        return tuned

    # Use ----------------------------------------------------------------------------------------
    def pipeline(self, runner, question: str | Sequence[str], context: str | Sequence[str]):
        """{"answer", "start", "end", "score", "null_margin"} (pipeline("question-answering")
        style): "score" the answer's probability (AnswerPrediction.probability), "null_margin"
        the null score less the best span's (above the tuned threshold: unanswered); "" with
        start -1 when the model judges the question unanswerable."""
        single = isinstance(question, str)
        questions = [question] if single else list(question)
        contexts = [context] * len(questions) if isinstance(context, str) else list(context)
        examples = [QAExample(str(i), q, c, []) for i, (q, c) in
                    enumerate(zip(questions, contexts))]
        out = [{"answer": p.text, "start": p.char_start,
                "end": p.char_start + len(p.text) if p.text else -1,
                "score": p.probability, "null_margin": float(p.null_margin)}
               for p in runner.predict(examples)]
        return out[0] if single else out

    def prediction_rows(self, runner, path) -> list[dict]:
        examples = self.read_inputs(path)
        answers = runner.answer([ex.question for ex in examples],
                                [ex.context for ex in examples])
        return [{"id": ex.id, **a} for ex, a in zip(examples, answers)]


__all__ = ["Window", "window_starts", "make_windows", "char_span_to_tokens", "target_positions",
           "question_windows", "best_spans", "AnswerPrediction", "decode_answers", "QA"]
