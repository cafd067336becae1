"""Training data for sentence embeddings: pairs, triplets, scored pairs, sentences, NLI.

Files and what they hold (CSV and TSV need a header row; JSON lines name the same keys; other
columns are ignored; the kind is told by the columns, `detect_kind`):

| kind | columns | trains with |
|---|---|---|
| pairs | `anchor` (or `query`), `positive` | in-batch negatives |
| triplets | `anchor` (or `query`), `positive`, `negative` | in-batch negatives plus a hard one |
| scored | `sentence1`, `sentence2`, `score` (or `text_a`, `text_b`, `score`) | CoSENT, cosine-MSE |
| nli | `premise`, `hypothesis`, `label` (entailment, neutral or contradiction), optionally `relatedness` (1..5) | see `read_nli` |
| sentences | a `.txt` file: one sentence a line, blank lines skipped | unsupervised SimCSE |
| queries | `query`, `relevant` (a passage, or in JSON lines a list), optionally `negatives` | in-batch negatives; retrieval figures |

An NLI file such as SICK (`sick.train.jsonl`) is read as it is: each
entailed hypothesis is a positive of its premise, a contradiction of the same premise its hard
negative, and SICK's relatedness gives scored pairs.

Bad input raises `UserError` naming the file and line. Rows with an empty text are skipped with
a warning that counts them (as the fine-tuning readers do); a file with nothing left is an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertkit.files import UserError, read_lines, require_file
from bertkit.finetuning.readers import _label_value, _records, _warn_skipped, detect_format


@dataclass
class Pair:
    """Two texts that mean the same (a query and its answer, a premise and what it entails)."""
    anchor: str
    positive: str
    source: str = ""
    """FILE:LINE it came from, for messages"""


@dataclass
class Triplet:
    """A pair and a hard negative: a text close to the anchor that does not mean the same."""
    anchor: str
    positive: str
    negative: str
    source: str = ""
    """FILE:LINE it came from, for messages"""


@dataclass
class ScoredPair:
    """Two texts and how similar they are."""
    text_a: str
    text_b: str
    score: float
    """as written, or brought to 0..1 when the reader is given the scores' range"""
    source: str = ""
    """FILE:LINE it came from, for messages"""


@dataclass
class QueryPassages:
    """A query, the passages that answer it and, optionally, passages that do not."""
    query: str
    relevant: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    source: str = ""
    """FILE:LINE of the query's first row"""


@dataclass
class NliExamples:
    """What an NLI file trains: see `read_nli`."""
    triplets: list[Triplet] = field(default_factory=list)
    """(premise, entailed hypothesis, contradicting hypothesis of the same premise)"""
    pairs: list[Pair] = field(default_factory=list)
    """(premise, entailed hypothesis) where the premise has no contradiction"""
    scored: list[ScoredPair] = field(default_factory=list)
    """(premise, hypothesis, relatedness brought from 1..5 to 0..1), every row; empty when the
    file has no relatedness"""


KIND_COLUMNS = {
    "queries": ("query", "relevant"),
    "nli": ("premise", "hypothesis", "label"),
    "triplets": ("anchor", "positive", "negative"),
    "triplets_query": ("query", "positive", "negative"),
    "pairs": ("anchor", "positive"),
    "pairs_query": ("query", "positive"),
    "scored": ("sentence1", "sentence2", "score"),
    "scored_ab": ("text_a", "text_b", "score"),
}
"""The columns that make each kind of file, in the order they are tried."""
KNOWN_COLUMNS = frozenset(c for columns in KIND_COLUMNS.values() for c in columns)
"""The names a header of this module's files is recognised by (and its delimiter)."""

NLI_LABELS = ("entailment", "neutral", "contradiction")


def _kind_of(columns, where: str) -> str:
    for kind, needed in KIND_COLUMNS.items():
        if set(needed) <= set(columns):
            return kind.partition("_")[0]  # scored_ab: scored, pairs_query: pairs, ...
    raise UserError(f"{where}: cannot tell what the file holds from its columns "
                    f"({', '.join(map(str, columns))}); expected anchor (or query),positive"
                    f"[,negative], sentence1,sentence2,score, query,relevant or "
                    f"premise,hypothesis,label (a plain text file of sentences: name it .txt)")


def detect_kind(path: str | Path) -> str:
    """What a training file holds: pairs, triplets, scored, queries, nli (from the columns of
    its first record) or sentences (a `.txt` file)."""
    p = require_file(path)
    if p.suffix.lower() == ".txt":
        return "sentences"
    fmt = detect_format(p)
    if fmt not in ("jsonl", "csv", "tsv"):
        raise UserError(f"{p}: expected JSON lines, CSV or TSV (or sentences in a .txt file), "
                        f"but this looks like {fmt}")
    for number, _, columns in _records(p, fmt, KNOWN_COLUMNS):
        if fmt != "jsonl":  # the columns are the header's, its first non-blank line
            number = next(n for n, line in read_lines(p) if line.strip())
        return _kind_of(columns, f"{p}:{number}")
    raise UserError(f"{p}: no records")


