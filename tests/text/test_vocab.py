"""Vocabulary training: the textbook's alpha mixture of several files, streaming, bad input."""
from __future__ import annotations

import inspect
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bertkit.files import UserError
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.vocab import count_lines, mixture_weights, mixed_lines, train_tokenizer

REPO = Path(__file__).resolve().parents[2]


def _tagged_files(tmp_path, sizes):
    """File i holds sizes[i] lines "f{i} l{n} ...", with blank lines that must not count."""
    files = []
    for i, n in enumerate(sizes):
        path = tmp_path / f"lang{i}.txt"
        path.write_text("".join(f"f{i} l{k} word{k % 7} text\n" + ("\n" if k % 10 == 0 else "")
                                for k in range(n)), encoding="utf-8")
        files.append(path)
    return files


def test_mixture_weights_follow_the_seeds_formula():
    q = mixture_weights([900, 90, 10], alpha=0.3)
    p = [0.9, 0.09, 0.01]
    expected = [x ** 0.3 / sum(y ** 0.3 for y in p) for x in p]
    assert q == pytest.approx(expected)
    assert sum(q) == pytest.approx(1.0)
    assert q[2] > 0.01 * 5  # the small language is up-weighted a lot
    assert mixture_weights([900, 90, 10], alpha=1.0) == pytest.approx(p)
    assert mixture_weights([900, 90, 10], alpha=0.0) == pytest.approx([1 / 3] * 3)
    with pytest.raises(UserError, match="alpha"):
        mixture_weights([1, 2], alpha=1.5)


@pytest.mark.parametrize("alpha", [0.3, 1.0, 0.0])
def test_sampled_lines_follow_q(tmp_path, alpha):
    sizes = [20000, 2000, 200]
    files = _tagged_files(tmp_path, sizes)
    assert [count_lines(f) for f in files] == sizes
    stream = mixed_lines(files, alpha=alpha, seed=1)
    assert inspect.isgenerator(stream)
    lines = list(stream)
    assert len(lines) == pytest.approx(sum(sizes), rel=0.02)
    q = mixture_weights(sizes, alpha)
    share = Counter(line.split()[0] for line in lines)
    for i in range(3):
        assert share[f"f{i}"] / len(lines) == pytest.approx(q[i], abs=0.01)
    # Any prefix follows the mixture too (files are interleaved, not concatenated).
    head = Counter(line.split()[0] for line in lines[:2000])
    for i in range(3):
        assert head[f"f{i}"] / 2000 == pytest.approx(q[i], abs=0.04)
    # The thinned big file is drawn from its whole length, not just its beginning.
    big = [int(line.split()[1][1:]) for line in lines if line.startswith("f0 ")]
    if alpha < 1:
        assert max(big) > 0.95 * sizes[0] and min(big) < 0.05 * sizes[0]
    # A small up-weighted file is repeated, each line about equally often.
    small = Counter(line for line in lines if line.startswith("f2 "))
    assert len(small) == sizes[2] or alpha == 1.0


def test_sampling_is_lazy_and_seeded(tmp_path):
    files = _tagged_files(tmp_path, [50, 50])
    # Bad bytes at the very end: a stream that read whole files up front would fail at once.
    with open(files[1], "ab") as f:
        f.write(b"tail \xff\n")
    stream = mixed_lines(files, sizes=[50, 50])
    assert next(stream).startswith("f")
    assert list(mixed_lines(files[:1], seed=3)) == list(mixed_lines(files[:1], seed=4))
    with pytest.raises(UserError, match=r"lang1.txt:56: not UTF-8"):
        list(mixed_lines(files))


