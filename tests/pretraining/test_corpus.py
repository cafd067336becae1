"""Corpus preparation: exact tokens, sentences and documents, held-out split, resume, bad input."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.pretraining.corpus import prepare
from bertkit.pretraining.provenance import check_tokenizer
from bertkit.pretraining.shards import load_manifest, load_split
from bertkit.text.tokenizer import Tokenizer
from synthetic_corpus import make_tokenizer, write_corpus

@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def split_documents(data: Path, split: str) -> list[list[np.ndarray]]:
    s = load_split(data, split)
    out = []
    for d in range(s.num_documents):
        sents = range(s.doc_sentences[d], s.doc_sentences[d + 1])
        out.append([np.asarray(s.shards[s.sentence_shard[i]][s.sentence_start[i]:
                                                                s.sentence_start[i] +
                                                                s.sentence_length[i]])
                    for i in sents])
    return out


def all_tokens(data: Path) -> np.ndarray:
    m = load_manifest(data)
    return np.concatenate([np.fromfile(data / "shards" / f"{s['name']}.tokens.bin",
                                       dtype=m["dtype"]) for s in m["shards"]]).astype(np.int64)


def test_prepare_keeps_exact_tokens_sentences_and_documents(tmp_path, tok_dir):
    documents = write_corpus(tmp_path / "c.txt", docs=60)
    manifest = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", workers=1,
                       progress=False)
    tok = Tokenizer.load(tok_dir)
    assert manifest["dtype"] == "uint16" and manifest["tokenizer"]["word_cache"]
    train, held = split_documents(tmp_path / "data", "train"), \
        split_documents(tmp_path / "data", "heldout")
    assert len(train) + len(held) == 60 and len(held) >= 1
    assert manifest["train"]["documents"] == len(train)
    # the shards hold every line's exact encoding, in input order
    reference = np.concatenate([np.asarray(ids) for d in documents
                                for ids in tok.encode_batch(d, add_special_tokens=False).ids])
    assert np.array_equal(all_tokens(tmp_path / "data"), reference)
    doc_tokens = sorted(tuple(np.concatenate(d).tolist()) for d in train + held)
    assert doc_tokens == sorted(tuple(np.concatenate(
        [np.asarray(x) for x in tok.encode_batch(d, add_special_tokens=False).ids]).tolist())
        for d in documents)
    # sentences: one per sentence of the text ("Mr." does not end one)
    n_sentences = sum(line.count(".") + line.count("!") + line.count("?") - line.count("Mr.")
                      for d in documents for line in d)
    assert manifest["train"]["sentences"] + manifest["heldout"]["sentences"] == n_sentences
    ends = {tok.token_to_id(p) for p in ".!?"}
    for doc in train:
        for s in doc:
            assert int(s[-1]) in ends
    # token counts of the train split for the unigram sampler; word starts from '##'
    counts = np.load(tmp_path / "data" / "token_counts.npy")
    all_train = np.concatenate([s for d in train for s in d])
    assert np.array_equal(counts, np.bincount(all_train, minlength=tok.vocab_size))
    starts = np.load(tmp_path / "data" / "word_starts.npy")
    assert not starts[tok.token_to_id("##ing")] and starts[tok.token_to_id("ka")]
    assert Tokenizer.load(tmp_path / "data" / "tokenizer").get_vocab() == tok.get_vocab()


def test_jsonl_input_by_extension_and_by_content(tmp_path, tok_dir):
    rows = [{"text": "Kalo mine su. Tari po!\nDean elor."}, {"text": "Anel kaka."},
            {"text": ""}, {"text": "Ritasu ne. Mimi lolo."}]
    body = "\n".join(json.dumps(r) for r in rows) + "\n"
    (tmp_path / "a.jsonl").write_text(body, encoding="utf-8")
    (tmp_path / "b.txt").write_text(body, encoding="utf-8")  # recognised by its first line
    for name in ("a.jsonl", "b.txt"):
        m = prepare([tmp_path / name], tok_dir, tmp_path / f"out-{name}", workers=1,
                    heldout_fraction=0.0, progress=False)
        assert m["train"]["documents"] == 3 and m["train"]["sentences"] == 6
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Ka."}\n{"txt": "x"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.jsonl:2: .*\"text\""):
        prepare([bad], tok_dir, tmp_path / "out-bad", workers=1, progress=False)
    assert not (tmp_path / "out-bad").exists()  # nothing half-written


def test_heldout_split_by_documents(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=300, paragraphs=(1, 2), sentences=(1, 3))
    m = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "d", heldout_fraction=0.05,
                workers=1, progress=False)
    assert 5 <= m["heldout"]["documents"] <= 30
    assert m["train"]["documents"] + m["heldout"]["documents"] == 300
    # one document only: its last lines become the held-out split
    (tmp_path / "one.txt").write_text("".join(f"Kalo mine {i}.\n" for i in range(200)),
                                      encoding="utf-8")
    m = prepare([tmp_path / "one.txt"], tok_dir, tmp_path / "e", workers=1, progress=False)
    assert m["heldout"]["documents"] == 1 and m["heldout"]["sentences"] == 2
    assert m["train"]["sentences"] == 198


def test_rerun_skips_finished_shards_and_resumes_identically(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=200, seed=3)
    kwargs = dict(shard_tokens=2000, chunk_bytes=4000, workers=1, progress=False)
    full = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "full", **kwargs)
    assert len(full["shards"]) >= 4
    # an interrupted run: the last two shards and the manifest never got written
    part = tmp_path / "part"
    prepare([tmp_path / "c.txt"], tok_dir, part, **kwargs)
    (part / "manifest.json").unlink()
    for shard in full["shards"][-2:]:
        for f in (part / "shards").glob(shard["name"] + ".*"):
            f.unlink()
    first = part / "shards" / (full["shards"][0]["name"] + ".tokens.bin")
    stamp = first.stat().st_mtime_ns
    resumed = prepare([tmp_path / "c.txt"], tok_dir, part, **kwargs)
    assert first.stat().st_mtime_ns == stamp  # finished shards are not redone
    assert resumed["shards"] == full["shards"]  # same checksums, counts and positions
    assert np.array_equal(np.load(part / "token_counts.npy"),
                          np.load(tmp_path / "full" / "token_counts.npy"))
    # other settings: started afresh
    again = prepare([tmp_path / "c.txt"], tok_dir, part, **{**kwargs, "shard_tokens": 10**6})
    assert len(again["shards"]) == 1


def test_an_output_inside_the_corpus_folder_is_not_read_by_the_next_run(tmp_path, tok_dir):
    from bertkit.pretraining.corpus import prepare_text

    corpus, texts = tmp_path / "corpus", tmp_path / "texts"
    for folder in (corpus, texts):
        folder.mkdir()
        write_corpus(folder / "c.txt", docs=40, seed=3)
    first = prepare([corpus], tok_dir, corpus / "data", workers=1, progress=False)
    assert prepare([corpus], tok_dir, corpus / "data", workers=1, progress=False) == first
    # `pretrain --data texts/ --out texts/run`: the run's own files are not corpus either
    run = texts / "run"
    made = prepare_text(texts, run / "data", tokenizer=tok_dir, leave_out=[run], progress=False)
    (run / "training_args.json").write_text(json.dumps({"lr": 0.001}, indent=2))
    assert prepare_text(texts, run / "data", tokenizer=tok_dir, leave_out=[run],
                        progress=False) == made


def test_worker_processes_give_the_same_shards(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=120, seed=4)
    kwargs = dict(chunk_bytes=3000, progress=False)
    one = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "one", workers=1, **kwargs)
    two = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "two", workers=2, **kwargs)
    assert one["shards"] == two["shards"]


def test_a_tokenizing_worker_starts_without_torch():
    """A spawned worker imports what unpickles its task: importing torch would cost each of
    them seconds (27 s before the first chunk on a 16-core machine)."""
    code = ("import sys, bertkit.pretraining.wordcache; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bad_input_is_one_clear_error(tmp_path, tok_dir):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("\n  \n\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("Kalo.\n\nCaf\xe9 mine.\n".encode("latin-1"))
    cases = [("empty.txt", "is empty"), ("blank.txt", r"blank.txt: no text \(only blank lines\)$"),
             ("latin1.txt", r"latin1.txt:3: not UTF-8"), ("missing.txt", "does not exist")]
    for name, message in cases:
        with pytest.raises(UserError, match=message):
            prepare([tmp_path / name], tok_dir, tmp_path / "out", workers=1, progress=False)
        assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="no manifest.json"):
        load_manifest(tmp_path)


def test_a_tokenizer_that_does_not_match_the_data_is_refused(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=5)
    prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", workers=1, progress=False)
    check_tokenizer(tmp_path / "data", tok_dir)  # the same one passes
    other = tmp_path / "other"
    other.mkdir()
    vocab = (tok_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    (other / "vocab.txt").write_text("\n".join(vocab[:-3]) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="does not match the data"):
        check_tokenizer(tmp_path / "data", other)


def test_cli_prepare(tmp_path, tok_dir, capsys):
    write_corpus(tmp_path / "c.txt", docs=20)
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer", str(tok_dir),
                 "--out", str(tmp_path / "a"), "--workers", "1"]) == 0
    assert "train" in capsys.readouterr().out
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\n")
    assert main(["prepare", "--input", str(tmp_path / "bad.txt"), "--tokenizer", str(tok_dir),
                 "--out", str(tmp_path / "b")]) == 2
    assert "bad.txt:2: not UTF-8" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_prepare_in_a_subprocess(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=20)
    exe = Path(sys.executable).parent / "bertkit"
    run = subprocess.run([str(exe), "prepare", "--input", str(tmp_path / "c.txt"),
                          "--tokenizer", str(tok_dir), "--out", str(tmp_path / "c"),
                          "--workers", "2", "--heldout", "0.1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "tokens/s" in run.stderr and (tmp_path / "c" / "manifest.json").is_file()


def test_real_corpus_word_cache_equals_direct_encoding(tmp_path, shared_data, minilm_dir):
    lines = (shared_data / "corpus" / "austen.txt").read_text(encoding="utf-8").split("\n")
    (tmp_path / "austen.txt").write_text("\n".join(lines[:1500]) + "\n", encoding="utf-8")
    m = prepare([tmp_path / "austen.txt"], minilm_dir, tmp_path / "data", workers=1,
                progress=False)
    assert m["tokenizer"]["word_cache"]  # the fast path was verified and used
    tok = Tokenizer.load(minilm_dir)
    text = [l.strip() for l in lines[:1500] if l.strip()]
    ref = np.concatenate([np.asarray(x, dtype=np.int64) for x in
                          tok.encode_batch(text, add_special_tokens=False).ids])
    assert np.array_equal(all_tokens(tmp_path / "data"), ref)


def test_unigram_tokenizer_uses_the_word_cache_exactly(tmp_path):
    from bertkit.text.vocab import train_tokenizer
    write_corpus(tmp_path / "c.txt", docs=60, seed=5)
    train_tokenizer([tmp_path / "c.txt"], vocab_size=300, kind="unigram",
                    out=tmp_path / "uni", progress=False)
    m = prepare([tmp_path / "c.txt"], tmp_path / "uni", tmp_path / "data", workers=1,
                progress=False)
    assert m["tokenizer"]["kind"] == "unigram" and m["tokenizer"]["word_cache"]
    tok = Tokenizer.load(tmp_path / "uni")
    lines = [l for l in (tmp_path / "c.txt").read_text(encoding="utf-8").split("\n") if l]
    ref = np.concatenate([np.asarray(x) for x in
                          tok.encode_batch(lines, add_special_tokens=False).ids])
    assert np.array_equal(all_tokens(tmp_path / "data"), ref)
    starts = np.load(tmp_path / "data" / "word_starts.npy")
    vocab = tok.get_vocab()
    assert all(starts[i] == p.startswith("\u2581") for p, i in vocab.items()
               if i not in tok.special_ids)


# Never lose a byte: a re-run, bad input, the user's files, shard checks ------------------------

def _snapshot(data: Path) -> dict[str, bytes]:
    return {p.relative_to(data).as_posix(): p.read_bytes() for p in sorted(data.rglob("*"))
            if p.is_file()}


def test_a_rerun_with_bad_input_keeps_the_previous_output(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=40, seed=5)
    kwargs = dict(shard_tokens=2000, chunk_bytes=4000, workers=1, progress=False)
    prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", **kwargs)
    before = _snapshot(tmp_path / "data")
    # the bad line comes late: shards are written before it is found
    lines = [json.dumps({"text": f"Kalo mine number {i} went to the pond."}) for i in range(400)]
    (tmp_path / "late.jsonl").write_text("\n".join(lines + ["{not json"]) + "\n",
                                         encoding="utf-8")
    with pytest.raises(UserError, match=r"late.jsonl:401: not valid JSON"):
        prepare([tmp_path / "late.jsonl"], tok_dir, tmp_path / "data", **kwargs)
    assert _snapshot(tmp_path / "data") == before  # every byte as it was, still usable
    assert load_split(tmp_path / "data", "train", verify=True).num_tokens > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "data", "late.jsonl"]


def test_a_rerun_keeps_the_users_files_and_drops_only_its_own(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=60, seed=6)
    kwargs = dict(chunk_bytes=4000, workers=1, progress=False)
    data = tmp_path / "data"
    old = prepare([tmp_path / "c.txt"], tok_dir, data, shard_tokens=2000, **kwargs)
    assert len(old["shards"]) >= 3
    (data / "shards" / "notes.csv").write_text("mine\n", encoding="utf-8")
    (data / "tokenizer" / "NOTES.txt").write_text("also mine\n", encoding="utf-8")
    (data / "README").write_text("about this corpus\n", encoding="utf-8")
    new = prepare([tmp_path / "c.txt"], tok_dir, data, shard_tokens=10**6, **kwargs)
    assert len(new["shards"]) == 1
    assert (data / "shards" / "notes.csv").read_text(encoding="utf-8") == "mine\n"
    assert (data / "tokenizer" / "NOTES.txt").read_text(encoding="utf-8") == "also mine\n"
    assert (data / "README").read_text(encoding="utf-8") == "about this corpus\n"
    shard_files = {p.name for p in (data / "shards").iterdir()} - {"notes.csv"}
    assert shard_files == {f"shard_00000.{suffix}" for suffix in
                           ("tokens.bin", "sentences.npy", "documents.npy", "heldout.npy",
                            "counts.npy", "json")}
    assert "shards/notes.csv" not in new["files"] and "shards/shard_00000.json" in new["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "data"]


def test_prepare_refuses_an_output_that_is_an_input(tmp_path, tok_dir):
    write_corpus(tmp_path / "c.txt", docs=5)
    before = _snapshot(tok_dir)
    with pytest.raises(UserError, match="is the tokenizer"):
        prepare([tmp_path / "c.txt"], tok_dir, tok_dir / ".." / tok_dir.name, progress=False)
    with pytest.raises(UserError, match="holds the corpus file"):
        prepare([tmp_path / "c.txt"], tok_dir, tmp_path, progress=False)
    assert _snapshot(tok_dir) == before


@pytest.mark.slow
def test_prepare_into_a_directory_in_use_is_refused(tmp_path, tok_dir):
    from bertkit.runlock import RunLock

    write_corpus(tmp_path / "c.txt", docs=5)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from bertkit.runlock import RunLock\n"
                               "with RunLock(sys.argv[1]):\n"
                               "    print('held', flush=True); time.sleep(60)",
                               str(tmp_path / "data")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError, match=rf"data is in use by pid {holder.pid} on "):
            prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", progress=False)
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path / "data"):  # the dead holder's lock is taken over
        pass


def test_an_interrupted_rerun_keeps_the_previous_output_and_resumes(tmp_path, tok_dir,
                                                                    monkeypatch, capsys):
    from bertkit.pretraining import shards

    write_corpus(tmp_path / "old.txt", docs=10, seed=7)
    write_corpus(tmp_path / "c.txt", docs=200, seed=8)
    kwargs = dict(shard_tokens=2000, chunk_bytes=4000, workers=1, progress=False)
    full = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "full", **kwargs)
    prepare([tmp_path / "old.txt"], tok_dir, tmp_path / "data", **kwargs)
    before = _snapshot(tmp_path / "data")
    close = shards.ShardWriter.close

    def interrupted_after_two(self):
        if self.index == 2:
            raise KeyboardInterrupt
        return close(self)

    monkeypatch.setattr(shards.ShardWriter, "close", interrupted_after_two)
    with pytest.raises(KeyboardInterrupt):
        prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", **kwargs)
    assert _snapshot(tmp_path / "data") == before  # the previous output, untouched
    assert (tmp_path / ".data.prepare" / "shards" / "shard_00001.json").is_file()
    monkeypatch.undo()
    capsys.readouterr()
    resumed = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "data", **kwargs)
    assert "resuming after 2 finished shard(s)" in capsys.readouterr().err
    assert resumed["shards"] == full["shards"]
    assert all_tokens(tmp_path / "data").tolist() == all_tokens(tmp_path / "full").tolist()
    assert not (tmp_path / ".data.prepare").exists()


def test_a_small_corpus_holds_out_its_share_not_one_tiny_document(tmp_path, tok_dir, capsys):
    """Of documents 0..99 the hash holds out none at 1.5%: the old rule then held out the
    smallest, a five-token document (evaluation said accuracy 0); now the documents whose hash
    came nearest make up the share asked."""
    docs = ["Kalo mine."] + [" ".join(f"Kalo mine {i} tuli {j}." for j in range(100))
                             for i in range(1, 100)]
    (tmp_path / "c.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    m = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "d", heldout_fraction=0.015,
                workers=1, progress=False)
    total = m["train"]["tokens"] + m["heldout"]["tokens"]
    assert 0.01 * total <= m["heldout"]["tokens"] <= 0.04 * total
    assert m["heldout"]["documents"] >= 2
    held = split_documents(tmp_path / "d", "heldout")
    assert min(sum(len(s) for s in d) for d in held) > 5
    assert "held-out split is only" not in capsys.readouterr().err


def test_a_corpus_too_small_to_hold_out_says_so(tmp_path, tok_dir, capsys):
    (tmp_path / "c.txt").write_text("Kalo mine tuli.\n\nMine kalo.\n\nTuli tuli kalo.\n",
                                    encoding="utf-8")
    m = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "d", workers=1, progress=False)
    assert m["heldout"]["documents"] == 1
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "held-out" in line] == [
        f"warning: {tmp_path / 'd'}: the held-out split is only {m['heldout']['tokens']} tokens "
        "(1 documents), too few for meaningful evaluation (under 1024); give more text or a "
        "larger --heldout"]
    prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "e", heldout_fraction=0.0, workers=1,
            progress=False)
    assert "held-out" not in capsys.readouterr().err  # none asked for, none missed


# One text file into a directory, once -------------------------------------------------------

def test_prepare_text_trains_a_vocabulary_once_and_finds_its_output_done(tmp_path, monkeypatch,
                                                                         capsys):
    from bertkit.pretraining import corpus as corpus_module
    from bertkit.text import vocab

    text = tmp_path / "corpus.txt"
    write_corpus(text, docs=60)
    manifest = corpus_module.prepare_text(text, tmp_path / "data", vocab_size=150,
                                          progress=False)
    tokenizer = Tokenizer.load(tmp_path / "data" / "tokenizer")
    assert 100 < tokenizer.vocab_size <= 150 and tokenizer.do_lower_case
    assert manifest["train"]["tokens"] > 0
    assert manifest["sources"][0]["path"] == str(text.resolve())
    assert not list(tmp_path.glob(".data*"))  # no build directory left behind

    def no_training(*args, **kwargs):
        raise AssertionError("the vocabulary was trained again")

    monkeypatch.setattr(vocab, "train_tokenizer", no_training)
    assert corpus_module.prepare_text(text, tmp_path / "data", vocab_size=150) == manifest
    assert "already prepared from" in capsys.readouterr().err

    # the same bytes with another modification time (touched, copied, checked out again):
    # still done, and the manifest a checkpoint's fingerprint hashes stays as it was
    hashed = (tmp_path / "data" / "manifest.json").read_bytes()
    stamp = text.stat().st_mtime_ns + 10**9
    os.utime(text, ns=(stamp, stamp))
    assert corpus_module.prepare_text(text, tmp_path / "data", vocab_size=150) == manifest
    assert (tmp_path / "data" / "manifest.json").read_bytes() == hashed
    # another request, or another file behind the same name, is prepared afresh
    with pytest.raises(AssertionError, match="trained again"):
        corpus_module.prepare_text(text, tmp_path / "data", vocab_size=140, progress=False)
    text.write_text(text.read_text().replace("a", "b"))  # same size, other bytes
    with pytest.raises(AssertionError, match="trained again"):
        corpus_module.prepare_text(text, tmp_path / "data", vocab_size=150, progress=False)
    text.write_text(text.read_text() + "One more line at the end.\n")
    with pytest.raises(AssertionError, match="trained again"):
        corpus_module.prepare_text(text, tmp_path / "data", vocab_size=150, progress=False)


def test_the_text_field_of_plain_text_is_not_part_of_its_request(tmp_path, tok_dir, capsys):
    # plain text is read line by line: another --text-field asks for the same directory, a
    # resumed run's (`keep`) included; a directory whose record names the field as earlier
    # versions wrote it is found done when the same field is given again
    from bertkit.pretraining.corpus import prepare_text
    from bertkit.pretraining.provenance import SOURCE_FILE

    text, data = tmp_path / "corpus.txt", tmp_path / "data"
    write_corpus(text, docs=30)
    made = prepare_text(text, data, tokenizer=tok_dir, text_field="body", progress=False)
    record = json.loads((data / SOURCE_FILE).read_text())
    assert "text_field" not in record
    for field in ("text", "title"):
        assert prepare_text(text, data, tokenizer=tok_dir, text_field=field, keep=True) == made
    (data / SOURCE_FILE).write_text(json.dumps({**record, "text_field": "body"}))
    assert prepare_text(text, data, tokenizer=tok_dir, text_field="body", keep=True) == made
    assert "text_field" not in json.loads((data / SOURCE_FILE).read_text())  # brought up to date
    assert capsys.readouterr().err.count("already prepared from") == 3

def test_prepare_text_with_a_given_tokenizer_and_its_bad_input(tmp_path, tok_dir):
    from bertkit.pretraining.corpus import prepare_text
    from bertkit.text.tokenizer import tokenizer_fingerprint

    text = tmp_path / "corpus.txt"
    write_corpus(text)
    manifest = prepare_text(text, tmp_path / "data", tokenizer=tok_dir, progress=False)
    assert manifest["tokenizer"]["fingerprint"] == tokenizer_fingerprint(Tokenizer.load(tok_dir))
    assert all_tokens(tmp_path / "data").size == manifest["train"]["tokens"] \
        + manifest["heldout"]["tokens"]

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"text": "A document."}) + "\n")
    # a vocabulary is trained on JSONL as on text (the reader is the same)
    trained = prepare_text(jsonl, tmp_path / "trained", vocab_size=100, progress=False)
    assert trained["train"]["documents"] + trained["heldout"]["documents"] == 1
    assert prepare_text(jsonl, tmp_path / "other", tokenizer=tok_dir,
                        progress=False)["train"]["documents"] == 1
    with pytest.raises(UserError, match=r"missing.txt: corpus file does not exist"):
        prepare_text(tmp_path / "missing.txt", tmp_path / "x")
    assert not (tmp_path / "x").exists()


# Several corpora into their own directories, one tokenizer ------------------------------------

def _files(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_prepare_corpora_shares_one_vocabulary_and_finds_everything_done(tmp_path, monkeypatch):
    from bertkit.pretraining import corpus as corpus_module
    from bertkit.pretraining.corpus import prepare_corpora
    from bertkit.text.tokenizer import tokenizer_fingerprint
    from bertkit.text import vocab

    texts, other = tmp_path / "texts", tmp_path / "b.txt"
    texts.mkdir()
    write_corpus(texts / "a.txt", docs=40, seed=1)
    write_corpus(other, docs=40, seed=2)
    run = texts / "run"  # a run inside a corpus folder: what it writes is never corpus
    outs = [run / "data" / "1-texts", run / "data" / "2-b"]
    kwargs = dict(vocabulary=run / "data" / "vocabulary", vocab_size=150, leave_out=[run],
                  progress=False)
    made = prepare_corpora([texts, other], outs, **kwargs)
    shared = tokenizer_fingerprint(Tokenizer.load(run / "data" / "vocabulary"))
    assert [m["tokenizer"]["fingerprint"] for m in made] == [shared, shared]
    assert [[s["path"] for s in m["sources"]] for m in made] == [
        [str((texts / "a.txt").resolve())], [str(other.resolve())]]

    def no_training(*args, **kwargs):
        raise AssertionError("trained or prepared again")

    monkeypatch.setattr(vocab, "train_tokenizer", no_training)
    monkeypatch.setattr(corpus_module, "prepare", no_training)
    assert prepare_corpora([texts, other], outs, **kwargs, keep=True) == made
    # other text, resuming: refused before anything is trained or replaced
    before = _files(run)
    with pytest.raises(UserError, match=re.escape(f"({other}: file 2 when it was made, 1 "
                                                  f"now: the same text in another order)")):
        prepare_corpora([other, texts], outs, **kwargs, keep=True)
    other.write_text(other.read_text() + "One more sentence.\n")
    with pytest.raises(UserError, match=r"vocabulary: this run's vocabulary was trained on "
                                        r"other text than it is given now \(" + re.escape(
                                            f"{other}: not the bytes it was made from)")):
        prepare_corpora([texts, other], outs, **kwargs, keep=True)  # b.txt named, not a.txt
    assert _files(run) == before
    with pytest.raises(UserError, match=r"\(3 file\(s\), 2 when it was made\)"):
        prepare_corpora([texts, other, other], [*outs, run / "data" / "3-b"], **kwargs,
                        keep=True)


def test_prepare_corpora_that_fails_leaves_nothing_it_made(tmp_path, tok_dir, monkeypatch):
    from bertkit.pretraining import corpus as corpus_module
    from bertkit.pretraining.corpus import prepare_corpora

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    write_corpus(a, docs=30, seed=1)
    write_corpus(b, docs=30, seed=2)
    real, calls = corpus_module.prepare, []

    def second_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise UserError("no space left on the device")
        return real(*args, **kwargs)

    monkeypatch.setattr(corpus_module, "prepare", second_fails)
    run = tmp_path / "run"
    run.mkdir()
    for given in ({"tokenizer": tok_dir}, {"vocabulary": run / "data" / "vocabulary"}):
        calls.clear()
        with pytest.raises(UserError, match="no space left"):
            prepare_corpora([a, b], [run / "data" / "1-a", run / "data" / "2-b"],
                            vocab_size=150, progress=False, **given)
        assert len(calls) == 2 and list(run.iterdir()) == []


def test_prepare_corpora_resuming_on_other_text_is_refused_before_reading_it(tmp_path, tok_dir,
                                                                            monkeypatch):
    from bertkit.pretraining.corpus import prepare_corpora
    from bertkit.text import vocab

    texts = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for seed, text in enumerate(texts):
        write_corpus(text, docs=30, seed=seed)
    outs = [tmp_path / "data" / "1-a", tmp_path / "data" / "2-b"]
    prepare_corpora(texts, outs, tokenizer=tok_dir, progress=False)
    before = _files(tmp_path / "data")
    for text in texts:
        text.write_text(text.read_text() + "One more sentence.\n")

    def read(*args, **kwargs):
        raise AssertionError("the text was read through first")

    monkeypatch.setattr(vocab, "count_text", read)
    with pytest.raises(UserError, match=r"1-a: this run's data was prepared from other text"):
        prepare_corpora(texts, outs, tokenizer=tok_dir, progress=False, keep=True)
    assert _files(tmp_path / "data") == before


def test_prepare_text_resumed_with_another_text_field_is_refused_naming_it(tmp_path, tok_dir):
    from bertkit.pretraining.corpus import prepare_text

    docs = write_corpus(tmp_path / "scratch.txt", docs=30, seed=4)
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"text": "\n".join(d), "body": d[0]}) + "\n"
                             for d in docs), encoding="utf-8")
    out = tmp_path / "run" / "data"
    prepare_text(jsonl, out, tokenizer=tok_dir, progress=False)
    before = _files(out)
    with pytest.raises(UserError, match=r"data: this run's data was prepared from other text "
                                        r".*\(text field 'body' now, 'text' when it was made\)"):
        prepare_text(jsonl, out, tokenizer=tok_dir, text_field="body", progress=False, keep=True)
    assert _files(out) == before