def _rows(path: Path, columns: tuple[str, ...]):
    """(line, the texts of `columns`, the record) per row whose texts are all non-empty; rows
    with an empty text are counted in one warning."""
    fmt = detect_format(path)
    if fmt not in ("jsonl", "csv", "tsv"):
        raise UserError(f"{path}: expected JSON lines, CSV or TSV, but this looks like {fmt}")
    skipped, first_skipped, rows = 0, "", 0
    for number, record, names in _records(path, fmt, columns):
        texts = []
        for column in columns:
            if column not in record:
                raise UserError(f"{path}:{number}: no column {column!r} (columns: "
                                f"{', '.join(map(str, names))})")
            if not isinstance(record[column], str):
                raise UserError(f"{path}:{number}: column {column!r} is "
                                f"{type(record[column]).__name__}, expected text")
            texts.append(record[column].strip())
        if not all(texts):
            skipped += 1
            first_skipped = first_skipped or f"{path}:{number}"
            continue
        rows += 1
        yield number, texts, record
    if not rows:  # one line: a warning of the skipped rows beside it would say it twice
        raise UserError(f"{first_skipped}: no examples: every row has an empty text "
                        f"({skipped} rows, this the first)" if skipped else f"{path}: no examples")
    _warn_skipped(path, "rows with an empty text", skipped, first_skipped)


def _columns_of(path: Path, kind: str) -> tuple[str, ...]:
    """The columns of `kind` this file names: `anchor`, or `query` in its place."""
    present = _first_columns(path)
    return next((KIND_COLUMNS[k] for k in (kind, f"{kind}_query")
                 if set(KIND_COLUMNS[k]) <= present), KIND_COLUMNS[kind])


def read_pairs(path: str | Path) -> list[Pair]:
    """(anchor, positive) pairs from the columns `anchor` (or `query`) and `positive`."""
    p = require_file(path)
    return [Pair(a, b, f"{p}:{n}") for n, (a, b), _ in _rows(p, _columns_of(p, "pairs"))]


def read_triplets(path: str | Path) -> list[Triplet]:
    """(anchor, positive, negative) triplets from the columns of those names (`query` for
    `anchor` too)."""
    p = require_file(path)
    return [Triplet(a, b, neg, f"{p}:{n}")
            for n, (a, b, neg), _ in _rows(p, _columns_of(p, "triplets"))]


def _score(path: Path, number: int, record: dict, column: str,
           score_range: tuple[float, float] | None) -> float:
    """The number in `column`, brought from `score_range` to 0..1 when a range is given."""
    if column not in record:
        raise UserError(f"{path}:{number}: no column {column!r}")
    score = _label_value(path, number, record[column], "float")
    if score_range is None:
        return score
    low, high = score_range
    if not low <= score <= high:
        raise UserError(f"{path}:{number}: {column} {score:g} is outside the range "
                        f"{low:g}..{high:g}")
    return (score - low) / (high - low)


def read_scored_pairs(path: str | Path, *,
                      score_range: tuple[float, float] | None = None) -> list[ScoredPair]:
    """Scored pairs from `sentence1`, `sentence2`, `score` (or `text_a`, `text_b`, `score`).

    Without `score_range` the scores are kept as written (CoSENT needs only their order); with
    it, `(low, high)`, each must lie in that range and is brought to 0..1 (STS-B: `(0, 5)`),
    as cosine-MSE needs."""
    if score_range is not None and not score_range[0] < score_range[1]:
        raise UserError(f"score range {score_range[0]:g}..{score_range[1]:g}: the low end must "
                        f"be below the high end")
    p = require_file(path)
    present = _first_columns(p)
    columns = next((KIND_COLUMNS[kind] for kind in ("scored", "scored_ab")
                    if set(KIND_COLUMNS[kind]) <= present), KIND_COLUMNS["scored"])
    return [ScoredPair(a, b, _score(p, n, record, columns[2], score_range), f"{p}:{n}")
            for n, (a, b), record in _rows(p, columns[:2])]


def _first_columns(path: Path) -> set[str]:
    for _, _, columns in _records(path, detect_format(path), KNOWN_COLUMNS):
        return set(columns)
    return set()


