"""Choosing a domain's words and adding them to a tokenizer: the choice against counts made by
hand, each new word one token (WordPiece and Unigram), the old pieces kept, and the result
read by transformers' AutoTokenizer with the same ids."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from bertkit.files import UserError
from bertkit.text.extend import (add_chars, choose_words, count_words, domain_pieces,
                                 domain_unknown, extend_tokenizer, missing_chars)
from bertkit.text.sources import expand
from bertkit.text.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertkit.text.vocab import train_tokenizer

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# A vocabulary small enough to split words by hand.
PIECES = [*SPECIAL_TOKENS, *LETTERS, *("##" + c for c in LETTERS),
          "the", "film", "##goer", ".", ","]
DOMAIN = "The filmgoer liked films.\nFilms, filmgoers and filmgoer zzz ZZZ\n"


@pytest.fixture
def by_hand(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(PIECES) + "\n", encoding="utf-8")
    (tmp_path / "domain.txt").write_text(DOMAIN, encoding="utf-8")
    return Tokenizer.from_vocab(tmp_path / "vocab.txt"), tmp_path / "domain.txt"


def test_choice_equals_the_count_by_hand(by_hand):
    tok, domain = by_hand
    counts = count_words(tok, expand([domain]), progress=False)
    assert counts == {"the": 1, "filmgoer": 2, "liked": 1, "films": 2, ".": 1, ",": 1,
                      "filmgoers": 1, "and": 1, "zzz": 2}
    # pieces: filmgoer = film ##goer (2), films = film ##s (2), zzz = z ##z ##z (3),
    # liked = l ##i ##k ##e ##d (5), and = a ##n ##d (3), filmgoers = film ##goer ##s (3)
    chosen = choose_words(tok, counts, add=10)  # min_count 2
    assert [(w.word, w.count, len(w.pieces), w.saving) for w in chosen] == [  # ties by word
        ("zzz", 2, 3, 4), ("filmgoer", 2, 2, 2), ("films", 2, 2, 2)]
    assert chosen[1].pieces == (tok.token_to_id("film"), tok.token_to_id("##goer"))
    everything = choose_words(tok, counts, add=10, min_count=1)
    assert [(w.word, w.saving) for w in everything] == [
        ("liked", 4), ("zzz", 4), ("and", 2), ("filmgoer", 2), ("filmgoers", 2), ("films", 2)]
    assert [w.word for w in choose_words(tok, counts, add=2, min_count=1)] == ["liked", "zzz"]
    # 1 + 2x2 + 5 + 2x2 + 1 + 1 + 3 + 3 + 2x3 pieces
    assert domain_pieces(tok, counts) == 28


def test_new_words_are_one_token_and_old_pieces_stay(by_hand):
    tok, domain = by_hand
    words = choose_words(tok, count_words(tok, expand([domain]), progress=False), add=3)
    grown = extend_tokenizer(tok, words)
    V = tok.vocab_size
    assert grown.vocab_size == V + 3
    assert [grown.token_to_id(w) for w in ("zzz", "filmgoer", "films")] == [V, V + 1, V + 2]
    assert all(grown.id_to_token(i) == tok.id_to_token(i) for i in range(V))
    assert grown.encode("Filmgoer FILMS zzz").tokens == [
        "[CLS]", "filmgoer", "films", "zzz", "[SEP]"]
    # the longest match now starts with the new word
    assert grown.encode("filmgoers").tokens[1:-1] == ["filmgoer", "##s"]
    assert grown.encode("the film [MASK].").ids == tok.encode("the film [MASK].").ids
    assert grown.do_lower_case and grown.kind == "wordpiece"


def test_missing_characters_are_added_in_both_forms(by_hand, tmp_path):
    """Uncased BERT keeps an emoji inside a word ("film😀": one [UNK]) and cuts CJK off
    character by character: the emoji comes as "😀" and "##😀", the CJK character as "水"
    alone; a character seen once is left as it was."""
    tok, _ = by_hand
    domain = _write_lines(tmp_path / "d.txt", ["film😀 FILM😀 😀", "水 水水 ☃ the"])
    counts = count_words(tok, expand([domain]), progress=False)
    assert counts == {"film😀": 2, "😀": 1, "水": 3, "☃": 1, "the": 1}
    assert domain_unknown(tok, counts) == 7
    chars = missing_chars(tok, counts)
    assert [(c.char, c.count, c.pieces) for c in chars] == [  # ties by the character
        ("水", 3, ("水",)), ("😀", 3, ("😀", "##😀"))]
    assert missing_chars(tok, counts, min_count=1)[-1].char == "☃"
    assert [c.char for c in missing_chars(tok, counts, limit=1)] == ["水"]
    assert missing_chars(tok, counts, limit=0) == []
    grown = add_chars(tok, chars)
    V = tok.vocab_size
    assert [grown.id_to_token(V + i) for i in range(3)] == ["水", "😀", "##😀"]
    assert all(grown.id_to_token(i) == tok.id_to_token(i) for i in range(V))
    assert grown.encode("Film😀 水水 ☃ 😀😀").tokens[1:-1] == [
        "film", "##😀", "水", "水", "[UNK]", "😀", "##😀"]
    assert domain_unknown(grown, counts) == 1
    plain = "The filmgoer liked films, zzz [MASK]."
    assert grown.encode(plain).ids == tok.encode(plain).ids
    with pytest.raises(UserError, match="--max-chars must be 0 or more"):
        missing_chars(tok, counts, limit=-1)


def test_a_word_that_was_unknown_is_chosen_once_its_character_is_there(by_hand, tmp_path):
    """A cased vocabulary without "é" reads "café" as one [UNK], which saves nothing: with "é"
    and "##é" added, it is c ##a ##f ##é, four pieces, and the word is chosen for them."""
    (tmp_path / "vocab.txt").write_text("\n".join(PIECES) + "\n", encoding="utf-8")
    tok = Tokenizer.from_vocab(tmp_path / "vocab.txt", lowercase=False)
    domain = _write_lines(tmp_path / "d.txt", ["café café cafés films films"])
    counts = count_words(tok, expand([domain]), progress=False)
    assert [w.word for w in choose_words(tok, counts, add=5)] == ["films"]  # café: [UNK]
    chars = missing_chars(tok, counts)
    assert [(c.char, c.count, c.pieces) for c in chars] == [("é", 3, ("é", "##é"))]
    lettered = add_chars(tok, chars)
    words = choose_words(lettered, counts, add=5)
    assert [(w.word, w.saving) for w in words] == [("café", 6), ("films", 2)]
    assert words[0].pieces[-1] == lettered.token_to_id("##é") == tok.vocab_size + 1
    grown = extend_tokenizer(lettered, words)
    assert grown.encode("café cafés é").tokens[1:-1] == ["café", "café", "##s", "é"]
    assert domain_unknown(tok, counts) == 3 and domain_unknown(grown, counts) == 0


