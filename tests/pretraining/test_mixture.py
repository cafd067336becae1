"""Corpora mixed by proportion: the spelling, the schedule's shares, a resume that continues
with exactly the batches of an uninterrupted run, and `pretrain --data a=W,b=W` (or a TOML
table) killed at a checkpoint and resumed to the weights of an uninterrupted run."""
from __future__ import annotations

import contextlib

import csv
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.files import UserError, sha256_file
from bertkit.pretraining.corpus import prepare
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.mixture import (MixedBatches, allocate, mixture_spec, parse_mixture,
                                        schedule)
from bertkit.text.tokenizer import Tokenizer, tokenizer_fingerprint
from synthetic_corpus import make_tokenizer, write_corpus


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("mixture")
    tok = make_tokenizer(root / "tok")
    made = []
    for name, seed in (("books", 1), ("web", 2)):
        write_corpus(root / f"{name}.txt", docs=60, seed=seed)
        prepare([root / f"{name}.txt"], tok, root / name, workers=1, progress=False)
        made.append(root / name)
    other = make_tokenizer(root / "other-tok")
    (other / "x").mkdir(exist_ok=True)
    return made[0], made[1], tok


def test_the_spelling_of_a_mixture(tmp_path):
    assert parse_mixture("a=0.7,b=0.3") == [(Path("a"), 0.7, None), (Path("b"), 0.3, None)]
    parts = parse_mixture("x/a=3, y/b=1")
    assert [(p, w) for p, w, _ in parts] == [(Path("x/a"), 0.75), (Path("y/b"), 0.25)]
    assert parse_mixture("data/") is None and parse_mixture(Path("corpus.txt")) is None
    odd = tmp_path / "odd=1"
    odd.mkdir()
    assert parse_mixture(odd) is None  # a path that exists is that path
    (tmp_path / "x, y.txt").write_text("text\n")  # a comma, a space and "=" in file names
    (tmp_path / "a=1,b.txt").write_text("text\n")
    with contextlib.chdir(tmp_path):
        assert parse_mixture("x, y.txt=1,a=1,b.txt=3") == [(Path("x, y.txt"), 0.25, None),
                                                          (Path("a=1,b.txt"), 0.75, None)]
        assert [(p, w) for p, w, _ in parse_mixture("a=1,b.txt=1, x, y.txt=1,*,*=2")] == [
            (Path("a=1,b.txt"), 0.25), (Path("x, y.txt"), 0.25), (Path("*,*"), 0.5)]
    for bad, message in (("a=0.7,b", "expected PATH=WEIGHT"),
                         ("x,y=1", "expected .*got 'x'"), ("a=x,b=1", "not a number"),
                         ("a=0,b=1", "must be positive"), ("a=1,a=2", "named twice"),
                         ("a=-1,b=2", "must be positive")):
        with pytest.raises(UserError, match=message):
            parse_mixture(bad)


def test_the_schedule_keeps_every_prefix_within_one_batch_of_its_share():
    weights = [0.5, 0.3, 0.2]
    taken = [0, 0, 0]
    for step in range(1, 201):
        taken[schedule(weights, taken)] += 1
        for w, n in zip(weights, taken):
            assert abs(n - w * step) < 1, (step, taken)
    assert taken == [100, 60, 40]
    assert allocate(10, [0.7, 0.3]) == [7, 3] and allocate(1, [0.2, 0.8]) == [0, 1]


