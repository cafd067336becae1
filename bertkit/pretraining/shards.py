"""Token shards on disk: writing them as chunks stream in, and reading a split back.

A shard `shards/shard_NNNNN.*` is a contiguous stretch of the corpus, whole documents except
where a shard boundary cuts one:
    tokens.bin      raw ids (dtype in manifest.json: uint16 when the vocabulary fits, else int32)
    sentences.npy   int64 [S+1] token offset of each sentence
    documents.npy   int64 [D+1] sentence offset of each document
    heldout.npy     bool [D] the document belongs to the held-out split
    counts.npy      int64 [vocab] token counts of its train documents
    json            counts, sha256 of each file, and where in the input the shard ends
The .json is written last (each file is renamed into place), so a shard with a .json is whole.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bertkit.files import UserError, atomic_file, read_json, sha256_file, write_json

FORMAT = "bertkit-shards/1"
SPLITS = ("train", "heldout")


class ShardWriter:
    """Streams chunk results (tokens, sentence lengths, document index of each sentence) into
    shard files; closes a shard at a chunk boundary once it holds `shard_tokens` tokens.
    `heldout(document indices)` says which documents are held out; `end` (given with each
    chunk) is recorded so that a re-run can resume reading after the shard."""

    def __init__(self, root: Path, first_index: int, dtype, shard_tokens: int,
                 heldout: Callable[[np.ndarray], np.ndarray], vocab_size: int):
        self.root, self.index, self.dtype = root, first_index, np.dtype(dtype)
        self.shard_tokens, self.heldout, self.vocab_size = shard_tokens, heldout, vocab_size
        self.file = None

    def _open(self) -> None:
        self.name = f"shard_{self.index:05d}"
        self.tmp = self.root / f".{self.name}.tokens.bin.tmp"
        self.file = open(self.tmp, "wb")
        self.hash = hashlib.sha256()
        self.n_tokens = 0
        self.sent_lens: list[np.ndarray] = []
        self.sent_docs: list[np.ndarray] = []
        self.counts = np.zeros(self.vocab_size, dtype=np.int64)  # of the train split

    def add(self, result, end: dict) -> dict | None:
        tokens, sent_len, sent_doc = result
        if self.file is None:
            self._open()
        data = np.ascontiguousarray(tokens, dtype=self.dtype)
        self.file.write(data.data)
        self.hash.update(data.data)
        self.n_tokens += len(data)
        self.sent_lens.append(sent_len)
        self.sent_docs.append(sent_doc)
        train = np.repeat(~self.heldout(sent_doc), sent_len)
        self.counts += np.bincount(data[train], minlength=self.vocab_size)[:self.vocab_size]
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
                              ("heldout.npy", heldout), ("counts.npy", self.counts)):
            with atomic_file(self.root / f"{self.name}.{suffix}", "wb") as f:
                np.save(f, array, allow_pickle=False)
            files[suffix] = sha256_file(self.root / f"{self.name}.{suffix}")
        os.replace(self.tmp, self.root / f"{self.name}.tokens.bin")
        record = {"name": self.name, "tokens": int(sentences[-1]), "sentences": len(sent_len),
                  "documents": len(doc_first), "heldout_documents": int(heldout.sum()),
                  "heldout_tokens": int(sent_len[np.repeat(heldout, np.diff(documents))].sum()),
                  "files": files, "end": self.end}
        write_json(self.root / f"{self.name}.json", record)
        self.index += 1
        return record


def shard_arrays(root: Path, name: str, dtype):
    tokens = np.memmap(root / f"{name}.tokens.bin", dtype=dtype, mode="r") \
        if (root / f"{name}.tokens.bin").stat().st_size else np.zeros(0, dtype=dtype)
    sentences = load_array(root / f"{name}.sentences.npy", mmap_mode="r")
    documents = load_array(root / f"{name}.documents.npy")
    heldout = load_array(root / f"{name}.heldout.npy")
    return tokens, sentences, documents, heldout


def load_array(path: Path, mmap_mode: str | None = None) -> np.ndarray:
    """A .npy file of a data directory, or a one-line UserError naming it."""
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{path}: data file missing: re-run bertkit prepare") from None
    except (ValueError, OSError, EOFError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{path}: not a readable .npy file ({reason}): re-run bertkit "
                        f"prepare") from None


def verify_shards(data_dir: str | os.PathLike) -> None:
    """Check a data directory before training reads it: every shard file against its sha256 in
    the manifest, and every token id inside the vocabulary. One streaming pass over the bytes
    (about a second per GB); a one-line UserError naming the first bad file."""
    data = Path(data_dir)
    manifest = load_manifest(data)
    dtype = np.dtype(manifest["dtype"])
    vocab = manifest["tokenizer"]["vocab_size"]
    root = data / "shards"
    for shard in manifest["shards"]:
        for suffix, digest in shard["files"].items():
            path = root / f"{shard['name']}.{suffix}"
            if not path.is_file():
                raise UserError(f"{path}: shard file missing: re-run bertkit prepare")
            digest_now, low, high = hashlib.sha256(), 0, -1
            with open(path, "rb") as f:
                while block := f.read(1 << 22):  # a multiple of every id's size
                    digest_now.update(block)
                    if suffix == "tokens.bin" and len(block) % dtype.itemsize == 0:
                        ids = np.frombuffer(block, dtype=dtype)
                        low, high = min(low, int(ids.min())), max(high, int(ids.max()))
            if digest_now.hexdigest() != digest:
                raise UserError(f"{path}: shard file is corrupt (checksum differs from "
                                f"manifest.json): re-run bertkit prepare")
            if low < 0 or high >= vocab:
                raise UserError(f"{path}: token id {low if low < 0 else high} is outside the "
                                f"vocabulary of {vocab} pieces: re-run bertkit prepare")


def load_manifest(data_dir: str | os.PathLike) -> dict:
    """The manifest of a finished `prepare` output; UserError for anything else."""
    data = Path(data_dir)
    if not data.is_dir():
        raise UserError(f"{data}: data directory does not exist (make it with bertkit prepare)")
    if not (data / "manifest.json").is_file():
        raise UserError(f"{data}: no manifest.json: not a finished `bertkit prepare` output "
                        f"(re-run prepare to finish it)")
    return read_json(data / "manifest.json", f"{FORMAT} manifest", format=FORMAT)


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
            if verify and sha256_file(path) != digest:
                raise UserError(f"{path}: shard file is corrupt (checksum differs from "
                                f"manifest.json): re-run bertkit prepare")
        tokens, sentences, documents, heldout = shard_arrays(root, shard["name"], dtype)
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


