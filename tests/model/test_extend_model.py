"""A model whose vocabulary grows: each new row the mean of its old pieces' rows in the
embeddings and the decoder bias, every other weight unchanged, and the directory loaded by
transformers (AutoTokenizer with bertkit's ids, AutoModelForMaskedLM with no missing or
mismatched keys and bertkit's logits), for both architectures and both kinds of vocabulary;
the command line end to end, and its refusals."""
from __future__ import annotations

import random

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model import hub
from bertkit.model.create import new_pretraining_model
from bertkit.model.extend import extend_vocabulary
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.vocab import train_tokenizer

SYLLABLES = ["ka", "lo", "mé", "ri", "tsu", "an", "be", "zo", "qué", "ön"]
LONG = ["kalomérian", "tsubezoqué", "önkaritsu", "zoqué’an", "Bekalo", "ribeanzo"]


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _corpus(path, seed=0):
    rng = random.Random(seed)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(80)]
    return _write(path, (" ".join(rng.choices(words, k=rng.randint(3, 12))) + "."
                         for _ in range(300)))


def _domain(path, seed=1):
    rng = random.Random(seed)
    return _write(path, (" ".join(rng.choices(LONG + ["ka", "lo"], k=8)) for _ in range(30)))


def _model_dir(tmp_path, architecture, kind, extra_rows=0):
    """A tiny model of `architecture` with a trained `kind` vocabulary, its biases and norms
    moved off their initial values so that a row in the wrong place shows."""
    tok = train_tokenizer([_corpus(tmp_path / "corpus.txt")], vocab_size=90, kind=kind,
                          progress=False)
    cfg = EncoderConfig(architecture=architecture, vocab_size=tok.vocab_size + extra_rows,
                        hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48,
                        max_positions=64, hidden_dropout=0.0, attention_dropout=0.0)
    model = new_pretraining_model(cfg, seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    tok.model_max_length = 64
    return hub.save_model(model, tmp_path / "model", tokenizer=tok)


CASES = [("bert", "wordpiece"), ("modern", "wordpiece"), ("modern", "unigram")]


@pytest.mark.parametrize("architecture,kind", CASES)
def test_new_rows_are_the_mean_of_their_old_pieces(tmp_path, architecture, kind):
    source = _model_dir(tmp_path, architecture, kind)
    result = extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 4, tmp_path / "out",
                               progress=False)
    old, new = hub.load_weights(source), hub.load_weights(tmp_path / "out")
    V = result.first_id
    # the corpus has no apostrophe: "zoqué’an" held an [UNK], now the piece "'" (no "##'":
    # punctuation is a word of its own), whose rows are [UNK]'s
    assert [(c.char, c.count, c.pieces) for c in result.chars] == [("'", 29, ("'",))]
    assert result.vocab_size == (V, V + 5) and len(result.words) == 4
    assert result.pieces[1] < result.pieces[0] and result.unknown == (29, 0)
    rows = [k for k in old if "word" in k or "tok_embeddings" in k or k.endswith("bias")
            and old[k].shape == (V,)]
    assert len(rows) == 2  # the embeddings and the decoder bias (its weight is tied)
    for name in old:
        if name not in rows:
            assert torch.equal(new[name], old[name]), name
            continue
        assert new[name].shape[0] == V + 5
        assert torch.equal(new[name][:V], old[name])
        assert torch.equal(new[name][V], old[name][1])  # [UNK]'s
        for i, w in enumerate(result.words):
            torch.testing.assert_close(new[name][V + 1 + i], new[name][list(w.pieces)].mean(0))
    tok = Tokenizer.load(tmp_path / "out")
    for i, w in enumerate(result.words):
        assert tok.encode(w.word.lstrip("\u2581")).ids[1:-1] == [V + 1 + i]
    assert tok.token_to_id("'") == V
    assert hub.load_config(tmp_path / "out").vocab_size == V + 5


