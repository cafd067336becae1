"""`bertkit evaluate` on a pretrained (not fine-tuned) model judges the language model: held-out
masked tokens of a prepared directory, minimal pairs of a .jsonl or of a directory of them,
masked tokens and pseudo-perplexity of a text file's lines; the figures are the library's."""
from __future__ import annotations

import gzip
import json

import pytest
import torch

from bertkit.cli.finetuning import _is_pretrained
from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.model.hub import load_pretraining_model, save_model
from bertkit.pretraining.evaluation import (heldout_scores, masked_token_scores,
                                            minimal_pairs, pseudo_perplexity, read_pairs)
from bertkit.text.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("the dog runs .", "the dog run .", "sv"), ("the dogs run .", "the dogs runs .", "sv"),
         ("a big cat sleeps .", "a cat big sleeps .", "order"),
         ("the cat sleeps .", "the cat sleeps .", "order")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny) -> dict:
    """A prepared corpus, a tiny pretrained model on its tokenizer, a pair file, a text file."""
    from bertkit.pretraining.corpus import prepare

    root = tmp_path_factory.mktemp("lm")
    corpus = tiny.write_corpus(root / "corpus.txt")
    tiny.model_dir(root, corpus)
    prepare([corpus], root / "tok", root / "data", heldout_fraction=0.2, workers=1,
            progress=False)
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"sentence_good": g, "sentence_bad": b, "UID": u}) + "\n"
                             for g, b, u in PAIRS), encoding="utf-8")
    lines = corpus.read_text(encoding="utf-8").splitlines()
    return {"root": root, "data": root / "data", "model": root / "model", "pairs": pairs,
            "text": corpus, "lines": [line for line in lines if line.strip()]}


