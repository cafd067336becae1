"""Corpus preparation: text, JSONL or tables -> documents -> sentences -> memory-mapped token shards.

    prepare(["austen.txt"], "tok/", "data/")      # bertkit prepare --input ... --out data/

Input (read by `bertkit.text.sources`: files, folders, globs, `datasets` directories; gzip,
zstd or bzip2): plain text (one sentence or paragraph per line, a blank line between
documents, a new file starts a new document), or JSONL, CSV, TSV, Parquet or Arrow with a
text field (one document per object or row; newlines in the text separate paragraphs).

Output directory:
    manifest.json      written last: tokenizer fingerprint, shard list with sha256, counts,
                       and "files": every file prepare wrote (what a re-run may replace)
    plan.json          the inputs and settings (a re-run with other ones starts afresh)
    tokenizer/         the tokenizer the shards were made with (`Tokenizer.load` reads it)
    token_counts.npy   int64 [vocab]: token frequencies of the train split (unigram sampler)
    word_starts.npy    bool [vocab]: does this piece begin a word (no `##`; `▁` in Unigram),
                       looked up per batch for whole-word and span masking
    shards/            see `bertkit.pretraining.shards`; read back with `shards.load_split`

Never losing the previous output: the new one is built in `.OUT.prepare` beside the output
directory, checked (`shards.verify_shards`), and only then swapped in by one rename
(`files.publish_dir`). Bad input found at any line leaves the previous output as it was and
deletes the build. The swap carries over every file of the old directory except those the old
manifest lists as prepare's own ("files"), so the user's files there stay. The output
directory is locked (`bertkit.runlock`) while prepare runs.

Speed: `bertkit.pretraining.wordcache` tokenizes each distinct word once and finds sentence ends per
distinct word, in `workers` processes. Memory is bounded by the shard size, the chunk size
and the word cache, not by the corpus. A re-run with the same inputs and settings resumes
after the last finished shard of the build directory an interrupted run left.

The input's first pass and its reader are `bertkit.pretraining.documents`; what a directory was
prepared from, and whether it is done, `bertkit.pretraining.provenance`.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from bertkit.files import (UserError, check_not_input, environment_error, publish_dir, read_json,
                           sha256_file, write_json)
from bertkit.pretraining.documents import HeldoutRule, Position, chunks, plan_documents
from bertkit.pretraining.provenance import (OTHER_DATA, SOURCE_FILE, already_prepared,
                                            field_read, found_done, read_or_none, refused,
                                            source_request)
from bertkit.pretraining.shards import (FORMAT, SPLITS, ShardWriter, load_manifest,
                                        verify_shards)
from bertkit.pretraining.wordcache import ChunkTokenizer, fast_path_ok, tokenize_chunks
from bertkit.progress import Progress
from bertkit.runlock import RunLock
from bertkit.text.sources import Source, expand, why_empty
from bertkit.text.tokenizer import Tokenizer, tokenizer_fingerprint, word_starts

MIN_HELDOUT_TOKENS = 1024
"""Below this many held-out tokens (eight sequences of 128; about 150 masked at 15%) held-out
figures are noise: prepare says so."""
_SHARD_FILE = re.compile(r"\.?shard_\d{5}\..*")
"""A shard file's name (see `bertkit.pretraining.shards`), finished or temporary."""


