"""Judging a pretrained masked LM: batched pseudo-log-likelihoods equal a plain loop over masked
copies, minimal pairs (ties count half, groups), the pair reader's errors, masked-token scores
(on texts, and on a prepared directory equal to what pretraining logs), and a tiny model
trained on agreement that prefers the good sentences of held-out pairs."""
from __future__ import annotations

import itertools
import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.config import TrainConfig
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel
from bertkit.pretraining import held_out_split, objectives
from bertkit.pretraining.evaluation import (heldout_scores, is_pairs_file, masked_token_scores,
                                            minimal_pairs, pseudo_log_likelihood,
                                            pseudo_perplexity, read_pairs)
from bertkit.pretraining.masking import mask_tokens, sampling_probs, special_tokens_mask
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")

NOUNS = ["dog", "cat", "bird", "child", "farmer", "teacher", "horse", "king"]
VERBS = ["run", "sleep", "sing", "walk", "swim", "eat"]
STEPS = 400
"""Optimizer steps of the agreement model (a few seconds on one thread)."""
WORDS = (["the", "a", "near", "tree", "house", "."] + NOUNS + [n + "s" for n in NOUNS]
         + VERBS + [v + "s" for v in VERBS])


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory) -> Tokenizer:
    """Whole words as pieces, plus letters and ## letters so that any word splits."""
    root = tmp_path_factory.mktemp("tok")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + letters + \
        ["##" + c for c in letters]
    (root / "vocab.txt").write_text("\n".join(dict.fromkeys(pieces)) + "\n", encoding="utf-8")
    return Tokenizer.from_vocab(root / "vocab.txt")


def _model(tokenizer, seed=0, **kw) -> PretrainingModel:
    cfg = EncoderConfig(**{**dict(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2,
                                  num_heads=2, intermediate_size=64, max_positions=32,
                                  hidden_dropout=0.0, attention_dropout=0.0), **kw})
    model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(seed))
    return model.eval()


SENTENCES = ["the dog runs .", "the dogs near the tree run .", "a cat sleeps",
             "the kings swim near a house .", "zebra", "the teacher eats ."]


def _plain_pll(model, tokenizer, sentence: str) -> float:
    """One sentence at a time, one masked copy at a time, all logits computed."""
    ids = torch.tensor([tokenizer.encode(sentence).ids])
    total = 0.0
    for t in range(ids.shape[1]):
        if int(ids[0, t]) in tokenizer.special_ids:
            continue
        masked = ids.clone()
        masked[0, t] = tokenizer.mask_id
        with torch.no_grad():
            logits = model(masked, torch.zeros_like(masked), torch.ones_like(masked))[0]
        total += float(F.log_softmax(logits[0, t], -1)[ids[0, t]])
    return total


@pytest.mark.parametrize("batch_size", [1, 5, 1000])
def test_batched_pll_equals_a_plain_loop_over_masked_copies(word_tokenizer, batch_size):
    model = _model(word_tokenizer)
    got = pseudo_log_likelihood(model, word_tokenizer, SENTENCES, batch_size=batch_size)
    want = [_plain_pll(model, word_tokenizer, s) for s in SENTENCES]
    assert len(got) == len(SENTENCES)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)
    assert all(v < 0 for v in got)


def _plain_word_l2r(model, tokenizer, sentence: str) -> float:
    """PLL-word-l2r one copy at a time: each piece masked with the later pieces of its word,
    the word read from the pieces' spelling (## continues a word)."""
    enc = tokenizer.encode(sentence)
    ids = torch.tensor([enc.ids])
    pieces = [tokenizer.id_to_token(i) for i in enc.ids]
    total = 0.0
    for t in range(ids.shape[1]):
        if int(ids[0, t]) in tokenizer.special_ids:
            continue
        masked = ids.clone()
        masked[0, t] = tokenizer.mask_id
        later = t + 1
        while later < len(pieces) and pieces[later].startswith("##"):
            masked[0, later] = tokenizer.mask_id
            later += 1
        with torch.no_grad():
            logits = model(masked, torch.zeros_like(masked), torch.ones_like(masked))[0]
        total += float(F.log_softmax(logits[0, t], -1)[ids[0, t]])
    return total