def test_a_word_glued_to_an_emoji_counts_for_its_leading_letters(by_hand, tmp_path):
    """BERT's pre-tokenizer cuts punctuation off a word, not symbols: "great😀" (an emoji is
    no Unicode punctuation) is one word, g ##r ##e ##a ##t ##😀 once the emoji is there. Its
    leading letters "great" are counted as a word where the word's pieces end with them, and
    save there what they save alone: the word becomes great ##😀, checked on the real
    tokenizer; the count by hand equals the pieces the extended tokenizer takes."""
    tok, _ = by_hand
    domain = _write_lines(tmp_path / "d.txt", ["Great😀 great😀😀 great", "zzz☃ zzz☃ ☃zzz",
                                               "Straße😀 straße😀"])  # ß: two bytes
    counts = count_words(tok, expand([domain]), progress=False)
    assert counts == {"great😀": 1, "great😀😀": 1, "great": 1, "zzz☃": 2, "☃zzz": 1,
                      "straße😀": 2}
    lettered = add_chars(tok, missing_chars(tok, counts))
    words = choose_words(lettered, counts, add=5)
    # great = g ##r ##e ##a ##t (5) alone and in both glued words; zzz = z ##z ##z (3)
    assert [(w.word, w.count, len(w.pieces), w.saving) for w in words] == [
        ("great", 3, 5, 12), ("straße", 2, 6, 10), ("zzz", 2, 3, 4)]
    assert words[0].glued == ("great😀", "great😀😀") and words[2].glued == ("zzz☃",)
    grown = extend_tokenizer(lettered, words)
    assert grown.encode("Great😀 zzz☃ great😀😀 ☃zzz").tokens[1:-1] == [
        "great", "##😀", "zzz", "##☃", "great", "##😀", "##😀", "☃", "##z", "##z", "##z"]
    assert domain_pieces(grown, counts) == domain_pieces(lettered, counts) - 26
    # a piece across the end of the letters (##t😀): the word does not end a piece there, so
    # "great" would not save its four pieces in it; it is not counted
    (tmp_path / "vocab.txt").write_text("\n".join(PIECES + ["😀", "##😀", "##t😀"]) + "\n",
                                        encoding="utf-8")
    across = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    assert across.encode("great😀").tokens[1:-1] == ["g", "##r", "##e", "##a", "##t😀"]
    assert choose_words(across, Counter({"great😀": 5}), add=5) == []
    alone = choose_words(across, Counter({"great": 1, "great😀": 5}), add=5, min_count=1)
    assert [(w.word, w.count, w.glued) for w in alone] == [("great", 1, ())]