def _batches(corpora, seed=0):
    books, web, _ = corpora
    parts = [PretrainingBatches(d, objective="mlm", seq_len=32, batch_size=4, seed=seed)
             for d in (books, web)]
    return MixedBatches(parts, [0.7, 0.3])


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def test_mixed_batches_follow_the_shares_and_resume_exactly(corpora):
    whole = _batches(corpora)
    stream = iter(whole)
    reference = [next(stream) for _ in range(20)]
    stream.close()
    assert whole.taken == [14, 6]
    # each batch is a whole batch of one corpus: compare with the corpora alone
    books = iter(PretrainingBatches(corpora[0], objective="mlm", seq_len=32, batch_size=4))
    web = iter(PretrainingBatches(corpora[1], objective="mlm", seq_len=32, batch_size=4))
    order = []
    taken = [0, 0]
    for batch in reference:
        i = schedule([0.7, 0.3], taken)
        taken[i] += 1
        order.append(i)
        assert _same(batch, next(books if i == 0 else web))
    assert order[:10] == [0, 1, 0, 0, 0, 1, 0, 0, 1, 0]  # 7 and 3 in every ten
    # cut after 7 batches, the state saved, a new run loads it: the same last 13
    first = _batches(corpora)
    stream = iter(first)
    for _ in range(7):
        next(stream)
    state = first.state_dict()
    stream.close()
    resumed = _batches(corpora)
    resumed.load_state_dict(state)
    stream = iter(resumed)
    rest = [next(stream) for _ in range(13)]
    stream.close()
    assert all(_same(a, b) for a, b in zip(rest, reference[7:]))
    other = MixedBatches(resumed.parts, [0.5, 0.5])
    with pytest.raises(UserError, match="mixture weights"):
        other.load_state_dict(state)


TINY = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--lr", "1e-3",
        "--log-every", "2", "--eval-batches", "3", "--early-fraction", "0"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_pretrain_on_a_mixture_resumes_to_the_weights_of_an_uninterrupted_run(
        corpora, tmp_path, capsys):
    books, web, tok = corpora
    spec = f"{books}=0.7,{web}=0.3"
    args = ["pretrain", "--data", spec, "--max-steps", "6", "--save-every", "2",
            "--keep-checkpoints", "3", *TINY]
    whole = tmp_path / "whole"
    assert main(args + ["--out", str(whole)]) == 0
    capsys.readouterr()
    cut = _cut_at_step_2(whole, tmp_path / "cut")
    assert main(args + ["--out", str(cut), "--resume"]) == 0
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(cut / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the same mixture from a TOML table, in another order of the keys' weights
    config = tmp_path / "mix.toml"
    config.write_text(f'[data]\n"{books}" = 7\n"{web}" = 3\n', encoding="utf-8")
    table = tmp_path / "table"
    assert main(["pretrain", "--config", str(config), "--max-steps", "6", "--save-every", "2",
                 "--keep-checkpoints", "3", *TINY, "--out", str(table)]) == 0
    c = load_file(str(table / "model.safetensors"))
    assert all(torch.equal(a[k], c[k]) for k in a)
    # another mixture does not resume this run
    capsys.readouterr()
    assert main(["pretrain", "--data", f"{books}=0.5,{web}=0.5", "--max-steps", "8",
                 "--save-every", "2", *TINY, "--out", str(cut), "--resume"]) == 2
    assert f"checkpoint was trained on the mixture {spec}, this run asks for the mixture " \
        f"{books}=0.5,{web}=0.5" in capsys.readouterr().err


def test_a_mixture_of_other_tokenizers_is_refused_before_anything_is_prepared(
        corpora, tmp_path, capsys):
    books, web, tok = corpora
    other_tok = make_tokenizer(tmp_path / "tok2")
    # a vocabulary with one piece more: another fingerprint
    vocab = (other_tok.parent / "vocab.txt").read_text().splitlines() + ["zzz"]
    (tmp_path / "v.txt").write_text("\n".join(vocab) + "\n")
    Tokenizer.from_vocab(tmp_path / "v.txt").save(tmp_path / "tok3")
    write_corpus(tmp_path / "c.txt", docs=30, seed=9)
    prepare([tmp_path / "c.txt"], tmp_path / "tok3", tmp_path / "odd", workers=1,
            progress=False)
    text = tmp_path / "c.txt"
    cases = [([f"{books}=0.5,{tmp_path / 'odd'}=0.5"], "prepared with another tokenizer"),
             ([f"{books}=0.5,{tmp_path / 'none'}=0.5"], "none: does not exist (give a corpus"),
             # text to prepare with a tokenizer other than the prepared corpus'
             ([f"{books}=0.5,{text}=0.5", "--tokenizer", str(tmp_path / "tok3")],
              "tokenizer does not match the data in"),
             ([f"{books}=0.5,{web}=0.5", "--tokenizer", str(tok)],
              "--tokenizer is for corpora to prepare as --data")]
    capsys.readouterr()
    for data, message in cases:
        out = tmp_path / "run"
        assert main(["pretrain", "--data", *data, "--out", str(out), "--max-steps", "1",
                     *TINY]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
        assert not out.exists()
    # the run's output may not be one of the corpora
    assert main(["pretrain", "--data", f"{books}=0.5,{web}=0.5", "--out", str(web),
                 "--max-steps", "1", *TINY]) == 2
    assert "--out is the corpus of --data" in capsys.readouterr().err


# Corpora to prepare, mixed ---------------------------------------------------------------------

def _raw_corpora(root: Path) -> tuple[Path, str]:
    """A text file and a glob of two gzipped JSONL files: (the file, the glob)."""
    books = root / "books.txt"
    write_corpus(books, docs=60, seed=1)
    tweets = root / "tweets"
    tweets.mkdir()
    documents = write_corpus(root / "scratch.txt", docs=60, seed=2)
    for k in range(2):
        with gzip.open(tweets / f"part-{k}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": "\n".join(d)}) + "\n" for d in documents[k::2])
    (root / "scratch.txt").unlink()
    return books, str(tweets / "*.jsonl.gz")


