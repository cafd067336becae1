"""Running a fine-tuned model: examples -> model inputs -> batched inference -> answers and scores.

`TaskModel.load(dir)` reads a directory written by `bertkit finetune` (or a transformers task
model); calling it predicts: `classify(texts)`, `tag(texts)` (entities with character offsets in
the original text, or one label per word for POS-style tags), `answer(question, context)`.
`evaluate(examples)` scores it on labelled examples. Examples become model inputs and padded
batches in task_inputs.py, shared with training (finetune.py).

Inference sorts inputs by token count and batches neighbours, so a batch pads to almost
nothing, and runs under `torch.inference_mode`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertkit.finetuning import metrics
from bertkit.finetuning import qa
from bertkit.finetuning import spans
from bertkit.finetuning.crf import CRF, allowed_transitions
from bertkit.finetuning.heads import (QuestionAnswerer, SequenceClassifier, TokenClassifier, load_task_model,
                    read_task)
from bertkit.finetuning.tagging import is_chunk_tag, tags_to_spans, word_scores, word_tags_from_pieces
from bertkit.files import UserError
from bertkit.finetuning.inputs import (Item, collate, encode_questions, encode_sentences, encode_texts,
                          length_batches)
from bertkit.finetuning.readers import QAExample, TaggedSentence, TextExample, check_labels, check_tags


# Inference --------------------------------------------------------------------------------------

def _run(model, items: Sequence[Item], task: dict, batch_size: int, device) -> list:
    """Model outputs per item, in item order (what each head's decoding needs)."""
    out: list = [None] * len(items)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for idx in length_batches([len(it.ids) for it in items], batch_size):
            chosen = [items[i] for i in idx]
            batch = {k: v.to(device) for k, v in collate(
                [Item(it.example, it.ids, it.type_ids, it.word_ids) for it in chosen],
                task).items()}
            inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            if isinstance(model, SequenceClassifier):
                rows = model(*inputs).float().cpu().unbind(0)
            elif isinstance(model, TokenClassifier) and task.get("decode") == "mean" \
                    and model.crf is None:
                rows = _mean_word_labels(model(*inputs), chosen)
            elif isinstance(model, TokenClassifier):
                logits = model(*inputs)
                mask = batch["word_ids"] >= 0
                if task.get("alignment", "copy") == "first":
                    keep = torch.zeros_like(mask)
                    keep[:, 1:] = batch["word_ids"][:, 1:] != batch["word_ids"][:, :-1]
                    mask = mask & keep
                labels = model.piece_labels(logits, mask)
                probs = torch.softmax(logits.float(), -1).max(-1).values
                rows = [(lab, p[m].tolist(), m.tolist()) for lab, p, m in
                        zip(labels, probs.cpu(), mask.cpu())]
            elif isinstance(model, QuestionAnswerer):
                start, end = model(*inputs)
                cs = torch.tensor([it.window.context_start for it in chosen], device=device)
                cl = torch.tensor([it.window.length for it in chosen], device=device)
                rows = list(zip(*(t.cpu().tolist() for t in qa.best_spans(
                    start, end, cs, cl, task["max_answer_tokens"]))))
            else:
                logits, wmask = model(*inputs, word_ids=batch["word_ids"])
                rows = [(logits[r].float().cpu(), wmask[r].cpu()) for r in range(len(chosen))]
            for i, row in zip(idx, rows):
                out[i] = row
    model.train(was_training)
    return out


def _mean_word_labels(logits: torch.Tensor, items: Sequence[Item]) -> list:
    """Per item: ("words", best label id per word, its probability), the word's pieces'
    log-probabilities averaged (the alternative to reading the first piece)."""
    logp = torch.log_softmax(logits.float(), -1).cpu()
    rows = []
    for r, it in enumerate(items):
        ids = [None if w < 0 else w for w in it.word_ids]
        scores = word_scores(logp[r, :len(ids)], ids, "mean", max(it.word_ids) + 1)  # [W, K]
        best = scores.max(-1)
        rows.append(("words", best.indices.tolist(), best.values.exp().tolist()))
    return rows


def _word_tags(row, item: Item, labels: list[str], alignment: str, num_words: int):
    if row[0] == "words":  # decoded per word already (mean over pieces)
        _, best, prob = row
        missing = num_words - len(best)  # words cut by max_length
        return [labels[i] for i in best] + ["O"] * missing, list(prob) + [1.0] * missing
    lab, prob, mask = row
    names = [None] * len(item.word_ids)
    scores = [None] * len(item.word_ids)
    kept = [t for t, m in enumerate(mask[:len(item.word_ids)]) if m]
    for t, label_id, p in zip(kept, lab, prob):
        names[t], scores[t] = labels[label_id], p
    tags = word_tags_from_pieces(names, [None if w < 0 else w for w in item.word_ids],
                                 alignment, num_words)
    word_score = [1.0] * num_words
    for t, w in enumerate(item.word_ids):
        if w >= 0 and scores[t] is not None and word_score[w] == 1.0:
            word_score[w] = scores[t]
    return tags, word_score


@dataclass
class TaskModel:
    """A fine-tuned model with its tokenizer and task description, ready to predict."""
    model: torch.nn.Module
    tokenizer: object
    task: dict
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    batch_size: int = 64
    skip_no_room: bool = False
    """QA: skip (with a warning) questions that leave no room for the context, else refuse."""

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             batch_size: int = 64) -> "TaskModel":
        from bertkit.text.tokenizer import Tokenizer
        described = read_task(path)
        model, task = load_task_model(path, lambda k: CRF(k, allowed_transitions(
            described["labels"], described.get("scheme"))), device)
        task.setdefault("max_length", min(512, model.encoder.config.max_positions))
        task.setdefault("stride", 128)
        task.setdefault("max_answer_tokens", 30)
        return cls(model, Tokenizer.load(path), task, torch.device(device), batch_size)

    @property
    def labels(self) -> list[str]:
        return self.task.get("labels") or []

    # Raw outputs over read examples ----------------------------------------------------------
    def predict_texts(self, examples: Sequence[TextExample]) -> list:
        """Per example: a label, a list of labels (multi-label) or a number; and its score."""
        items = encode_texts(self.tokenizer, examples, {**self.task, "labels": self.labels})
        rows = _run(self.model, items, self.task, self.batch_size, self.device)
        kind = self.task.get("label_kind", "single")
        out = []
        for logits in rows:
            if kind == "float":
                out.append((float(logits[0]), None))
            elif kind == "multi":
                p = torch.sigmoid(logits)
                out.append(([self.labels[k] for k in (p > 0.5).nonzero().flatten().tolist()],
                            p.tolist()))
            else:
                p = torch.softmax(logits, -1)
                out.append((self.labels[int(p.argmax())], float(p.max())))
        return out

    def predict_sentences(self, sentences: Sequence[TaggedSentence]):
        """Per sentence: (word tags, word scores) for `tag`; entity spans (start word, end word
        exclusive, type, score) for `spans`."""
        items = encode_sentences(self.tokenizer, sentences, self.task)
        rows = _run(self.model, items, self.task, self.batch_size, self.device)
        if self.task["task"] == "spans":
            return self.decode_span_rows(rows)
        return [_word_tags(row, it, self.labels, self.task.get("alignment", "copy"),
                           len(s.tokens)) for row, it, s in zip(rows, items, sentences)]

    def span_rows(self, sentences: Sequence[TaggedSentence]) -> list:
        """Span logits and word masks per sentence (decode them with `decode_span_rows`)."""
        items = encode_sentences(self.tokenizer, sentences, self.task)
        return _run(self.model, items, self.task, self.batch_size, self.device)

    def decode_span_rows(self, rows: list, margin: float | None = None) -> list:
        margin = self.task.get("span_margin", 0.0) if margin is None else margin
        out = []
        for logits, wmask in rows:
            found = spans.decode_spans(logits[None], wmask[None], margin,
                                       self.task.get("nested", False))[0]
            out.append([(s, e + 1, self.labels[t - 1], sc) for s, e, t, sc in found])
        return out

    def predict_questions(self, examples: Sequence[QAExample]) -> list[qa.Prediction]:
        items, offsets = encode_questions(self.tokenizer, examples, self.task,
                                          skip_no_room=self.skip_no_room)
        rows = _run(self.model, items, self.task, self.batch_size, self.device)
        scores, firsts, lasts, nulls = (torch.tensor(col) for col in zip(*rows)) if rows \
            else (torch.zeros(0),) * 4
        return qa.decode_answers([it.window for it in items], scores, firsts, lasts, nulls,
                                 [ex.context for ex in examples], offsets,
                                 self.task.get("null_threshold"))

    # Scores ------------------------------------------------------------------------------------
    def evaluate(self, examples: Sequence) -> dict:
        """Metrics on labelled examples: accuracy / macro_f1 (classes), pearson / spearman
        (regression), precision / recall / f1 per type (entities), token accuracy (tags), exact /
        f1 with HasAns / NoAns (QA)."""
        name = self.task["task"]
        if name in ("classify", "pair") or (name == "regress" and self.labels):
            check_labels(examples, self.labels)  # an unknown label names its line
        elif name == "tag":
            check_tags(examples, self.labels)
        if name in ("classify", "pair", "regress"):
            pred = [p for p, _ in self.predict_texts(examples)]
            gold = [ex.label for ex in examples]
            if self.task.get("label_kind") == "float":
                return metrics.regression_scores(gold, pred)
            if self.task.get("label_kind") == "multi":
                return metrics.multilabel_scores(gold, pred, self.labels)
            return metrics.classification_scores(gold, pred, self.labels)
        if name == "tag":
            pred = [tags for tags, _ in self.predict_sentences(examples)]
            gold = [s.tags for s in examples]
            if any(is_chunk_tag(t) and t != "O" for t in self.labels):
                return metrics.entity_scores(gold, pred)
            return {"accuracy": metrics.accuracy([t for s in gold for t in s],
                                                 [t for s in pred for t in s])}
        if name == "spans":
            found = self.predict_sentences(examples)
            return metrics.span_scores(
                [spans.gold_spans(s) for s in examples], [[(a, b, t) for a, b, t, _ in f] for f in found])
        preds = self.predict_questions(examples)
        refs = {ex.id: [a.text for a in ex.answers] for ex in examples}
        two = any(ex.is_impossible for ex in examples)
        out = metrics.squad_scores({ex.id: p.text for ex, p in zip(examples, preds)}, refs)
        if two:
            raw = metrics.squad_scores({ex.id: p.span_text for ex, p in zip(examples, preds)},
                                       refs, {ex.id: p.null_margin for ex, p in zip(examples, preds)})
            out.update({k: raw[k] for k in ("best_exact", "best_exact_thresh", "best_f1",
                                            "best_f1_thresh")})
        return out

    # The Python API ----------------------------------------------------------------------------
    def classify(self, texts: Sequence[str] | str, pairs: Sequence[str] | None = None):
        """[{"label", "score"}] per text (pipeline("text-classification") style); a number
        under "score" for regression, a list of labels for multi-label."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        pairs = [pairs] if single and isinstance(pairs, str) else pairs
        examples = [TextExample(t, None if pairs is None else pairs[i])
                    for i, t in enumerate(texts)]
        kind = self.task.get("label_kind", "single")
        res = self.predict_texts(examples)
        out = []
        for label, score in res:
            if kind == "float":
                out.append({"score": label})
            elif kind == "multi":
                out.append({"labels": label, "scores": dict(zip(self.labels, score))})
            else:
                out.append({"label": label, "score": score})
        return out[0] if single else out

    def tag(self, texts: Sequence[str] | str):
        """Per text: entities [{"label", "text", "start", "end", "score"}] with character
        offsets into the text; for plain tags (POS), one {"word", "label", "start", "end"} per
        word. Words are split as the tokenizer's pre-tokenizer splits them."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        words = split_words(self.tokenizer, texts)
        sentences = [TaggedSentence([t[a:b] for a, b in w], [], t) for t, w in zip(texts, words)]
        keep = [i for i, s in enumerate(sentences) if s.tokens]
        found = self.predict_sentences([sentences[i] for i in keep])
        results: list[list[dict]] = [[] for _ in texts]
        chunked = self.task["task"] == "spans" or any(
            is_chunk_tag(t) and t != "O" for t in self.labels)
        for i, res in zip(keep, found):
            text, spans_ = texts[i], words[i]
            if self.task["task"] == "spans":
                ents = [(a, b, t, float(np.exp(-np.logaddexp(0, -s)))) for a, b, t, s in res]
            elif chunked:
                tags, scores = res
                ents = [(a, b, t, float(np.mean(scores[a:b]))) for a, b, t in tags_to_spans(tags)]
            else:
                tags, scores = res
                results[i] = [{"word": text[s:e], "label": t, "start": s, "end": e,
                               "score": sc} for (s, e), t, sc in zip(spans_, tags, scores)]
                continue
            for a, b, t, sc in ents:
                s, e = spans_[a][0], spans_[b - 1][1]
                results[i].append({"label": t, "text": text[s:e], "start": s, "end": e,
                                   "score": sc})
        return results[0] if single else results

    def answer(self, question: str | Sequence[str], context: str | Sequence[str]):
        """{"answer", "start", "end", "score"} (pipeline("question-answering") style); "" with
        start -1 when the model judges the question unanswerable."""
        single = isinstance(question, str)
        questions = [question] if single else list(question)
        contexts = [context] * len(questions) if isinstance(context, str) else list(context)
        examples = [QAExample(str(i), q, c, []) for i, (q, c) in enumerate(zip(questions, contexts))]
        out = [{"answer": p.text, "start": p.char_start,
                "end": p.char_start + len(p.text) if p.text else -1,
                "score": float(p.span_score), "null_margin": float(p.null_margin)}
               for p in self.predict_questions(examples)]
        return out[0] if single else out

    def __call__(self, *args, **kwargs):
        name = self.task["task"]
        if name in ("classify", "pair", "regress"):
            return self.classify(*args, **kwargs)
        if name in ("tag", "spans"):
            return self.tag(*args, **kwargs)
        return self.answer(*args, **kwargs)