def prepare(corpus_files: Sequence[str | os.PathLike], tokenizer_dir: str | os.PathLike,
            out_dir: str | os.PathLike, *, heldout_fraction: float = 0.01,
            shard_tokens: int = 1 << 22, workers: int | None = None, chunk_bytes: int = 1 << 20,
            cache_words: int = 300_000, text_field: str = "text", progress: bool = True,
            leave_out: Sequence[str | os.PathLike] = ()) -> dict:
    """Tokenize `corpus_files` into shards under `out_dir`; return the manifest.

    corpus_files: files, folders, globs or `datasets` directories, in any format of
    `bertkit.text.sources` (text, JSONL, CSV, TSV, Parquet, Arrow; gzip, zstd, bzip2);
    text_field: the field of a JSONL object, or the column of a CSV or table row, that holds
    the text. `out_dir` and the folders `leave_out` (a run's directory around it) are never
    read as corpus, even inside a folder.
    heldout_fraction: share of documents kept out of training, scattered through the corpus
    (see `documents.plan_documents`); a corpus of one document gives the last lines of it.
    shard_tokens: a shard is closed once it holds at least this many tokens. workers:
    tokenizing processes; 1 = in this process; default: all cores from 8 MB of text on
    (below that, starting processes and filling their word caches costs more than it saves). chunk_bytes: text sent to
    a worker at a time. cache_words: distinct words cached per worker.
    """
    if not corpus_files:
        raise UserError("no corpus files given")
    if not 0.0 <= heldout_fraction < 1.0:
        raise UserError(f"heldout fraction must be in [0, 1), got {heldout_fraction}")
    if shard_tokens < 1 or chunk_bytes < 1:
        raise UserError("shard_tokens and chunk_bytes must be positive")
    sources = expand(corpus_files, text_field, "corpus file", [out_dir, *leave_out])
    files = [s.path for s in sources]
    tokenizer = Tokenizer.load(tokenizer_dir)
    out = Path(out_dir)
    if out.is_symlink():  # the new output replaces the directory it names, not the link
        out = out.resolve()
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    vocab_size = tokenizer.vocab_size
    dtype = np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)
    fingerprint = tokenizer_fingerprint(tokenizer)
    layout, text_bytes = plan_documents(sources, heldout_fraction)
    if layout["documents"] == 0:
        raise UserError(f"{files[0]}: no text ({why_empty(sources)})")
    plan = {"format": FORMAT, "tokenizer": fingerprint, "dtype": dtype.name,
            "heldout_fraction": heldout_fraction, "shard_tokens": shard_tokens,
            "chunk_bytes": chunk_bytes,
            "sources": [{"path": str(f.resolve()), "bytes": f.stat().st_size,
                         "mtime_ns": f.stat().st_mtime_ns} for f in files],
            # only when it matters and is not the default: earlier outputs keep their plan
            **({"text_field": text_field} if field_read(sources, text_field) != "text"
               else {}),
            **layout}
    check_not_input(out, [*files, Path(tokenizer_dir)], what="output directory",
                    names=[*(["corpus file"] * len(files)), "tokenizer"])
    created = not out.exists()
    try:
        with RunLock(out):
            manifest = _prepare_beside(sources, text_bytes, tokenizer, out, plan, fingerprint,
                                       dtype, workers, cache_words, progress)
        held = manifest["heldout"]
        if heldout_fraction > 0 and held["tokens"] < MIN_HELDOUT_TOKENS:
            print(f"warning: {out}: the held-out split is only {held['tokens']} tokens "
                  f"({held['documents']} documents), too few for meaningful evaluation "
                  f"(under {MIN_HELDOUT_TOKENS}); give more text or a larger --heldout",
                  file=sys.stderr)
        return manifest
    finally:
        if created:  # failed before anything was published: leave no empty directory
            with contextlib.suppress(OSError):
                out.rmdir()


def prepare_text(text_file: str | os.PathLike | Sequence[str | os.PathLike],
                 out_dir: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None,
                 vocab_size: int = 16000, text_field: str = "text",
                 progress: bool = True, leave_out: Sequence[str | os.PathLike] = (),
                 keep: bool = False) -> dict:
    """Prepare a corpus (a file, or files, folders and globs in any format of
    `bertkit.text.sources`) into `out_dir` with `tokenizer` (a tokenizer or model
    directory), or with an uncased WordPiece vocabulary of `vocab_size` trained on it
    first; return the manifest. A later call with the same files (path, size, modification
    time; or the same bytes by sha256, touched, copied or moved) and the same tokenizer request
    finds the directory done and returns at once, without training the vocabulary again. The
    vocabulary is trained into a temporary directory, so nothing but the finished output is
    left behind. `leave_out`: as for `prepare`. `keep`: a directory prepared from other text
    is refused, not replaced (a resumed run's data: its checkpoints fit no other)."""
    arguments = [text_file] if isinstance(text_file, (str, os.PathLike)) else list(text_file)
    sources = expand(arguments, text_field, "corpus file", [out_dir, *leave_out])
    out = Path(out_dir)
    request = source_request(sources, text_field,
                             {"fingerprint": tokenizer_fingerprint(Tokenizer.load(tokenizer))}
                             if tokenizer is not None
                             else {"trained": "wordpiece", "vocab_size": vocab_size})
    if found_done(out, "manifest.json", request, sources, text_field):
        if progress:
            print(f"prepare: {out} is already prepared from {sources[0].path}", file=sys.stderr)
        return load_manifest(out)
    if keep and (out / "manifest.json").is_file():
        raise refused(out, sources, OTHER_DATA, request)
    with tempfile.TemporaryDirectory(prefix="bertkit-vocab-") as scratch:
        if tokenizer is None:
            tokenizer = Path(scratch) / "tokenizer"
            _train_vocabulary([sources], vocab_size, tokenizer, progress)
        manifest = prepare(arguments, tokenizer, out, text_field=text_field, progress=progress,
                           leave_out=leave_out)
    write_json(out / SOURCE_FILE, {**request, "sha256": [sha256_file(s.path) for s in sources]})
    return manifest


