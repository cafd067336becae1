"""Readers for fine-tuning data, and the label sets collected from them.

Formats: CSV / TSV / JSON lines with configurable text, pair and label columns; CoNLL (token
and tag per line, the tag in the last column) and CoNLL-U (the UPOS or XPOS column); SQuAD
1.1 / 2.0 JSON. `detect_format` recognises each from the extension, else from the content.

Bad input raises `UserError` naming the file and line. Two things are skipped instead, with a
warning that counts them and names the first, because a user would rather lose a few rows
than the run: examples whose text is empty (blank rows are common in exported spreadsheets),
and SQuAD answers whose text is not at their offset (a question left with no valid answer is
dropped; pass strict=True to make either an error). An empty CoNLL-U sentence (comments and no
words) is skipped the same way. A file with nothing left is an error.

An input given as "-" or as rows in memory is staged as a file for these readers by
`bertkit.finetuning.input_sources`.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterable, Sequence

from bertkit.files import (UserError, compression_of, format_suffix, read_json, read_jsonl,
                           read_lines, require_file)
from bertkit.finetuning.tagging import tag_label_set
from bertkit.text.sources import Source, csv_rows, find_delimiter, naming_delimiter

MULTI_LABEL_SEPARATOR = "|"  # between labels of one example in a CSV/TSV cell or a JSON string


@dataclass
class TextExample:
    """One classification, pair or regression example."""
    text: str
    pair: str | None = None
    label: str | float | list[str] | None = None
    """a class name, a number (regression) or a list of class names (multi-label)"""
    source: str = ""
    """FILE:LINE it came from, for messages"""


@dataclass
class TaggedSentence:
    tokens: list[str]
    tags: list[str]
    text: str
    """the original sentence (CoNLL-U `# text`), else the tokens joined by spaces"""
    source: str = ""
    """FILE:LINE of the first token"""
    lines: list[int] = field(default_factory=list)
    """line number of each token, for messages about one tag"""


@dataclass
class Answer:
    text: str
    start: int
    """character offset of `text` in the context"""


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[Answer]
    """empty for an unanswerable question (plausible_answers are not kept)"""
    title: str = ""
    source: str = ""

    @property
    def is_impossible(self) -> bool:
        return not self.answers


def _warn_skipped(path, what: str, count: int, first: str) -> None:
    if count:
        warnings.warn(f"{path}: skipped {count} {what} (first: {first})", stacklevel=3)


# --------------------------------------------------------------------------------------------
# format detection
# --------------------------------------------------------------------------------------------

TEXT_COLUMNS = ("text", "sentence", "premise", "sentence1", "question")
"""The names a text column goes by where none is given (the first a file has is read)."""

_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
               ".conll": "conll", ".bio": "conll", ".iob": "conll", ".conllu": "conllu"}


def _is_conllu_line(line: str) -> bool:
    fields = line.split("\t")
    return len(fields) == 10 and fields[0].split("-")[0].split(".")[0].isdigit()


def _is_tagged_line(line: str) -> bool:
    # CoNLL: a single token then one or a few tags, none containing spaces
    fields = line.split("\t") if "\t" in line else line.split()
    return 2 <= len(fields) <= 10 and not any(" " in f.strip() or not f.strip() for f in fields)


def detect_format(path: str | Path, columns: Collection[str] = TEXT_COLUMNS) -> str:
    """One of jsonl, csv, tsv, conll, conllu, squad: from the extension (before a .gz, .zst or
    .bz2: every reader decompresses), else the content. A header that names one of `columns`
    (the text column) only when cut at ';' or '|' is CSV, as the CSV reader takes it
    (`find_delimiter`)."""
    p = require_file(path)
    by_ext = _EXTENSIONS.get(format_suffix(p))
    if by_ext:
        return by_ext
    sample = []
    for number, line in read_lines(p):
        if line.strip():
            sample.append(line.lstrip("\ufeff"))
        if len(sample) == 200 or number > 5000:
            break
    if not sample:
        raise UserError(f"{p}: no content")
    first = sample[0].strip()
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "squad"  # one JSON object spread over many lines
        return "squad" if isinstance(obj, dict) and isinstance(obj.get("data"), list) \
            else "jsonl"
    words = [line for line in sample if not line.startswith("#")]
    if words and _is_conllu_line(words[0]):
        return "conllu"
    named = naming_delimiter(sample[0], columns, (";", "|")) is not None
    if named and len(sample[0].split()) < 2:
        return "csv"  # the CoNLL reader would refuse this first line: none read it so before
    if sum(map(_is_tagged_line, sample)) >= 0.9 * len(sample):
        return "conll"  # (the odd untagged line is then reported by the reader)
    if "\t" in sample[0]:
        return "tsv"
    if "," in sample[0] or named:
        return "csv"
    raise UserError(f"{p}:1: cannot tell the format (expected JSON lines, CSV or TSV with a "
                    f"header, CoNLL, CoNLL-U or SQuAD JSON; name the file .jsonl/.csv/.tsv/"
                    f".conll/.conllu/.json)")


# --------------------------------------------------------------------------------------------
# classification, pairs, regression
# --------------------------------------------------------------------------------------------

def _records(path: Path, fmt: str, columns: Collection[str]):
    """(line, {column: value}, columns) per record of a JSONL, CSV or TSV file; a CSV or TSV
    file is read with the delimiter whose header names one of `columns` (`find_delimiter`:
    the semicolons of Excel where the comma is the decimal point)."""
    if fmt == "jsonl":
        for number, obj in read_jsonl(path):
            yield number, obj, list(obj)
        return
    # the one CSV reader (bertkit.text.sources.csv_rows): a quoted cell may span lines, a row is
    # numbered by the line it starts on; a quote never closed, a row of another length than
    # the header's, a cell past csv's limit are one line each
    header = None
    source = find_delimiter(Source(path, fmt, compression_of(path)), columns)
    for number, row, _ in csv_rows(source):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip().lstrip("\ufeff") for h in row]
            if len(set(header)) != len(header):
                raise UserError(f"{path}:{number}: repeated column names in the header")
            continue
        yield number, dict(zip(header, row)), header


def _one_line(path, number, value: str, column: str) -> None:
    """A label never spans lines: one that does is rows swallowed by a quote left open."""
    if "\n" in value:
        raise UserError(f"{path}:{number}: column {column!r} spans several lines (a quote "
                        f"left open? a quote inside a cell is written twice: \"\")")


def _text_value(path, number, record, column, columns) -> str:
    if column not in record:
        raise UserError(f"{path}:{number}: no column {column!r} (columns: "
                        f"{', '.join(map(str, columns))}); choose one with --text-column / "
                        f"--pair-column / --label-column")
    value = record[column]
    if not isinstance(value, str):
        raise UserError(f"{path}:{number}: column {column!r} is {type(value).__name__}, "
                        f"expected text")
    return value


def _label_value(path, number, value, kind: str):
    where = f"{path}:{number}"
    if kind == "float":
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise UserError(f"{where}: label {value!r} is not a number") from None
        if isinstance(value, bool) or not math.isfinite(x):
            raise UserError(f"{where}: label {value!r} is not a finite number")
        return x
    if kind == "multi":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(MULTI_LABEL_SEPARATOR) if v.strip()]
        if not isinstance(value, list) or not all(
                isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            raise UserError(f"{where}: multi-label value {value!r} is not a list of labels")
        return sorted({str(v) for v in value})
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        hint = " (for numeric targets use the regress task)" if isinstance(value, float) else ""
        raise UserError(f"{where}: label {value!r} is not a class name{hint}")
    value = str(value).strip()
    if not value:
        raise UserError(f"{where}: empty label")
    return value


def read_text_examples(path: str | Path, *, text_column: str = "text",
                       pair_column: str | None = None, label_column: str | None = "label",
                       label_kind: str = "single", fmt: str | None = None) -> list[TextExample]:
    """Examples from a JSON-lines, CSV or TSV file (CSV/TSV need a header row).

    label_kind: "single" (a class name), "multi" (a JSON list, or names separated by '|'),
    "float" (regression). label_column None reads texts only (for prediction). Rows whose text
    (or pair) is empty are skipped with a warning.
    """
    if label_kind not in ("single", "multi", "float"):
        raise ValueError(f"unknown label kind {label_kind!r}")
    p = require_file(path)
    fmt = fmt or detect_format(p, [text_column])
    if fmt not in ("jsonl", "csv", "tsv"):
        raise UserError(f"{p}: expected JSON lines, CSV or TSV, but this looks like {fmt}")
    examples, skipped, first_skipped = [], 0, ""
    for number, record, columns in _records(p, fmt, [text_column]):
        text = _text_value(p, number, record, text_column, columns)
        pair = None if pair_column is None else \
            _text_value(p, number, record, pair_column, columns)
        label = None
        if label_column is not None:
            if label_column not in record:
                _text_value(p, number, record, label_column, columns)  # raises, naming columns
            if record[label_column] is None:
                raise UserError(f"{p}:{number}: no label (null in column {label_column!r})")
            if fmt != "jsonl" and isinstance(record[label_column], str):
                _one_line(p, number, record[label_column], label_column)
            label = _label_value(p, number, record[label_column], label_kind)
        if not text.strip() or (pair is not None and not pair.strip()):
            skipped += 1
            first_skipped = first_skipped or f"{p}:{number}"
            continue
        examples.append(TextExample(text, pair, label, f"{p}:{number}"))
    _warn_skipped(p, "examples with empty text", skipped, first_skipped)
    if not examples:
        raise UserError(f"{p}: no examples")
    return examples


def collect_labels(examples: Iterable[TextExample]) -> list[str]:
    """Sorted class names seen in training (multi-label lists flattened)."""
    labels = set()
    for ex in examples:
        labels.update(ex.label if isinstance(ex.label, list) else [ex.label])
    labels.discard(None)
    return sorted(labels)


def _unknown(source: str, label: str, labels: Sequence[str]) -> UserError:
    shown = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
    return UserError(f"{source}: unknown label {label!r} (the training labels are: {shown})")


def check_labels(examples: Iterable[TextExample], labels: Sequence[str]) -> None:
    """Raise naming FILE:LINE if an example (dev, test) has a label not seen in training."""
    known = set(labels)
    for ex in examples:
        for label in ex.label if isinstance(ex.label, list) else [ex.label]:
            if label is not None and label not in known:
                raise _unknown(ex.source, label, list(labels))


# --------------------------------------------------------------------------------------------
# tagging: CoNLL and CoNLL-U
# --------------------------------------------------------------------------------------------

def read_conll(path: str | Path) -> list[TaggedSentence]:
    """Sentences of a CoNLL file: `token TAB tag` (or space-separated; with more columns the
    tag is the last, and every line of a sentence has as many columns as its first), a blank
    line between sentences, `-DOCSTART-` lines skipped."""
    p = require_file(path)
    sentences: list[TaggedSentence] = []
    tokens, tags, lines = [], [], []
    width, width_line = 0, 0  # every line of a sentence has as many columns as its first

    def flush():
        if tokens:
            sentences.append(TaggedSentence(list(tokens), list(tags), " ".join(tokens),
                                            f"{p}:{lines[0]}", list(lines)))
            tokens.clear(), tags.clear(), lines.clear()

    for number, line in read_lines(p):
        s = line.strip().lstrip("\ufeff")
        if not s or s.startswith("-DOCSTART-"):
            flush()
            width = 0
            continue
        fields = [f.strip() for f in s.split("\t")] if "\t" in s else s.split()
        if len(fields) < 2 or not fields[-1] or not fields[0]:
            raise UserError(f"{p}:{number}: token {fields[0]!r} has no tag (expected "
                            f"TOKEN<TAB>TAG, a blank line between sentences)")
        if not width:
            width, width_line = len(fields), number
        elif len(fields) != width:
            raise UserError(f"{p}:{number}: {len(fields)} columns but line {width_line} has "
                            f"{width} (the tag is the last column, so every line of a "
                            f"sentence needs the same columns)")
        tokens.append(fields[0])
        tags.append(fields[-1])
        lines.append(number)
    flush()
    if not sentences:
        raise UserError(f"{p}: no sentences")
    return sentences


CONLLU_COLUMNS = {"upos": 3, "xpos": 4}


def read_conllu(path: str | Path, column: str = "upos") -> list[TaggedSentence]:
    """Sentences of a CoNLL-U file tagged with `column` (upos or xpos). Multiword-token ranges
    (1-2) and empty nodes (1.1) are skipped; `# text =` is kept as the sentence text."""
    if column.lower() not in CONLLU_COLUMNS:
        raise UserError(f"unknown CoNLL-U column {column!r} (expected upos or xpos)")
    index = CONLLU_COLUMNS[column.lower()]
    p = require_file(path)
    sentences: list[TaggedSentence] = []
    tokens, tags, lines, text, block_line = [], [], [], None, 0
    empty, first_empty = 0, ""

    def flush():
        nonlocal text, empty, first_empty, block_line
        if tokens:
            sentences.append(TaggedSentence(list(tokens), list(tags), text or " ".join(tokens),
                                            f"{p}:{lines[0]}", list(lines)))
        elif block_line:
            empty += 1
            first_empty = first_empty or f"{p}:{block_line}"
        tokens.clear(), tags.clear(), lines.clear()
        text, block_line = None, 0

    for number, line in read_lines(p):
        line = line.lstrip("\ufeff")
        if not line.strip():
            flush()
            continue
        block_line = block_line or number
        if line.startswith("#"):
            if line.startswith("# text = "):
                text = line[len("# text = "):]
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise UserError(f"{p}:{number}: {len(fields)} tab-separated columns, CoNLL-U has 10")
        word_id = fields[0]
        if "-" in word_id or "." in word_id:
            continue
        if not word_id.isdigit():
            raise UserError(f"{p}:{number}: word id {word_id!r} is not a number")
        tag = fields[index].strip()
        if tag in ("", "_"):
            raise UserError(f"{p}:{number}: word {fields[1]!r} has no {column.upper()} tag")
        tokens.append(fields[1])
        tags.append(tag)
        lines.append(number)
    flush()
    _warn_skipped(p, "empty sentences (comments but no words)", empty, first_empty)
    if not sentences:
        raise UserError(f"{p}: no sentences")
    return sentences


def read_tagged(path: str | Path, column: str = "upos") -> list[TaggedSentence]:
    """CoNLL, CoNLL-U or JSON lines of tokens and tags, recognised from the file; `column`
    applies to CoNLL-U."""
    fmt = detect_format(path)
    if fmt == "conllu":
        return read_conllu(path, column)
    if fmt == "conll":
        return read_conll(path)
    if fmt == "jsonl":
        return read_tagged_jsonl(path)
    raise UserError(f"{path}: expected CoNLL (token TAB tag), CoNLL-U or JSON lines of "
                    f"tokens and tags, but this looks like {fmt}")


TAG_FIELDS = ("tags", "ner_tags", "pos_tags", "upos")
"""The field of a JSON line that holds its tokens' tags: the first of these it has."""