@pytest.mark.parametrize("batch_size", [1, 7, 1000])
def test_pll_word_l2r_equals_a_plain_loop_and_differs_only_on_split_words(word_tokenizer,
                                                                           batch_size):
    model = _model(word_tokenizer)
    # "zebra" and "zoo" split into letters; "dogz" into "dog" + letters; the rest are words
    sentences = SENTENCES + ["the zoo dogz run", "zebra zebra ."]
    assert any(p.startswith("##") for s in sentences
               for p in word_tokenizer.encode(s).tokens)
    got = pseudo_log_likelihood(model, word_tokenizer, sentences, batch_size=batch_size,
                                metric="word-l2r")
    want = [_plain_word_l2r(model, word_tokenizer, s) for s in sentences]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)
    original = pseudo_log_likelihood(model, word_tokenizer, sentences, batch_size=batch_size)
    for s, a, b in zip(sentences, got, original):
        split = any(p.startswith("##") for p in word_tokenizer.encode(s).tokens)
        assert (a != pytest.approx(b, abs=1e-6)) == split, s
    with pytest.raises(ValueError, match="word-l2r"):
        pseudo_log_likelihood(model, word_tokenizer, sentences, metric="l2r")


def test_pseudo_perplexity_is_exp_of_minus_the_mean_pll_per_piece(word_tokenizer):
    model = _model(word_tokenizer)
    texts = SENTENCES[:3]
    pll = pseudo_log_likelihood(model, word_tokenizer, texts)
    pieces = sum(len(word_tokenizer.encode(t).ids) - 2 for t in texts)
    got = pseudo_perplexity(model, word_tokenizer, texts)
    assert got["pieces"] == pieces and got["texts"] == 3
    assert got["pseudo_perplexity"] == pytest.approx(math.exp(-sum(pll) / pieces), rel=1e-9)


def test_pseudo_perplexity_per_word_counts_the_words_not_the_pieces(word_tokenizer):
    model = _model(word_tokenizer)
    # "zebra" and "xylophones" are no entries: cut into letters, one word of many pieces each
    texts = ["the dog runs .", "zebra", "a xylophones sleep near the house"]
    pieces = sum(len(word_tokenizer.encode(t).ids) - 2 for t in texts)
    words = sum(len(t.split()) for t in texts)
    assert pieces > words + 10
    for metric in ("original", "word-l2r"):
        pll = pseudo_log_likelihood(model, word_tokenizer, texts, metric=metric)
        got = pseudo_perplexity(model, word_tokenizer, texts, metric=metric)
        assert got["words"] == words and got["pieces"] == pieces
        assert got["pseudo_perplexity_per_word"] == pytest.approx(math.exp(-sum(pll) / words),
                                                                  rel=1e-9)


def test_pseudo_perplexity_per_word_counts_only_the_words_a_cut_text_kept(word_tokenizer):
    model = _model(word_tokenizer)  # 32 positions: 30 pieces after [CLS] and [SEP]
    text = " ".join(["the dog runs ."] * 20)  # 80 words of one piece each
    with pytest.warns(UserWarning, match="were cut"):
        got = pseudo_perplexity(model, word_tokenizer, [text])
    assert got["words"] == got["pieces"] == 30


def test_a_pair_of_identical_sentences_is_a_tie_counted_half(word_tokenizer):
    model = _model(word_tokenizer)
    pairs = [{"sentence_good": s, "sentence_bad": s} for s in SENTENCES]
    report = minimal_pairs(model, word_tokenizer, pairs, batch_size=3)
    assert report["accuracy"] == 0.5 and report["pairs"] == len(SENTENCES)
    assert report["mean_pll_difference"] == 0.0
    assert report["group_by"] is None and report["groups"] == {}


