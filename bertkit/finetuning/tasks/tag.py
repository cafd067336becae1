"""Tagging: a label per word (NER in IO / BIO / BIOES, or plain labels such as POS), read from
CoNLL or CoNLL-U, through BertForTokenClassification with an optional linear-chain CRF.

Labels live on subword pieces (tagging.align_labels: copied from the word, or on its first
piece only); a word's label is read back from its first piece or from the mean of its pieces'
log-probabilities. Entities are scored as seqeval does; plain labels by accuracy. The schemes,
their conversions and the alignment are in tagging.py, the CRF in crf.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Sequence

import numpy as np
import torch

from bertkit.files import UserError
from bertkit.finetuning import baselines, distillation, metrics
from bertkit.finetuning.crf import CRF, allowed_transitions
from bertkit.finetuning.heads import Parts, TokenClassifier
from bertkit.finetuning.inputs import (Item, encode_words, first_window_word,
                                      pad_inputs, piece_cases, word_windows,
                                      words_cut)
from bertkit.finetuning.readers import (TaggedSentence, check_tags, detect_format, holds_tokens,
                                        read_tagged, read_text_examples, tagging_labels)
from bertkit.finetuning.task import (Defaults, ModelFacts, Task, fitted, model_inputs,
                                     text_lines)
from bertkit.finetuning.tagging import (SCHEMES, align_labels, convert_tags, detect_scheme,
                                        has_entities, tags_to_spans, word_scores,
                                        word_tags_from_pieces)
from bertkit.model.heads import IGNORE_INDEX


@dataclass(frozen=True)
class WordTask(Task):
    """What the tasks over word-split sentences share: CoNLL / CoNLL-U input, texts split into
    words as the tokenizer splits them, and the most-frequent-tag baseline."""
    defaults: ClassVar[Defaults] = Defaults(epochs=10, batch_size=16, max_length=128)
    verb: ClassVar[str] = "tag"
    pipeline_tag: ClassVar[str] = "token-classification"

    labels: tuple[str, ...] = fitted(())
    """The tags (tag) or entity types (spans), in the order of the head's outputs."""
    conllu_column: Literal["upos", "xpos"] = "upos"
    """On CoNLL-U: which column holds the tag (upos or xpos)."""
    text_column: str = fitted("text")
    """Column of the texts when predicting from JSON lines, CSV or TSV (`bertkit predict
    --text-column`)."""
    case_feature: bool | None = None
    """Add each word's letter case (lower, Capitalised, UPPER, ...) to the encoder's input as a
    learned embedding; none: on when the model's tokenizer lowercases, which loses the
    capitals that mark names (WNUT-16 F1 with the 60- and 120-minute `mini` of
    docs/recipe.md, three seeds each: 0.295 and 0.271 with it, 0.280 and 0.232 without;
    MiniLM 0.564 against 0.542). Such a model is saved as a BertModel / ModernBertModel with
    its head beside."""

    def for_backbone(self, model: ModelFacts) -> "WordTask":
        if model.architecture is None:  # another family reads no case embedding
            if self.case_feature:
                raise UserError("--case-feature needs a transformer encoder, which this "
                                "backbone is not")
            return dataclasses.replace(self, case_feature=False)
        return dataclasses.replace(self, case_feature=model.lowercases
                                   if self.case_feature is None else self.case_feature)

    def label_names(self) -> tuple[str, ...]:
        return self.labels

    def read_inputs(self, path) -> list:
        """Sentences of a CoNLL / CoNLL-U file or of JSON lines of tokens and tags; for other
        files, their texts."""
        p = Path(path)
        lines = text_lines(p)
        if lines is not None:
            return lines[0]
        fmt = detect_format(p)
        if fmt in ("conll", "conllu") or (fmt == "jsonl" and holds_tokens(p)):
            return read_tagged(p, self.conllu_column)
        if fmt not in ("jsonl", "csv", "tsv"):
            raise UserError(f"{p}: a {self.name} model reads .txt, JSONL, CSV or TSV here, "
                            f"not {fmt}")
        return [ex.text for ex in read_text_examples(p, text_column=self.text_column or "text",
                                                     label_column=None, fmt=fmt)]

    def unlabelled(self, path, tokenizer) -> list:
        """Sentences; texts split into words as the tokenizer's pre-tokenizer splits them."""
        inputs = self.read_inputs(path)
        if not inputs or not isinstance(inputs[0], str):
            return inputs
        return [TaggedSentence([t[a:b] for a, b in w], [], t)
                for t, w in zip(inputs, split_words(tokenizer, inputs))]

    def baseline(self, train, test, start) -> dict | None:
        return baselines.most_frequent_tag(train, test)

    def case_ids(self, sentence, word_ids: Sequence[int]) -> list[int] | None:
        """An item's `case_ids` (None without the case feature)."""
        return piece_cases(sentence.tokens, word_ids) if self.case_feature else None

    def parts(self, layer_mix: bool) -> Parts:
        """Its model's optional parts: the word-case input with the case feature."""
        return Parts(layer_mix=layer_mix, word_case=bool(self.case_feature))

    def pipeline(self, runner, texts: Sequence[str] | str):
        """Per text: entities [{"label", "text", "start", "end", "score"}] with character
        offsets into the text; for plain tags (POS), one {"word", "label", "start", "end",
        "score"} per word. Words are split as the tokenizer's pre-tokenizer splits them."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        words = split_words(runner.tokenizer, texts)
        sentences = [TaggedSentence([t[a:b] for a, b in w], [], t) for t, w in zip(texts, words)]
        results: list[list[dict]] = []
        for text, spans, res in zip(texts, words, self._predict_words(runner, sentences)):
            entities = None if res is None else self.entities(res)
            if res is not None and entities is None:  # plain labels: one row per word
                tags, scores = res
                results.append([{"word": text[s:e], "label": t, "start": s, "end": e,
                                 "score": sc} for (s, e), t, sc in zip(spans, tags, scores)])
            else:
                results.append(_entity_dicts(text, spans, entities or []))
        return results[0] if single else results

    @staticmethod
    def _predict_words(runner, sentences: Sequence[TaggedSentence]) -> list:
        """The prediction of each sentence; None for one without words."""
        keep = [i for i, s in enumerate(sentences) if s.tokens]
        found = dict(zip(keep, runner.predict([sentences[i] for i in keep])))
        return [found.get(i) for i in range(len(sentences))]

    def entities(self, prediction) -> list[tuple[int, int, str, float]] | None:
        """(start word, end word exclusive, type, score) of one sentence's prediction; None
        when the labels are not entities."""
        raise NotImplementedError

    def prediction_rows(self, runner, path) -> list[dict]:
        """One row per sentence, whatever the input: {"text", "tokens", "tags", "entities"},
        plus "gold" (the file's tags) for tagged input. `tokens` are the words (as the file
        splits them, or as the tokenizer splits a text), `tags` one predicted tag per word
        (BIO for spans), `entities` [{"label", "text", "start", "end", "score"}] with
        character offsets into `text` ([] for plain tags such as POS); the text of CoNLL
        input is its words joined by spaces."""
        inputs = self.read_inputs(path)
        if inputs and isinstance(inputs[0], str):
            spans = split_words(runner.tokenizer, inputs)
            sentences = [TaggedSentence([t[a:b] for a, b in w], [], t)
                         for t, w in zip(inputs, spans)]
            texts = list(inputs)
        else:
            sentences, texts, spans = inputs, [], []
            for s in sentences:
                starts = np.cumsum([0] + [len(w) + 1 for w in s.tokens[:-1]]).tolist()
                texts.append(" ".join(s.tokens))
                spans.append([(a, a + len(w)) for a, w in zip(starts, s.tokens)])
        rows = []
        for s, text, words, res in zip(sentences, texts, spans,
                                       self._predict_words(runner, sentences)):
            row = {"text": text, "tokens": list(s.tokens),
                   "tags": [] if res is None else self.word_tags(res, len(s.tokens)),
                   "entities": _entity_dicts(text, words, (res is not None
                                                           and self.entities(res)) or [])}
            if s.tags:
                row["gold"] = list(s.tags)
            rows.append(row)
        return rows

    @property
    def marks_entities(self) -> bool:
        return has_entities(self.labels)

    def word_tags(self, prediction, length: int) -> list[str]:
        """One predicted tag per word of a sentence of `length` words."""
        raise NotImplementedError


@dataclass(frozen=True)
class Tag(WordTask):
    """A label per word."""
    name: ClassVar[str] = "tag"
    reads_windows: ClassVar[bool | None] = True

    scheme: Literal["IO", "BIO", "BIOES"] | None = None
    """Re-tag the data in IO, BIO or BIOES as it is read; none keeps the data's scheme."""
    alignment: Literal["copy", "first"] = "copy"
    """Subword labels: "copy" gives every piece its word's tag, but a B-X word's later pieces
    I-X (a chunk opens on the first piece only; BIOES S-X becomes B-X ... E-X); "first"
    labels the first piece and ignores the rest."""
    decode: Literal["first", "mean"] = "first"
    """Read a word's label from its first piece ("first", as BERT's paper does) or
    average its pieces' log-probabilities ("mean"; not with a CRF, which decodes the pieces)."""
    crf: bool | None = None
    """A linear-chain conditional random field (CRF) over the labels, with the scheme's invalid transitions barred;
    none: a CRF unless --decode mean (as flair's tagger; the 60-minute `mini` of
    docs/recipe.md gets WNUT-16 F1 0.318 with it against 0.224 without, POS 0.926
    against 0.924)."""

    def configure(self, train_path: Path) -> "Tag":
        if self.decode not in ("first", "mean"):
            raise UserError(f"decode must be first or mean, got {self.decode!r}")
        if self.decode == "mean" and self.crf:
            raise UserError("--decode mean reads words from their pieces' probabilities, "
                            "which a CRF does not give: drop --crf")
        if self.alignment not in ("copy", "first"):
            raise UserError(f"alignment must be copy or first, got {self.alignment!r}")
        if self.scheme is not None and self.scheme not in SCHEMES:
            raise UserError(f"scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        return dataclasses.replace(self, crf=self.decode != "mean" if self.crf is None
                                   else self.crf)

    @classmethod
    def from_json(cls, data: dict) -> "Tag":
        task = super().from_json(data)
        return dataclasses.replace(task, crf=bool(data.get("head", {}).get("crf", task.crf)))

    @classmethod
    def from_transformers(cls, config: dict) -> "Tag | None":
        if (config.get("architectures") or [""])[0] != "BertForTokenClassification":
            return None
        labels = [config["id2label"][k] for k in sorted(config.get("id2label", {}), key=int)]
        return cls(labels=tuple(labels), alignment="first", crf=False, case_feature=False)

    # Data ---------------------------------------------------------------------------------------
    def read(self, path) -> list[TaggedSentence]:
        sentences = read_tagged(path, self.conllu_column)
        if self.scheme:
            for s in sentences:
                s.tags = convert_tags(s.tags, self.scheme)
        return sentences

    def with_labels(self, train, dev) -> "Tag":
        labels = tagging_labels(train, self.scheme)
        check_tags(dev, labels)
        return dataclasses.replace(self, labels=tuple(labels),
                                   scheme=self.scheme or detect_scheme(labels))

    def check(self, examples) -> None:
        check_tags(examples, self.labels)

    # Model inputs -------------------------------------------------------------------------------
    def encode(self, tokenizer, examples, *, training=False, skip_no_room=False) -> list[Item]:
        """Piece label ids aligned per `alignment` where the sentences have tags."""
        index = {name: i for i, name in enumerate(self.labels)}
        return [Item(i, e.ids, e.type_ids, word_ids,
                     align_labels(e.word_ids, s.tags, index, self.alignment) if s.tags else None,
                     cut=words_cut(s, word_ids), case_ids=self.case_ids(s, word_ids))
                for i, (s, (e, word_ids)) in enumerate(
                    zip(examples, encode_words(tokenizer, examples, self.max_length)))]

    def collate(self, items) -> dict:
        batch = pad_inputs(items)
        if items[0].target is not None:
            labels = np.full(tuple(batch["input_ids"].shape), IGNORE_INDEX, dtype=np.int64)
            for row, it in enumerate(items):
                labels[row, :len(it.target)] = it.target
            batch["labels"] = torch.from_numpy(labels)
        return batch

    # Model --------------------------------------------------------------------------------------
    def make_model(self, encoder, layer_mix: bool = False) -> TokenClassifier:
        crf = CRF(len(self.labels), allowed_transitions(self.labels, self.scheme)) \
            if self.crf else None
        return TokenClassifier(encoder, len(self.labels), crf, self.parts(layer_mix))

    def loss(self, model, batch) -> torch.Tensor:
        return model.loss(model(*model_inputs(batch), case_ids=batch.get("case_ids")),
                          batch["labels"])

    def target_count(self, batch) -> float:
        # the CRF's loss is a mean over sentences, the softmax's over the labelled pieces
        if self.crf or "labels" not in batch:
            return batch["input_ids"].shape[0]
        return int((batch["labels"] != IGNORE_INDEX).sum())

    def teacher_outputs(self, model, batch, items) -> list:
        """The emissions [T, K] per item (a CRF tagger's too: its transitions stay the
        student's own)."""
        logits = model(*model_inputs(batch), case_ids=batch.get("case_ids"))
        return [logits[row, :len(it.ids)].float().cpu() for row, it in enumerate(items)]

    def taught_loss(self, model, batch, settings, project=None) -> torch.Tensor:
        """KL per word piece (specials and padding left out) of the softened emissions."""
        logits = model(*model_inputs(batch), case_ids=batch.get("case_ids"))
        taught = distillation.soft_kl(logits, batch["teacher"].to(logits.device),
                                      settings.temperature, batch["word_ids"] >= 0)
        labels = model.loss(logits, batch["labels"]) if "labels" in batch else None
        return distillation.mixed(settings.alpha, taught, labels)

    def infer(self, model, batch, items) -> list:
        """Per item: ("words", best label per word, its probability) for mean decoding, else
        (best label per kept piece, their probabilities, the kept-piece mask)."""
        logits = model(*model_inputs(batch), case_ids=batch.get("case_ids"))
        if self.decode == "mean" and model.crf is None:
            return _mean_word_labels(logits, items)
        mask = batch["word_ids"] >= 0
        if self.alignment == "first":
            keep = torch.zeros_like(mask)
            keep[:, 1:] = batch["word_ids"][:, 1:] != batch["word_ids"][:, :-1]
            mask = mask & keep
        labels = model.piece_labels(logits, mask)
        probs = torch.softmax(logits.float(), -1).max(-1).values
        return [(lab, p[m].tolist(), m.tolist()) for lab, p, m in
                zip(labels, probs.cpu(), mask.cpu())]

    def pool_windows(self, outputs, windows, item) -> tuple:
        """Each word's label (and probability) from the window where its first piece is most
        central; with a CRF, each window's own best path, so a tag may follow another across
        the seam where no single path would put it."""
        if outputs[0][0] == "words":  # per window: its words' best labels, from its first word
            owner = word_windows(item.word_ids, windows)
            base = [first_window_word(item.word_ids, held) for held in windows.positions]
            picked = [(outputs[k][1][w - base[k]], outputs[k][2][w - base[k]])
                      for w, k in enumerate(owner)]
            return "words", [b for b, _ in picked], [p for _, p in picked]
        labels, probs = {}, {}
        for k, ((lab, prob, mask), held) in enumerate(zip(outputs, windows.positions)):
            kept = [j for j, m in enumerate(mask[:len(held)]) if m]
            for j, label, p in zip(kept, lab, prob):
                if windows.owner[held[j]] == k and not windows.shared[held[j]]:
                    labels[int(held[j])], probs[int(held[j])] = label, p
        kept = sorted(labels)
        return ([labels[t] for t in kept], [probs[t] for t in kept],
                [t in labels for t in range(len(item.ids))])

    def decode_outputs(self, outputs, items, examples) -> list[tuple[list[str], list[float]]]:
        """(word tags, word scores) per sentence."""
        return [_word_tags(out, it, self.labels, self.alignment, len(s.tokens))
                for out, it, s in zip(outputs, items, examples)]

    # Scores -------------------------------------------------------------------------------------
    def score(self, examples, predictions) -> dict:
        pred = [tags for tags, _ in predictions]
        gold = [s.tags for s in examples]
        if self.marks_entities:
            return metrics.entity_scores(gold, pred)
        return {"accuracy": metrics.accuracy([t for s in gold for t in s],
                                             [t for s in pred for t in s])}

    def selection(self, scores: dict) -> float:
        return scores["f1"] if self.marks_entities else scores["accuracy"]

    # Use ----------------------------------------------------------------------------------------
    def entities(self, prediction):
        if not self.marks_entities:
            return None
        tags, scores = prediction
        return [(a, b, t, float(np.mean(scores[a:b]))) for a, b, t in tags_to_spans(tags)]

    def word_tags(self, prediction, length: int) -> list[str]:
        return list(prediction[0])


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


def _word_tags(row, item: Item, labels: Sequence[str], alignment: str, num_words: int):
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


def _entity_dicts(text: str, spans: Sequence[tuple[int, int]],
                  entities: Sequence[tuple[int, int, str, float]]) -> list[dict]:
    """Entities over words as {"label", "text", "start", "end", "score"}, character offsets
    into `text` (whose words are at `spans`)."""
    out = []
    for a, b, t, sc in entities:
        s, e = spans[a][0], spans[b - 1][1]
        out.append({"label": t, "text": text[s:e], "start": s, "end": e, "score": sc})
    return out


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


__all__ = ["WordTask", "Tag", "split_words"]