def _first_json_line(path: str | Path) -> dict:
    return next(iter(read_jsonl(path)), (0, {}))[1]


def holds_tokens(path: str | Path) -> bool:
    """Whether the first JSON line of `path` has "tokens": words with their tags, not a text."""
    return "tokens" in _first_json_line(path)


def holds_tags(path: str | Path) -> bool:
    """Whether the first JSON line of `path` has a field of `TAG_FIELDS`."""
    return any(field in _first_json_line(path) for field in TAG_FIELDS)


def read_tagged_jsonl(path: str | Path) -> list[TaggedSentence]:
    """Sentences of JSON lines, one a line, as `datasets` writes them: `{"tokens": [...],
    "ner_tags": [...]}` (or "tags", "pos_tags", "upos"), a tag a string per token. Tags as
    numbers (a `datasets` ClassLabel) are refused: their names are not in the file."""
    p = require_file(path)
    sentences = []
    for number, row in read_jsonl(p):
        where = f"{p}:{number}"
        tokens = row.get("tokens")
        field = next((f for f in TAG_FIELDS if f in row), None)
        if not isinstance(tokens, list) or field is None:
            raise UserError(f"{where}: a tagged JSON line has \"tokens\" and one of "
                            f"{', '.join(TAG_FIELDS)}, each a list (or give CoNLL: token TAB "
                            f"tag)")
        tags = row[field]
        if not isinstance(tags, list) or len(tags) != len(tokens):
            raise UserError(f"{where}: \"{field}\" must be a list of one tag per token "
                            f"({len(tokens)} tokens)")
        if any(not isinstance(t, str) or not t.strip() for t in tokens):
            raise UserError(f"{where}: every token must be a non-empty string")
        if any(not isinstance(t, str) or not t for t in tags):
            numbers = any(isinstance(t, int) for t in tags)
            raise UserError(f"{where}: \"{field}\" holds " + (
                "numbers: write each tag's name (with `datasets`: "
                "features[...].feature.int2str)" if numbers else "a tag that is no string"))
        if tokens:
            sentences.append(TaggedSentence(list(tokens), list(tags), " ".join(tokens), where,
                                            [number] * len(tokens)))
    if not sentences:
        raise UserError(f"{p}: no sentences")
    return sentences


