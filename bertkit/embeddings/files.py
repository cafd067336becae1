"""A text file of any size embedded into a float32 `.npy` matrix plus an index of its rows.

One row per line (a sentence vector; a tab separates a pair), or per JSON line or table row
(its text field), or one per word, with `out.index.jsonl` beside the matrix saying which line,
word and characters each row is. The
file is streamed in chunks into a memory-mapped `.npy`, so memory does not grow with its size;
both files appear complete or not at all. The vectors themselves come from
`bertkit.embeddings.embedder.Embedder`.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import numpy as np

from bertkit.embeddings.embedder import Embedder, LayerSpec, resolve_layers
from bertkit.embeddings.inputs import Text, word_groups
from bertkit.embeddings.standardize import Standardizer, unit_rows
from bertkit.files import UserError, atomic_file, atomic_path, check_not_input
from bertkit.progress import Progress
from bertkit.text.sources import is_dataset_dir, numbered_texts
from bertkit.text.tokenizer import cut_warning


@dataclass
class EmbedFileResult:
    rows: int
    """Rows written to the .npy file."""
    lines: int
    """Input lines read."""
    truncated: int
    """Lines cut to the model's maximum length."""
    index_path: Path


def check_out_suffix(out: str | Path, suffix: str, written_as: str) -> Path:
    """`out` if its name ends in `suffix`; else a one-line UserError saying how the vectors
    are `written_as`: a file's format is what it holds whatever the name, and `vectors.csv`
    holding NumPy's would mislead every reader."""
    out = Path(out)
    if out.suffix.lower() != suffix:
        raise UserError(f"--out {out}: {written_as}; name it {out.with_suffix(suffix).name}")
    return out


def check_npy_out(out: str | Path) -> Path:
    """`out` if it names a `.npy` file; else a one-line UserError."""
    return check_out_suffix(out, ".npy", "the vectors are written as a NumPy .npy matrix "
                                         "(numpy.load reads it)")


def index_path_for(out: str | Path) -> Path:
    """Where the row index of `out.npy` goes: `out.index.jsonl` beside it."""
    out = Path(out)
    return out.with_name(out.name[:-4] + ".index.jsonl")


def text_chunks(path: Path, chunk_lines: int, text_field: str = "text"
                ) -> Iterator[tuple[list[dict], list[Text]]]:
    """The texts of a file, folder, glob or `datasets` directory `chunk_lines` at a time, each
    with where it is ({"line": number}, and {"file": path} first when the input is several
    files): its lines, or the `text_field` of its records (`numbered_texts`); a tab separates
    a pair in a line of text (not in a record: a TSV row's text is one text)."""
    places, texts = [], []
    for source, number, text in numbered_texts(path, text_field):
        places.append({"line": number} if source.path == path else
                      {"file": str(source.path), "line": number})
        texts.append(tuple(text.split("\t", 1)) if "\t" in text and source.format == "text"
                     else text)
        if len(texts) == chunk_lines:
            yield places, texts
            places, texts = [], []
    if texts:
        yield places, texts


def count_rows(embedder: Embedder, path: Path, words: bool, chunk_lines: int,
               text_field: str = "text") -> tuple[int, int, int]:
    """(texts, rows, tokens) of a file: the rows are its texts, or with `words` its words."""
    lines = rows = tokens = 0
    for places, texts in text_chunks(path, chunk_lines, text_field):
        encoded = embedder.tokenize(texts, names=[
            f"{place.get('file', path)}:{place['line']}" for place in places])
        lines += len(texts)
        tokens += sum(len(e.ids) for e in encoded)
        rows += sum(len(g) for g in word_groups(encoded, texts)[0]) if words else len(texts)
    return lines, rows, tokens