def test_unigram_reads_a_new_character_where_it_read_unk(tmp_path):
    """bertkit's Unigram has no byte fallback: an unknown character is [UNK], and a run of
    them one fused [UNK]. Each is a piece once added, scored as the unknown character was,
    so the rest of the segmentation stays as it was."""
    tok = train_tokenizer([_corpus(tmp_path / "c.txt")], vocab_size=90, kind="unigram",
                          progress=False)
    domain = _write_lines(tmp_path / "d.txt", ["kalo😀 ka☃☃lo 😀 水"])
    counts = count_words(tok, expand([domain]), progress=False)
    chars = missing_chars(tok, counts)
    assert [(c.char, c.count, c.pieces) for c in chars] == [("☃", 2, ("☃",)),
                                                           ("😀", 2, ("😀",))]
    grown = add_chars(tok, chars)
    old, new = tok.encode("ka☃☃lo kalo😀 水"), grown.encode("ka☃☃lo kalo😀 水")
    unk, V = tok.unk_id, tok.vocab_size
    assert old.ids.count(unk) == 3 and new.ids.count(unk) == 1  # 水, seen once
    assert [i for i in old.ids if i != unk] == [i for i in new.ids if i < V and i != unk]
    assert new.tokens[new.ids.index(V):][:3] == ["☃", "☃", "lo"]
    assert new.tokens.count("😀") == 1
    plain = "kalo tsube ka [MASK]"
    assert grown.encode(plain).ids == tok.encode(plain).ids


def _corpus(path, seed=0):
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mé", "ri", "tsu", "an", "be", "zo", "qué", "ön"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 3))) for _ in range(80)]
    path.write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(3, 12))) + "."
                              for _ in range(300)) + "\n", encoding="utf-8")
    return path