def test_figures_per_group_and_overall(word_tokenizer):
    model = _model(word_tokenizer, seed=3)
    rng = random.Random(0)
    pairs = []
    for i in range(12):
        noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
        good, bad = f"the {noun} {verb}s .", f"the {noun} {verb} ."
        pairs.append({"sentence_good": good, "sentence_bad": bad, "UID": f"uid_{i % 3}",
                      "field": "syntax" if i % 2 else "morphology", "pairID": str(i)})
    sentences = [p[k] for p in pairs for k in ("sentence_good", "sentence_bad")]
    pll = dict(zip(sentences, pseudo_log_likelihood(model, word_tokenizer, sentences)))

    def expected(chosen):
        wins = [1.0 if pll[p["sentence_good"]] > pll[p["sentence_bad"]] else
                0.5 if pll[p["sentence_good"]] == pll[p["sentence_bad"]] else 0.0
                for p in chosen]
        diff = [pll[p["sentence_good"]] - pll[p["sentence_bad"]] for p in chosen]
        return sum(wins) / len(chosen), sum(diff) / len(chosen)

    report = minimal_pairs(model, word_tokenizer, pairs)  # UID by default: the pairs have it
    assert report["group_by"] == "UID" and sorted(report["groups"]) == ["uid_0", "uid_1", "uid_2"]
    acc, diff = expected(pairs)
    assert report["accuracy"] == pytest.approx(acc) and report["pairs"] == 12
    assert report["mean_pll_difference"] == pytest.approx(diff, abs=1e-9)
    for uid, figures in report["groups"].items():
        acc, diff = expected([p for p in pairs if p["UID"] == uid])
        assert figures["pairs"] == 4
        assert figures["accuracy"] == pytest.approx(acc)
        assert figures["mean_pll_difference"] == pytest.approx(diff, abs=1e-9)
    by_field = minimal_pairs(model, word_tokenizer, pairs, group_by="field")
    assert sorted(by_field["groups"]) == ["morphology", "syntax"]
    assert sum(g["pairs"] for g in by_field["groups"].values()) == 12
    assert minimal_pairs(model, word_tokenizer, pairs, group_by="")["groups"] == {}
    with pytest.raises(UserError, match="no pair has the field 'linguistics_term'"):
        minimal_pairs(model, word_tokenizer, pairs, group_by="linguistics_term")


@pytest.mark.parametrize("content,message", [
    ('{"sentence_good": "a b", "sentence_bad": "b a"}\n{"sentence_good": "x"}\n',
     r"pairs.jsonl:2: no 'sentence_bad'"),
    ('{"sentence_good": "a b", "sentence_bad": 3}\n', r"pairs.jsonl:1: 'sentence_bad' is int"),
    ('{"sentence_good": "  ", "sentence_bad": "b"}\n', r"pairs.jsonl:1: 'sentence_good' is empty"),
    ('\n{"sentence_good": "a", "sentence_bad": "b"\n', r"pairs.jsonl:2: not valid JSON"),
    ('["a", "b"]\n', r"pairs.jsonl:1: expected a JSON object"),
    ('\n\n', r"pairs.jsonl: no minimal pairs \(an empty file\)"),
    (b'{"sentence_good": "caf\xe9", "sentence_bad": "b"}\n', r"pairs.jsonl:1: not UTF-8"),
])
def test_pair_reader_errors_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "pairs.jsonl"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message) as e:
        read_pairs(path)
    assert "\n" not in str(e.value)