def prepare_corpora(corpora: Sequence[str | os.PathLike | Sequence[str | os.PathLike]],
                    out_dirs: Sequence[str | os.PathLike], *,
                    tokenizer: str | os.PathLike | None = None,
                    vocabulary: str | os.PathLike | None = None, vocab_size: int = 16000,
                    text_field: str | Sequence[str] = "text", progress: bool = True,
                    leave_out: Sequence[str | os.PathLike] = (), keep: bool = False
                    ) -> list[dict]:
    """Prepare each corpus (what `prepare_text` takes) into its own directory of `out_dirs`,
    all with one tokenizer, so that they can be mixed; return their manifests. `text_field`:
    of every corpus, or one for each. The tokenizer:
    `tokenizer`, or an uncased WordPiece vocabulary of `vocab_size` trained on the text of all
    the corpora together (as one corpus, not by a mixture's weights) and kept in the directory
    `vocabulary` with what it was trained from, where a later call finds it as it finds each
    directory done (`prepare_text`): nothing is trained or prepared again.

    Every corpus is found and its format sniffed, then all the text still to prepare read
    through (checked: the vocabulary's first pass, or one of its own), before anything is
    written. On an error the directories this call made are deleted again (an interrupt keeps
    them: a re-run resumes). `keep`: a directory or the vocabulary made from other text is
    refused before anything is replaced (a resumed run's data)."""
    outs = [Path(d) for d in out_dirs]
    if len(outs) != len(corpora) or not outs or (tokenizer is None and vocabulary is None):
        raise ValueError("one output directory per corpus, and a tokenizer or a vocabulary "
                         "directory to train one in")
    fields = [text_field] * len(outs) if isinstance(text_field, str) else list(text_field)
    if len(fields) != len(outs):
        raise ValueError("one text field, or one per corpus")
    places = outs + ([Path(vocabulary)] if tokenizer is None else [])
    skip = [*places, *leave_out]
    sources = [expand([c] if isinstance(c, (str, os.PathLike)) else list(c), field,
                      "corpus file", skip) for c, field in zip(corpora, fields)]
    fresh = [p for p in dict.fromkeys([*(p.parent for p in places), *places]) if not p.exists()]
    try:
        if tokenizer is None:
            made = [(Path(vocabulary), "tokenizer.json"), *((d, "manifest.json") for d in outs)]
            tokenizer = _shared_vocabulary(sources, Path(vocabulary), vocab_size, fields,
                                           progress, keep and any((d / f).is_file()
                                                                  for d, f in made))
        else:
            _check_before_preparing(sources, outs, tokenizer, fields, keep)
        return [prepare_text(c, d, tokenizer=tokenizer, text_field=field,
                             progress=progress, leave_out=skip, keep=keep)
                for c, d, field in zip(corpora, outs, fields)]
    except Exception:
        for place in fresh:  # parents first: what this call made, with all it holds
            shutil.rmtree(place, ignore_errors=True)
        raise


def _check_before_preparing(sources: list[list[Source]], outs: list[Path],
                            tokenizer: str | os.PathLike, fields: list[str], keep: bool) -> None:
    """With a tokenizer given: a directory made from other text refused (`keep`), and the text
    of every corpus still to prepare read through (checked: UTF-8, JSON, fields, compressed
    data), before the first is prepared, where there are several: bad input in the last is
    found at once, not after the others are prepared."""
    from bertkit.text.vocab import count_text

    asked = {"fingerprint": tokenizer_fingerprint(Tokenizer.load(tokenizer))}
    requests = [source_request(part, field, asked) for part, field in zip(sources, fields)]
    todo = [(part, out, request) for part, out, request, field
            in zip(sources, outs, requests, fields)
            if not found_done(out, "manifest.json", request, part, field)]
    for part, out, request in todo:
        if keep and (out / "manifest.json").is_file():
            raise refused(out, part, OTHER_DATA, request)
    if len(todo) > 1:  # one alone is checked by prepare's first pass
        for part, _, _ in todo:
            count_text(part)