def split_words(tokenizer, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
    """Character spans of the words of each text, as the tokenizer's pre-tokenizer cuts them
    (whitespace and punctuation for WordPiece); words that make no tokens are left out."""
    enc = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    out = []
    for e in enc:
        words: dict[int, list[int]] = {}
        for w, (start, end) in zip(e.word_ids, e.offsets):
            if w is not None:
                span = words.setdefault(w, [start, end])
                span[1] = max(span[1], end)
        out.append([tuple(words[w]) for w in sorted(words)])
    return out


# Files -----------------------------------------------------------------------------------------------

def _read_inputs(runner: TaskModel, path: str | Path):
    """(kind, inputs, keys) of a prediction input file: kind "texts", "sentences" or "questions"."""
    from bertkit.files import read_jsonl, read_lines
    from bertkit.finetuning.readers import detect_format, read_squad, read_tagged, read_text_examples
    p = Path(path)
    task = runner.task
    if p.suffix.lower() == ".txt":
        lines = [(n, line) for n, line in read_lines(p) if line.strip()]
        if not lines:
            raise UserError(f"{p}: no texts")
        return "texts", [line for _, line in lines], [f"{p}:{n}" for n, _ in lines]
    fmt = detect_format(p)
    if task["task"] == "qa":
        if fmt == "squad":
            examples = read_squad(p)
        else:
            examples = []
            for n, obj in read_jsonl(p):
                if not isinstance(obj.get("question"), str) or not isinstance(obj.get("context"), str):
                    raise UserError(f"{p}:{n}: expected \"question\" and \"context\" strings")
                examples.append(QAExample(str(obj.get("id", n)), obj["question"], obj["context"],
                                          [], source=f"{p}:{n}"))
        return "questions", examples, [ex.id for ex in examples]
    if fmt in ("conll", "conllu") and task["task"] in ("tag", "spans"):
        sentences = read_tagged(p, task.get("conllu_column", "upos"))
        return "sentences", sentences, [s.source for s in sentences]
    if fmt not in ("jsonl", "csv", "tsv"):
        raise UserError(f"{p}: a {task['task']} model reads .txt, JSONL, CSV or TSV here, not {fmt}")
    examples = read_text_examples(p, text_column=task.get("text_column") or "text",
                                  pair_column=task.get("pair_column"), label_column=None, fmt=fmt)
    if task["task"] in ("tag", "spans"):
        return "texts", [ex.text for ex in examples], [ex.source for ex in examples]
    return "examples", examples, [ex.source for ex in examples]


def predict_file(runner: TaskModel, path: str | Path, out: str | Path | None = None) -> int:
    """Predict every input of a file; write one JSON object per input (to `out` atomically, or
    to stdout). Returns the number of predictions."""
    import json
    import sys

    from bertkit.files import atomic_file
    kind, inputs, keys = _read_inputs(runner, path)
    if kind == "questions":
        preds = runner.answer([ex.question for ex in inputs], [ex.context for ex in inputs])
        rows = [{"id": ex.id, **pr} for ex, pr in zip(inputs, preds)]
    elif kind == "sentences":
        found = runner.predict_sentences(inputs)
        if runner.task["task"] == "spans":
            rows = [{"tokens": s.tokens, "entities": [[a, b, t, round(sc, 4)] for a, b, t, sc in f]}
                    for s, f in zip(inputs, found)]
        else:
            rows = [{"tokens": s.tokens, "tags": tags} for s, (tags, _) in zip(inputs, found)]
    elif kind == "texts":
        if runner.task["task"] in ("tag", "spans"):
            rows = [{"text": t, "entities" if runner.labels and _chunked(runner) else "words": r}
                    for t, r in zip(inputs, runner.tag(inputs))]
        else:
            rows = [{"text": t, **r} for t, r in zip(inputs, runner.classify(inputs))]
    else:
        res = runner.classify([ex.text for ex in inputs],
                              [ex.pair for ex in inputs] if inputs[0].pair is not None else None)
        rows = [{"text": ex.text, **({"pair": ex.pair} if ex.pair is not None else {}), **r}
                for ex, r in zip(inputs, res)]
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if out is None:
        sys.stdout.write(lines)
    else:
        with atomic_file(out) as f:
            f.write(lines)
    return len(rows)


def _chunked(runner: TaskModel) -> bool:
    return runner.task["task"] == "spans" or any(is_chunk_tag(t) and t != "O"
                                                  for t in runner.labels)


# Module-level shortcuts -------------------------------------------------------------------------

def _model(model: "TaskModel | str | Path") -> TaskModel:
    return model if isinstance(model, TaskModel) else TaskModel.load(model)


def classify(model: "TaskModel | str | Path", texts, pairs=None):
    return _model(model).classify(texts, pairs)


def tag(model: "TaskModel | str | Path", texts):
    return _model(model).tag(texts)


def answer(model: "TaskModel | str | Path", question, context):
    return _model(model).answer(question, context)


__all__ = ["TaskModel", "classify", "tag", "answer", "split_words", "predict_file"]
