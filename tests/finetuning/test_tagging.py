"""Tagging schemes, conversions, spans, and subword alignment on real tokenizations."""
from __future__ import annotations

import random

import pytest
import torch

from bertkit.finetuning import tagging
from bertkit.model.heads import IGNORE_INDEX
from bertkit.finetuning.tagging import (align_labels, convert_tags, detect_scheme,
                             spans_to_tags, tag_label_set, tags_to_spans, word_scores,
                             word_tags_from_pieces)


def _random_spans(rng: random.Random, length: int, gap: int = 0) -> list:
    spans, i = [], 0
    while i < length:
        if rng.random() < 0.4:
            n = rng.randint(1, min(4, length - i))
            spans.append((i, i + n, rng.choice(["PER", "LOC", "geo-loc"])))
            i += n + gap
        else:
            i += 1
    return spans


def test_split_and_detect():
    assert tagging.split_tag("B-geo-loc") == ("B", "geo-loc")
    assert tagging.split_tag("O") == ("O", "")
    assert tagging.split_tag("NOUN") == ("", "NOUN")
    assert tagging.split_tag("B") == ("", "B")  # no type: a plain label
    assert detect_scheme(["O", "I-X"]) == "IO"
    assert detect_scheme(["O", "B-X", "I-X"]) == "BIO"
    assert detect_scheme(["S-X", "O"]) == "BIOES"


def test_bio_bioes_round_trip_on_random_valid_sequences():
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(0, 15)
        spans = _random_spans(rng, n)
        bio = spans_to_tags(spans, n, "BIO")
        bioes = convert_tags(bio, "BIOES")
        assert bioes == spans_to_tags(spans, n, "BIOES")
        assert convert_tags(bioes, "BIO") == bio
        assert tags_to_spans(bio) == tags_to_spans(bioes) == sorted(spans)
        # IO keeps entities that do not touch another of their type
        separated = _random_spans(rng, n, gap=1)
        io = spans_to_tags(separated, n, "IO")
        assert tags_to_spans(io) == sorted(separated)
        assert convert_tags(io, "BIO") == spans_to_tags(separated, n, "BIO")


def test_conversions_of_ill_formed_and_plain_sequences():
    # I-X after O opens an entity (conlleval): BIO repairs it to B-X
    assert convert_tags(["O", "I-PER", "I-PER", "B-LOC"], "BIO") == \
        ["O", "B-PER", "I-PER", "B-LOC"]
    assert convert_tags(["I-PER", "I-LOC"], "BIOES") == ["S-PER", "S-LOC"]
    # IO merges adjacent entities of one type: information lost, as documented
    assert convert_tags(["B-PER", "B-PER"], "IO") == ["I-PER", "I-PER"]
    assert convert_tags(["NOUN", "VERB"], "BIOES") == ["NOUN", "VERB"]
    with pytest.raises(ValueError):
        spans_to_tags([(0, 2, "X"), (1, 3, "Y")], 4)
    with pytest.raises(ValueError):
        spans_to_tags([], 3, "BILOU")


def test_label_set_completes_prefixes_and_puts_o_first():
    assert tag_label_set(["B-PER", "O", "B-LOC", "I-LOC"]) == \
        ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    assert tag_label_set(["S-X", "O"]) == ["O", "B-X", "E-X", "I-X", "S-X"]
    assert tag_label_set(["VERB", "NOUN", "ADJ"]) == ["ADJ", "NOUN", "VERB"]


