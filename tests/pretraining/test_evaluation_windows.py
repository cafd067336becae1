"""`evaluate --long-inputs windows` of a pretrained masked LM on a text file: a line longer than
the model read in windows, each piece scored (masked-token scores, pseudo-log-likelihood) in
the window where it is most central; the plain figures wherever every line fits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.model.hub import save_model
from bertkit.pretraining.evaluation import masked_token_scores, pseudo_perplexity
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.windows import split

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["the", "a", "dog", "dogs", "cat", "runs", "run", "sleeps", "near", "tree", "house", "."]
LONG = "the dog runs near the tree . a cat sleeps near the house . the dogs run ."  # 18 pieces
SHORT = ["the dog runs .", "a cat sleeps near the house .", "the dogs run"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A random masked LM of 10 positions (LONG takes three windows of 8 pieces), its
    tokenizer and its directory."""
    root = tmp_path_factory.mktemp("lm")
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n", encoding="utf-8")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2,
                        num_heads=2, intermediate_size=64, max_positions=10, hidden_dropout=0.0,
                        attention_dropout=0.0)
    model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    save_model(model, root / "model", tokenizer=tokenizer)
    return model.eval(), tokenizer, root / "model"


def _log_probs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return F.log_softmax(model(ids[None], torch.zeros_like(ids)[None],
                                   torch.ones_like(ids)[None])[0][0], -1)


def _plain_windowed_pll(model, tokenizer, text: str) -> tuple[float, int]:
    """Each piece masked alone in the window where it is most central, that window run by
    itself: (the sum of log P, pieces scored)."""
    ids = torch.tensor(tokenizer.encode(text).ids)
    windows = split(len(ids), (1, len(ids) - 1), 10)
    total = 0.0
    for t in range(1, len(ids) - 1):
        held = torch.from_numpy(windows.positions[windows.owner[t]])
        window = ids[held].clone()
        at = int((held == t).nonzero())
        window[at] = tokenizer.mask_id
        total += float(_log_probs(model, window)[at, ids[t]])
    return total, len(ids) - 2


def test_a_long_text_s_pieces_are_each_scored_in_their_most_central_window(lm):
    model, tokenizer, _ = lm
    assert len(tokenizer.encode(LONG).ids) == 20
    got = pseudo_perplexity(model, tokenizer, [LONG, SHORT[0]], windows=True)
    want = [_plain_windowed_pll(model, tokenizer, t) for t in (LONG, SHORT[0])]
    assert got["pieces"] == sum(n for _, n in want) == 18 + 4
    assert got["pseudo_log_likelihood"] == pytest.approx(sum(s for s, _ in want), abs=1e-4)


def test_masked_tokens_of_a_long_text_each_predicted_in_their_most_central_window(lm):
    model, tokenizer, _ = lm
    got = masked_token_scores(model, tokenizer, [LONG], mask_rate=1.0, windows=True)
    ids = torch.tensor(tokenizer.encode(LONG).ids)
    windows = split(len(ids), (1, len(ids) - 1), 10)
    losses, right = [], 0
    for k, held in enumerate(windows.positions):  # every piece masked, the owned ones scored
        window = ids[torch.from_numpy(held)].clone()
        window[1:-1] = tokenizer.mask_id
        logp = _log_probs(model, window)
        for at in np.flatnonzero(windows.owned(k) & ~windows.shared[held]):
            losses.append(-float(logp[at, ids[held[at]]]))
            right += int(logp[at].argmax() == ids[held[at]])
    assert got["tokens"] == len(losses) == 18
    assert got["loss"] == pytest.approx(np.mean(losses), abs=1e-5)
    assert got["accuracy"] == right / 18


@pytest.mark.parametrize("kw", [{}, {"whole_word": True}, {"mask_frac": 0.8, "random_frac": 0.1}])
def test_windows_equal_the_plain_figures_where_every_text_fits(lm, kw):
    model, tokenizer, _ = lm
    assert masked_token_scores(model, tokenizer, SHORT, seed=1, windows=True, **kw) == \
        masked_token_scores(model, tokenizer, SHORT, seed=1, **kw)
    for metric in ("original", "word-l2r"):
        assert pseudo_perplexity(model, tokenizer, SHORT, metric=metric, windows=True) == \
            pseudo_perplexity(model, tokenizer, SHORT, metric=metric)


def test_cli_scores_a_text_file_in_windows_and_refuses_minimal_pairs(lm, tmp_path, capsys):
    model, tokenizer, model_dir = lm
    text = tmp_path / "text.txt"
    text.write_text(f"{LONG}\n{SHORT[1]}\n", encoding="utf-8")
    args = ["evaluate", "--model", str(model_dir), "--input", str(text), "--json", "--quiet"]
    assert main(args) == 0
    cut = json.loads(capsys.readouterr().out)
    assert main([*args, "--long-inputs", "windows"]) == 0
    got = json.loads(capsys.readouterr().out)
    lines = [LONG, SHORT[1]]
    want = {**masked_token_scores(model, tokenizer, lines, windows=True),
            **pseudo_perplexity(model, tokenizer, lines, windows=True)}
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key
    assert got["pieces"] == 18 + 7 and cut["pieces"] == 8 + 7
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"sentence_good": SHORT[0], "sentence_bad": SHORT[2]}) + "\n")
    assert main(["evaluate", "--model", str(model_dir), "--input", str(pairs),
                 "--long-inputs", "windows"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --long-inputs windows: {pairs} is no text file for a "
                          "masked LM") and len(err.splitlines()) == 1