def read_nli(path: str | Path) -> NliExamples:
    """Training examples from an NLI file (`premise`, `hypothesis`, `label`, and optionally
    SICK's `relatedness`), read as it is.

    Rows are grouped by premise. Each hypothesis labelled entailment is a positive of its
    premise; the premise's contradictions are its hard negatives, handed round in turn (the
    k-th entailment of a premise gets its `k mod C`-th of C contradictions), so a premise
    with both gives triplets and one with entailments only gives pairs. Neutral rows train
    neither. With a `relatedness` column (1..5) every row is also a scored pair, its score
    brought to 0..1.
    """
    p = require_file(path)
    groups: dict[str, tuple[list, list]] = {}  # premise: (entailments, contradictions)
    out = NliExamples()
    related = None  # whether the file has relatedness, told by its first row
    for number, (premise, hypothesis), record in _rows(p, ("premise", "hypothesis")):
        if "label" not in record:
            raise UserError(f"{p}:{number}: no column 'label' (entailment, neutral or "
                            f"contradiction)")
        label = record["label"]
        if not isinstance(label, str) or label.strip().lower() not in NLI_LABELS:
            raise UserError(f"{p}:{number}: label {label!r} is not one of "
                            f"{', '.join(NLI_LABELS)}")
        label = label.strip().lower()
        related = "relatedness" in record if related is None else related
        if related:
            out.scored.append(ScoredPair(premise, hypothesis, _score(
                p, number, record, "relatedness", (1.0, 5.0)), f"{p}:{number}"))
        entailed, contradicting = groups.setdefault(premise, ([], []))
        if label != "neutral":
            (entailed if label == "entailment" else contradicting).append(
                (hypothesis, f"{p}:{number}"))
    for premise, (entailed, contradicting) in groups.items():
        for k, (hypothesis, where) in enumerate(entailed):
            if contradicting:
                negative = contradicting[k % len(contradicting)][0]
                out.triplets.append(Triplet(premise, hypothesis, negative, where))
            else:
                out.pairs.append(Pair(premise, hypothesis, where))
    if not out.triplets and not out.pairs and not out.scored:
        raise UserError(f"{p}: no entailment pairs and no relatedness scores to train on")
    return out


def _passages(path: Path, number: int, record: dict, column: str) -> tuple[str, ...]:
    """A column's passages: one text, or (JSON lines) a list of texts; empty ones dropped."""
    value = record.get(column, [])
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UserError(f"{path}:{number}: column {column!r} must be a text or a list of texts, "
                        f"got {type(value).__name__}")
    return tuple(v.strip() for v in values if v.strip())


def read_queries(path: str | Path) -> list[QueryPassages]:
    """Queries with their relevant passages, from `query` and `relevant` (and optionally
    `negatives`): in JSON lines each a text or a list of texts, in CSV/TSV one text a row.
    Rows of the same query are merged, in the order first seen; a query with no relevant
    passage is skipped with a warning that counts them. The passages of every row together
    are the collection a query is searched in."""
    p = require_file(path)
    fmt = detect_format(p)
    if fmt not in ("jsonl", "csv", "tsv"):
        raise UserError(f"{p}: expected JSON lines, CSV or TSV, but this looks like {fmt}")
    found: dict[str, tuple[dict, dict, str]] = {}  # query: (relevant, negatives, source)
    for number, record, names in _records(p, fmt, KIND_COLUMNS["queries"]):
        query = record.get("query")
        if not isinstance(query, str):
            raise UserError(f"{p}:{number}: column 'query' must be a text (columns: "
                            f"{', '.join(map(str, names))})")
        relevant, negatives, _ = found.setdefault(query.strip(), ({}, {}, f"{p}:{number}"))
        relevant.update(dict.fromkeys(_passages(p, number, record, "relevant")))
        negatives.update(dict.fromkeys(_passages(p, number, record, "negatives")))
    out, skipped, first = [], 0, ""
    for query, (relevant, negatives, source) in found.items():
        if not query or not relevant:
            skipped, first = skipped + 1, first or source
            continue
        out.append(QueryPassages(query, tuple(relevant),
                                 tuple(n for n in negatives if n not in relevant), source))
    _warn_skipped(p, "queries with no text or no relevant passage", skipped, first)
    if not out:
        raise UserError(f"{p}: no query with a relevant passage")
    return out


def read_sentences(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped: one sentence (or short passage) a
    line, for unsupervised SimCSE."""
    p = require_file(path)
    sentences = [line.strip() for _, line in read_lines(p) if line.strip()]
    if not sentences:
        raise UserError(f"{p}: no sentences (only blank lines)")
    return sentences


__all__ = ["KIND_COLUMNS", "NLI_LABELS", "NliExamples", "Pair", "QueryPassages", "ScoredPair",
           "Triplet", "detect_kind", "read_nli", "read_pairs", "read_queries",
           "read_scored_pairs", "read_sentences", "read_triplets"]