def _shared_vocabulary(sources: list[list[Source]], out: Path, vocab_size: int,
                       fields: list[str], progress: bool, keep: bool) -> Path:
    """`prepare_corpora`'s vocabulary: `out` when it was trained there from these files (read
    from the text fields `fields`, of each corpus), else trained on their text together and
    swapped in whole (`keep`: refused instead)."""
    every = [s for part in sources for s in part]
    read = [field_read(part, field) for part, field in zip(sources, fields)]
    # one field as before corpora had their own: vocabularies trained then are found again
    request = source_request(every, read[0] if len(set(read)) == 1 else read,
                       {"trained": "wordpiece", "vocab_size": vocab_size})
    if found_done(out, "tokenizer.json", request, every,
                   fields[0] if len(set(fields)) == 1 else fields):
        if progress:
            print(f"prepare: {out} is already trained on {every[0].path}"
                  f"{f' and {len(every) - 1} more file(s)' if len(every) > 1 else ''}",
                  file=sys.stderr)
        return out
    if keep:
        raise refused(out, every, "vocabulary was trained on other text", request)
    with tempfile.TemporaryDirectory(prefix="bertkit-vocab-") as scratch:
        _train_vocabulary(sources, vocab_size, Path(scratch) / "tokenizer", progress)
        out.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            shutil.copytree(Path(scratch) / "tokenizer", build, dirs_exist_ok=True)
            write_json(build / SOURCE_FILE,
                       {**request, "sha256": [sha256_file(s.path) for s in every]})
            publish_dir(build, out, replaces=[p.name for p in out.iterdir()]
                        if out.is_dir() else ())
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return out


def _train_vocabulary(parts: list[list[Source]], vocab_size: int, out: Path,
                      progress: bool) -> None:
    """An uncased WordPiece vocabulary of `vocab_size` trained on the text of the corpora
    `parts` together, in their natural proportions (alpha 1: each line once, as one corpus),
    saved in `out`. Each part is checked to hold text, and the line saying what is trained
    comes once every file is checked, so that bad input is the only thing printed."""
    from bertkit.text.vocab import train_tokenizer

    every = [s for part in parts for s in part]
    more = f" and {len(every) - 1} more file(s)" if len(every) > 1 else ""
    train_tokenizer(parts, vocab_size=vocab_size, alpha=1.0, out=out,
                    say=_note if progress else None, progress=progress,
                    announce=f"a WordPiece vocabulary of {vocab_size:,} pieces from "
                             f"{every[0].path}{more}")


def _note(line: str) -> None:
    print(f"prepare: {line}", file=sys.stderr)


def _prepare_beside(sources, text_bytes, tokenizer, out: Path, plan: dict, fingerprint: str,
                    dtype, workers, cache_words: int, progress: bool) -> dict:
    """Build the new output in `.OUT.prepare` beside `out`, check it, then swap it in: until
    then `out` keeps the previous output, whole. The build directory survives an interrupted
    run (a re-run resumes from its finished shards) and is deleted on bad input."""
    if already_prepared(out, plan):
        if progress:
            print(f"prepare: {out} is already prepared from these files", file=sys.stderr)
        return read_json(out / "manifest.json")
    build = out.parent / f".{out.name}.prepare"
    if not build.exists() and read_or_none(out / "plan.json") == plan:
        _seed(build, out)  # an output left unfinished by an earlier version: keep its shards
    try:
        manifest = _prepare(sources, text_bytes, tokenizer, build, plan, fingerprint, dtype,
                            workers, cache_words, progress)
        verify_shards(build)
    except Exception as e:  # noqa: BLE001 - re-raised; an interrupt keeps the build
        # Bad input stays bad: nothing to resume. A full disk or a read-only directory wants
        # its space back.
        shutil.rmtree(build, ignore_errors=True)
        error = e if isinstance(e, UserError) else environment_error(e, out)
        if error is not None:  # named by the output it builds
            raise UserError(str(error).replace(str(build), str(out))) from None
        raise
    publish_dir(build, out, replaces=_owned(out))
    return manifest


def _seed(build: Path, out: Path) -> None:
    """Start `build` from the finished shards of an unfinished `out` (hard links: no copy)."""
    build.mkdir()
    for name in ("shards", "tokenizer"):
        if (out / name).is_dir():
            shutil.copytree(out / name, build / name, copy_function=_link_or_copy)
    shutil.copy2(out / "plan.json", build / "plan.json")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _owned(out: Path) -> list[str]:
    """The files an earlier `prepare` wrote into `out` (relative paths), which the new output
    replaces: those its manifest lists, and its shard files by their names. Anything else in
    `out` is the user's and is kept."""
    manifest = read_or_none(out / "manifest.json") if (out / "manifest.json").is_file() else None
    owned = ["manifest.json", "plan.json", "token_counts.npy", "word_starts.npy"]
    if isinstance(manifest, dict) and isinstance(manifest.get("files"), list):
        owned += [f for f in manifest["files"] if isinstance(f, str)]
    if (out / "shards").is_dir():
        owned += [f"shards/{p.name}" for p in (out / "shards").iterdir()
                  if _SHARD_FILE.fullmatch(p.name)]
    return owned


