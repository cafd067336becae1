"""Corpus preparation: text or JSONL files -> documents -> sentences -> memory-mapped token shards.

    prepare(["austen.txt"], "tok/", "data/")      # bertkit prepare --corpus ... --out data/

Input: plain text (one sentence or paragraph per line, a blank line between documents, a new
file starts a new document) or JSONL with a "text" field (one document per line; newlines in
the text separate paragraphs), recognised by the extension .jsonl/.json or by its first line.

Output directory:
    manifest.json            written last: tokenizer fingerprint, shard list with sha256, counts
    tokenizer/               the tokenizer the shards were made with (`Tokenizer.load` reads it)
    token_counts.npy         int64 [vocab]: token frequencies of the train split (unigram sampler)
    word_starts.npy          bool [vocab]: does this piece begin a word (no `##`; `▁` in Unigram)
    shards/shard_NNNNN.*     tokens.bin   raw dtype (uint16 when the vocab fits, else int32)
                             sentences.npy int64 [S+1] token offset of each sentence
                             documents.npy int64 [D+1] sentence offset of each document
                             heldout.npy   bool [D] the document belongs to the held-out split
                             json         counts, checksums, and where in the input it ends

Speed: the text is cut into words at spaces, and each distinct word is tokenized once by the
`tokenizers` pipeline and cached (per worker, bounded); a chunk's tokens are then a numpy
gather. For a BERT or Unigram pipeline this gives exactly the ids of encoding the whole line
(checked on the first chunk of every run; any other pipeline encodes sentences directly).
Sentence ends are found per distinct word too ("Mr." is not an end), so the per-token work is
all numpy. Chunks go to `workers` processes; memory is bounded by the chunk size and the word
cache, not by the corpus. A shard is complete once its .json exists (written last, each file
renamed into place), so a re-run with the same inputs resumes after the last complete shard.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import re
import shutil
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import tokenizers

from .files import UserError, atomic_file, read_json, require_file, write_json

FORMAT = "bertkit-shards/1"
SPLITS = ("train", "heldout")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof rev gen col capt lt sgt mt ft vs etc e.g i.e no vol fig "
    "jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp dept est approx".split())
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u2019\u201d)\]]*$")
_OPENERS = "\"'\u201c\u2018([{"
_CACHED_WORD_CHARS = 48
"""Longer 'words' (URLs, text without spaces) are tokenized every time, never cached."""


@dataclass
class _Position:
    """Where the reader stands in the input: enough to resume reading exactly there."""
    file: int = 0
    offset: int = 0
    line: int = 0
    doc: int = -1
    """Index of the last document started (documents are numbered from 0 in input order)."""
    in_doc: bool = False
    """The last line read was text (a following text line continues the same document)."""


def prepare(corpus_files: Sequence[str | os.PathLike], tokenizer_dir: str | os.PathLike,
            out_dir: str | os.PathLike, *, heldout_fraction: float = 0.01,
            shard_tokens: int = 1 << 24, workers: int | None = None, chunk_bytes: int = 1 << 20,
            cache_words: int = 300_000, progress: bool = True) -> dict:
    """Tokenize `corpus_files` into shards under `out_dir`; return the manifest.

    heldout_fraction: share of documents kept out of training, scattered through the corpus
    (see `_plan_documents`); a corpus of one document gives the last lines of it.
    shard_tokens: a shard is closed once it holds at least this many tokens. workers:
    tokenizing processes (default: all cores; 1 = in this process). chunk_bytes: text sent to
    a worker at a time. cache_words: distinct words cached per worker.
    """
    from .tokenizer import Tokenizer

    if not corpus_files:
        raise UserError("no corpus files given")
    if not 0.0 <= heldout_fraction < 1.0:
        raise UserError(f"heldout fraction must be in [0, 1), got {heldout_fraction}")
    if shard_tokens < 1 or chunk_bytes < 1:
        raise UserError("shard_tokens and chunk_bytes must be positive")
    files = [require_file(f, "corpus file") for f in corpus_files]
    kinds = [_kind(f) for f in files]
    tokenizer = Tokenizer.load(tokenizer_dir)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    vocab_size = tokenizer.vocab_size
    dtype = np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)
    fingerprint = tokenizer_fingerprint(tokenizer)
    layout = _plan_documents(files, kinds, heldout_fraction)
    if layout["documents"] == 0:
        raise UserError(f"{files[0]}: no documents in the corpus (only blank lines)")
    plan = {"format": FORMAT, "tokenizer": fingerprint, "dtype": dtype.name,
            "heldout_fraction": heldout_fraction, "shard_tokens": shard_tokens,
            "chunk_bytes": chunk_bytes,
            "sources": [{"path": str(f.resolve()), "bytes": f.stat().st_size,
                         "mtime_ns": f.stat().st_mtime_ns} for f in files],
            **layout}
    created = not out.exists()
    try:
        return _prepare(files, kinds, tokenizer, out, plan, fingerprint, dtype, workers,
                        cache_words, progress)
    except UserError:
        if created:  # bad input found late (invalid JSON, no text at all): leave nothing
            shutil.rmtree(out, ignore_errors=True)
        raise


def _prepare(files, kinds, tokenizer, out: Path, plan: dict, fingerprint: str, dtype,
             workers, cache_words: int, progress: bool) -> dict:
    done = _resume_point(out, plan)
    if done is None:
        if progress:
            print(f"prepare: {out} is already prepared from these files", file=sys.stderr)
        return read_json(out / "manifest.json")
    shards, position = done
    (out / "shards").mkdir(parents=True, exist_ok=True)
    if not (out / "tokenizer" / "tokenizer.json").is_file() or not shards:
        shutil.rmtree(out / "tokenizer", ignore_errors=True)
        tokenizer.save(out / "tokenizer")
    write_json(out / "plan.json", plan)

    tokenizer_json = (out / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8")
    fast = _fast_path_ok(tokenizer_json, files, kinds)
    heldout = _HeldoutRule(plan["heldout"])
    reader = _chunks(files, kinds, position, plan["chunk_bytes"], plan["cut_line"])
    meter = _Progress(sum(f.stat().st_size for f in files), position, files, progress)
    writer = _ShardWriter(out / "shards", len(shards), dtype, plan["shard_tokens"], heldout)
    for chunk_result, end in _tokenize_chunks(reader, tokenizer_json, fast, dtype, workers,
                                              cache_words):
        meter.update(end, len(chunk_result[0]))
        shard = writer.add(chunk_result, end)
        if shard is not None:
            shards.append(shard)
    last = writer.close()
    if last is not None:
        shards.append(last)
    meter.finish()

    manifest = _manifest(out, shards, tokenizer, fingerprint, dtype, plan, fast)
    if manifest["train"]["tokens"] == 0:
        raise UserError(f"{files[0]}: no text to train on in the corpus")
    write_json(out / "manifest.json", manifest)
    return manifest


# Input: kinds, document counts, reading ------------------------------------------------------

def _kind(path: Path) -> str:
    if path.suffix.lower() in (".jsonl", ".json"):
        return "jsonl"
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                head = raw.lstrip()
                if head.startswith(b"{"):
                    try:
                        return "jsonl" if "text" in json.loads(raw) else "text"
                    except (ValueError, TypeError):
                        return "text"
                return "text"
    return "text"


def _plan_documents(files: list[Path], kinds: list[str], fraction: float) -> dict:
    """A first pass over the bytes: refuse non-UTF-8 text before writing anything, and choose
    the held-out documents. Each document is held out with probability `fraction` (a hash of
    its index, so the choice is scattered through the corpus and repeatable), unless it is
    larger than 2 x fraction of the corpus (one huge document would make the held-out split
    lopsided); at least one is when there are two or more. A corpus that is one document of
    text has its last 1% of lines (at least one) made a second, held-out document."""
    total = sum(f.stat().st_size for f in files)
    cap = max(2 * fraction * total, 1 << 16)
    documents, first_doc_lines, size = 0, 0, 0
    heldout: list[int] = []
    smallest = (float("inf"), -1)

    def close(doc: int, size: int) -> None:
        nonlocal smallest
        if doc < 0:
            return
        if size <= cap and _unit_hash(doc) < fraction:
            heldout.append(doc)
        smallest = min(smallest, (size, doc))

    for path, kind in zip(files, kinds):
        in_doc = False
        for _, block in _blocks(path):
            for raw in block:
                text = bool(raw.strip())
                if kind == "jsonl" or (text and not in_doc):
                    if text:
                        close(documents - 1, size)
                        documents, size = documents + 1, 0
                in_doc = text
                size += len(raw)
                first_doc_lines += text and documents == 1
    close(documents - 1, size)
    cut = None
    if documents == 1 and kinds[0] == "text" and first_doc_lines >= 2 and fraction > 0:
        tail_start = first_doc_lines - max(1, round(first_doc_lines * 0.01)) + 1
        seen = 0
        for first_number, block in _blocks(files[0]):
            for number, raw in enumerate(block, first_number):
                seen += bool(raw.strip())
                if seen == tail_start and cut is None:
                    cut = [0, number]
        heldout = [1]
    elif not heldout and documents >= 2 and fraction > 0:
        heldout = [smallest[1]]
    return {"documents": documents, "heldout": heldout, "cut_line": cut}


def _unit_hash(i: int) -> float:
    """A fixed pseudo-random number in [0, 1) for document i (splitmix64)."""
    z = (i + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def _blocks(path: Path) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first line, lines) in blocks of ~4 MB, checked to be UTF-8."""
    number = 1
    with open(path, "rb") as f:
        while block := f.readlines(1 << 22):
            try:
                b"".join(block).decode("utf-8")
            except UnicodeDecodeError:
                for i, raw in enumerate(block):
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise UserError(f"{path}:{number + i}: not UTF-8 text (byte "
                                        f"{raw[e.start]:#04x} at column {e.start + 1})") from None
            yield number, block
            number += len(block)