def test_alignment_on_crafted_pieces():
    word_ids = [None, 0, 0, 0, 1, 2, 2, None]
    labels = tag_label_set(["S-X", "O"], "BIOES")
    index = {t: i for i, t in enumerate(labels)}
    name = {i: t for t, i in index.items()}
    bioes = ["S-X", "O", "E-X"]  # E-X on a word of its own is ill-formed but must survive
    copied = align_labels(word_ids, bioes, index, "copy")
    assert [name.get(i) for i in copied] == [None, "B-X", "I-X", "E-X", "O", "I-X", "E-X", None]
    first = align_labels(word_ids, bioes, index, "first")
    assert [name.get(i) for i in first] == [None, "S-X", None, None, "O", "E-X", None, None]
    assert copied[0] == first[2] == IGNORE_INDEX
    for labels_, mode in ((copied, "copy"), (first, "first")):
        pieces = [name.get(i) for i in labels_]
        assert word_tags_from_pieces(pieces, word_ids, mode) == bioes
    bio = ["B-X", "I-X", "O"]
    index = {t: i for i, t in enumerate(tag_label_set(bio))}
    name = {i: t for t, i in index.items()}
    assert [name.get(i) for i in align_labels(word_ids, bio, index)] == \
        [None, "B-X", "I-X", "I-X", "I-X", "O", "O", None]
    # a word cut by truncation comes back as O
    assert word_tags_from_pieces(["B-X", "I-X"], [0, 0], num_words=2) == ["B-X", "O"]


def test_word_scores_first_and_mean():
    scores = torch.arange(18, dtype=torch.float32).reshape(6, 3)
    word_ids = [None, 0, 0, 1, 2, None]
    first = word_scores(scores, word_ids, "first")
    assert torch.equal(first, scores[[1, 3, 4]])
    mean = word_scores(scores, word_ids, "mean")
    assert torch.equal(mean[0], (scores[1] + scores[2]) / 2)
    assert torch.equal(mean[1:], scores[[3, 4]])
    assert word_scores(scores, word_ids, "first", num_words=4)[3].abs().sum() == 0


def _wnut_sentences(shared_data, n=300):
    from bertkit.finetuning.readers import read_conll
    return read_conll(shared_data / "ner" / "wnut16.train.conll")[:n]


@pytest.mark.parametrize("scheme", ["BIO", "BIOES", "IO"])
@pytest.mark.parametrize("mode", ["copy", "first"])
def test_alignment_round_trips_on_real_tokenization(shared_data, minilm_dir, scheme, mode):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    sentences = _wnut_sentences(shared_data)
    word_tags = [convert_tags(s.tags, scheme) for s in sentences]
    labels = tag_label_set([t for tags in word_tags for t in tags], scheme)
    index = {t: i for i, t in enumerate(labels)}
    encodings = tok.encode_batch([s.tokens for s in sentences], is_pretokenized=True)
    split_words = 0
    for s, tags, enc in zip(sentences, word_tags, encodings):
        word_ids = enc.word_ids
        assert sorted(set(w for w in word_ids if w is not None)) == list(range(len(s.tokens)))
        ids = align_labels(word_ids, tags, index, mode)
        pieces = [None if i == IGNORE_INDEX else labels[i] for i in ids]
        assert word_tags_from_pieces(pieces, word_ids, mode) == tags
        if mode == "copy":
            # the piece sequence stays well formed: its entities are the words' entities
            words_of = [w for w in word_ids if w is not None]
            piece_spans = tags_to_spans([p for p in pieces if p is not None])
            assert [(words_of[a], words_of[b - 1] + 1, t) for a, b, t in piece_spans] == \
                tags_to_spans(tags) or scheme == "IO"
        # scores that are one-hot on the piece labels decode to the word labels
        scores = torch.zeros(len(ids), len(labels))
        keep = torch.tensor(ids) != IGNORE_INDEX
        scores[keep, torch.tensor(ids)[keep]] = 1.0
        decoded = word_scores(scores, word_ids, "first").argmax(1).tolist()
        if mode == "first" or scheme != "BIOES":
            assert [labels[k] for k in decoded] == tags
        split_words += sum(1 for w in set(word_ids) if w is not None
                           and word_ids.count(w) > 1)
    assert split_words > 100  # tweets: plenty of words split into pieces