def tagging_labels(sentences: Iterable[TaggedSentence], scheme: str | None = None) -> list[str]:
    """Tag set from training sentences: 'O' first, then sorted; every prefix of the scheme for
    each entity type seen (see tagging.tag_label_set)."""
    return tag_label_set((t for s in sentences for t in s.tags), scheme)


def check_tags(sentences: Iterable[TaggedSentence], labels: Sequence[str]) -> None:
    """Raise naming FILE:LINE for a tag (dev, test) not in the training tag set."""
    known = set(labels)
    for s in sentences:
        for tag, number in zip(s.tags, s.lines):
            if tag not in known:
                raise _unknown(f"{s.source.rsplit(':', 1)[0]}:{number}", tag, list(labels))


# --------------------------------------------------------------------------------------------
# extractive QA: SQuAD JSON
# --------------------------------------------------------------------------------------------

class _LineFinder:
    """Line of a question id in the raw JSON, for messages (the parsed JSON has no lines)."""

    def __init__(self, path: Path):
        self.path, self.raw = path, None

    def __call__(self, qid: str) -> str:
        if self.raw is None:
            self.raw = "\n".join(line for _, line in read_lines(self.path))
        # the id as the value of "id" (a string, or a number), not the same text in a context
        found = re.search(r'"id"\s*:\s*(?:' + re.escape(json.dumps(qid, ensure_ascii=False))
                          + "|" + re.escape(qid) + r"(?![\w.]))", self.raw)
        at = found.start() if found else -1
        return f"{self.path}:{self.raw.count(chr(10), 0, at) + 1}" if at >= 0 else str(self.path)