def embed_file(embedder: Embedder, input_path: str | Path, out: str | Path, *,
               words: bool = False, layers: LayerSpec = -1, combine: str = "mean",
               pool: str | None = None, subword_pool: str = "mean",
               normalize: bool | None = None,
               standardize: bool = False, batch_size: int = 32, chunk_lines: int = 10000,
               text_field: str = "text", progress: bool = True) -> EmbedFileResult:
    """Embed every text of a file into a float32 `.npy` file: each line of a UTF-8 text file
    (a tab separates a pair), or the `text_field` of each JSON line or CSV, TSV, Parquet or
    Arrow row (`bertkit.text.sources`; compressed or not). A folder, glob or `datasets`
    directory is its files in order.

    One row per text (sentence vectors), or with `words=True` one row per word; the index
    (JSON lines beside the output: `out.index.jsonl`) says which line (or row) and word each
    row is, and which file when the input is several.
    Streams the file in chunks, so memory does not grow with its size: a first pass checks
    the text and counts rows, the second embeds into a memory-mapped file. Lines longer than
    the model are cut (counted and warned about), or read in windows where the embedder
    says so (`Embedder.windows`). Both files appear complete or not at all.
    `pool` and `normalize` None: the embedder's defaults for sentence vectors (a
    sentence-transformers directory's Pooling and Normalize), no normalising for words.
    """
    out = check_npy_out(out)
    input_path = Path(input_path)
    check_not_input(out, [input_path])
    if input_path.is_dir() and not is_dataset_dir(input_path) \
            and input_path.resolve() in out.resolve().parents:
        raise UserError(f"--out {out}: inside the input folder {input_path}, every file of which "
                        f"is read: a later run would read the vectors as text; write them "
                        f"elsewhere")
    layers_list = resolve_layers(layers, embedder.config.num_layers)
    width = embedder.config.hidden_size * (len(layers_list) if combine == "concat" else 1) \
        if words else embedder.sentence_width(layers_list, combine, pool)
    if standardize and embedder.standardizer is None:
        raise UserError("--standardize: no standardizer is fitted for this model (run "
                        "`bertkit anisotropy --fit-standardizer` first)")
    # Pass 1: decode and count (tokenizing is cheap next to the model).
    lines, rows, tokens = count_rows(embedder, input_path, words, chunk_lines, text_field)
    if rows == 0:
        raise UserError(f"{input_path}: no words to embed")

    index = index_path_for(out)
    truncated = done = 0
    bar = Progress("embed", tokens, "tokens", counts={"lines": lines}, enabled=progress)
    with _atomic_npy(out, (rows, width)) as matrix, atomic_file(index) as f_index:
        for places, texts in text_chunks(input_path, chunk_lines, text_field):
            encoded = embedder.tokenize(texts)
            truncated += sum(e.truncated for e in encoded)
            if words:
                groups, refs = word_groups(encoded, texts)
                if refs:
                    block = matrix[done:done + len(refs)]
                    embedder.pool_groups(encoded, groups, layers_list, combine, subword_pool,
                                         standardize, batch_size, False, "lines", out=block)
                    if normalize:  # None: word vectors are left as they are
                        block[:] = unit_rows(block)
                for k, r in enumerate(refs):
                    f_index.write(json.dumps({"row": done + k, **places[r.item],
                                              "word": r.word, "segment": r.segment,
                                              "start": r.start, "end": r.end, "text": r.text},
                                             ensure_ascii=False) + "\n")
                done += len(refs)
            else:
                block = matrix[done:done + len(encoded)]
                embedder.pool_sentences(encoded, layers=layers_list, combine=combine, pool=pool,
                                        normalize=normalize, standardize=standardize,
                                        batch_size=batch_size, out=block)
                for k, e in enumerate(encoded):
                    f_index.write(json.dumps({"row": done + k, **places[k],
                                              "truncated": e.truncated},
                                             ensure_ascii=False) + "\n")
                done += len(block)
            bar.update(add=sum(len(e.ids) for e in encoded), lines=len(texts))
    bar.finish()
    cut_warning(truncated, lines, embedder.max_length, "lines", str(input_path))
    return EmbedFileResult(rows=rows, lines=lines, truncated=truncated, index_path=index)


@contextlib.contextmanager
def _atomic_npy(path: Path, shape: tuple[int, int]) -> Iterator[np.memmap]:
    """A float32 .npy memory map at a temporary sibling of `path`, renamed onto it on success.

    Its disk space is reserved before the map is written: a store into a page the file system
    cannot back kills the process with SIGBUS, so a full disk must show up here, as ENOSPC."""
    with atomic_path(path) as tmp:
        matrix = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
        _reserve(tmp, matrix.offset)
        yield matrix
        matrix.flush()
        del matrix


def _reserve(path: Path, data_start: int) -> None:
    """Allocate every block of the (sparse) file `path`, whose data (zeros so far) begins at
    `data_start`: ENOSPC now rather than SIGBUS later."""
    size = path.stat().st_size
    with open(path, "rb+") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, size)
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS):
                raise
        except AttributeError:  # no posix_fallocate (macOS): write the zeros it would hold
            pass
        zeros, position = bytes(1 << 20), f.seek(data_start)  # the header numpy wrote stays
        end = size
        while position < end:
            position += f.write(zeros[:min(len(zeros), end - position)])
        f.flush()


@dataclass(kw_only=True)
class EmbedSettings:
    """How `embed_file` turns each line of a file into rows (`bertkit embed`)."""

    layers: str = "-1"
    """Hidden layers: a number (0 = embeddings, -1 = last block), a comma-separated list,
    "last4" or "all"."""
    combine: Literal["mean", "sum", "concat"] = "mean"
    """How several layers are combined."""
    pool: Literal["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean",
                  "lasttoken"] | None = None
    """Sentence vector from the tokens: [CLS], their mean, max, ...; none: the model's
    sentence-transformers Pooling (modules.json), else mean."""
    words: bool = False
    """One row per word instead of per line."""
    subword_pool: Literal["mean", "first"] = "mean"
    """Word vector from its pieces: their mean or the first."""
    normalize: bool | None = None
    """Scale rows to unit length; none: as the model's sentence-transformers Normalize says
    for sentence vectors (no for a plain BERT directory, and for words)."""
    standardize: bool = False
    """z-score each layer with the model's fitted standardizer."""
    standardizer: Path | None = None
    """Standardizer file (implies --standardize)."""
    batch_size: int = 32
    """Texts per forward pass."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    long_inputs: Literal["cut", "windows"] = "cut"
    """A text longer than the model's length (--max-length): cut to it, or read whole in
    windows half a window apart, each token's vector from the window where it is most
    central, a sentence vector pooling those (a pair's second text is windowed, its first
    kept whole)."""
    quiet: bool = False
    """No progress on stderr."""

    def embed(self, embedder: Embedder, input_path: str | Path, out: str | Path
              ) -> EmbedFileResult:
        """`embed_file` with these settings; `standardizer` (a fitted file) replaces the
        embedder's own and implies `standardize`."""
        if self.standardizer:
            embedder.standardizer = Standardizer.load(self.standardizer)
        embedder.windows = self.long_inputs == "windows"
        return embed_file(embedder, input_path, out, words=self.words, layers=self.layers,
                          combine=self.combine, pool=self.pool, subword_pool=self.subword_pool,
                          normalize=self.normalize,
                          standardize=self.standardize or bool(self.standardizer),
                          batch_size=self.batch_size, text_field=self.text_field,
                          progress=not self.quiet)


__all__ = ["EmbedFileResult", "EmbedSettings", "check_npy_out", "embed_file", "index_path_for"]
