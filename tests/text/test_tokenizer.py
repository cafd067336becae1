"""The tokenizer against transformers' BertTokenizerFast on MiniLM's real vocabulary, and the
round trip of our own saved tokenizers through transformers' AutoTokenizer."""
from __future__ import annotations

import json
import random
import shutil
import warnings

import pytest
import torch

from bertkit.files import UserError
from bertkit.text.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertkit.text.vocab import train_tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    "Hello, world! This is a plain sentence.",
    "Crème brûlée, naïve café, Ångström, São Paulo, Straße, İstanbul",
    "中文字符和日本語のテキスト、한국어도 섞여 있다",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and ♥ ★",
    "control\x00chars\x07 bell\x1b escape\u200bzero\u200dwidth\ufeffbom",
    "see https://example.com/path?q=1&r=two#frag or mail me@example.org",
    "a" * 150 + " supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    "  leading   and\ttabs\nnewline\r\n  trailing \u00a0nbsp\u3000ideographic  ",
    "",
    "The capital of France is [MASK]. Numbers 3.14159 and 1,000,000 and 2nd!!!",
    "UPPER lower MiXeD cAsE ÉCOLE",
    "العربية والعبرית עברית; हिन्दी भाषा; ελληνικά; русский текст",
    "don't can't it's rock'n'roll — em-dash … ellipsis «quotes» „more“",
]


def hf_fields(hf, texts, pairs=None, **kw):
    """transformers' encodings as our field names, one dict per item."""
    args = (texts,) if pairs is None else (texts, pairs)
    out = hf(*args, return_offsets_mapping=True, **kw)
    return [{"ids": out["input_ids"][i], "type_ids": out["token_type_ids"][i],
             "attention_mask": out["attention_mask"][i],
             "offsets": [tuple(o) for o in out["offset_mapping"][i]],
             "word_ids": out.word_ids(i),
             "tokens": hf.convert_ids_to_tokens(out["input_ids"][i])}
            for i in range(len(texts))]


def ours_fields(batch):
    return [{"ids": e.ids, "type_ids": e.type_ids, "attention_mask": e.attention_mask,
             "offsets": e.offsets, "word_ids": e.word_ids, "tokens": e.tokens} for e in batch]


@pytest.fixture(scope="module")
def minilm_tokenizers(minilm_dir):
    return Tokenizer.load(minilm_dir), transformers.BertTokenizerFast.from_pretrained(minilm_dir)


def test_singles_match_bert_tokenizer_fast(minilm_tokenizers):
    ours, hf = minilm_tokenizers
    assert ours_fields(ours.encode_batch(TEXTS)) == hf_fields(hf, TEXTS)
    assert ours.encode(TEXTS[3]).ids == hf(TEXTS[3])["input_ids"]
    assert ours.vocab_size == 30522 and ours.kind == "wordpiece"
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 100, 101,
                                                                                102, 103)


def test_pairs_truncation_and_padding_match(minilm_tokenizers):
    ours, hf = minilm_tokenizers
    firsts, seconds = TEXTS, TEXTS[::-1]
    assert ours_fields(ours.encode_batch(firsts, seconds)) == hf_fields(hf, firsts, seconds)
    for padding in ("longest", "max_length"):
        got = ours.encode_batch(firsts, seconds, max_length=24, padding=padding)
        assert ours_fields(got) == hf_fields(hf, firsts, seconds, max_length=24,
                                             truncation="longest_first", padding=padding)
        want = hf(firsts, seconds, max_length=24, truncation=True, padding=padding,
                  return_tensors="pt")
        tensors = got.as_tensors()
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            assert torch.equal(getattr(tensors, name), want[name]), (padding, name)
    # One pair at a time, so that a strategy that cannot cut a pair fails alike on both sides.
    for strategy in ("longest_first", "only_first", "only_second"):
        for max_length in (8, 20):
            for a, b in zip(firsts, seconds):
                try:
                    want = hf_fields(hf, [a], [b], max_length=max_length, truncation=strategy)
                except Exception:
                    with pytest.raises(UserError, match="cannot truncate"):
                        ours.encode(a, b, max_length=max_length, truncation=strategy)
                    continue
                got = ours_fields([ours.encode(a, b, max_length=max_length,
                                               truncation=strategy)])
                assert got == want, (strategy, max_length, a, b)
    for strategy in ("longest_first", "only_first"):
        assert ours_fields(ours.encode_batch(TEXTS, max_length=7, truncation=strategy)) == \
            hf_fields(hf, TEXTS, max_length=7, truncation=strategy)


