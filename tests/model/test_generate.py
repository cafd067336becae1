"""Text from a left-to-right model: greedy is the argmax loop, top-k 1 is greedy, top-p keeps
the smallest set reaching p, a cold temperature is greedy, a seed repeats its text; only clm
models write; next-token perplexity."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertkit.cli.main as cli
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.generate import (GenerationConfig, generate, generate_ids, is_causal,
                                    load_causal_model, log_likelihoods, next_token_scores,
                                    next_tokens,
                                    top_k_filter, top_p_filter)
from bertkit.model.heads import PretrainingModel
from bertkit.pretraining.evaluation import evaluate_pretrained, minimal_pairs
from bertkit.pretraining.objectives import objective_named
from bertkit.text.tokenizer import Tokenizer

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "hat", "and", "."]


def _model_dir(root, causal: bool):
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_layers=2, num_heads=2,
                        intermediate_size=32, max_positions=12, hidden_dropout=0.0,
                        attention_dropout=0.0)
    with torch.random.fork_rng():  # the modules' default init draws globally
        model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # sharper logits than BERT's init, so choices are not near-ties
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    objective_named("clm" if causal else "mlm").save(model, root / "model", tokenizer)
    return root / "model"


@pytest.fixture(scope="module")
def clm_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("clm"), causal=True)


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("mlm"), causal=False)


def test_only_a_clm_model_is_causal(clm_dir, mlm_dir):
    assert is_causal(clm_dir) and not is_causal(mlm_dir)
    assert json.loads((clm_dir / "config.json").read_text())["is_decoder"] is True
    assert "is_decoder" not in json.loads((mlm_dir / "config.json").read_text())
    with pytest.raises(UserError, match="not a left-to-right model"):
        load_causal_model(mlm_dir)


def test_greedy_is_the_argmax_loop(clm_dir):
    model, tokenizer = load_causal_model(clm_dir)
    prompt = [tokenizer.cls_id] + tokenizer.encode("the cat", add_special_tokens=False).ids
    ours = generate_ids(model, prompt, GenerationConfig(max_new_tokens=6))[0]
    ids, plain = list(prompt), []
    with torch.no_grad():
        for _ in range(6):
            h = model.encoder(torch.tensor([ids]), causal=True).last_hidden_state
            token = int(model.mlm(h)[0, -1].argmax())
            plain.append(token)
            ids.append(token)
    assert ours == plain
    # the prefix is read left to right: the last position's logits are not the
    # bidirectional ones
    with torch.no_grad():
        both = model.mlm(model.encoder(torch.tensor([ids[:4]]), causal=False)
                         .last_hidden_state)[0, 1]
        left = model.mlm(model.encoder(torch.tensor([ids[:4]]), causal=True)
                         .last_hidden_state)[0, 1]
    assert not torch.allclose(both, left)


class _Script(torch.nn.Module):
    """A fake model that writes 7, 8, then 3 whatever it reads: the loop's stop at [SEP]."""
    config = EncoderConfig(vocab_size=10, hidden_size=4, num_layers=1, num_heads=1,
                           intermediate_size=4, max_positions=16)

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def encoder(self, ids, causal):
        assert causal
        return type("Out", (), {"last_hidden_state": ids[..., None].float()})

    def mlm(self, h):  # h [N, 1]: the last piece read -> the next one
        script = {2: 7, 7: 8, 8: 3}
        return F.one_hot(torch.tensor([script[int(x)] for x in h[:, 0]]), 10).float()


def test_stop_at_sep():
    written = generate_ids(_Script(), [2], GenerationConfig(max_new_tokens=10), stop_id=3)
    assert written == [[7, 8]]


def test_top_k_of_one_is_greedy_and_a_cold_temperature_too(clm_dir):
    model, tokenizer = load_causal_model(clm_dir)
    prompt = [tokenizer.cls_id] + tokenizer.encode("a dog", add_special_tokens=False).ids
    greedy = generate_ids(model, prompt, GenerationConfig(max_new_tokens=8))[0]
    for seed in range(3):
        top1 = GenerationConfig(max_new_tokens=8, strategy="sample", top_k=1, seed=seed,
                                temperature=5.0, num_return_sequences=2)
        assert generate_ids(model, prompt, top1) == [greedy, greedy]
        cold = GenerationConfig(max_new_tokens=8, strategy="sample", temperature=1e-3,
                                seed=seed)
        assert generate_ids(model, prompt, cold)[0] == greedy