def _cut_at_step_2(whole: Path, cut: Path) -> Path:
    """A copy of the finished run `whole` as a kill after step 2 leaves it."""
    shutil.copytree(whole, cut)
    for late in (cut / "checkpoints").glob("step-*"):
        if late.name != "step-00000002":
            shutil.rmtree(late)
    (cut / "model.safetensors").unlink()
    return cut


def _taken(run: Path, step: int) -> list:
    """The batches each corpus gave by `step`, as its checkpoint holds them (the "taken" of
    MixedBatches.state_dict, wherever the loop's state puts it)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            found.extend(v for k, v in node.items() if k == "taken")
            node = list(node.values())
        for child in node if isinstance(node, list) else ():
            walk(child)

    walk(json.loads((run / "checkpoints" / f"step-{step:08d}" / "state.json").read_text()))
    assert len(found) == 1
    return found[0]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_raw_corpora_mixed_are_prepared_into_the_run_and_resume_exactly(tmp_path, capsys):
    books, tweets = _raw_corpora(tmp_path)
    spec = f"{books}=0.7,{tweets}=0.3"
    args = ["pretrain", "--data", spec, "--vocab-size", "120", "--max-steps", "6",
            "--save-every", "2", "--keep-checkpoints", "3", *TINY]
    whole = tmp_path / "whole"
    assert main(args + ["--out", str(whole)]) == 0
    err = capsys.readouterr().err
    assert err.count("WordPiece vocabulary of 120 pieces") == 1  # one, on both corpora
    data = whole / "data"
    assert sorted(p.name for p in data.iterdir()) == ["1-books", "2-tweets", "vocabulary"]
    fingerprint = tokenizer_fingerprint(Tokenizer.load(data / "vocabulary"))
    for part, files in (("1-books", 1), ("2-tweets", 2)):
        manifest = json.loads((data / part / "manifest.json").read_text())
        assert manifest["tokenizer"]["fingerprint"] == fingerprint
        assert len(manifest["sources"]) == files
    assert f"a mixture of {data / '1-books'} (70%), {data / '2-tweets'} (30%)" in err
    # the shares asked, and the command line as typed
    assert _taken(whole, 6) == allocate(6, [0.7, 0.3]) == [4, 2]
    argv = shlex.split(json.loads((whole / "training_args.json").read_text())["command"])
    assert argv[argv.index("--data") + 1] == spec

    # cut at step 2 and resumed: nothing trained or prepared again, the same weights
    cut = _cut_at_step_2(whole, tmp_path / "cut")
    os.utime(books)  # the same bytes touched: the same data
    assert main(args + ["--out", str(cut), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "WordPiece" not in err and err.count("already prepared from") == 2
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(cut / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    # the same mixture from a TOML table of file names: the same run
    config = tmp_path / "mix.toml"
    config.write_text(f'[data]\n"{books}" = 7\n"{tweets}" = 3\n', encoding="utf-8")
    table = tmp_path / "table"
    assert main(["pretrain", "--config", str(config), *args[3:], "--out", str(table)]) == 0
    c = load_file(str(table / "model.safetensors"))
    assert all(torch.equal(a[k], c[k]) for k in a)

    # other text under the same name: refused before anything is trained or replaced
    capsys.readouterr()
    before = {p: p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()}
    books.write_text(books.read_text() + "One more sentence at the end.\n", encoding="utf-8")
    assert main(args[:-len(TINY)] + ["--max-steps", "8", *TINY, "--out", str(whole),
                                     "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this run's vocabulary was trained on other text" in err[0], err
    assert {p: p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()} == before


@pytest.mark.usefixtures("one_thread")
def test_a_part_moved_under_another_name_is_found_prepared(tmp_path, capsys):
    books, tweets = _raw_corpora(tmp_path)
    args = ["pretrain", "--vocab-size", "120", *TINY, "--out", str(tmp_path / "run")]
    assert main([*args, "--max-steps", "1", "--data", f"{books}=0.5,{tweets}=0.5"]) == 0
    novels = books.rename(tmp_path / "novels.txt")  # 1-books is now 1-novels: the same bytes
    data = tmp_path / "run" / "data"
    # without --resume the run is refused, and a refused run renames nothing
    assert main([*args, "--max-steps", "2", "--data", f"{novels}=0.5,{tweets}=0.5"]) == 2
    assert sorted(p.name for p in data.iterdir()) == ["1-books", "2-tweets", "vocabulary"]
    # nor does a resume refused for another model (its shape known before the data)
    capsys.readouterr()
    assert main([*args, "--max-steps", "2", "--resume", "--architecture", "bert", "--data",
                 f"{novels}=0.5,{tweets}=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "it was made for a different model" in err[0], err
    assert sorted(p.name for p in data.iterdir()) == ["1-books", "2-tweets", "vocabulary"]
    assert main([*args, "--max-steps", "2", "--resume", "--data",
                 f"{novels}=0.5,{tweets}=0.5"]) == 0
    err = capsys.readouterr().err
    assert sorted(p.name for p in data.iterdir()) == ["1-novels", "2-tweets", "vocabulary"]
    assert f"{data / '1-novels'} is already prepared from {novels}" in err


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file under `root` with its bytes, and every folder (None)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.mark.usefixtures("one_thread")
def test_a_corpus_swapped_for_another_is_refused_before_it_is_prepared(corpora, tmp_path,
                                                                         capsys):
    # with a tokenizer given, nothing is trained that would find the other text: the corpus
    # at a place of the mixture is known other by the bytes its directory was prepared from
    books, tweets = _raw_corpora(tmp_path)
    other = tmp_path / "other.txt"
    write_corpus(other, docs=30, seed=7)
    out = tmp_path / "run"
    args = ["pretrain", "--tokenizer", str(corpora[2]), *TINY, "--out", str(out)]
    assert main([*args, "--max-steps", "1", "--data", f"{books}=0.7,{tweets}=0.3"]) == 0
    novels = shutil.copy(books, tmp_path / "novels.txt")  # the same bytes: found prepared
    capsys.readouterr()
    before = _tree(out)
    for data in (f"{books}=0.7,{other}=0.3", f"{other}=0.7,{tweets}=0.3",
                 f"{novels}=0.7,{other}=0.3"):  # nothing renamed for a refused run
        assert main([*args, "--max-steps", "2", "--resume", "--data", data]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and (f"checkpoint was trained on the mixture {books}=0.7,"
                                  f"{tweets}=0.3, this run asks for the mixture {data}") \
            in err[0], err
        assert _tree(out) == before
    assert main([*args, "--max-steps", "2", "--resume", "--data",
                 f"{novels}=0.7,{tweets}=0.3"]) == 0
    assert sorted(p.name for p in (out / "data").iterdir()) == ["1-novels", "2-tweets"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_text_mixed_with_prepared_corpora_takes_their_tokenizer(corpora, tmp_path, capsys):
    books, web, tok = corpora
    text = tmp_path / "more.txt"
    write_corpus(text, docs=40, seed=5)
    out = tmp_path / "run"
    assert main(["pretrain", "--data", f"{books}=0.5,{text}=0.25,{web}=0.25", "--out", str(out),
                 "--max-steps", "2", *TINY]) == 0
    assert "WordPiece" not in capsys.readouterr().err
    assert sorted(p.name for p in (out / "data").iterdir()) == ["2-more"]
    assert (out / "data" / "2-more" / "tokenizer" / "vocab.txt").read_text() \
        == (books / "tokenizer" / "vocab.txt").read_text()


def test_bad_text_in_a_mixture_is_one_line_before_anything_is_written(tmp_path, capsys,
                                                                        monkeypatch):
    from bertkit.pretraining import corpus

    books, tweets = _raw_corpora(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Hello world.\n" * 3 + b"bad \xff here\n")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")
    tok = make_tokenizer(tmp_path / "tok")

    def nothing_written(*args, **kwargs):
        raise AssertionError("a corpus was prepared before the bad one was found")

    monkeypatch.setattr(corpus, "prepare", nothing_written)
    out = tmp_path / "run"
    for spec, more, message in (
            (f"{books}=1,{tweets}=1,{bad}=1", [], f"{bad}:4: not UTF-8 text"),
            (f"{books}=1,{bad}=1", ["--tokenizer", str(tok)], f"{bad}:4: not UTF-8 text"),
            (f"{books}=1,{blank}=1", [], f"{blank}: no text (only blank lines)"),
            (f"{books}=1,{tmp_path / 'none' / '*.txt'}=1", [], "none/*.txt: no files match")):
        assert main(["pretrain", "--data", spec, *more, "--out", str(out), "--max-steps", "1",
                     *TINY]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
        assert not out.exists()


@pytest.mark.slow
def test_a_mixed_run_relaunched_under_torchrun_finds_its_prepared_corpora(tmp_path):
    """Also the suite's check that two ranks under torchrun run the command as one process
    does, rank 0 alone writing the log and the model (one torchrun start-up, not two)."""
    books, tweets = _raw_corpora(tmp_path)
    out = tmp_path / "run"
    args = ["pretrain", "--data", f"{books}=0.7,{tweets}=0.3", "--vocab-size", "120",
            "--save-every", "2", *TINY, "--out", str(out)]
    assert main(args + ["--max-steps", "2"]) == 0
    prepared = {p: p.stat().st_mtime_ns for p in (out / "data").rglob("*") if p.is_file()}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "bertkit.cli", *args,
                           "--max-steps", "4", "--resume"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 ranks" in done.stderr and "resumed from" in done.stderr
    assert done.stderr.count("already prepared from") == 2 and "WordPiece" not in done.stderr
    assert {p: p.stat().st_mtime_ns for p in (out / "data").rglob("*") if p.is_file()} == prepared
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4]  # rank 0 alone wrote
    assert records[-1]["split"] == "eval" and records[-1]["step"] == 4
    assert (out / "model.safetensors").is_file()


def _forget_the_mixture(checkpoint: Path) -> None:
    """`checkpoint` as runs before checkpoints recorded their --data left it: no "given"."""
    state = json.loads((checkpoint / "state.json").read_text())
    state["state"]["__dict__"]["fingerprint"]["__dict__"].pop("given")
    (checkpoint / "state.json").write_text(json.dumps(state))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["state.json"] = sha256_file(checkpoint / "state.json")
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.usefixtures("one_thread")
def test_a_resume_on_another_mixture_says_which_and_what_to_do(corpora, tmp_path, capsys):
    books, tweets = _raw_corpora(tmp_path)
    other = tmp_path / "other.txt"
    write_corpus(other, docs=30, seed=7)
    out = tmp_path / "run"
    args = ["pretrain", "--vocab-size", "120", *TINY, "--out", str(out), "--max-steps", "2",
            "--resume"]
    assert main([*args[:-3], "--max-steps", "1", "--data", f"{books}=0.7,{tweets}=0.3"]) == 0
    was = f"the mixture {books}=0.7,{tweets}=0.3"
    prepared = {p: p.read_bytes() for p in sorted((out / "data").rglob("*")) if p.is_file()}
    capsys.readouterr()
    for data, now in ((f"{books}=0.5,{tweets}=0.5", f"the mixture {books}=0.5,{tweets}=0.5"),
                      (str(books), f"the corpus {books}"),
                      (f"{books}=0.7,{other}=0.3", f"the mixture {books}=0.7,{other}=0.3")):
        assert main([*args, "--data", data]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert f"checkpoint was trained on {was}, this run asks for {now}" in err[0], err
        assert f"--init {out} --data {shlex.quote(data)}" in err[0], err  # a new run from it
        # refused before anything is prepared or replaced
        assert {p: p.read_bytes() for p in sorted((out / "data").rglob("*"))
                if p.is_file()} == prepared
    # prepared corpora, one swapped for another: the same
    third = tmp_path / "third"
    write_corpus(tmp_path / "third.txt", docs=30, seed=8)
    prepare([tmp_path / "third.txt"], corpora[2], third, workers=1, progress=False)
    run = tmp_path / "prepared-run"
    mixed = ["pretrain", *TINY, "--out", str(run), "--data"]
    assert main([*mixed, f"{corpora[0]}=0.5,{corpora[1]}=0.5", "--max-steps", "1"]) == 0
    capsys.readouterr()
    assert main([*mixed, f"{corpora[0]}=0.5,{third}=0.5", "--max-steps", "2", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (
        f"checkpoint was trained on the mixture {corpora[0]}=0.5,{corpora[1]}=0.5, this run "
        f"asks for the mixture {corpora[0]}=0.5,{third}=0.5") in err[0], err
    # a checkpoint made before checkpoints recorded their mixture resumes as before, and
    # other weights are refused as other data
    _forget_the_mixture(out / "checkpoints" / "step-00000001")
    assert main([*args, "--data", f"{books}=0.5,{tweets}=0.5"]) == 2
    assert "other data (another corpus" in capsys.readouterr().err
    assert main([*args, "--data", f"{books}=0.7,{tweets}=0.3"]) == 0
    assert "given" in json.loads((out / "checkpoints" / "step-00000002" / "state.json")
                                 .read_text())["state"]["__dict__"]["fingerprint"]["__dict__"]


# A text field for each corpus ------------------------------------------------------------------

def _fielded_corpora(root: Path) -> tuple[Path, Path]:
    """A JSONL file whose text is in "text" (and a "body" of other text) and a CSV file whose
    text is in "content" (and a short "title")."""
    docs = write_corpus(root / "scratch.txt", docs=60, seed=3)
    (root / "scratch.txt").unlink()
    jsonl = root / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"text": "\n".join(d), "body": d[0]}) + "\n"
                             for d in docs[:30]), encoding="utf-8")
    table = root / "b.csv"
    with open(table, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["title", "content"])
        writer.writerows([d[0][:20], "\n".join(d)] for d in docs[30:])
    return jsonl, table


def test_a_text_field_after_the_weight_is_that_corpus_own(tmp_path):
    assert parse_mixture("a.jsonl=0.7,b.csv=0.3:content") == [
        (Path("a.jsonl"), 0.7, None), (Path("b.csv"), 0.3, "content")]
    assert parse_mixture("a=1:my field: x,b=3") == [(Path("a"), 0.25, "my field: x"),
                                                   (Path("b"), 0.75, None)]
    assert mixture_spec(parse_mixture("a=1,b=1:content")) == "a=0.5,b=0.5:content"
    for bad, message in (("a=1:,b=1", "the text field of a after ':' is empty"),
                         ("a=x:t,b=1", "the weight of a is 'x', not a number")):
        with pytest.raises(UserError, match=message):
            parse_mixture(bad)


@pytest.mark.usefixtures("one_thread")
def test_corpora_of_a_mixture_each_with_their_text_field(corpora, tmp_path, capsys):
    jsonl, table = _fielded_corpora(tmp_path)
    out = tmp_path / "run"
    args = ["pretrain", "--vocab-size", "120", *TINY, "--out", str(out)]
    # one --text-field for both: the CSV has no column "text"
    assert main([*args, "--max-steps", "1", "--data", f"{jsonl}=0.5,{table}=0.5"]) == 2
    assert "b.csv" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--max-steps", "1", "--data", f"{jsonl}=0.5,{table}=0.5:content"]) == 0
    capsys.readouterr()
    source = json.loads((out / "data" / "2-b" / "source.json").read_text())
    assert source["text_field"] == "content"
    assert "text_field" not in json.loads((out / "data" / "1-a" / "source.json").read_text())
    # the same mixture from a --config table: found prepared, and resumed
    config = tmp_path / "mix.toml"
    config.write_text(f'[data]\n"{jsonl}" = 0.5\n"{table}" = {{ weight = 0.5, text_field = '
                      f'"content" }}\n', encoding="utf-8")
    assert main(["pretrain", "--config", str(config), *args[1:], "--max-steps", "2",
                 "--resume"]) == 0
    err = capsys.readouterr().err
    assert err.count("already prepared from") == 2 and "WordPiece" not in err
    # another field on resume is refused like other text, before anything is replaced
    prepared = {p: p.read_bytes() for p in sorted((out / "data").rglob("*")) if p.is_file()}
    assert main([*args, "--max-steps", "3", "--resume", "--data",
                 f"{jsonl}=0.5,{table}=0.5:title"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (f"trained on the mixture {jsonl}=0.5,{table}=0.5:content, this "
                              f"run asks for the mixture {jsonl}=0.5,{table}=0.5:title") in err[0]
    assert main([*args, "--max-steps", "3", "--resume", "--text-field", "body", "--data",
                 f"{jsonl}=0.5,{table}=0.5:content"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("text field ['body', 'content'] now, ['text', 'content'] when "
                              "it was made") in err[0], err
    assert {p: p.read_bytes() for p in sorted((out / "data").rglob("*"))
            if p.is_file()} == prepared
    # a prepared directory has no text field to choose
    assert main([*args, "--max-steps", "1", "--out", str(tmp_path / "other"), "--data",
                 f"{jsonl}=0.5,{corpora[0]}=0.5:content"]) == 2
    assert f"{corpora[0]}: prepared data, whose text is read already" in capsys.readouterr().err


@pytest.mark.usefixtures("one_thread")
def test_the_text_field_of_plain_text_changes_nothing_on_resume(tmp_path, capsys):
    # a text file is read line by line, whatever --text-field says: its data, vocabulary and
    # checkpoints are the same; a JSONL file's field is other text
    books, _ = _raw_corpora(tmp_path)
    jsonl, _ = _fielded_corpora(tmp_path)  # its text in "text", other text in "body"
    args = ["pretrain", "--vocab-size", "120", *TINY]
    single = ["--out", str(tmp_path / "single"), "--data", str(books)]
    assert main([*args, *single, "--max-steps", "1"]) == 0
    capsys.readouterr()
    assert main([*args, *single, "--text-field", "body", "--max-steps", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "already prepared from" in err and "WordPiece" not in err
    out = tmp_path / "mixed"
    mixed = [*args, "--out", str(out), "--data"]
    assert main([*mixed, f"{books}=0.7,{jsonl}=0.3", "--max-steps", "1"]) == 0
    capsys.readouterr()
    before = _tree(out)
    assert main([*mixed, f"{books}=0.7,{jsonl}=0.3", "--text-field", "body",
                 "--max-steps", "2", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "text field ['text', 'body'] now, 'text' when it was made" \
        in err[0], err
    assert _tree(out) == before
    assert main([*mixed, f"{books}=0.7,{jsonl}=0.3:text", "--text-field", "body",
                 "--max-steps", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert err.count("already prepared from") == 2 and "WordPiece" not in err


def test_a_bad_entry_of_a_mixture_table_names_the_file(corpora, tmp_path, capsys):
    books, web, _ = corpora
    config = tmp_path / "mix.toml"
    for entry in ("-1", "0", '{ weight = 1, text_field = "" }', '{ weight = 1, field = "x" }',
                  '{ text_field = "x" }', '{ weight = 1, text_field = "a,b" }',
                  '{ weight = 0, text_field = "x" }'):
        config.write_text(f'[data]\n"{books}" = {entry}\n"{web}" = 3\n', encoding="utf-8")
        assert main(["pretrain", "--config", str(config), "--out", str(tmp_path / "run"),
                     "--max-steps", "1", *TINY]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
            f"error: {config}: data: expected a table of paths with positive numbers (their "
            f"weights), or tables {{weight = W, text_field = \"FIELD\"}} (a field without ',' "
            f"or '='), got {{"), entry