class _HeldoutRule:
    """Is each of these document indices one of the held-out documents?"""

    def __init__(self, heldout: list[int]):
        self.heldout = np.asarray(sorted(heldout), dtype=np.int64)

    def __call__(self, doc: np.ndarray) -> np.ndarray:
        return np.isin(np.asarray(doc, dtype=np.int64), self.heldout)


def _chunks(files: list[Path], kinds: list[str], start: _Position, chunk_bytes: int,
            cut_line) -> Iterator[tuple[list[str], list[int], _Position]]:
    """Yield (lines, document index of each line, position after the chunk), from `start`."""
    lines: list[str] = []
    docs: list[int] = []
    size = 0
    pos = _Position(**vars(start))
    cut = tuple(cut_line) if cut_line else None
    for index in range(start.file, len(files)):
        path, kind = files[index], kinds[index]
        if index != pos.file:
            pos = _Position(file=index, doc=pos.doc)
        with open(path, "rb") as f:
            f.seek(pos.offset)
            for raw in f:
                pos.line += 1
                pos.offset += len(raw)
                size += len(raw)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise UserError(f"{path}:{pos.line}: not UTF-8 text (byte "
                                    f"{raw[e.start]:#04x} at column {e.start + 1})") from None
                if kind == "jsonl":
                    if not line.strip():
                        continue
                    pos.doc += 1
                    for paragraph in _json_text(line, path, pos.line).split("\n"):
                        if paragraph := paragraph.strip():
                            lines.append(paragraph)
                            docs.append(pos.doc)
                else:
                    line = line.strip()
                    if not line:
                        pos.in_doc = False
                        continue
                    if not pos.in_doc or (index, pos.line) == cut:
                        pos.doc += 1
                    pos.in_doc = True
                    lines.append(line)
                    docs.append(pos.doc)
                if size >= chunk_bytes:
                    yield lines, docs, _Position(**vars(pos))
                    lines, docs, size = [], [], 0
        pos.in_doc = False
    if lines or size:
        yield lines, docs, _Position(file=len(files), doc=pos.doc)