def _prepare(sources, text_bytes, tokenizer, out: Path, plan: dict, fingerprint: str, dtype,
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
    first = next(chunks(sources, Position(), 1 << 16, None), ([], [], None))[0]
    probe = ChunkTokenizer(tokenizer_json, fast=True, dtype=dtype, cache_words=cache_words)
    fast = fast_path_ok(probe, first[:400])
    heldout = HeldoutRule(plan["heldout"])
    reader = chunks(sources, position, plan["chunk_bytes"], plan["cut_line"])
    sizes = text_bytes  # of the text read, decompressed: what the positions count

    def bytes_before(p: Position) -> int:
        return sum(sizes[:p.file]) + p.offset if p.file < len(sizes) else sum(sizes)

    meter = Progress("prepare", sum(sizes), "MB", done=bytes_before(position), scale=1e6,
                     counts=("tokens",), enabled=progress)
    writer = ShardWriter(out / "shards", len(shards), dtype, plan["shard_tokens"], heldout,
                          tokenizer.vocab_size)
    if workers is None:
        workers = os.cpu_count() or 1 if meter.total - meter.done >= 8_000_000 else 1
    for chunk_result, end in tokenize_chunks(reader, tokenizer_json, fast, dtype, workers,
                                             cache_words, local=probe if fast else None):
        meter.update(bytes_before(end), tokens=len(chunk_result[0]))
        shard = writer.add(chunk_result, vars(end))
        if shard is not None:
            shards.append(shard)
    last = writer.close()
    if last is not None:
        shards.append(last)
    meter.finish()

    manifest = _manifest(out, shards, tokenizer, fingerprint, dtype, plan, fast)
    if manifest["train"]["tokens"] == 0:
        raise UserError(f"{sources[0].path}: no text to train on in the corpus")
    manifest["files"] = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                               if p.is_file() and not p.name.startswith(".")) + ["manifest.json"]
    write_json(out / "manifest.json", manifest)
    return manifest


def _resume_point(out: Path, plan: dict):
    """None when the build directory `out` is finished for this plan; else (complete shards,
    position after them). One made from other inputs or settings is cleared first."""
    if already_prepared(out, plan):
        return None
    if read_or_none(out / "plan.json") != plan:
        # the build directory holds only what prepare wrote
        shutil.rmtree(out, ignore_errors=True)
        return [], Position()
    shards = []
    while (record := out / "shards" / f"shard_{len(shards):05d}.json").is_file() \
            and (finished := read_or_none(record)) is not None:
        shards.append(finished)
    for stale in (out / "shards").glob("*"):
        index = int(stale.name.split("_")[1].split(".")[0]) if stale.name.startswith(
            "shard_") else -1
        if index >= len(shards) or stale.name.startswith("."):
            stale.unlink()
    if shards:
        print(f"prepare: resuming after {len(shards)} finished shard(s)", file=sys.stderr)
        return shards, Position(**shards[-1]["end"])
    return [], Position()


def _manifest(out: Path, shards: list[dict], tokenizer, fingerprint: str, dtype, plan: dict,
              fast: bool) -> dict:
    vocab = tokenizer.vocab_size
    counts = np.zeros(vocab, dtype=np.int64)
    totals = {split: {"documents": 0, "sentences": 0, "tokens": 0} for split in SPLITS}
    for shard in shards:
        root, name = out / "shards", shard["name"]
        sentences = np.load(root / f"{name}.sentences.npy", mmap_mode="r")
        documents = np.load(root / f"{name}.documents.npy")
        heldout = np.load(root / f"{name}.heldout.npy")
        sent_per_doc = np.diff(documents)
        tok_per_doc = sentences[documents[1:]] - sentences[documents[:-1]]
        for split, mask in (("train", ~heldout), ("heldout", heldout)):
            totals[split]["documents"] += int(mask.sum())
            totals[split]["sentences"] += int(sent_per_doc[mask].sum())
            totals[split]["tokens"] += int(tok_per_doc[mask].sum())
        counts += np.load(root / f"{name}.counts.npy")
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


