"""fill-mask against transformers' BertForMaskedLM on a random tiny model saved by bertkit."""
from __future__ import annotations

import random

import pytest
import torch

from bertkit.model.create import init_model
from bertkit.files import UserError
from bertkit.model.fill_mask import FillMask, fill_mask
from bertkit.model.hub import load_pretraining_model
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.vocab import train_tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    "the [MASK] sat on the mat .",
    "[MASK] and [MASK] went to the market , where [MASK] bought bread .",
    "a much longer sentence about the river , the hills , and the [MASK] that the people of "
    "the village loved to watch in the evening light .",
    "[MASK]",
    "two masks [MASK] [MASK] side by side",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fill")
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "mat", "river", "hills", "village", "bread", "market",
             "people", "evening", "light", "went", "bought", "and", "to", "a", "of", ","]
    (root / "corpus.txt").write_text("\n".join(" ".join(rng.choices(words, k=12))
                                               for _ in range(300)) + "\n", encoding="utf-8")
    tok = train_tokenizer([root / "corpus.txt"], vocab_size=200, progress=False)
    # A wide initialisation spreads the logits, so that top-k orders are not near-ties.
    init_model("tiny", tok, root / "model", seed=3, initializer_range=0.2, max_positions=64)
    return root / "model"


def test_top_k_matches_bert_for_masked_lm(model_dir):
    ours = FillMask.load(model_dir, batch_size=2)  # several length buckets, reordered
    results = ours(TEXTS, top_k=4)
    hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    hf, loading = transformers.BertForMaskedLM.from_pretrained(model_dir,
                                                               output_loading_info=True)
    assert not loading["missing_keys"]
    hf.eval()
    batch = hf_tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**batch).logits
    for text, result, ids, row in zip(TEXTS, results, batch["input_ids"], logits):
        assert result["text"] == text
        where = (ids == hf_tok.mask_token_id).nonzero().squeeze(1)
        assert len(result["masks"]) == len(where) == text.count("[MASK]")
        for guesses, position in zip(result["masks"], where):
            scores, top = row[position].softmax(-1).topk(4)
            assert [g["token"] for g in guesses] == top.tolist()
            assert [g["score"] for g in guesses] == pytest.approx(scores.tolist(), abs=1e-5)
            assert [g["token_str"] for g in guesses] == [hf_tok.decode([t]) for t in top]
            assert guesses[0]["score"] >= guesses[-1]["score"]


def test_guesses_are_the_fill_mask_pipelines(model_dir):
    """The same dicts as transformers' pipeline("fill-mask"): for one [MASK] its list, for
    several its list of lists (each sequence keeping the other [MASK]s and the specials)."""
    pipe = transformers.pipeline("fill-mask", model=str(model_dir), device="cpu")
    results = FillMask.load(model_dir, batch_size=2)(TEXTS, top_k=3)
    for text, result in zip(TEXTS, results):
        theirs = pipe(text, top_k=3)
        ours = result["masks"][0] if text.count("[MASK]") == 1 else result["masks"]
        if text.count("[MASK]") == 1:
            theirs, ours = [theirs], [ours]
        assert len(ours) == len(theirs)
        for mine, pipes in zip(ours, theirs):
            assert [list(g) for g in mine] == [["score", "token", "token_str", "sequence"]] * 3
            assert [{**g, "score": pytest.approx(g["score"], abs=1e-5)} for g in pipes] == mine
    assert "[MASK]" not in results[0]["masks"][0][0]["sequence"]
    assert results[1]["masks"][0][0]["sequence"].count("[MASK]") == 2


def test_function_and_class_agree(model_dir):
    model, tok = load_pretraining_model(model_dir), Tokenizer.load(model_dir)
    by_dir = fill_mask(model_dir, TEXTS[:2], top_k=3)
    by_model = fill_mask(model, TEXTS[:2], top_k=3, tokenizer=tok)
    assert by_dir == by_model
    assert fill_mask(model, TEXTS[0], tokenizer=tok)[0]["masks"][0][0]["token"] == \
        by_dir[0]["masks"][0][0]["token"]
    assert len(by_dir[0]["masks"][0]) == 3
    with pytest.raises(ValueError, match="tokenizer"):
        fill_mask(model, TEXTS)


def test_bad_texts_are_named(model_dir):
    filler = FillMask.load(model_dir)
    with pytest.raises(UserError, match=r"text 2: no \[MASK\]"):
        filler(["a [MASK]", "no blank here"])
    with pytest.raises(UserError, match=r"notes.txt:4: no \[MASK\]"):
        filler(["nothing"], names=["notes.txt:4"])
    with pytest.raises(UserError, match=r"text 1: \d+ tokens, longer than max_length 64"):
        filler(["the cat " * 40 + "[MASK]"])
    assert filler([]) == []


def test_the_command_reads_standard_input(model_dir, monkeypatch, capsys):
    import io
    import json

    from bertkit.cli.main import main

    monkeypatch.setattr("sys.stdin", io.StringIO("the [MASK] sat\n[MASK] and [MASK]\n"))
    assert main(["fill-mask", "--model", str(model_dir), "--input", "-", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["the [MASK] sat", "[MASK] and [MASK]"]
    assert rows == FillMask.load(model_dir)(["the [MASK] sat", "[MASK] and [MASK]"])
    monkeypatch.setattr("sys.stdin", io.StringIO("a [MASK]\nno blank\n"))
    assert main(["fill-mask", "--model", str(model_dir), "--input", "-"]) == 2
    assert "<stdin>:2: no [MASK]" in capsys.readouterr().err