def _json_text(line: str, path: Path, number: int) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{number}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise UserError(f"{path}:{number}: expected a JSON object with a \"text\" string")
    return obj["text"]


# Tokenizing: the word cache ------------------------------------------------------------------

def _word_flags(words: list[str]) -> tuple[list[bool], list[bool]]:
    """For each word: (it can end a sentence, it can start one). "Mr." and "J." end none."""
    closers = "\"'\u2019\u201d)]"
    ends = [m is not None for m in map(_SENTENCE_END.search, words)]
    for i in [i for i, e in enumerate(ends) if e and words[i].rstrip(closers).endswith(".")]:
        core = words[i].lstrip(_OPENERS).rstrip(closers)[:-1].lower()
        ends[i] = not (core in _ABBREVIATIONS or len(core) == 1)
    heads = [w.lstrip(_OPENERS)[:1] for w in words]
    return ends, [h.isupper() or h.isdigit() for h in heads]


class _Growable:
    """A numpy array that grows by doubling (cache storage without Python lists)."""

    def __init__(self, dtype, capacity: int = 1 << 16):
        self.data = np.empty(capacity, dtype=dtype)
        self.n = 0

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self.data.dtype)
        while self.n + len(values) > len(self.data):
            self.data = np.resize(self.data, 2 * len(self.data))
        self.data[self.n:self.n + len(values)] = values
        self.n += len(values)