def test_training_rejects_bad_files_before_writing(tmp_path):
    good = _tagged_files(tmp_path, [30])[0]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("ok line\nsecond line\ncaf\xe9 au lait\n".encode("latin-1"))
    out = tmp_path / "out"
    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    cases = [(tmp_path / "missing.txt", "missing.txt: input file does not exist"),
             (empty, "empty.txt: input file is empty"),
             (blank, "blank.txt: no text"),
             (latin, r"latin1.txt:3: not UTF-8 text \(byte 0xe9"),
             (empty_dir, "empty_dir: no files in the folder"),
             (tmp_path / "*.none", r"\*.none: no files match")]
    for bad, message in cases:
        with pytest.raises(UserError, match=message):
            train_tokenizer([good, bad], vocab_size=100, out=out, progress=False)
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    with pytest.raises(UserError, match="unknown tokenizer kind"):
        train_tokenizer([good], kind="bpe", progress=False)


def test_a_model_directory_is_refused_as_out(tmp_path):
    """`tokenizer train --out runs/mini` would replace the model's tokenizer with one that
    its embeddings do not fit, keeping config.json and the weights beside it."""
    good = _tagged_files(tmp_path, [30])[0]
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UserError, match="model: holds a model .config.json."):
        train_tokenizer([good], vocab_size=100, out=model, progress=False)
    assert [p.name for p in model.iterdir()] == ["config.json"]


def test_an_out_that_is_an_input_is_refused_before_the_corpus_is_read(tmp_path):
    """The cheap check first: the whole corpus is not read (here: to its bad byte) before."""
    bad = tmp_path / "corpus.txt"
    bad.write_bytes(b"a line of text\n" * 1000 + b"\xff\n")
    with pytest.raises(UserError, match="is the input"):
        train_tokenizer([bad], vocab_size=100, out=bad, progress=False)


def test_training_several_files_writes_a_loadable_directory(tmp_path, capsys):
    files = _tagged_files(tmp_path, [300, 30])
    tok = train_tokenizer(files, vocab_size=120, alpha=0.3, out=tmp_path / "tok", progress=True)
    assert "lines/s" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.vocab_size == tok.vocab_size <= 120
    assert loaded.encode("f1 l3 word2").ids == tok.encode("f1 l3 word2").ids
    assert "f1" in loaded.get_vocab()  # the small file's tag made it into the vocabulary


def test_a_unigram_vocabulary_too_small_for_its_alphabet_says_the_minimum(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("abcdefghij Klmnopqrst uvwxyz 0123456789 αβγδεζ Ä\n" * 50, encoding="utf-8")
    # uncased: 26 letters, 10 digits, 6 Greek letters and the word-start mark
    with pytest.raises(UserError, match=r"c.txt: vocab_size 42 is too small for a Unigram "
                                        r"vocabulary of this text: it needs at least 43"):
        train_tokenizer([corpus], vocab_size=42, kind="unigram", progress=False,
                        out=tmp_path / "tok")
    assert not (tmp_path / "tok").exists()
    assert train_tokenizer([corpus], vocab_size=43, kind="unigram", progress=False).vocab_size


def _syllable_text(path: Path) -> Path:
    """Words of random syllables, accents and capitals included: many merges tie in count."""
    rng = random.Random(0)
    syllables = ["ka", "to", "ri", "mu", "sen", "la", "pó", "de", "qui", "Zor", "an", "él", "us"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
                            + ".\n" for _ in range(1500)), encoding="utf-8")
    return path