def test_same_seed_same_text(clm_dir):
    hot = dict(max_new_tokens=8, strategy="sample", temperature=2.0, num_return_sequences=3)
    a = generate(clm_dir, "the cat", GenerationConfig(**hot, seed=5))
    b = generate(clm_dir, "the cat", GenerationConfig(**hot, seed=5))
    c = generate(clm_dir, "the cat", GenerationConfig(**hot, seed=6))
    assert a == b and a != c
    assert all(t.startswith("the cat") for t in a)
    assert len(set(a)) > 1  # three draws, not one text three times


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    logits = probs.log()
    kept = {p: torch.isfinite(top_p_filter(logits, p))[0].nonzero().flatten().tolist()
            for p in (0.3, 0.5, 0.79, 0.81, 0.96, 1.0)}
    assert kept == {0.3: [1], 0.5: [1], 0.79: [1, 3], 0.81: [0, 1, 3], 0.96: [0, 1, 2, 3],
                    1.0: [0, 1, 2, 3]}
    # the kept logits are unchanged, the others -inf
    cut = top_p_filter(logits, 0.79)[0]
    assert torch.equal(cut[[1, 3]], logits[0, [1, 3]]) and torch.isinf(cut[[0, 2]]).all()
    # sampling with top-p never draws outside the set
    draws = next_tokens(logits.expand(2000, -1), GenerationConfig(strategy="sample", top_p=0.79),
                        torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {1, 3}
    share = (draws == 1).float().mean().item()
    assert abs(share - 0.5 / 0.8) < 0.04  # renormalised over the kept set


def test_top_k_filter():
    logits = torch.tensor([[1.0, 4.0, 3.0, -2.0], [0.0, 0.0, 5.0, 1.0]])
    assert torch.isfinite(top_k_filter(logits, 2)).tolist() == [[False, True, True, False],
                                                                [False, False, True, True]]
    assert torch.isfinite(top_k_filter(logits, 10)).all()


def test_bad_settings():
    for bad in (dict(temperature=0.0), dict(top_p=1.5), dict(top_k=0), dict(max_new_tokens=0),
                dict(strategy="beam")):
        with pytest.raises(UserError):
            GenerationConfig(**bad)


def test_next_token_perplexity_by_hand(clm_dir, tmp_path):
    model, tokenizer = load_causal_model(clm_dir)
    texts = ["the cat sat on the mat .", "a dog ran"]
    scores = next_token_scores(model, tokenizer, texts, batch_size=1)
    total, n = 0.0, 0
    with torch.no_grad():
        for t in texts:
            ids = [tokenizer.cls_id] + tokenizer.encode(t, add_special_tokens=False).ids
            h = model.encoder(torch.tensor([ids]), causal=True).last_hidden_state
            logp = torch.log_softmax(model.mlm(h)[0], -1)
            total -= sum(float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1))
            n += len(ids) - 1
    assert scores["tokens"] == n
    assert scores["next_token_loss"] == pytest.approx(total / n, rel=1e-5)
    assert scores["perplexity"] == pytest.approx(math.exp(total / n), rel=1e-5)
    # padded batches score the same
    assert next_token_scores(model, tokenizer, texts, batch_size=2)["next_token_loss"] \
        == pytest.approx(total / n, rel=1e-5)
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")
    report = evaluate_pretrained(clm_dir, lines)
    assert report["kind"] == "next_token"
    assert report["perplexity"] == pytest.approx(math.exp(total / n), rel=1e-5)