class ChunkTokenizer:
    """Lines of one chunk -> (tokens, sentence lengths, document of each sentence)."""

    def __init__(self, tokenizer_json: str, *, fast: bool, dtype=np.int32,
                 cache_words: int = 300_000):
        self.backend = tokenizers.Tokenizer.from_str(tokenizer_json)
        self.backend.no_truncation()
        self.backend.no_padding()
        self.fast, self.dtype, self.limit = fast, np.dtype(dtype), cache_words
        self.index: dict[str, int] = {}
        self.pieces = _Growable(np.int32, 1 << 20)
        self.start = _Growable(np.int64)  # entry -> first piece in self.pieces
        self.length = _Growable(np.int32)
        self.ends = _Growable(np.bool_)
        self.opens = _Growable(np.bool_)

    def __call__(self, lines: list[str], line_doc: list[int]):
        split = [line.split(" ") for line in lines]
        per_line = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
        words = list(itertools.chain.from_iterable(split))
        # one dict lookup per word; only the misses (few once the cache is warm) cost more
        entry = np.fromiter(map(self.index.get, words, itertools.repeat(-1)), dtype=np.int64,
                            count=len(words))
        misses = np.flatnonzero(entry < 0)
        keep = self._add_missing({words[i] for i in misses})
        entry[misses] = [self.index[words[i]] for i in misses]
        try:
            return self._assemble(lines, words, entry, per_line, np.asarray(line_doc, np.int64))
        finally:
            self._forget(keep)

    def _add_missing(self, new_words: set[str]) -> int:
        """Add the chunk's new words; return how many entries stay cached afterwards."""
        index = self.index
        missing = sorted(new_words, key=lambda w: len(w) > _CACHED_WORD_CHARS)
        short = sum(len(w) <= _CACHED_WORD_CHARS for w in missing)
        keep = min(self.limit, self.start.n + short)
        if not missing:
            return self.start.n
        ends, opens = _word_flags(missing)
        self.ends.extend(ends)
        self.opens.extend(opens)
        if self.fast:
            encoded = self.backend.encode_batch_fast(missing, add_special_tokens=False)
            ids = [e.ids for e in encoded]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            self.start.extend(self.pieces.n + np.cumsum(lengths) - lengths)
            self.length.extend(lengths)
            self.pieces.extend(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32,
                                           count=int(lengths.sum())))
        else:
            # words are not encoded one by one here: only "is there any text" matters
            self.start.extend(np.zeros(len(missing)))
            self.length.extend([bool(w.strip()) for w in missing])
        for i, w in enumerate(missing, self.start.n - len(missing)):
            index[w] = i
        return keep

    def _forget(self, keep: int) -> None:
        """Drop the entries past the cache limit (and uncached long words) a chunk added: they
        are the last ones inserted."""
        extra = self.start.n - keep
        if extra <= 0:
            return
        for word in list(itertools.islice(reversed(self.index), extra)):
            del self.index[word]
        if self.fast:
            self.pieces.n = int(self.start.data[keep])
        for arr in (self.start, self.length, self.ends, self.opens):
            arr.n = keep

    def _assemble(self, lines, words, entry, per_line, line_doc):
        word_line = np.repeat(np.arange(len(lines)), per_line)
        n_pieces = self.length.data[entry]
        real = n_pieces > 0  # "" between two spaces, or a word of only control characters
        entry, word_line, n_pieces = entry[real], word_line[real], n_pieces[real]
        same_line = word_line[1:] == word_line[:-1]
        end = np.ones(len(entry), dtype=bool)  # sentence ends after this word
        end[:-1] = ~same_line | (self.ends.data[entry[:-1]] & self.opens.data[entry[1:]])
        last_word = np.flatnonzero(end)
        sent_doc = line_doc[word_line[last_word]]
        if self.fast:
            total = int(n_pieces.sum())
            first = self.start.data[entry]
            offsets = np.cumsum(n_pieces) - n_pieces
            tokens = self.pieces.data[np.repeat(first - offsets, n_pieces) + np.arange(total)]
            ends_at = np.cumsum(n_pieces)[last_word]
            sent_len = np.diff(ends_at, prepend=0)
        else:
            kept_words = np.flatnonzero(real)
            bounds = np.concatenate([[0], last_word + 1])
            sentences = [" ".join(words[j] for j in kept_words[a:b])
                         for a, b in zip(bounds[:-1], bounds[1:])]
            encoded = self.backend.encode_batch_fast(sentences, add_special_tokens=False)
            ids = [e.ids for e in encoded]
            sent_len = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                                 count=int(sent_len.sum()))
            nonempty = sent_len > 0
            sent_len, sent_doc = sent_len[nonempty], sent_doc[nonempty]
        return tokens.astype(self.dtype), sent_len.astype(np.int64), sent_doc