def _trained_files(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


@pytest.mark.parametrize("kind,cased", [("wordpiece", False), ("wordpiece", True),
                                        ("unigram", False)])
def test_same_files_and_seed_give_the_same_vocabulary_byte_for_byte(tmp_path, kind, cased):
    corpus = _syllable_text(tmp_path / "corpus.txt")
    for run in ("a", "b", "c"):
        train_tokenizer([corpus], vocab_size=180, kind=kind, cased=cased, seed=5,
                        out=tmp_path / run, progress=False)
    first = _trained_files(tmp_path / "a")
    assert _trained_files(tmp_path / "b") == first
    assert _trained_files(tmp_path / "c") == first
    pieces = first["vocab.txt"].decode().split("\n")[:-1]
    assert pieces[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(pieces) == 180
    assert len(set(pieces)) == len(pieces)
    if kind == "wordpiece":  # characters, then `##` characters, each sorted, then merges
        chars = [p for p in pieces[5:] if len(p) == 1]
        continuations = [p for p in pieces[5:] if len(p) == 3 and p.startswith("##")]
        assert pieces[5:5 + len(chars) + len(continuations)] == sorted(chars) + sorted(
            continuations)
        assert ("##Z" in continuations) == cased and "##." not in continuations


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_a_fresh_process_with_another_hash_seed_trains_the_same_vocabulary(tmp_path, kind):
    corpus = _syllable_text(tmp_path / "corpus.txt")
    train_tokenizer([corpus], vocab_size=180, kind=kind, seed=5, out=tmp_path / "here",
                    progress=False)
    script = ("import sys; from bertkit.text.vocab import train_tokenizer; "
              f"train_tokenizer([sys.argv[1]], vocab_size=180, kind={kind!r}, seed=5, "
              "out=sys.argv[2], progress=False)")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script, str(corpus), str(tmp_path / "there")],
                   env=env, check=True, timeout=120)
    assert _trained_files(tmp_path / "there") == _trained_files(tmp_path / "here")


def test_a_corpus_over_the_budget_is_sampled_evenly_and_says_so(tmp_path, capsys):
    import gzip

    from bertkit.cli.main import main

    [plain] = _tagged_files(tmp_path, [4000])
    lines = [l for l in plain.read_text(encoding="utf-8").splitlines() if l.strip()]
    sample = list(mixed_lines([plain], seed=3, keep=0.25))
    # each line kept independently with probability 1/4: a binomial count, in file order
    assert abs(len(sample) - 1000) < 5 * (4000 * 0.25 * 0.75) ** 0.5
    assert sample == [l for l in lines if l in set(sample)]
    tail = sum(int(l.split()[1][1:]) >= 2000 for l in sample)
    assert abs(tail - len(sample) / 2) < 5 * (len(sample) / 4) ** 0.5  # from the whole file
    assert sample == list(mixed_lines([plain], seed=3, keep=0.25))  # the seed decides it
    # compressed, the same text is the same corpus: the same vocabulary from the same sample
    gz = tmp_path / "lang0.txt.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    size = sum(len(l.encode()) for l in lines)
    said = []
    a = train_tokenizer([plain], vocab_size=60, sample_bytes=size // 4, say=said.append,
                        progress=False)
    assert said[0].startswith(f"tokenizer: the corpus holds {size:,} bytes of text, more than ")
    assert "training on a sample of 25.0% of its lines" in said[0] and len(said) == 1
    b = train_tokenizer([gz], vocab_size=60, sample_bytes=size // 4, say=None, progress=False)
    assert a.get_vocab() == b.get_vocab()
    # under the budget: no sample, nothing said
    said = []
    train_tokenizer([plain], vocab_size=60, sample_bytes=size, say=said.append, progress=False)
    assert said == []
    # the command says it on stdout
    assert main(["tokenizer", "train", "--input", str(gz), "--vocab-size", "60", "--sample-bytes",
                 str(size // 4), "--out", str(tmp_path / "tok"), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tokenizer: the corpus holds") and "(--sample-bytes)" in out[0]
    assert out[-1].startswith(f"{tmp_path / 'tok'}: wordpiece vocabulary of")


def test_a_semicolon_csv_trains_the_vocabulary_of_its_text_column(tmp_path):
    """What Excel writes where the comma is the decimal point: the text column, as the same
    texts in a text file give it (the other columns, decimal commas and all, are no text)."""
    [plain] = _tagged_files(tmp_path, [300])
    texts = [line for line in plain.read_text(encoding="utf-8").splitlines() if line]
    excel = tmp_path / "excel.csv"
    excel.write_text("id;text;score\n" + "".join(f'{k};"{t}";{k},5\n' for k, t in
                                                 enumerate(texts)), encoding="utf-8")
    assert count_lines(excel) == len(texts)
    a = train_tokenizer([plain], vocab_size=60, say=None, progress=False)
    b = train_tokenizer([excel], vocab_size=60, say=None, progress=False)
    assert a.get_vocab() == b.get_vocab()