@pytest.mark.parametrize("architecture,kind", CASES)
def test_extended_model_equals_transformers(tmp_path, architecture, kind):
    transformers = pytest.importorskip("transformers")
    source = _model_dir(tmp_path, architecture, kind)
    domain = _domain(tmp_path / "d.txt")
    result = extend_vocabulary(source, [domain], 5, tmp_path / "out", progress=False)
    theirs, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert not info["unexpected_keys"] or architecture == "bert"  # BertForPreTraining's NSP
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    ours_tok = Tokenizer.load(tmp_path / "out")
    texts = domain.read_text(encoding="utf-8").splitlines()[:6] + [
        " ".join(w.word.lstrip("\u2581") for w in result.words) + " [MASK] ka"]
    batch = hf_tok(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == ours_tok(texts).input_ids.tolist()
    assert (batch["input_ids"] >= result.first_id + 1).any()  # the new words are read
    assert (batch["input_ids"] == result.first_id).any()  # and the new character "'"
    ours = hub.load_pretraining_model(tmp_path / "out")
    theirs.eval()
    with torch.no_grad():
        ref = theirs(input_ids=batch["input_ids"],
                     attention_mask=batch["attention_mask"]).logits
        logits = ours(batch["input_ids"], None, batch["attention_mask"])[0]
    keep = batch["attention_mask"].bool()
    assert logits.shape[-1] == result.vocab_size[1]
    torch.testing.assert_close(logits[keep], ref[keep], atol=1e-4, rtol=1e-4)


def test_unused_rows_of_a_padded_vocabulary_are_taken_first(tmp_path):
    source = _model_dir(tmp_path, "modern", "wordpiece", extra_rows=3)
    result = extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 5, tmp_path / "out",
                               progress=False)
    V = result.first_id
    assert result.vocab_size == (V + 3, V + 6)  # the piece "'" and 5 words
    old, new = hub.load_weights(source), hub.load_weights(tmp_path / "out")
    name = "model.embeddings.tok_embeddings.weight"
    torch.testing.assert_close(new[name][V], old[name][1])
    torch.testing.assert_close(new[name][V + 2], old[name][list(result.words[1].pieces)].mean(0))


def test_a_sentence_transformers_directory_stays_one(tmp_path):
    """all-MiniLM-L6-v2 extended still pools, normalizes and cuts as it did: its pipeline
    (modules.json, sentence_bert_config.json, the module folders) comes along as it was."""
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.sentence_model import sentence_model_files

    source = _model_dir(tmp_path, "bert", "wordpiece")
    files = sentence_model_files(("cls",), True, 16, 32, lowercase=True)
    for name, data in files.items():
        (source / name).parent.mkdir(exist_ok=True)
        (source / name).write_bytes(data)
    extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 3, tmp_path / "out", progress=False)
    assert {n: (tmp_path / "out" / n).read_bytes() for n in files} == files
    embedder = Embedder.load(tmp_path / "out")
    assert (embedder.pool, embedder.normalize, embedder.max_length) == (("cls",), True, 16)
    for name in files:  # the plain model extended into the same --out is a plain model again
        (source / name).unlink()
    extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 3, tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "modules.json").exists()