def _fast_path_ok(tokenizer_json: str, files: list[Path], kinds: list[str]) -> bool:
    """Word-by-word encoding equals whole-line encoding for pipelines that split at spaces and
    normalize character by character; check that on real lines of this corpus too."""
    spec = json.loads(tokenizer_json)
    local = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}
    splitting = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}

    def steps(node, key):
        if node is None:
            return []
        return [s for n in node.get(key, [node]) for s in steps(n, key)] \
            if node.get("type") == "Sequence" else [node]

    normalizers = steps(spec.get("normalizer"), "normalizers")
    pre = steps(spec.get("pre_tokenizer"), "pretokenizers")
    ok = all(n.get("type") in local for n in normalizers) and bool(pre) and all(
        p.get("type") in splitting or (p.get("type") == "Metaspace" and p.get("split", True)
                                       and p.get("prepend_scheme", "always") != "never")
        for p in pre)
    ok = ok and not any(any(c.isspace() for c in t["content"]) for t in spec["added_tokens"])
    if not ok:
        return False
    sample = list(itertools.islice(
        (l for l, _, _ in _chunks(files, kinds, _Position(), 1 << 16, None)), 1))
    lines = sample[0][:400] if sample else []
    docs = list(range(len(lines)))
    fast = ChunkTokenizer(tokenizer_json, fast=True)(lines, docs)
    slow = ChunkTokenizer(tokenizer_json, fast=False)(lines, docs)
    return all(np.array_equal(a, b) for a, b in zip(fast, slow))


_WORKER: ChunkTokenizer | None = None


def _worker_init(tokenizer_json: str, fast: bool, dtype: str, cache_words: int) -> None:
    global _WORKER  # one tokenizer per worker process, made once by the pool's initializer
    os.environ["RAYON_NUM_THREADS"] = "1"  # the processes are the parallelism
    _WORKER = ChunkTokenizer(tokenizer_json, fast=fast, dtype=dtype, cache_words=cache_words)


def _worker_run(lines: list[str], docs: list[int]):
    return _WORKER(lines, docs)


def _tokenize_chunks(reader, tokenizer_json: str, fast: bool, dtype, workers: int | None,
                     cache_words: int):
    """Yield ((tokens, sentence lengths, sentence docs), end position) in input order."""
    workers = os.cpu_count() or 1 if workers is None else max(1, workers)
    if workers == 1:
        run = ChunkTokenizer(tokenizer_json, fast=fast, dtype=dtype, cache_words=cache_words)
        for lines, docs, end in reader:
            yield run(lines, docs), end
        return
    context = multiprocessing.get_context("spawn")  # no fork after the Rust pool has started
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init,
                             initargs=(tokenizer_json, fast, np.dtype(dtype).name,
                                       cache_words)) as pool:
        pending: deque = deque()
        try:
            for lines, docs, end in reader:
                pending.append((pool.submit(_worker_run, lines, docs), end))
                if len(pending) > 2 * workers:  # bounded: the reader never runs far ahead
                    future, end_ = pending.popleft()
                    yield future.result(), end_
            while pending:
                future, end_ = pending.popleft()
                yield future.result(), end_
        finally:
            for future, _ in pending:
                future.cancel()


# Output: shards ------------------------------------------------------------------------------