def test_pair_reader_keeps_the_other_fields(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"sentence_good": "the dog runs", "sentence_bad": "the dog run", "UID": "sv"},
            {"sentence_good": "the dogs run", "sentence_bad": "the dogs runs", "UID": "sv"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    assert read_pairs(path) == rows


def test_a_directory_of_pair_files_is_read_file_by_file(tmp_path):
    rows = {"b_agreement": [{"sentence_good": "the dog runs", "sentence_bad": "the dog run"}],
            "a_order": [{"sentence_good": "a big dog", "sentence_bad": "a dog big"},
                        {"sentence_good": "the red cat", "sentence_bad": "the cat red",
                         "file": "kept"}]}
    for name, lines in rows.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines),
                                                encoding="utf-8")
    (tmp_path / "README.txt").write_text("not a pair file\n", encoding="utf-8")
    assert is_pairs_file(tmp_path)
    assert read_pairs(tmp_path) == [{**rows["a_order"][0], "file": "a_order"}, rows["a_order"][1],
                                    {**rows["b_agreement"][0], "file": "b_agreement"}]
    (tmp_path / "c.jsonl").write_text('{"sentence_good": "x"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"c.jsonl:1: no 'sentence_bad'"):
        read_pairs(tmp_path)
    (tmp_path / "c.jsonl").unlink()
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    assert not is_pairs_file(tmp_path)  # a prepared directory
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not is_pairs_file(empty)
    with pytest.raises(UserError, match="empty: no .jsonl files of minimal pairs"):
        read_pairs(empty)


def test_pairs_of_several_files_group_by_file_and_average_the_groups(word_tokenizer):
    model = _model(word_tokenizer, seed=3)
    pairs = [{"sentence_good": f"the {n} {v}s .", "sentence_bad": f"the {n} {v} .",
              "file": "agreement" if i < 6 else "other"}
             for i, (n, v) in enumerate(zip(NOUNS * 2, VERBS * 2)) if i < 8]
    report = minimal_pairs(model, word_tokenizer, pairs)
    assert report["group_by"] == "file"
    assert [g["pairs"] for g in report["groups"].values()] == [6, 2]
    assert report["mean_group_accuracy"] == pytest.approx(
        (report["groups"]["agreement"]["accuracy"] + report["groups"]["other"]["accuracy"]) / 2)
    with_uid = [{**p, "UID": "one"} for p in pairs]  # BLiMP's own field comes first
    assert list(minimal_pairs(model, word_tokenizer, with_uid)["groups"]) == ["one"]
    assert minimal_pairs(model, word_tokenizer, pairs, group_by="")["mean_group_accuracy"] is None


def test_masked_token_scores_with_every_piece_masked_equal_the_full_logits(word_tokenizer):
    model = _model(word_tokenizer, seed=1)
    texts = SENTENCES[:4]
    got = masked_token_scores(model, word_tokenizer, texts, mask_rate=1.0, batch_size=3)
    losses, correct = [], 0
    for text in texts:
        ids = torch.tensor([word_tokenizer.encode(text).ids])
        keep = torch.tensor([int(i) not in word_tokenizer.special_ids for i in ids[0]])
        masked = ids.masked_fill(keep[None], word_tokenizer.mask_id)
        with torch.no_grad():
            logits = model(masked)[0][0, keep]
        losses += F.cross_entropy(logits, ids[0, keep], reduction="none").tolist()
        correct += int((logits.argmax(-1) == ids[0, keep]).sum())
    assert got["tokens"] == len(losses)
    assert got["loss"] == pytest.approx(sum(losses) / len(losses), abs=1e-5)
    assert got["accuracy"] == correct / len(losses)
    assert got["perplexity"] == pytest.approx(math.exp(got["loss"]))


def test_masked_token_sample_is_fixed_by_the_seed_not_the_batch_size(word_tokenizer):
    model = _model(word_tokenizer, seed=2)
    texts = [" ".join(random.Random(i).choices(WORDS, k=3 + i % 9)) for i in range(40)]
    pieces = [len(word_tokenizer.encode(t).ids) - 2 for t in texts]
    a = masked_token_scores(model, word_tokenizer, texts, seed=7, batch_size=4)
    b = masked_token_scores(model, word_tokenizer, texts, seed=7, batch_size=64)
    assert a["tokens"] == b["tokens"] == sum(max(1, round(0.15 * n)) for n in pieces)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-5) and a["accuracy"] == b["accuracy"]
    c = masked_token_scores(model, word_tokenizer, texts, seed=8, batch_size=64)
    assert c["loss"] != pytest.approx(a["loss"], abs=1e-6)


class _Recording(torch.nn.Module):
    """The model, keeping of every forward pass the inputs at the predicted positions and
    every row as given (with its masks, without padding)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config, self.inputs, self.rows = model, model.config, [], []

    def forward(self, ids, types, attention, positions=None):
        self.inputs.append(ids.flatten()[positions].clone())
        self.rows += [r[a.bool()] for r, a in zip(ids, attention)]
        return self.model(ids, types, attention, positions=positions)


def test_masked_token_scores_with_nothing_masked_score_the_text_as_it_is(word_tokenizer):
    model = _model(word_tokenizer, seed=1)
    texts = SENTENCES[:4]
    got = masked_token_scores(model, word_tokenizer, texts, mask_rate=1.0, mask_frac=0.0)
    correct, count = 0, 0
    for text in texts:
        ids = torch.tensor([word_tokenizer.encode(text).ids])
        keep = torch.tensor([int(i) not in word_tokenizer.special_ids for i in ids[0]])
        with torch.no_grad():
            logits = model(ids)[0][0, keep]
        correct += int((logits.argmax(-1) == ids[0, keep]).sum())
        count += int(keep.sum())
    assert got["tokens"] == count and got["accuracy"] == correct / count


def test_masked_token_scores_corrupt_the_sample_80_10_10_and_score_all_of_it(word_tokenizer):
    """run_mlm.py's evaluation: of the sample, 80% [MASK], 10% a random piece, 10% kept."""
    texts = [" ".join(["the"] * (5 + i % 7)) for i in range(600)]
    the = word_tokenizer.encode("the").ids[1]
    model = _Recording(_model(word_tokenizer, seed=3))
    plain = masked_token_scores(model, word_tokenizer, texts, seed=2)
    model.inputs.clear()
    got = masked_token_scores(model, word_tokenizer, texts, seed=2, mask_frac=0.8,
                              random_frac=0.1)
    assert got["tokens"] == plain["tokens"]  # the same sample, corrupted otherwise
    inputs = torch.cat(model.inputs)
    assert len(inputs) == got["tokens"] > 700
    masked = float((inputs == word_tokenizer.mask_id).float().mean())
    kept = float((inputs == the).float().mean())
    assert masked == pytest.approx(0.8, abs=0.05) and kept == pytest.approx(0.1, abs=0.04)
    others = inputs[(inputs != the) & (inputs != word_tokenizer.mask_id)]
    assert len(others) / len(inputs) == pytest.approx(0.1, abs=0.04)
    assert len(set(others.tolist())) > 20 and int(others.max()) < word_tokenizer.vocab_size
    again = masked_token_scores(model.model, word_tokenizer, texts, seed=2, mask_frac=0.8,
                                random_frac=0.1, batch_size=7)
    assert again["accuracy"] == got["accuracy"]  # fixed by the seed, not the batches
    assert again["loss"] == pytest.approx(got["loss"], abs=1e-5)
    with pytest.raises(ValueError, match="add up to at most 1"):
        masked_token_scores(model.model, word_tokenizer, texts, mask_frac=0.8, random_frac=0.3)