def test_vocab_txt_alone_matches(minilm_dir, tmp_path, minilm_tokenizers):
    shutil.copy(minilm_dir / "vocab.txt", tmp_path / "vocab.txt")
    ours = Tokenizer.load(tmp_path)
    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert ours_fields(ours.encode_batch(TEXTS, TEXTS[::-1])) == \
        hf_fields(hf, TEXTS, TEXTS[::-1])
    assert ours_fields(ours.encode_batch(TEXTS)) == ours_fields(minilm_tokenizers[0].encode_batch(TEXTS))
    # tokenizer_config.json's flags are honoured as BertTokenizerFast honours them.
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    cased, hf_cased = Tokenizer.load(tmp_path), \
        transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert ours_fields(cased.encode_batch(TEXTS)) == hf_fields(hf_cased, TEXTS)
    assert cased.encode("Hello").tokens != ours.encode("Hello").tokens


def test_decode_merges_pieces(minilm_tokenizers):
    ours, hf = minilm_tokenizers
    text = "unbelievable tokenization of hyperparameters, isn't it?"
    ids = ours.encode(text).ids
    assert any(t.startswith("##") for t in ours.encode(text).tokens)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True) == \
        "unbelievable tokenization of hyperparameters, isn't it?".replace("n't", "n ' t")
    assert ours.decode(torch.tensor(ids), skip_special_tokens=False).startswith("[CLS] ")
    assert ours.decode_batch([ids, ids[:3]]) == [ours.decode(ids), ours.decode(ids[:3])]


def test_over_long_text_without_truncation_names_the_input(minilm_tokenizers):
    ours, _ = minilm_tokenizers
    with pytest.raises(UserError, match=r"input 2: \d+ tokens, longer than max_length 5"):
        ours.encode_batch(["short", "this one is far too long"], max_length=5, truncation=False)
    with pytest.raises(UserError, match=r"notes.txt:7: \d+ tokens"):
        ours.encode_batch(["this one is far too long"], max_length=5, truncation=False,
                          names=["notes.txt:7"])
    assert len(ours.encode("this one is far too long", max_length=5)) == 5


def test_batch_views_agree(minilm_tokenizers):
    ours, _ = minilm_tokenizers
    batch = ours.encode_batch(TEXTS, padding="longest")
    flat, lengths = batch.flat_ids()
    assert lengths.tolist() == [sum(e.attention_mask) for e in batch]
    assert flat.tolist() == [i for e in batch for i, m in zip(e.ids, e.attention_mask) if m]
    t = ours(TEXTS)
    assert t.input_ids.tolist() == batch.ids and t.input_ids.dtype == torch.long
    assert t.attention_mask.sum(1).tolist() == lengths.tolist()
    assert not t.token_type_ids.any()
    words = ours.encode(["Crème", "brûlée", "x"], is_split_into_words=True)
    assert words.word_ids[0] is None and max(w for w in words.word_ids if w is not None) == 2


def _write_corpus(path, n=400, seed=0):
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mé", "ri", "tsu", "an", "be", "Zo", "qué", "ön", "str", "ing"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(300)]
    path.write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(3, 15))) + rng.choice(
        [".", "!", "?", ","]) for _ in range(n)) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind,cased,plain_quotes", [
    ("wordpiece", False, True), ("wordpiece", True, True), ("wordpiece", False, False),
    ("unigram", False, True)])