class _ShardWriter:
    """Streams chunk results into shard files; closes a shard at a chunk boundary once it holds
    `shard_tokens` tokens."""

    def __init__(self, root: Path, first_index: int, dtype, shard_tokens: int,
                 heldout: _HeldoutRule):
        self.root, self.index, self.dtype = root, first_index, np.dtype(dtype)
        self.shard_tokens, self.heldout = shard_tokens, heldout
        self.file = None

    def _open(self) -> None:
        self.name = f"shard_{self.index:05d}"
        self.tmp = self.root / f".{self.name}.tokens.bin.tmp"
        self.file = open(self.tmp, "wb")
        self.hash = hashlib.sha256()
        self.n_tokens = 0
        self.sent_lens: list[np.ndarray] = []
        self.sent_docs: list[np.ndarray] = []

    def add(self, result, end: _Position) -> dict | None:
        tokens, sent_len, sent_doc = result
        if self.file is None:
            self._open()
        data = np.ascontiguousarray(tokens, dtype=self.dtype)
        self.file.write(data.data)
        self.hash.update(data.data)
        self.n_tokens += len(data)
        self.sent_lens.append(sent_len)
        self.sent_docs.append(sent_doc)
        self.end = end
        if self.n_tokens >= self.shard_tokens:
            return self.close()
        return None

    def close(self) -> dict | None:
        if self.file is None:
            return None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.file = None
        sent_len = np.concatenate(self.sent_lens) if self.sent_lens else np.zeros(0, np.int64)
        sent_doc = np.concatenate(self.sent_docs) if self.sent_docs else np.zeros(0, np.int64)
        sentences = np.concatenate([[0], np.cumsum(sent_len)]).astype(np.int64)
        new_doc = np.ones(len(sent_doc), dtype=bool)
        new_doc[1:] = sent_doc[1:] != sent_doc[:-1]
        doc_first = np.flatnonzero(new_doc)
        documents = np.concatenate([doc_first, [len(sent_doc)]]).astype(np.int64)
        heldout = self.heldout(sent_doc[doc_first])
        files = {"tokens.bin": self.hash.hexdigest()}
        for suffix, array in (("sentences.npy", sentences), ("documents.npy", documents),
                              ("heldout.npy", heldout)):
            with atomic_file(self.root / f"{self.name}.{suffix}", "wb") as f:
                np.save(f, array, allow_pickle=False)
            files[suffix] = _sha256(self.root / f"{self.name}.{suffix}")
        os.replace(self.tmp, self.root / f"{self.name}.tokens.bin")
        record = {"name": self.name, "tokens": int(sentences[-1]), "sentences": len(sent_len),
                  "documents": len(doc_first), "heldout_documents": int(heldout.sum()),
                  "heldout_tokens": int(sent_len[np.repeat(heldout, np.diff(documents))].sum()),
                  "files": files, "end": vars(self.end)}
        write_json(self.root / f"{self.name}.json", record)
        self.index += 1
        return record


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _resume_point(out: Path, plan: dict):
    """None when `out` is finished for this plan; else (complete shards, position after them).
    A directory made from other inputs or settings is cleared first."""
    plan_file = out / "plan.json"
    same = plan_file.is_file() and _load_json(plan_file) == plan
    if same and (out / "manifest.json").is_file():
        return None
    if not same:
        for name in ("manifest.json", "plan.json", "token_counts.npy", "word_starts.npy"):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "shards", ignore_errors=True)
        shutil.rmtree(out / "tokenizer", ignore_errors=True)
        return [], _Position()
    shards = []
    while (record := out / "shards" / f"shard_{len(shards):05d}.json").is_file():
        shards.append(_load_json(record))
    for stale in (out / "shards").glob("*"):
        index = int(stale.name.split("_")[1].split(".")[0]) if stale.name.startswith(
            "shard_") else -1
        if index >= len(shards) or stale.name.startswith("."):
            stale.unlink()
    if shards:
        print(f"prepare: resuming after {len(shards)} finished shard(s)", file=sys.stderr)
        return shards, _Position(**shards[-1]["end"])
    return [], _Position()


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _manifest(out: Path, shards: list[dict], tokenizer, fingerprint: str, dtype, plan: dict,
              fast: bool) -> dict:
    vocab = tokenizer.vocab_size
    counts = np.zeros(vocab, dtype=np.int64)
    totals = {split: {"documents": 0, "sentences": 0, "tokens": 0} for split in SPLITS}
    for shard in shards:
        arrays = _shard_arrays(out / "shards", shard["name"], dtype)
        tokens, sentences, documents, heldout = arrays
        sent_per_doc = np.diff(documents)
        tok_per_doc = sentences[documents[1:]] - sentences[documents[:-1]]
        for split, mask in (("train", ~heldout), ("heldout", heldout)):
            totals[split]["documents"] += int(mask.sum())
            totals[split]["sentences"] += int(sent_per_doc[mask].sum())
            totals[split]["tokens"] += int(tok_per_doc[mask].sum())
        train_token = np.repeat(~heldout, tok_per_doc)
        counts += np.bincount(tokens[train_token], minlength=vocab)[:vocab]
    np.save(out / "token_counts.npy", counts)
    np.save(out / "word_starts.npy", word_starts(tokenizer))
    specials = {"pad": tokenizer.pad_id, "unk": tokenizer.unk_id, "cls": tokenizer.cls_id,
                "sep": tokenizer.sep_id, "mask": tokenizer.mask_id}
    return {"format": FORMAT, "dtype": np.dtype(dtype).name,
            "tokenizer": {"dir": "tokenizer", "fingerprint": fingerprint, "vocab_size": vocab,
                          "kind": tokenizer.kind, "special_ids": specials,
                          "word_cache": fast},
            "heldout_fraction": plan["heldout_fraction"], **totals,
            "token_counts": "token_counts.npy", "word_starts": "word_starts.npy",
            "sources": plan["sources"], "shards": shards}