def _masked_words(rows: list[torch.Tensor], tokenizer) -> list[tuple[str, ...]]:
    """Each row's words, a run of masked words as one "?" (a vocabulary of letters masks a
    word as several [MASK]s). A word masked in part reads otherwise, so it fails a comparison."""
    vocab = {i: p for p, i in tokenizer.get_vocab().items()}
    out = []
    for row in rows:
        words: list[str] = []
        for i in row.tolist():
            piece = vocab[i]
            if i == tokenizer.mask_id:
                if not words or words[-1] != "?":
                    words.append("?")
            elif i in tokenizer.special_ids:
                continue
            elif piece.startswith("##"):
                words[-1] += piece[2:]
            else:
                words.append(piece)
        out.append(tuple(words))
    return out


def test_whole_word_masked_scores_mask_every_piece_of_a_word_and_count_words(word_tokenizer):
    model = _model(word_tokenizer, seed=4)
    # "zebra", "xylophones", "quiz" are cut into letters: words of several pieces
    texts = ["the zebra runs near a xylophones tree .", "quiz", "the dogs sleep .",
             "a zebra eats"]
    got = masked_token_scores(model, word_tokenizer, texts, mask_rate=1.0, whole_word=True)
    # Every word masked: a plain pass per text, a word right when all its pieces are.
    right, words, pieces = 0, 0, 0
    for text in texts:
        enc = word_tokenizer.encode(text)
        ids = torch.tensor([enc.ids])
        keep = torch.tensor([int(i) not in word_tokenizer.special_ids for i in ids[0]])
        with torch.no_grad():
            ok = (model(ids.masked_fill(keep[None], word_tokenizer.mask_id))[0][0]
                  .argmax(-1) == ids[0])
        starts = [t for t, p in enumerate(enc.tokens) if keep[t] and not p.startswith("##")]
        for a, b in zip(starts, starts[1:] + [len(enc.tokens) - 1]):
            right += int(ok[a:b].all())
        words += len(starts)
        pieces += int(keep.sum())
    assert words == sum(len(t.split()) for t in texts) and pieces > words + 15
    assert got["masked_words"] == words and got["tokens"] == pieces
    assert got["word_accuracy"] == right / words