def _domain(path, seed=1):
    """Long words made of the corpus' syllables, each several times, and one with a
    character the vocabulary lacks."""
    rng = random.Random(seed)
    long = ["kalomérian", "tsubezoqué", "önkaritsu", "zoqué’an", "Bekalo", "riribe☃"]
    lines = [" ".join(rng.choices(long + ["ka", "lo"], k=8)) for _ in range(40)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_trained_vocabulary_grows_by_whole_words(tmp_path, kind):
    tok = train_tokenizer([_corpus(tmp_path / "c.txt")], vocab_size=90 if kind == "unigram"
                          else 80, kind=kind, progress=False)
    domain = _domain(tmp_path / "d.txt")
    counts = count_words(tok, expand([domain]), progress=False)
    words = choose_words(tok, counts, add=5)
    assert len(words) == 5 and all(len(w.pieces) > 1 for w in words)
    assert all(words[i].saving >= words[i + 1].saving for i in range(4))
    grown = extend_tokenizer(tok, words)
    V = tok.vocab_size
    for i, w in enumerate(words):
        text = w.word.lstrip("\u2581")
        assert grown.encode(text).ids[1:-1] == [V + i], (w.word, grown.encode(text).tokens)
    # the normalizer is the old one: curly and plain apostrophes, upper and lower case
    assert grown.encode("ZOQUÉ'AN bekalo").ids == grown.encode("zoqué’an Bekalo").ids
    assert grown.plain_quotes and grown.kind == kind
    assert domain_pieces(grown, counts) < domain_pieces(tok, counts)
    untouched = "ka lo mé ri [MASK]"
    assert grown.encode(untouched).ids == tok.encode(untouched).ids


def test_unigram_words_gather_the_punctuation_they_carry(tmp_path):
    tok = train_tokenizer([_corpus(tmp_path / "c.txt")], vocab_size=90, kind="unigram",
                          progress=False)
    domain = _write_lines(tmp_path / "d.txt", ["Kalomérian. kalomérian, kalomérian", "(ka☃"])
    counts = count_words(tok, expand([domain]), progress=False)
    assert counts == {"\u2581kalomerian.": 1, "\u2581kalomerian,": 1, "\u2581kalomerian": 1,
                      "\u2581(ka☃": 1}
    words = choose_words(tok, counts, add=5, min_count=3)
    assert [(w.word, w.count) for w in words] == [("\u2581kalomerian", 3)]
    grown = extend_tokenizer(tok, words)
    assert grown.encode("kalomérian.").tokens[1:-1] == ["\u2581kalomerian", "."]


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "bert-vocab"])
def test_extended_tokenizer_loads_in_auto_tokenizer(tmp_path, kind, by_hand):
    transformers = pytest.importorskip("transformers")
    if kind == "bert-vocab":  # BertTokenizerFast, BERT's normalizer rebuilt from the flags
        tok, domain = by_hand
    else:
        tok = train_tokenizer([_corpus(tmp_path / "c.txt")], vocab_size=90, kind=kind,
                              progress=False)
        domain = _domain(tmp_path / "d.txt")
    with domain.open("a", encoding="utf-8") as f:  # characters the vocabulary lacks
        f.write("ribe☃ 😀😀 水水 film😀\n" * 2)
    counts = count_words(tok, expand([domain]), progress=False)
    chars = missing_chars(tok, counts)
    assert {"☃", "😀", "水"} <= {c.char for c in chars}
    lettered = add_chars(tok, chars)
    words = choose_words(lettered, counts, add=4)
    grown = extend_tokenizer(lettered, words)
    grown.save(tmp_path / "tok")
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    texts = domain.read_text(encoding="utf-8").splitlines() + [
        "“Kalomérian’s” filmgoers [MASK] zzz", "", " ".join(w.word.lstrip("\u2581")
                                                           for w in words),
        "☃😀水 ka😀lo 水ka ☃ .😀. bekalo😀"]
    assert grown.encode(texts[-1]).ids.count(tok.unk_id) == 0
    for text in texts:
        assert hf(text)["input_ids"] == grown.encode(text).ids, text
    assert len(hf) == grown.vocab_size
    assert Tokenizer.load(tmp_path / "tok").encode(texts[-1]).ids == grown.encode(texts[-1]).ids


def test_bad_requests(by_hand, tmp_path):
    tok, domain = by_hand
    counts = count_words(tok, expand([domain]), progress=False)
    with pytest.raises(UserError, match="--add must be 0 or more"):
        choose_words(tok, counts, add=-1)
    assert choose_words(tok, counts, add=0) == []
    with pytest.raises(UserError, match="--min-count must be at least 1"):
        choose_words(tok, counts, add=3, min_count=0)
    (tmp_path / "bad.txt").write_bytes(b"films\n\xff zzz\n")
    with pytest.raises(UserError, match=r"bad.txt:2: not UTF-8"):
        count_words(tok, expand([tmp_path / "bad.txt"]), progress=False)
    (tmp_path / "twice.txt").write_text("\n".join(PIECES + ["the"]) + "\n", encoding="utf-8")
    twice = Tokenizer.from_vocab(tmp_path / "twice.txt")  # "the" keeps its last id
    with pytest.raises(UserError, match="ids have gaps"):
        extend_tokenizer(twice, choose_words(twice, counts, add=1))