# Reading shards back -------------------------------------------------------------------------

def _shard_arrays(root: Path, name: str, dtype):
    tokens = np.memmap(root / f"{name}.tokens.bin", dtype=dtype, mode="r") \
        if (root / f"{name}.tokens.bin").stat().st_size else np.zeros(0, dtype=dtype)
    sentences = np.load(root / f"{name}.sentences.npy", mmap_mode="r")
    documents = np.load(root / f"{name}.documents.npy")
    heldout = np.load(root / f"{name}.heldout.npy")
    return tokens, sentences, documents, heldout


def load_manifest(data_dir: str | os.PathLike) -> dict:
    """The manifest of a finished `prepare` output; UserError for anything else."""
    data = Path(data_dir)
    if not data.is_dir():
        raise UserError(f"{data}: data directory does not exist (make it with bertkit prepare)")
    if not (data / "manifest.json").is_file():
        raise UserError(f"{data}: no manifest.json: not a finished `bertkit prepare` output "
                        f"(re-run prepare to finish it)")
    manifest = read_json(data / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{data / 'manifest.json'}: not a {FORMAT} manifest")
    return manifest


@dataclass
class CorpusSplit:
    """One split of a prepared corpus, as documents of sentences of tokens (all memory-mapped).

    Document d has sentences doc_sentences[d] .. doc_sentences[d+1]; sentence s has tokens
    sentence_start[s] .. + sentence_length[s] inside shard sentence_shard[s]."""
    shards: list[np.ndarray]
    doc_sentences: np.ndarray
    """int64 [D+1]."""
    sentence_shard: np.ndarray
    """int32 [S]."""
    sentence_start: np.ndarray
    """int64 [S] token offset inside its shard."""
    sentence_length: np.ndarray
    """int64 [S]."""

    @property
    def num_documents(self) -> int:
        return len(self.doc_sentences) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sentence_length.sum())