def test_command_line_end_to_end(tmp_path, capsys):
    source = _model_dir(tmp_path, "bert", "wordpiece")
    domain = _domain(tmp_path / "d.txt")
    out = tmp_path / "grown"
    assert main(["tokenizer", "extend", "--model", str(source), "--input", str(domain),
                 "--add", "3", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"{out}: 1 character and 3 words added to the wordpiece vocabulary (4 pieces, ids " \
        f"90-93; model rows 90 -> 94)" in printed and "% fewer), 0 of them [UNK] instead of 29" \
        in printed and "\n  characters: ' (29 x: ')\n" in printed
    first = Tokenizer.load(out).id_to_token(91)
    assert f"\n  words: {first} (" in printed
    assert main(["tokenize", "--model", str(out), f"{first.upper()} ka"]) == 0
    count, tokens, ids = capsys.readouterr().out.strip().split("\t")
    assert tokens.split()[1] == first and ids.split()[1] == "91"
    assert main(["tokenize", "--model", str(source), first]) == 0
    assert int(capsys.readouterr().out.split("\t")[0]) > 3  # several pieces before
    assert load_file(str(out / "model.safetensors"))["bert.embeddings.word_embeddings.weight"] \
        .shape[0] == hub.load_config(out).vocab_size == 94


def test_the_model_card_is_kept_and_says_what_was_extended(tmp_path, monkeypatch, capsys):
    """README.md of --out: the source's card as it was, then a section saying what was added,
    from which input, and the command that does it again; no date, so the same command writes
    the same card. A source without a card gets the section alone; extended again, a second
    section."""
    import re

    source = _model_dir(tmp_path, "bert", "wordpiece")
    card = "---\nlicense: apache-2.0\ntags:\n- bert\n---\n\n# A tiny model\n\nSyllables.\n"
    (source / "README.md").write_text(card, encoding="utf-8")
    _domain(tmp_path / "d.txt")
    monkeypatch.chdir(tmp_path)

    def extend(model: str, out: str) -> str:
        assert main(["tokenizer", "extend", "--model", model, "--input", "d.txt", "--add", "3",
                     "--out", out, "--quiet"]) == 0
        return (tmp_path / out / "README.md").read_text(encoding="utf-8")

    written = extend("model", "out")
    assert written.startswith(card) and written.count("---\n") == 2  # front matter first
    section = written[len(card):]
    assert "## Vocabulary extended" in section and "`model`" in section
    assert "3 words and 1 character" in section and "`d.txt`" in section
    assert "ids 90-93" in section and "90 -> 94" in section
    assert "bertkit tokenizer extend --model model --input d.txt --add 3" in section
    assert not re.search(r"\b20\d\d\b", section)  # no date: the same command, the same card
    assert extend("model", "out") == written
    (source / "README.md").unlink()
    assert extend("model", "out") == section.lstrip("\n").replace(
        " The card above is `model`'s.", "")
    (source / "README.md").write_text(card, encoding="utf-8")
    assert extend("model", "out") == written
    assert extend("out", "twice").startswith(written)
    assert (tmp_path / "twice" / "README.md").read_text().count("## Vocabulary extended") == 2
    (source / "README.md").write_bytes(b"# caf\xe9\n")  # Latin-1: refused, nothing written
    assert main(["tokenizer", "extend", "--model", "model", "--input", "d.txt", "--add", "3",
                 "--out", "latin", "--quiet"]) == 2
    assert "model/README.md: the model card is not UTF-8 text (byte 5)" in capsys.readouterr().err
    assert not (tmp_path / "latin").exists()


def test_the_domain_text_comes_in_any_shape_prepare_reads(tmp_path, capsys):
    """Gzipped JSON lines by a glob, the text in --text-field: the words counted are those of
    the field alone (the other fields' numbers and names are no words of the domain), the
    same as from the text as a plain file."""
    import gzip
    import json

    source = _model_dir(tmp_path, "bert", "wordpiece")
    lines = _domain(tmp_path / "d.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "j").mkdir()
    for part in (0, 1):
        with gzip.open(tmp_path / "j" / f"part{part}.jsonl.gz", "wt", encoding="utf-8") as f:
            for i, line in enumerate(lines[part::2]):
                f.write(json.dumps({"body": line, "score": 0.557894737 + i,
                                    "kalomérian": "tsubezoqué"}) + "\n")
    printed = []
    for out, given in (("plain", [str(tmp_path / "d.txt")]),
                       ("json", [str(tmp_path / "j" / "*.jsonl.gz"), "--text-field", "body"])):
        assert main(["tokenizer", "extend", "--model", str(source), "--input", *given,
                     "--add", "4", "--out", str(tmp_path / out), "--quiet"]) == 0
        printed.append(capsys.readouterr().out.split(": ", 1)[1])
    assert printed[0] == printed[1]
    assert "557894737" not in printed[1] and "score" not in printed[1]
    assert main(["tokenizer", "extend", "--model", str(source), "--input",
                 str(tmp_path / "j"), "--add", "4", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert 'part0.jsonl.gz:1: no field "text"' in err and "--text-field" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args,message", [
    (["--input", "missing.txt"], "missing.txt: domain text does not exist"),
    (["--add", "-1"], "--add must be 0 or more"),
    (["--add", "0", "--max-chars", "0"], "--add 0 and --max-chars 0: nothing asked for"),
    (["--add", "0", "--input", "nothing.txt"], "nothing.txt: no word seen 2+ times"),
    (["--input", "bad.txt"], "bad.txt:2: not UTF-8"),
    (["--input", "nothing.txt"], "nothing.txt: no word seen 2+ times"),
    (["--out", "model"], "is the --model"),
    (["--model", "corpus.txt"], "corpus.txt: is a file, expected a model directory"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, args,
                                                  message):
    _model_dir(tmp_path, "modern", "wordpiece")
    _domain(tmp_path / "d.txt")
    (tmp_path / "bad.txt").write_bytes("kalomérian kalomérian\n".encode() + b"\xff\n")
    _write(tmp_path / "nothing.txt", ["ka lo ka lo", "unseen"])
    monkeypatch.chdir(tmp_path)
    given = {"--model": "model", "--input": "d.txt", "--add": "4", "--out": "out"}
    given.update(zip(args[::2], args[1::2]))
    assert main(["tokenizer", "extend", "--quiet", *(x for kv in given.items() for x in kv)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.txt", "corpus.txt", "d.txt", "model", "nothing.txt"]


def test_a_fine_tuned_model_is_refused(tmp_path):
    """Its task head and bertkit_task.json would not come along: the result would be a bare
    encoder (or a classifier with [CLS] pooling where it was trained with the mean)."""
    source = _model_dir(tmp_path, "bert", "wordpiece")
    (source / "bertkit_task.json").write_text('{"task": "classify"}', encoding="utf-8")
    with pytest.raises(UserError, match="model: a fine-tuned task model, not a BERT encoder"):
        extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 3, tmp_path / "out",
                          progress=False)
    assert not (tmp_path / "out").exists()


def test_encoder_without_embeddings_is_refused(tmp_path):
    source = _model_dir(tmp_path, "modern", "wordpiece")
    weights = hub.load_weights(source)
    weights.pop("model.embeddings.tok_embeddings.weight")
    from safetensors.torch import save_file
    save_file(weights, str(source / "model.safetensors"))
    with pytest.raises(UserError, match="no word embeddings of 90 rows"):
        extend_vocabulary(source, [_domain(tmp_path / "d.txt")], 3, tmp_path / "out",
                          progress=False)


def test_max_chars_zero_adds_words_alone(tmp_path, capsys):
    source = _model_dir(tmp_path, "bert", "wordpiece")
    assert main(["tokenizer", "extend", "--model", str(source), "--input",
                 str(_domain(tmp_path / "d.txt")), "--add", "3", "--max-chars", "0",
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "0 characters and 3 words added to the wordpiece vocabulary (3 pieces, ids 90-92" \
        in printed and "29 of them [UNK] instead of 29" in printed
    assert "characters:" not in printed
    assert main(["tokenizer", "extend", "--model", str(source), "--input",
                 str(_domain(tmp_path / "d.txt")), "--add", "0", "--out", str(tmp_path / "c"),
                 "--quiet"]) == 0  # characters alone
    assert "1 character and 0 words added to the wordpiece vocabulary (1 piece, ids 90-90" \
        in capsys.readouterr().out
    assert Tokenizer.load(tmp_path / "c").vocab_size == 91
    assert main(["tokenizer", "extend", "--model", str(source), "--input",
                 str(_domain(tmp_path / "d.txt")), "--add", "3", "--max-chars", "-1",
                 "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "--max-chars must be 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_minilm_reads_the_emoji_it_lacked(tmp_path, minilm_dir):
    """all-MiniLM-L6-v2 (uncased BERT vocabulary) reads an emoji, and any word holding one,
    as [UNK]; extended, it reads them as pieces whose rows start as [UNK]'s, every old id and
    row kept, and transformers reads the directory with bertkit's ids."""
    transformers = pytest.importorskip("transformers")
    domain = _write(tmp_path / "d.txt", ["great moviegoers 😀", "loved it😀😀", "so sad 😢",
                                         "😢 boring", "paid 5₿ for it", "₿ is up"] * 2)
    result = extend_vocabulary(minilm_dir, [domain], 1, tmp_path / "out", progress=False)
    V = result.first_id
    assert [(c.char, c.pieces) for c in result.chars] == [
        ("😀", ("😀", "##😀")), ("₿", ("₿", "##₿")), ("😢", ("😢", "##😢"))]
    assert result.unknown == (12, 0) and [w.word for w in result.words] == ["moviegoers"]
    old, new = hub.load_weights(minilm_dir), hub.load_weights(tmp_path / "out")
    name = "embeddings.word_embeddings.weight"
    assert torch.equal(new[name][:V], old[name])
    assert torch.equal(new[name][V:V + 6], old[name][[100] * 6])  # [UNK]'s row
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    ours, before = Tokenizer.load(tmp_path / "out"), Tokenizer.load(minilm_dir)
    texts = ["Great movie😀!", "😢😀 ₿5 5₿", "A plain sentence, [MASK] nothing new."]
    assert [hf(t)["input_ids"] for t in texts] == [ours.encode(t).ids for t in texts]
    assert ours.encode(texts[0]).tokens == ["[CLS]", "great", "movie", "##😀", "!", "[SEP]"]
    assert ours.encode(texts[2]).ids == before.encode(texts[2]).ids
    card = (minilm_dir / "README.md").read_text(encoding="utf-8")
    assert (tmp_path / "out" / "README.md").read_text(encoding="utf-8").startswith(card)
    model, info = transformers.AutoModel.from_pretrained(tmp_path / "out",
                                                         output_loading_info=True)
    assert not info["missing_keys"] and model.config.vocab_size == V + 7