def test_a_causal_model_scores_minimal_pairs_by_its_log_likelihood(clm_dir):
    """Left to right, a sentence's score is log P(pieces), each given its left context only (a
    masked model's pseudo-log-likelihood would read a right context it never learned)."""
    model, tokenizer = load_causal_model(clm_dir)
    texts = ["the cat sat on the mat .", "mat the on sat cat the .", "a dog ran"]
    by_hand = []
    with torch.no_grad():
        for t in texts:
            ids = [tokenizer.cls_id] + tokenizer.encode(t, add_special_tokens=False).ids
            h = model.encoder(torch.tensor([ids]), causal=True).last_hidden_state
            logp = torch.log_softmax(model.mlm(h)[0], -1)
            by_hand.append(sum(float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1)))
    for batch_size in (1, 3):  # padded batches score the same
        assert log_likelihoods(model, tokenizer, texts, batch_size=batch_size) == \
            pytest.approx(by_hand, rel=1e-5)
    report = minimal_pairs(model, tokenizer, [{"sentence_good": texts[0],
                                               "sentence_bad": texts[1]}])
    assert report["mean_pll_difference"] == pytest.approx(by_hand[0] - by_hand[1], rel=1e-4)
    assert report["accuracy"] == (1.0 if by_hand[0] > by_hand[1] else 0.0)
    pairs = clm_dir.parent / "pairs.jsonl"
    pairs.write_text(json.dumps({"sentence_good": texts[0], "sentence_bad": texts[1]}) + "\n")
    assert evaluate_pretrained(clm_dir, pairs)["scored_by"] == \
        "log-likelihood"


def test_cli(clm_dir, mlm_dir, capsys):
    assert cli.main(["generate", "--model", str(clm_dir), "the cat", "--max-new-tokens", "4",
                     "--strategy", "sample", "--top-p", "0.9", "--seed", "3",
                     "--num-return-sequences", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["texts"]) == 2 and out["prompt"] == "the cat"
    assert cli.main(["generate", "--model", str(mlm_dir), "the cat"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a left-to-right model" in err
    assert cli.main(["generate", "--model", str(clm_dir), "x", "--temperature", "0"]) == 2


def test_evaluate_judges_a_clm_model_left_to_right_on_a_prepared_directory(tmp_path, tiny):
    from bertkit.pretraining.corpus import prepare
    from bertkit.pretraining.evaluation import LMEvalOptions
    from bertkit.text.vocab import train_tokenizer

    corpus = tiny.write_corpus(tmp_path / "corpus.txt", documents=20)
    train_tokenizer([corpus], vocab_size=100, out=tmp_path / "tok", progress=False)
    prepare([corpus], tmp_path / "tok", tmp_path / "data", heldout_fraction=0.3, workers=1,
            progress=False)
    tokenizer = Tokenizer.load(tmp_path / "tok")
    cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_layers=1,
                        num_heads=2, intermediate_size=32, max_positions=64)
    with torch.random.fork_rng():
        model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    objective_named("clm").save(model, tmp_path / "clm", tokenizer)
    settings = dict(seq_len=32, pretrain_batch_size=4, eval_batches=2)
    # whatever --objective says, a causal model is judged on next tokens
    default = evaluate_pretrained(tmp_path / "clm", tmp_path / "data", LMEvalOptions(**settings))
    clm = evaluate_pretrained(tmp_path / "clm", tmp_path / "data",
                              LMEvalOptions(objective="clm", **settings))
    assert default == clm and clm["kind"] == "heldout"
    assert clm["perplexity"] == pytest.approx(math.exp(clm["loss"]))


def test_a_left_to_right_model_runs_causally_wherever_it_runs(clm_dir, mlm_dir):
    """Embedding a clm model's text, or drawing its attention, reads it left to right as it
    was trained: a token's vector does not change with the words after it, and no token
    attends to a later one; a masked model reads both ways."""
    from bertkit.embeddings.embedder import Embedder
    from bertkit.model.attention import attention_weights
    from bertkit.model.hub import load_encoder

    for model_dir, causal in ((clm_dir, True), (mlm_dir, False)):
        first, second = Embedder.load(model_dir).token_vectors(
            ["the cat sat on the mat", "the cat ran and a hat"])  # [T, H] each
        assert np.allclose(first[:3], second[:3], atol=1e-6) == causal  # [CLS] the cat
        ids = torch.tensor([[2, 5, 6, 7, 8, 3], [2, 5, 10, 11, 12, 3]])
        weights = attention_weights(load_encoder(model_dir), ids)  # [L, B, A, T, T]
        assert bool((weights.triu(diagonal=1) == 0).all()) == causal