def _json(capsys, args: list[str]) -> dict:
    assert main(["evaluate", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_minimal_pairs_of_a_jsonl(setup, capsys):
    got = _json(capsys, ["--model", setup["model"], "--input", setup["pairs"]])
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    want = minimal_pairs(model, tokenizer, read_pairs(setup["pairs"]))
    assert got == {"kind": "minimal_pairs", "scored_by": "pseudo-log-likelihood",
                   "pll": "original", **want}
    assert got["pairs"] == 4 and set(got["groups"]) == {"sv", "order"}
    assert main(["evaluate", "--model", str(setup["model"]), "--input",
                 str(setup["pairs"])]) == 0
    table = capsys.readouterr().out
    assert "accuracy" in table and "mean_pll_difference" in table
    assert "good > bad by pseudo-log-likelihood" in table
    assert "UID" in table and "order" in table and "sv" in table
    packed = setup["root"] / "pairs.jsonl.gz"  # known as pairs by the name before the .gz
    packed.write_bytes(gzip.compress(setup["pairs"].read_bytes()))
    assert _json(capsys, ["--model", setup["model"], "--input", packed]) == got


def test_a_text_file_gives_masked_tokens_and_pseudo_perplexity(setup, capsys):
    got = _json(capsys, ["--model", setup["model"], "--input", setup["text"],
                         "--max-lines", "5", "--seed", "3"])
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    lines = setup["lines"][:5]
    want = {**masked_token_scores(model, tokenizer, lines, seed=3),
            **pseudo_perplexity(model, tokenizer, lines)}
    assert got["kind"] == "text" and got["texts"] == 5
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key


def test_pseudo_log_likelihoods_show_their_progress_unless_quiet(setup, capsys):
    """A forward pass a piece: minutes of a CPU for a few thousand lines, so the masked copies
    scored, their rate and the ETA go to stderr; --quiet leaves stderr empty."""
    for given in (setup["text"], setup["pairs"]):
        assert main(["evaluate", "--model", str(setup["model"]), "--input", str(given),
                     "--max-lines", "5"]) == 0
        err = capsys.readouterr().err
        assert "pseudo-log-likelihood: " in err and " masked copies (100%)" in err, err
        assert main(["evaluate", "--model", str(setup["model"]), "--input", str(given),
                     "--max-lines", "5", "--quiet"]) == 0
        assert capsys.readouterr().err == ""


def test_a_text_file_scored_as_run_mlm_scores_it(setup, capsys):
    got = _json(capsys, ["--model", setup["model"], "--input", setup["text"],
                         "--max-lines", "20", "--mask-frac", "0.8", "--random-frac", "0.1"])
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    want = masked_token_scores(model, tokenizer, setup["lines"][:20], mask_frac=0.8,
                               random_frac=0.1)
    plain = masked_token_scores(model, tokenizer, setup["lines"][:20])
    assert got["tokens"] == want["tokens"] == plain["tokens"]
    assert got["accuracy"] == pytest.approx(want["accuracy"]) and got["loss"] != plain["loss"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    for args, message in ((["--mask-frac", "1.5"], "--mask-frac must be in [0, 1]"),
                          (["--mask-frac", "0.9", "--random-frac", "0.2"],
                           "add up to more than 1"),
                          # alone on a text file, the rest of the sample stays [MASK]
                          (["--random-frac", "0.1"], "add up to more than 1")):
        assert main(["evaluate", "--model", str(setup["model"]), "--input", str(setup["text"]),
                     *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_text_file_with_whole_words_gives_word_accuracy(setup, capsys):
    got = _json(capsys, ["--model", setup["model"], "--input", setup["text"],
                         "--max-lines", "20", "--whole-word"])
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    want = masked_token_scores(model, tokenizer, setup["lines"][:20], whole_word=True)
    assert got["masked_words"] == want["masked_words"] > 20 and got["tokens"] == want["tokens"]
    assert got["word_accuracy"] == pytest.approx(want["word_accuracy"])
    assert "word_accuracy" not in _json(capsys, ["--model", setup["model"], "--input",
                                                 setup["text"], "--max-lines", "20"])
    assert main(["evaluate", "--model", str(setup["model"]), "--input", str(setup["text"]),
                 "--max-lines", "20", "--whole-word"]) == 0
    assert "word_accuracy" in capsys.readouterr().out


def test_pll_word_l2r_is_an_option_of_pairs_and_text(setup, capsys):
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    got = _json(capsys, ["--model", setup["model"], "--input", setup["pairs"],
                         "--pll", "word-l2r"])
    want = minimal_pairs(model, tokenizer, read_pairs(setup["pairs"]), metric="word-l2r")
    assert got == {"kind": "minimal_pairs", "scored_by": "pseudo-log-likelihood",
                   "pll": "word-l2r", **want}
    got = _json(capsys, ["--model", setup["model"], "--input", setup["text"],
                         "--max-lines", "5", "--pll", "word-l2r"])
    want = pseudo_perplexity(model, tokenizer, setup["lines"][:5], metric="word-l2r")
    assert got["pll"] == "word-l2r"
    assert got["pseudo_perplexity"] == pytest.approx(want["pseudo_perplexity"], rel=1e-6)
    with pytest.raises(SystemExit) as refused:
        main(["evaluate", "--model", str(setup["model"]), "--input", str(setup["pairs"]),
              "--pll", "left"])
    assert refused.value.code == 2 and "--pll" in capsys.readouterr().err


def test_a_prepared_directory_gives_the_held_out_figures(setup, capsys):
    got = _json(capsys, ["--model", setup["model"], "--input", setup["data"],
                         "--seq-len", "32", "--pretrain-batch-size", "8",
                         "--eval-batches", "2"])
    model = load_pretraining_model(setup["model"])
    want = heldout_scores(model, setup["data"], batch_size=8, seq_len=32, eval_batches=2)
    assert got == {"kind": "heldout", **want}


def test_a_fine_tuned_directory_is_not_judged_as_a_language_model(setup, tmp_path):
    assert _is_pretrained(setup["model"])
    model = load_pretraining_model(setup["model"])
    save_model(model, tmp_path / "cls", tokenizer=Tokenizer.load(setup["model"]),
               architectures=["BertForSequenceClassification"],
               extra_config={"id2label": {"0": "a", "1": "b"}})
    assert not _is_pretrained(tmp_path / "cls")
    assert not _is_pretrained(tmp_path / "missing")


def test_a_directory_of_pair_files_as_blimp_ships_them(setup, tmp_path, capsys):
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for name, (good, bad, _) in zip(("agreement", "order"), (PAIRS[0], PAIRS[2])):
        (blimp / f"{name}.jsonl").write_text(
            json.dumps({"sentence_good": good, "sentence_bad": bad}) + "\n", encoding="utf-8")
    got = _json(capsys, ["--model", setup["model"], "--input", blimp])
    model, tokenizer = load_pretraining_model(setup["model"]), Tokenizer.load(setup["model"])
    want = minimal_pairs(model, tokenizer, read_pairs(blimp))
    assert got == {"kind": "minimal_pairs", "scored_by": "pseudo-log-likelihood",
                   "pll": "original", **want}
    assert got["group_by"] == "file" and set(got["groups"]) == {"agreement", "order"}
    assert main(["evaluate", "--model", str(setup["model"]), "--input", str(blimp)]) == 0
    table = capsys.readouterr().out
    assert "mean_group_accuracy" in table and "agreement" in table


def test_a_directory_that_is_neither_prepared_nor_pairs_is_one_line(setup, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("the dog runs .\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(setup["model"]), "--input", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "neither a finished `bertkit prepare` output" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content,message", [
    ('{"sentence_good": "the dog runs ."}\n', "bad.jsonl:1: no 'sentence_bad'"),
    ('{"sentence_good": "a", "sentence_bad": "b"}\n{"sentence_bad": 1}\n',
     "bad.jsonl:2: no 'sentence_good'"),
])
def test_a_bad_pair_file_is_one_line(setup, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    assert main(["evaluate", "--model", str(setup["model"]), "--input", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_prepared_directory_of_another_tokenizer_is_refused(setup, tmp_path, capsys):
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "runs", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(pieces) + "\n", encoding="utf-8")
    tokenizer = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    cfg = EncoderConfig(vocab_size=len(pieces), hidden_size=32, num_layers=1, num_heads=2,
                        intermediate_size=64, max_positions=64)
    model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    save_model(model, tmp_path / "other", tokenizer=tokenizer)
    assert main(["evaluate", "--model", str(tmp_path / "other"), "--input",
                 str(setup["data"])]) == 2
    err = capsys.readouterr().err
    assert "tokenizer does not match the data" in err and len(err.strip().splitlines()) == 1