def load_split(data_dir: str | os.PathLike, split: str = "train",
               verify: bool = False) -> CorpusSplit:
    """Documents of one split; `verify` re-hashes every shard file against the manifest."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    data = Path(data_dir)
    manifest = load_manifest(data)
    dtype = np.dtype(manifest["dtype"])
    shards, doc_sent, sent_shard, sent_start, sent_len = [], [], [], [], []
    for index, shard in enumerate(manifest["shards"]):
        root = data / "shards"
        for suffix, digest in shard["files"].items():
            path = root / f"{shard['name']}.{suffix}"
            if not path.is_file():
                raise UserError(f"{path}: shard file missing: re-run bertkit prepare")
            if verify and _sha256(path) != digest:
                raise UserError(f"{path}: shard file is corrupt (checksum differs from "
                                f"manifest.json): re-run bertkit prepare")
        tokens, sentences, documents, heldout = _shard_arrays(root, shard["name"], dtype)
        if len(tokens) != shard["tokens"]:
            raise UserError(f"{root / shard['name']}.tokens.bin: {len(tokens)} tokens, manifest "
                            f"says {shard['tokens']}: re-run bertkit prepare")
        shards.append(tokens)
        keep = heldout if split == "heldout" else ~heldout
        first, last = documents[:-1][keep], documents[1:][keep]
        counts = last - first
        # sentence indices of the kept documents, in order: a ragged arange
        idx = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
        starts = np.asarray(sentences[:-1])[idx]
        doc_sent.append(counts)
        sent_shard.append(np.full(len(idx), index, dtype=np.int32))
        sent_start.append(starts)
        sent_len.append(np.asarray(sentences[1:])[idx] - starts)
    counts = np.concatenate(doc_sent) if doc_sent else np.zeros(0, np.int64)
    return CorpusSplit(
        shards=shards, doc_sentences=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        sentence_shard=np.concatenate(sent_shard) if sent_shard else np.zeros(0, np.int32),
        sentence_start=np.concatenate(sent_start).astype(np.int64) if sent_start
        else np.zeros(0, np.int64),
        sentence_length=np.concatenate(sent_len).astype(np.int64) if sent_len
        else np.zeros(0, np.int64))


# Tokenizer identity --------------------------------------------------------------------------

def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of what decides the ids: the kind, lower-casing and the pieces in id order."""
    vocab = tokenizer.get_vocab()
    pieces = sorted(vocab, key=vocab.__getitem__)
    h = hashlib.sha256(f"{tokenizer.kind}\n{tokenizer.do_lower_case}\n".encode())
    h.update("\n".join(pieces).encode("utf-8"))
    return h.hexdigest()[:32]


def check_tokenizer(data_dir: str | os.PathLike, tokenizer) -> None:
    """Refuse a tokenizer (or a model directory's tokenizer) other than the data's."""
    if isinstance(tokenizer, (str, os.PathLike)):
        from .tokenizer import Tokenizer
        source, tokenizer = str(tokenizer), Tokenizer.load(tokenizer)
    else:
        source = "the tokenizer"
    manifest = load_manifest(data_dir)
    if tokenizer_fingerprint(tokenizer) != manifest["tokenizer"]["fingerprint"]:
        raise UserError(f"{source}: tokenizer does not match the data in {data_dir} (vocabulary "
                        f"of {tokenizer.vocab_size} vs {manifest['tokenizer']['vocab_size']} "
                        f"pieces, or other pieces): prepare the corpus with this tokenizer")


def word_starts(tokenizer) -> np.ndarray:
    """bool [vocab]: the piece begins a word. WordPiece: no `##`; Unigram: a leading `▁`
    (punctuation after a word is then part of it). Special tokens count as starts."""
    vocab = tokenizer.get_vocab()
    starts = np.ones(tokenizer.vocab_size, dtype=bool)
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    if tokenizer.kind == "unigram":
        flags = np.fromiter((p.startswith("\u2581") for p in vocab), dtype=bool, count=len(vocab))
    else:
        flags = np.fromiter((not p.startswith("##") for p in vocab), dtype=bool, count=len(vocab))
    starts[ids] = flags
    starts[list(tokenizer.special_ids)] = True
    return starts


# Progress ------------------------------------------------------------------------------------

class _Progress:
    def __init__(self, total_bytes: int, start: _Position, files: list[Path], enabled: bool):
        self.total = total_bytes
        self.done = sum(f.stat().st_size for f in files[:start.file]) + start.offset
        self.files = files
        self.first = self.done
        self.tokens = 0
        self.enabled = enabled
        self.t0 = self.last = time.perf_counter()

    def update(self, end: _Position, tokens: int) -> None:
        self.tokens += tokens
        self.done = sum(f.stat().st_size for f in self.files[:end.file]) + end.offset \
            if end.file < len(self.files) else self.total
        now = time.perf_counter()
        if self.enabled and now - self.last >= 2.0:
            self.last = now
            print(self._line(now), file=sys.stderr, flush=True)

    def _line(self, now: float) -> str:
        dt = max(now - self.t0, 1e-9)
        rate = (self.done - self.first) / dt
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        return (f"prepare: {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB  "
                f"{self.tokens / 1e6:.2f}M tokens  {self.tokens / dt / 1e6:.2f}M tokens/s  "
                f"{rate / 1e6:.1f} MB/s  ETA {int(eta) // 60}:{int(eta) % 60:02d}")

    def finish(self) -> None:
        if self.enabled:
            print(self._line(time.perf_counter()).replace("ETA 0:00", "done"), file=sys.stderr,
                  flush=True)
