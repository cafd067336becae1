"""Text lines -> tokens, sentence lengths and documents, through a cache of distinct words.

The text is cut into words at spaces; each distinct word is tokenized once by the `tokenizers`
pipeline and cached, so a chunk's tokens are a numpy gather over cached pieces. For a pipeline
that splits at whitespace and normalizes character by character (BERT's WordPiece pipeline, a
Metaspace Unigram one) this gives exactly the ids of encoding whole lines; `fast_path_ok`
checks the pipeline and compares both ways on real lines, and any other pipeline encodes the
sentences directly. Sentence ends are decided per distinct word too, by the rules of
`bertkit.text.sentences` ("Mr." ends none), so all per-token work is numpy. `tokenize_chunks`
runs chunks in worker processes, in order, with a bounded number in flight.
"""
from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import tokenizers

from bertkit.text.sentences import sentence_ends, word_flags
from bertkit.text.quotes import PLAIN_QUOTES

CACHED_WORD_CHARS = 48


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

    def __init__(self, tokenizer: str | tokenizers.Tokenizer, *, fast: bool, dtype=np.int32,
                 cache_words: int = 300_000):
        """tokenizer: a tokenizers JSON string, or a backend to share (without truncation or
        padding)."""
        if isinstance(tokenizer, str):
            tokenizer = tokenizers.Tokenizer.from_str(tokenizer)
            tokenizer.no_truncation()
            tokenizer.no_padding()
        self.backend = tokenizer
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
        missing = sorted(new_words, key=lambda w: len(w) > CACHED_WORD_CHARS)
        short = sum(len(w) <= CACHED_WORD_CHARS for w in missing)
        keep = min(self.limit, self.start.n + short)
        if not missing:
            return self.start.n
        ends, opens = word_flags(missing)
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
        end = sentence_ends(self.ends.data[entry], self.opens.data[entry],
                            word_line[1:] == word_line[:-1])
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


def fast_path_ok(probe: "ChunkTokenizer", lines: list[str]) -> bool:
    """Word-by-word encoding equals whole-line encoding for pipelines that split at spaces and
    normalize character by character; check that on real lines of this corpus too. `probe`
    is a fast ChunkTokenizer (left warm for the caller)."""
    spec = json.loads(probe.backend.to_str())
    local = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}
    splitting = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}

    def steps(node, key):
        if node is None:
            return []
        return [s for n in node.get(key, [node]) for s in steps(n, key)] \
            if node.get("type") == "Sequence" else [node]

    def word_local(n) -> bool:
        # the Unigram pipeline's whitespace collapsing, control-character removal and strip
        # act inside a space-free word as they do inside the line, and the plain quotes put
        # one character for one
        if n.get("type") == "Replace":
            return n.get("pattern", {}).get("Regex") in (
                r"\s+", r"[\p{Cc}\p{Cf}]", *(pattern for pattern, _ in PLAIN_QUOTES))
        return n.get("type") in local or n.get("type") == "Strip"

    normalizers = steps(spec.get("normalizer"), "normalizers")
    pre = steps(spec.get("pre_tokenizer"), "pretokenizers")
    ok = all(map(word_local, normalizers)) and bool(pre) and all(
        p.get("type") in splitting or (p.get("type") == "Metaspace" and p.get("split", True)
                                       and p.get("prepend_scheme", "always") != "never")
        for p in pre)
    ok = ok and not any(any(c.isspace() for c in t["content"]) for t in spec["added_tokens"])
    if not ok:
        return False
    docs = list(range(len(lines)))
    fast = probe(lines, docs)
    slow = ChunkTokenizer(probe.backend, fast=False, dtype=probe.dtype)(lines, docs)
    return all(np.array_equal(a, b) for a, b in zip(fast, slow))


_WORKER: ChunkTokenizer | None = None


def _worker_init(tokenizer_json: str, fast: bool, dtype: str, cache_words: int) -> None:
    global _WORKER  # one tokenizer per worker process, made once by the pool's initializer
    os.environ["RAYON_NUM_THREADS"] = "1"  # the processes are the parallelism
    _WORKER = ChunkTokenizer(tokenizer_json, fast=fast, dtype=dtype, cache_words=cache_words)


def _worker_run(lines: list[str], docs: list[int]):
    return _WORKER(lines, docs)


def tokenize_chunks(reader, tokenizer_json: str, fast: bool, dtype, workers: int,
                     cache_words: int, local: ChunkTokenizer | None = None):
    """Yield ((tokens, sentence lengths, sentence docs), end position) in input order.
    With one worker, chunks are tokenized here, by `local` if given."""
    if workers <= 1:
        run = local or ChunkTokenizer(tokenizer_json, fast=fast, dtype=dtype,
                                      cache_words=cache_words)
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


