"""The data a pretraining run trains on: what `pretrain --data` names, and where it is
prepared.

    parts = data_parts(options, rank)   # [(prepared directory, share)], shares summing to 1

--data names a directory made by `bertkit prepare` (taken as it is), a corpus to prepare
(a file, folder, glob or `datasets` directory: prepared into OUT/data, `TEXT_DATA`, by rank
0 while the others wait), or a mixture of either by weight (`bertkit.pretraining.mixture`),
whose corpora to prepare go to OUT/data/K-NAME (`mixture_dir`) with one tokenizer. Later runs
find what is prepared there and prepare nothing again; a resumed run whose text changed is
refused before anything is replaced. `data_fingerprint` is the digest of the prepared data a
checkpoint records, so that a run resumes only on the data it was trained on; beside it the
checkpoint records --data as typed (`given_data`), so that a resume on another mixture is
refused in those words (`check_resumed_data`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shlex
from pathlib import Path
from dataclasses import dataclass

import torch.distributed as dist

from bertkit import signals
from bertkit.files import UserError, check_not_input, sha256_file
from bertkit.model.hub import is_model_dir
from bertkit.pretraining.corpus import prepare_corpora, prepare_text
from bertkit.pretraining.mixture import MixedCorpus, parse_mixture
from bertkit.pretraining.provenance import SOURCE_FILE, OtherText, check_tokenizer
from bertkit.pretraining.shards import load_manifest
from bertkit.text.sources import expand
from bertkit.training.checkpoint import GIVEN, latest_checkpoint, saved_fingerprint


@dataclass(frozen=True)
class DataOptions:
    """The settings the data is read with, as the run's plan hands them over (`bertkit
    pretrain --help` documents each under its flag)."""
    data: Path
    """--data: a prepared directory, a corpus to prepare, or a mixture."""
    out: Path
    """--out: the run's directory, where a corpus is prepared (OUT/data)."""
    tokenizer: Path | None
    """--tokenizer: the vocabulary a corpus is prepared with."""
    init: Path | None
    """--init: the model whose vocabulary prepares a corpus when no --tokenizer is given."""
    vocab_size: int
    """--vocab-size: of a vocabulary trained on the corpus."""
    text_field: str
    """--text-field: the field of JSON and `datasets` records that holds the text."""


def data_fingerprint(parts: list[tuple[Path, float]], resumed: str | None = None) -> str:
    """A digest of what the run trains on: each corpus's manifest but its "sources" (the
    files it was read from, with their times: the same text touched or copied and prepared
    again is the same data) and the mixture's shares. `resumed`: the data digest of the
    checkpoint to resume; one made before sources were left out (of the manifest's bytes)
    is matched as it was made."""
    def digest(contents: list[bytes]) -> str:
        digests = [hashlib.sha256(c).hexdigest()[:16] for c in contents]
        if len(parts) == 1:  # as before mixtures: earlier checkpoints still resume
            return digests[0]
        spelled = ",".join(f"{d}={w!r}" for d, (_, w) in zip(digests, parts))
        return hashlib.sha256(spelled.encode()).hexdigest()[:16]

    raw = [(data / "manifest.json").read_bytes() for data, _ in parts]
    if resumed is not None and digest(raw) == resumed:
        return resumed
    return digest([json.dumps({k: v for k, v in json.loads(r).items() if k != "sources"},
                              sort_keys=True).encode() for r in raw])


def given_data(data: Path) -> dict:
    """--data as a checkpoint records it (its fingerprint's GIVEN entry): "data" as typed (a
    --config table as its PATH=W,... spelling), "shares" those of its corpora (None for one
    corpus)."""
    mixture = parse_mixture(data)
    return {"data": str(data), "shares": None if mixture is None else [c.weight for c in mixture]}


def check_resumed_data(checkpoint: Path | None, given: dict, out: Path,
                       other_data: bool = False) -> None:
    """Refuse to resume `checkpoint` on other --data than it was trained on, naming both and
    what to do: where the shares differ (other data whatever the text: checked before anything
    is prepared), or where the data is found other (`other_data`: its digest, or its text on
    preparing) and --data is typed otherwise. A checkpoint that did not record its --data
    (made before GIVEN) is left to the data digest, as it was."""
    was = saved_fingerprint(checkpoint).get(GIVEN) if checkpoint is not None else None
    if not isinstance(was, dict) or not isinstance(was.get("data"), str):
        return
    if _same_shares(was.get("shares"), given["shares"]) and not (
            other_data and was["data"] != given["data"]):
        return
    new = shlex.quote(given["data"])
    later = "" if is_model_dir(out) else "once this run has finished (its model at the top), "
    raise UserError(f"{checkpoint}: checkpoint was trained on {_spelled(was)}, this run asks for "
                    f"{_spelled(given)}; a run resumes only on the data it was trained on: "
                    f"resume with --data {shlex.quote(was['data'])}, or {later}train on the "
                    f"new data in a new run from its model (--init {shlex.quote(str(out))} "
                    f"--data {new} --out NEW_RUN)")


def _same_shares(was, now) -> bool:
    was, now = was or [1.0], now or [1.0]
    return len(was) == len(now) and all(abs(a - b) <= 1e-12 for a, b in zip(was, now))


def _spelled(given: dict) -> str:
    """"the mixture a.txt=0.7,b.txt=0.3" or "the corpus a.txt"."""
    return f"the {'corpus' if given.get('shares') is None else 'mixture'} {given['data']}"


def data_parts(opts: DataOptions, rank: int = 0, keep: bool | None = None,
               resumed: Path | None = None) -> list[tuple[Path, float]]:
    """The prepared directories --data names with their shares: one (`prepared_data`), or
    the corpora of a mixture (`mixture_parts`). `keep`: as for `prepared_data`. `resumed`:
    the checkpoint the run resumes, refused first where it was trained on other --data
    (`check_resumed_data`)."""
    given = given_data(opts.data)
    check_resumed_data(resumed, given, opts.out)
    mixture = parse_mixture(opts.data)
    try:
        if mixture is None:
            return [(prepared_data(opts, rank, keep), 1.0)]
        return mixture_parts(opts, mixture, rank, keep)
    except OtherText:  # the text of another mixture: said as such where --data says so
        check_resumed_data(resumed, given, opts.out, other_data=True)
        raise


def _is_corpus(path: Path) -> bool:
    """--data names text to prepare (a file, a folder of files, a glob, a `datasets`
    directory), not a `bertkit prepare` output (finished or not)."""
    if path.is_file():
        return True
    if path.is_dir():  # prepare writes plan.json first: a folder `shards/` of text is a corpus
        return not any((path / name).exists() for name in ("manifest.json", "plan.json"))
    return bool(set("*?[") & set(str(path)))


TEXT_DATA = "data"
"""Where a corpus given as --data is prepared: this directory inside the run's (for the
corpora of a mixture, one directory each inside it: `mixture_dir`)."""
MIXTURE_VOCABULARY = "vocabulary"
"""Where the vocabulary shared by the corpora of a mixture is trained, inside TEXT_DATA."""


def _not_there(path: Path) -> UserError:
    return UserError(f"{path}: does not exist (give a corpus: a file, folder or glob; a "
                     f"directory made by `bertkit prepare`; or PATH=W,PATH=W to mix several)")


def prepared_data(opts: DataOptions, rank: int = 0, keep: bool | None = None) -> Path:
    """The prepared directory `opts.data` names: itself, or for a text file OUT/data, which
    rank 0 prepares (`corpus.prepare_text`) while the other ranks wait. `keep`: the run
    resumes a checkpoint, so OUT/data prepared from other text is refused, not replaced
    (None: whether OUT holds one; `pretrain` knows it already)."""
    if not opts.data.exists() and not _is_corpus(opts.data):
        raise _not_there(opts.data)
    if not _is_corpus(opts.data):
        if opts.tokenizer is not None:
            raise UserError(f"--tokenizer is for a text file as --data; {opts.data} is prepared "
                            f"data, whose tokenizer is its own")
        return opts.data
    data = opts.out / TEXT_DATA
    if rank == 0:
        with _run_dir(opts.out):
            prepare_text(opts.data, data, tokenizer=opts.tokenizer or opts.init,
                         vocab_size=opts.vocab_size, text_field=opts.text_field,
                         leave_out=[opts.out], keep=_resumes(opts, keep))
    if dist.is_initialized():  # the others wait in Python, where a SIGTERM still stops them
        signals.wait(dist.barrier(async_op=True))
    return data


@contextlib.contextmanager
def _run_dir(out: Path):
    """OUT made (if need be) for its data; when making the data fails, an OUT made here is
    removed again if empty: bad input leaves no empty run directory behind."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise


def mixture_dir(out: Path, index: int, corpus: Path) -> Path:
    """Where the corpus at `index` (from 0) of a mixture is prepared: OUT/data/K-NAME, K its
    place from 1, NAME that of its file or folder (a glob's: the last folder without
    wildcards) up to the first dot, in letters, digits, - and _ ("corpus" if none is left)."""
    name = next((part for part in reversed(corpus.parts) if not set("*?[") & set(part)), "")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", name.split(".")[0]).strip("_")[:40] or "corpus"
    return out / TEXT_DATA / f"{index + 1}-{name}"


def mixture_parts(opts: DataOptions, mixture: list[MixedCorpus], rank: int = 0,
                  keep: bool | None = None) -> list[tuple[Path, float]]:
    """The corpora of a mixture with their shares, prepared: a directory made by `bertkit
    prepare` as it is, a corpus to prepare (`_is_corpus`) in its `mixture_dir`, which rank 0
    prepares (`corpus.prepare_corpora`) while the other ranks wait, its text in its own field
    or else --text-field's. They share one tokenizer: --tokenizer, --init's or that of the
    prepared directories (which must all have the same, and --tokenizer's or --init's if
    given: checked before anything is prepared); else a WordPiece vocabulary of --vocab-size
    trained on the text of all the corpora to prepare, together, in OUT/data/vocabulary.
    `keep`: as for `prepared_data`."""
    to_prepare = {i for i, corpus in enumerate(mixture) if _is_corpus(corpus.path)}
    prepared = [corpus.path for i, corpus in enumerate(mixture) if i not in to_prepare]
    for i, corpus in enumerate(mixture):
        if i not in to_prepare and corpus.text_field is not None:
            raise UserError(f"{corpus.path}: prepared data, whose text is read already: a "
                            f"text field (:{corpus.text_field}) is for text to prepare")
    if opts.tokenizer is not None and not to_prepare:
        raise UserError("--tokenizer is for corpora to prepare as --data; the corpora of this "
                        "mixture are all prepared data, each with its own tokenizer")
    first = _one_tokenizer(prepared)
    given = opts.tokenizer or opts.init
    if first is not None and given is not None and to_prepare:
        check_tokenizer(first, given)
    check_not_input(opts.out, prepared, what="--out", names=["corpus of --data"] * len(prepared))
    dirs = {i: mixture_dir(opts.out, i, mixture[i].path) for i in sorted(to_prepare)}
    fields = {i: mixture[i].text_field or opts.text_field for i in dirs}
    if dirs and rank == 0:
        with _run_dir(opts.out):
            if _resumes(opts, keep):  # a refused or fresh run renames nothing
                moved = [(_moved_part(place, mixture[i].path, fields[i], opts.out), place)
                         for i, place in dirs.items()]  # all checked before one is renamed
                for old, place in moved:
                    if old is not None:
                        old.rename(place)
            prepare_corpora([mixture[i].path for i in dirs], list(dirs.values()),
                            tokenizer=given or (first / "tokenizer" if first else None),
                            vocabulary=opts.out / TEXT_DATA / MIXTURE_VOCABULARY,
                            vocab_size=opts.vocab_size, text_field=list(fields.values()),
                            leave_out=[opts.out], keep=_resumes(opts, keep))
    if dirs and dist.is_initialized():  # waited in Python, as for one corpus
        signals.wait(dist.barrier(async_op=True))
    return [(dirs.get(i, corpus.path), corpus.weight) for i, corpus in enumerate(mixture)]


def _moved_part(place: Path, corpus: Path, text_field: str, out: Path) -> Path | None:
    """A corpus of a mixture moved under another name since the run began has a new K-NAME:
    the directory of its old name, the only one at its place K, to take the new name when it
    was prepared from the same bytes (by sha256), so that it is found prepared, not prepared
    again beside the old one. From other bytes, the corpus is other text than the run's at K:
    refused (`OtherText`) before it is prepared beside them (with a tokenizer given, nothing
    else reads the text before it is prepared)."""
    olds = [d for d in place.parent.glob(f"{place.name.split('-')[0]}-*") if d.is_dir()]
    if place.exists() or len(olds) != 1:
        return None
    try:  # a corpus not there, or no readable SOURCE_FILE: left to the checks that follow
        saved = json.loads((olds[0] / SOURCE_FILE).read_text(encoding="utf-8"))
        digests = [sha256_file(s.path) for s in expand([corpus], text_field, "corpus file",
                                                        [out])]
        then = saved.get("sha256")
    except (UserError, OSError, ValueError, AttributeError):
        return None
    if then == digests:
        return olds[0]
    if isinstance(then, list):
        raise OtherText(f"{olds[0]}: this run's corpus {place.name.split('-')[0]} of the "
                        f"mixture was prepared from other text than {corpus}; resume with the "
                        f"--data it started with, or start a new run in another --out")
    return None


def _one_tokenizer(prepared: list[Path]) -> Path | None:
    """The first of these prepared directories, once all are found prepared with its
    tokenizer; None for none."""
    first = None
    for data in prepared:
        if not data.is_dir():
            raise (_not_there(data) if not data.exists() else UserError(
                f"{data}: a corpus of a mixture is a file, folder or glob of text, or a "
                f"directory made by `bertkit prepare`"))
        fingerprint = load_manifest(data)["tokenizer"]["fingerprint"]
        if first is None:
            first = (data, fingerprint)
        elif fingerprint != first[1]:
            raise UserError(f"{data}: prepared with another tokenizer than {first[0]}: the "
                            f"corpora of a mixture must share one (bertkit prepare "
                            f"--tokenizer {first[0] / 'tokenizer'})")
    return None if first is None else first[0]


def _resumes(opts: DataOptions, keep: bool | None) -> bool:
    """`keep` as given, or whether the run has a checkpoint to resume."""
    return latest_checkpoint(opts.out / "checkpoints") is not None if keep is None else keep


__all__ = ["DataOptions", "data_parts", "prepared_data", "mixture_parts", "mixture_dir",
           "data_fingerprint", "given_data", "check_resumed_data", "TEXT_DATA",
           "MIXTURE_VOCABULARY"]