def test_whole_word_sample_is_the_same_words_whatever_the_vocabulary(word_tokenizer, tmp_path):
    """A vocabulary of letters cuts every word; the words masked stay the same."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                    "."] + letters + ["##" + c for c in letters])
                                         + "\n", encoding="utf-8")
    spelled = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    texts = [" ".join(random.Random(i).choices(WORDS, k=4 + i % 11)) for i in range(60)]
    seen = {}
    for name, tokenizer in (("words", word_tokenizer), ("letters", spelled)):
        model = _Recording(_model(tokenizer, seed=5, max_positions=128))  # no text cut
        got = masked_token_scores(model, tokenizer, texts, seed=3, whole_word=True)
        assert got["masked_words"] == sum(max(1, round(0.15 * len(t.split()))) for t in texts)
        seen[name] = sorted(_masked_words(model.rows, tokenizer))
    assert seen["words"] == seen["letters"]
    assert sum(row.count("?") for row in seen["words"]) > 60
    # and a different seed masks other words
    model = _Recording(_model(word_tokenizer, seed=5, max_positions=128))
    masked_token_scores(model, word_tokenizer, texts, seed=4, whole_word=True)
    assert sorted(_masked_words(model.rows, word_tokenizer)) != seen["words"]


# On a prepared directory: the figures pretraining logs ----------------------------------------

@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny):
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.vocab import train_tokenizer

    root = tmp_path_factory.mktemp("judge")
    corpus = tiny.write_corpus(root / "corpus.txt")
    train_tokenizer([corpus], vocab_size=120, out=root / "tok", progress=False)
    prepare([corpus], root / "tok", root / "data", heldout_fraction=0.2, workers=1,
            progress=False)
    return root / "data", Tokenizer.load(root / "tok")


@pytest.mark.parametrize("objective,masking", [("mlm", "token"), ("mlm+nsp", "whole-word")])
def test_heldout_scores_of_a_prepared_directory_equal_evaluate_lm(prepared, tmp_path,
                                                                 objective, masking):
    from bertkit.pretraining.masking import MaskingConfig
    from bertkit.pretraining.options import PretrainMasking, PretrainOptions
    from bertkit.pretraining.plan import _heldout_batches

    data, tokenizer = prepared
    model = _model(tokenizer, seed=4)
    rate, whole_word = 0.15, masking == "whole-word"
    opts = PretrainOptions(data=data, out=tmp_path / "run", preset="tiny", objective=objective,
                           masking=PretrainMasking(mlm_prob=rate, whole_word=whole_word),
                           seq_len=32, batch_size=8, eval_batches=3)
    # what `pretrain` evaluates on with --seed 5
    held = _heldout_batches(opts, dict(objective=objective, seq_len=32,
                                       masking=MaskingConfig(mlm_prob=rate,
                                                             whole_word=whole_word)),
                            5 + 1)
    want = objectives.evaluate_lm(model, held, objective)
    got = heldout_scores(model, data, seed=5, batch_size=8, objective=objective, seq_len=32,
                         eval_batches=3, whole_word=masking == "whole-word")
    assert got["accuracy"] == want["eval_accuracy"] and got["loss"] == want["eval_loss"]
    assert got["perplexity"] == want["eval_perplexity"] and got["tokens"] == want["eval_tokens"]
    assert ("nsp_accuracy" in got) == (objective == "mlm+nsp")
    other = heldout_scores(model, data, seed=6, batch_size=8, objective=objective, seq_len=32,
                           eval_batches=3)
    assert other["loss"] != want["eval_loss"]  # the seed chooses the masks
    same = heldout_scores(model, data, seed=5, batch_size=8, objective=objective, seq_len=32,
                          eval_batches=3, whole_word=whole_word,
                          mask_frac=0.8, random_frac=0.1)  # pretraining's split, spelled out
    assert same["loss"] == got["loss"]
    every = heldout_scores(model, data, seed=5, batch_size=8, objective=objective, seq_len=32,
                           eval_batches=3, whole_word=whole_word, mask_frac=1.0,
                           random_frac=0.0)
    assert every["tokens"] == got["tokens"] and every["loss"] != got["loss"]
    with pytest.raises(UserError, match="--mask-frac 0.95 and --random-frac 0.1"):
        heldout_scores(model, data, seq_len=32, mask_frac=0.95)
    with pytest.raises(TypeError, match="score a prepared data directory with heldout_scores"):
        masked_token_scores(model, tokenizer, str(data))  # texts are texts, never a path


# Behaviour: a model trained on agreement prefers the agreeing sentence ----------------------

def _agreement_pair(noun: str, verb: str, plural: bool) -> tuple[str, str]:
    """("the dogs run .", "the dogs runs .") or ("the dog runs .", "the dog run .")."""
    subject = noun + "s" if plural else noun
    good, bad = (verb, verb + "s") if plural else (verb + "s", verb)
    return f"the {subject} {good} .", f"the {subject} {bad} ."


def _sentence_batches(tokenizer, sentences, batch_size, seed):
    """Endless MLM batches of whole sentences, one a row, masked by bertkit's mask_tokens."""
    g = torch.Generator().manual_seed(seed)
    probs = sampling_probs(None, tokenizer.vocab_size, tokenizer.special_ids)
    while True:
        chosen = torch.randint(len(sentences), (batch_size,), generator=g).tolist()
        rows = tokenizer([sentences[i] for i in chosen])
        special = special_tokens_mask(rows.input_ids, tokenizer.special_ids)
        ids, labels = mask_tokens(rows.input_ids, special, mask_id=tokenizer.mask_id,
                                  sampling_probs=probs, mlm_prob=0.25, generator=g)
        positions = (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)
        yield {"input_ids": ids, "token_type_ids": rows.token_type_ids,
               "attention_mask": rows.attention_mask, "mlm_positions": positions,
               "mlm_labels": labels.flatten()[positions]}


