"""BEIR directories and passage collections, read with every bad line named.

A BEIR directory (the layout of the BEIR benchmark, Thakur et al. 2021) holds

    corpus.jsonl       {"_id": ..., "title": ..., "text": ...} a passage a line
    queries.jsonl      {"_id": ..., "text": ...} a query a line
    qrels/test.tsv     query-id, corpus-id, score: a header line, then a judgement a line
                       (tab-separated; qrels/dev.tsv when there is no test.tsv)

A passage is its title and text joined by a space, as BEIR gives them to a sentence model. A
score above 0 marks a relevant passage, graded by its value (nDCG counts the grade). A
collection for `bertkit mine` is such a corpus.jsonl (`_id` and `title` optional) or a text
file, one passage a line.

Bad input is a one-line UserError naming the file and line: a passage or query id twice, a
judgement naming a query or passage the directory does not have, a line that is not JSON or a
score that is not a whole number.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.files import UserError, atomic_dir, read_jsonl, read_lines, require_file

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
SPLITS = ("test", "dev")
"""The judgements read, the first a directory has."""


@dataclass
class Passages:
    """A collection of passages: ids, texts and where each was read (FILE:LINE)."""
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def index(self) -> dict[str, int]:
        """Passage id -> its position."""
        return {pid: i for i, pid in enumerate(self.ids)}

    def add(self, pid: str, text: str, source: str, seen: dict[str, str]) -> None:
        if pid in seen:
            raise UserError(f"{source}: duplicate id {pid!r}, first at {seen[pid]}")
        seen[pid] = source
        self.ids.append(pid)
        self.texts.append(text)
        self.sources.append(source)


@dataclass
class BeirSet:
    """A BEIR directory read: the corpus, the judged queries and their judgements."""
    corpus: Passages
    queries: Passages
    """The queries with a relevant passage, in the order of queries.jsonl."""
    qrels: list[dict[int, int]]
    """Per query, its judged passages (positions in `corpus`) and their grades."""
    qrels_path: Path


def _text(record: dict, key: str, where: str, required: bool = True) -> str:
    value = record.get(key, "" if not required else None)
    if value is None:
        raise UserError(f"{where}: no {key!r} field")
    if not isinstance(value, str):
        raise UserError(f"{where}: {key!r} is {type(value).__name__}, expected text")
    return value.strip()


def _id(record: dict, where: str) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UserError(f"{where}: expected an '_id' field (text or a whole number)")
    return str(value)


def _records(path: Path, what: str, titled: bool, ids: bool = True) -> Passages:
    out, seen = Passages(), {}
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        pid = _id(record, where) if ids or "_id" in record else str(number)
        text = _text(record, "text", where)
        if titled:
            text = f"{_text(record, 'title', where, required=False)} {text}".strip()
        if not text:
            raise UserError(f"{where}: the {what} is empty")
        out.add(pid, text, where, seen)
    if not out.ids:
        raise UserError(f"{path}: no {what}s")
    return out


def _first_line(path: Path) -> str:
    return next((line.strip() for _, line in read_lines(path) if line.strip()), "")


def read_passages(path: str | Path) -> Passages:
    """A collection of passages: JSON lines with `text` (and optionally `_id`, `title`, as a
    BEIR corpus.jsonl; without `_id` a passage's id is its line number), or a text file, one
    passage a line (its id its line number; blank lines skipped)."""
    p = require_file(path)
    if _first_line(p).startswith("{"):
        return _records(p, "passage", titled=True, ids=False)
    out, seen = Passages(), {}
    for number, line in read_lines(p):
        if line.strip():
            out.add(str(number), line.strip(), f"{p}:{number}", seen)
    if not out.ids:
        raise UserError(f"{p}: no passages")
    return out


def is_beir_dir(path: str | Path) -> bool:
    """A directory with BEIR's corpus.jsonl, queries.jsonl and qrels/."""
    p = Path(path)
    return p.is_dir() and (p / CORPUS_FILE).is_file() and (p / QUERIES_FILE).is_file() \
        and (p / QRELS_DIR).is_dir()


def qrels_file(path: str | Path) -> Path:
    """The judgements a BEIR directory is evaluated on: qrels/test.tsv, else qrels/dev.tsv."""
    for split in SPLITS:
        candidate = Path(path) / QRELS_DIR / f"{split}.tsv"
        if candidate.is_file():
            return candidate
    raise UserError(f"{Path(path) / QRELS_DIR}: no {' or '.join(s + '.tsv' for s in SPLITS)}")


def read_qrels(path: Path) -> dict[str, dict[str, tuple[int, str]]]:
    """query id -> passage id -> (grade, FILE:LINE), from a qrels TSV with its header."""
    found: dict[str, dict[str, tuple[int, str]]] = {}
    header = True
    for number, line in read_lines(path):
        if not line.strip():
            continue
        fields = line.rstrip("\n").split("\t")
        where = f"{path}:{number}"
        if header:
            header = False
            if [f.strip() for f in fields] == ["query-id", "corpus-id", "score"]:
                continue
            raise UserError(f"{where}: expected the header query-id<TAB>corpus-id<TAB>score")
        if len(fields) != 3:
            raise UserError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, "
                            f"score), got {len(fields)}")
        try:
            grade = int(fields[2])
        except ValueError:
            raise UserError(f"{where}: score {fields[2]!r} is not a whole number") from None
        found.setdefault(fields[0].strip(), {})[fields[1].strip()] = (grade, where)
    return found