def test_trained_tokenizer_loads_in_auto_tokenizer(tmp_path, kind, cased, plain_quotes):
    corpus = _write_corpus(tmp_path / "corpus.txt")
    with corpus.open("a", encoding="utf-8") as f:  # quotes typed both ways
        f.write("kalo's \"ri\" an ‘lo’\n“be” kalo’s an 'lo'\n" * 3)
    ours = train_tokenizer([corpus], vocab_size=300, kind=kind, cased=cased,
                           plain_quotes=plain_quotes, out=tmp_path / "tok", progress=False)
    assert [ours.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert ours.plain_quotes == plain_quotes
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    if kind == "wordpiece" and not plain_quotes:
        assert type(hf).__name__ in ("BertTokenizer", "BertTokenizerFast")
    texts = corpus.read_text(encoding="utf-8").splitlines()[:20] + [
        "Kalo MÉRI tsuan [MASK] unseenword ✓", "", "“Kalo’s” ‘ri’, „an‟ and \"kalo's\""]
    pairs = texts[::-1]
    assert ours_fields(ours.encode_batch(texts, pairs)) == hf_fields(hf, texts, pairs)
    loaded = Tokenizer.load(tmp_path / "tok")
    assert ours_fields(loaded.encode_batch(texts)) == ours_fields(ours.encode_batch(texts))
    assert loaded.plain_quotes == plain_quotes
    typed = ours.encode("“kalo’s” ‘ri’"), ours.encode('"kalo\'s" \'ri\'')
    assert (typed[0].ids == typed[1].ids) == plain_quotes
    assert [(a, b) for a, b in typed[0].offsets] == [(a, b) for a, b in typed[1].offsets]
    vocab = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == [ours.id_to_token(i) for i in range(ours.vocab_size)]
    assert ours.encode("KALO").tokens[1:-1] != ours.encode("kalo").tokens[1:-1] or not cased
    assert ours.encode("ka [MASK] lo").ids.count(ours.mask_id) == 1
    (tmp_path / "tok" / "tokenizer.json").unlink()
    if kind == "unigram":  # its scores live only in tokenizer.json
        with pytest.raises(UserError, match="no tokenizer.json"):
            Tokenizer.load(tmp_path / "tok")
    elif plain_quotes:  # and so does the quote step
        with pytest.raises(UserError, match="vocab.txt alone describes only a BERT"):
            Tokenizer.load(tmp_path / "tok")
    else:
        assert ours_fields(Tokenizer.load(tmp_path / "tok").encode_batch(texts, pairs)) == \
            ours_fields(ours.encode_batch(texts, pairs))


def test_vocabulary_without_special_tokens_is_refused(tmp_path, minilm_dir):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "vocab.txt").write_text("[UNK]\nhello\nworld\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"a/vocab.txt: vocabulary lacks .*\[PAD\].*\[MASK\]"):
        Tokenizer.load(tmp_path / "a")
    (tmp_path / "b").mkdir()
    spec = json.loads((minilm_dir / "tokenizer.json").read_text(encoding="utf-8"))
    del spec["model"]["vocab"]["[MASK]"]
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "[MASK]"]
    (tmp_path / "b" / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(UserError, match=r"b/tokenizer.json: vocabulary lacks .*\[MASK\]"):
        Tokenizer.load(tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\n")
    with pytest.raises(UserError, match=r"c/vocab.txt:3: not UTF-8"):
        Tokenizer.load(tmp_path / "c")
    with pytest.raises(UserError, match="no tokenizer.json or vocab.txt"):
        Tokenizer.load(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        Tokenizer.load(tmp_path / "missing")


@pytest.mark.parametrize("config, message", [
    ("[1]", "tokenizer_config.json: expected a JSON object, got list"),
    ('{"do_lower_case": "yes"}', "tokenizer_config.json: do_lower_case should be true or false, "
                                 "not 'yes'"),
    ('{"strip_accents": 0}', "strip_accents should be true or false, not 0"),
    ('{"model_max_length": ', r"tokenizer_config.json:1: not valid JSON"),
])
def test_a_bad_tokenizer_config_names_the_file(tmp_path, config, message):
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS) + "\nriver\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(config, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"strip_accents": null}', encoding="utf-8")
    assert Tokenizer.load(tmp_path).encode("river").tokens == ["[CLS]", "river", "[SEP]"]


def test_a_batchs_tensors_unpack_as_a_mapping_as_transformers_inputs_do(tmp_path):
    """`model(**tok.encode_batch(...).as_tensors())` and `inputs["input_ids"]`, as with a
    transformers BatchEncoding (the named tuple took neither: "argument after ** must be a
    mapping"); it stays a tuple of three tensors."""
    _write_corpus(tmp_path / "c.txt")
    tok = train_tokenizer([tmp_path / "c.txt"], vocab_size=200)
    inputs = tok.encode_batch(["a short one", "and a longer text here"],
                              padding="longest").as_tensors()
    assert list(inputs.keys()) == ["input_ids", "token_type_ids", "attention_mask"]
    assert inputs["attention_mask"] is inputs.attention_mask and inputs[0] is inputs.input_ids
    assert dict(inputs).keys() == inputs._asdict().keys()
    assert dict(**inputs)["input_ids"].shape == inputs.input_ids.shape
    assert [name for name, _ in inputs.items()] == list(inputs.keys())
    ids, types, mask = inputs
    assert ids.shape == mask.shape and inputs.to("cpu")["token_type_ids"].shape == types.shape


def test_cut_warnings_of_a_block_are_summed_into_one_and_others_pass():
    from bertkit.text.tokenizer import CutWarning, cut_warning, cut_warnings_summed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cut_warnings_summed(27):
            cut_warning(2, 10, 128, where="a.txt", what="lines")
            warnings.warn("something else")
            cut_warning(0, 10, 128, where="a.txt", what="lines")
            cut_warning(5, 7, 128, where="a.txt", what="lines")
    assert [str(w.message) for w in caught] == [
        "something else", "a.txt: 7 of 27 lines were longer than 128 tokens and were cut"]
    assert isinstance(caught[1].message, CutWarning) and caught[1].message.cut == 7