def _field(obj, key: str, kind, where: str, default=...):
    """obj[key], which must be of `kind` (bool is never an int here); `default` if absent."""
    if not isinstance(obj, dict):
        raise UserError(f"{where}: should be a JSON object, not {type(obj).__name__}")
    if key not in obj:
        if default is not ...:
            return default
        raise UserError(f"{where}: missing {key!r}")
    value = obj[key]
    if kind is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where}: {key!r} should be true or false, not {value!r}")
        return value
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise UserError(f"{where}: {key!r} should be {names}, not {type(value).__name__}")
    return value


def read_squad(path: str | Path, strict: bool = False) -> list[QAExample]:
    """Questions of a SQuAD 1.1 or 2.0 file with their contexts and answers (char offsets).

    An answer whose text is not at its answer_start is skipped, and a question left without
    answers is dropped, with one warning counting them; strict=True raises instead.
    """
    p = require_file(path)
    if detect_format(p) == "jsonl":
        raise UserError(f"{p}: JSON lines, not SQuAD JSON (one object with a 'data' list of "
                        f"articles)")
    data = read_json(p)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f"{p}: not SQuAD JSON (expected an object with a 'data' list)")
    line_of = _LineFinder(p)
    examples: list[QAExample] = []
    bad_answers = dropped = 0
    first_bad = ""
    for a, article in enumerate(data["data"]):
        where = f"{p}: article {a}"
        title = _field(article, "title", str, where, "")
        for g, para in enumerate(_field(article, "paragraphs", list, where)):
            where = f"{p}: article {a} paragraph {g}"
            context = _field(para, "context", str, where)
            for qa in _field(para, "qas", list, where):
                qid = str(_field(qa, "id", (str, int), where))
                here = f"{line_of(qid)}: question {qid}"
                question = _field(qa, "question", str, here)
                impossible = _field(qa, "is_impossible", bool, here, False)
                listed = _field(qa, "answers", list, here, [])
                for ans in _field(qa, "plausible_answers", list, here, []):
                    _field(ans, "text", str, f"{here}: plausible answer")
                    _field(ans, "answer_start", int, f"{here}: plausible answer")
                answers = []
                for ans in listed:
                    text = _field(ans, "text", str, f"{here}: answer")
                    start = _field(ans, "answer_start", int, f"{here}: answer")
                    if impossible:
                        continue  # SQuAD 2.0 keeps no answers for these; the flag decides
                    if text and start >= 0 and context[start:start + len(text)] == text:
                        answers.append(Answer(text, start))
                        continue
                    message = (f"{here}: answer {text!r} is not at answer_start {start} of "
                               f"its context")
                    if strict:
                        raise UserError(message)
                    bad_answers += 1
                    first_bad = first_bad or message
                if not impossible and not answers and listed:
                    dropped += 1
                    continue
                if not question.strip() or not context.strip():
                    raise UserError(f"{here}: empty question or context")
                examples.append(QAExample(qid, question, context, answers, title,
                                          line_of(qid)))
    if bad_answers:
        warnings.warn(f"{p}: skipped {bad_answers} answers not at their offset and {dropped} "
                      f"questions left without an answer (first: {first_bad})", stacklevel=2)
    if not examples:
        raise UserError(f"{p}: no questions")
    return examples