def read_beir(path: str | Path) -> BeirSet:
    """A BEIR directory, its queries cut to those with a relevant passage (score above 0) in
    the judgements (`qrels_file`); a judgement naming a query or a passage that is not there is
    a UserError naming its line."""
    path = Path(path)
    corpus = _records(path / CORPUS_FILE, "passage", titled=True)
    queries = _records(path / QUERIES_FILE, "query", titled=False)
    qrels_path = qrels_file(path)
    judged = read_qrels(qrels_path)
    where = corpus.index()
    query_at = queries.index()
    for qid, passages in judged.items():
        for pid, (_, line) in passages.items():
            if qid not in query_at:
                raise UserError(f"{line}: query {qid!r} is not in {path / QUERIES_FILE}")
            if pid not in where:
                raise UserError(f"{line}: document {pid!r} is not in {path / CORPUS_FILE}")
    kept, qrels = Passages(), []
    for i, qid in enumerate(queries.ids):
        grades = {where[pid]: grade for pid, (grade, _) in judged.get(qid, {}).items()}
        if any(g > 0 for g in grades.values()):
            kept.ids.append(qid)
            kept.texts.append(queries.texts[i])
            kept.sources.append(queries.sources[i])
            qrels.append(grades)
    if not qrels:
        raise UserError(f"{qrels_path}: no query has a relevant passage (a score above 0)")
    return BeirSet(corpus, kept, qrels, qrels_path)


def write_beir(path: str | Path, corpus: list[dict], queries: list[dict],
               qrels: list[tuple[str, str, int]], split: str = "test") -> Path:
    """Write a BEIR directory: corpus records (`_id`, `title`, `text`), query records (`_id`,
    `text`) and judgements (query id, passage id, score) into qrels/SPLIT.tsv."""
    with atomic_dir(path) as tmp:
        for name, records in ((CORPUS_FILE, corpus), (QUERIES_FILE, queries)):
            (tmp / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                            for r in records), encoding="utf-8")
        (tmp / QRELS_DIR).mkdir()
        (tmp / QRELS_DIR / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{p}\t{s}\n" for q, p, s in qrels),
            encoding="utf-8")
    return Path(path)


__all__ = ["BeirSet", "CORPUS_FILE", "Passages", "QRELS_DIR", "QUERIES_FILE", "is_beir_dir",
           "qrels_file", "read_beir", "read_passages", "read_qrels", "write_beir"]