@pytest.mark.slow
def test_a_model_trained_on_agreement_prefers_the_good_sentence_of_held_out_pairs(
        tmp_path, word_tokenizer):
    rng = random.Random(0)
    combos = list(itertools.product(NOUNS, VERBS))
    rng.shuffle(combos)
    held_out, seen = combos[:12], combos[12:]  # noun-verb pairs never seen together
    train_sentences = [_agreement_pair(n, v, plural)[0] for n, v in seen
                       for plural in (False, True)]
    model = _model(word_tokenizer, seed=0, hidden_size=64, intermediate_size=128,
                   num_heads=4).train()
    train(model, objectives.mlm_loss, _sentence_batches(word_tokenizer, train_sentences, 32, 0),
          TrainConfig(max_steps=STEPS, lr=2e-3, warmup_steps=20, log_every=100),
          tmp_path / "run", target_count=objectives.target_count("mlm"), show_progress=False)
    pairs = [dict(zip(("sentence_good", "sentence_bad"), _agreement_pair(n, v, plural)),
                  UID="plural" if plural else "singular")
             for n, v in held_out for plural in (False, True)]
    report = minimal_pairs(model.eval(), word_tokenizer, pairs)
    untrained = minimal_pairs(_model(word_tokenizer, seed=0, hidden_size=64,
                                     intermediate_size=128, num_heads=4), word_tokenizer, pairs)
    assert report["accuracy"] >= 0.85, report
    assert report["mean_pll_difference"] > 0.5 > untrained["mean_pll_difference"], \
        (report, untrained)
    assert all(g["accuracy"] >= 0.75 for g in report["groups"].values()), report


def test_masked_token_scores_cut_an_over_long_text_and_say_so_once(word_tokenizer):
    model = _model(word_tokenizer, seed=3, max_positions=8)
    texts = ["the dogs near the tree run near a house .", "a cat sleeps", "zebra"]
    with pytest.warns(UserWarning, match="^1 of 3 texts were longer than 8 tokens and were "
                                         "cut$") as caught:
        got = masked_token_scores(model, word_tokenizer, texts, mask_rate=1.0)
    assert len([w for w in caught if "were cut" in str(w.message)]) == 1
    pieces = [min(len(word_tokenizer.encode(t).ids), 8) - 2 for t in texts]
    assert pieces[0] == 6 and got["tokens"] == sum(pieces)  # the long text keeps 8 - 2


def test_a_tiny_held_out_split_is_flagged_and_an_empty_one_refused(prepared, monkeypatch,
                                                                   capsys):
    from bertkit.pretraining import evaluation
    from bertkit.pretraining.evaluation import heldout_scores

    data, tokenizer = prepared
    model = _model(tokenizer)
    scores = heldout_scores(model, data, seq_len=16, batch_size=1, eval_batches=1)
    assert 0 < scores["tokens"] < evaluation.MIN_SCORED_TOKENS
    assert capsys.readouterr().err == (
        f"warning: {data}: only {int(scores['tokens'])} masked tokens of the held-out split "
        "scored: these figures are noise (prepare it with more text or a larger --heldout)\n")
    heldout_scores(model, data, seq_len=32, batch_size=32, eval_batches=3)
    assert capsys.readouterr().err == ""  # enough tokens: nothing said
    figures = {"eval_loss": 0.0, "eval_acc": 0.0, "eval_ppl": 1.0, "eval_tokens": 0.0}
    monkeypatch.setattr(held_out_split, "held_out_figures", lambda *a, **k: figures)
    with pytest.raises(UserError, match=r"held-out split gives no masked tokens to score"):
        heldout_scores(model, data, seq_len=16, batch_size=1, eval_batches=1)
