"""Skip-gram with negative sampling: the sampling statistics, the gradients, planted
co-occurrences learned, files and the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit.cli.main as cli
from bertkit.files import UserError
from bertkit.embeddings.static import StaticVectors, Tokenization
from bertkit.road.word2vec import (Corpus, SkipGramConfig, keep_probabilities, noise_distribution,
                                   read_corpus, sample_negatives, sgns_gradients, sgns_loss,
                                   skipgram_pairs, subsample, train_skipgram,
                                   train_static_vectors)
from bertkit.text.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[2]


def test_negatives_follow_unigram_to_the_three_quarters():
    counts = np.array([1000, 300, 100, 30, 10, 3, 1])
    expected = counts ** 0.75 / (counts ** 0.75).sum()
    assert torch.allclose(noise_distribution(counts), torch.from_numpy(expected))
    cdf = torch.cumsum(noise_distribution(counts), 0)
    n = 400_000
    draws = sample_negatives(cdf, (n,), torch.Generator().manual_seed(1))
    observed = np.bincount(draws.numpy(), minlength=len(counts))
    # Pearson chi-square with 6 degrees of freedom: 22.5 is its 0.999 quantile.
    chi2 = ((observed - n * expected) ** 2 / (n * expected)).sum()
    assert chi2 < 22.5, (observed, n * expected)
    # ... and plainly not the raw unigram distribution.
    raw = counts / counts.sum()
    assert ((observed - n * raw) ** 2 / (n * raw)).sum() > 1000


def test_subsampling_keeps_frequent_words_at_the_expected_rate():
    # token 0 has frequency 0.5, token 1 frequency 1e-6: t = 1e-3 keeps sqrt(1e-3 / 0.5).
    counts = np.array([500_000, 1] + [1] * 499_999)
    keep = keep_probabilities(counts, 1e-3)
    assert keep[0].item() == pytest.approx(np.sqrt(1e-3 / 0.5))
    assert keep[1].item() == 1.0
    assert torch.all(keep_probabilities(counts, 0.0) == 1.0)
    ids = torch.cat([torch.zeros(200_000, dtype=torch.long), torch.ones(20_000, dtype=torch.long)])
    kept = subsample(ids, keep, torch.Generator().manual_seed(0))
    rate0 = kept[:200_000].float().mean().item()
    p = np.sqrt(1e-3 / 0.5)
    assert abs(rate0 - p) < 4 * np.sqrt(p * (1 - p) / 200_000)
    assert kept[200_000:].all()


def test_pairs_stay_on_their_line_and_thin_out_with_distance():
    n, window = 20_000, 3
    ids = torch.arange(n)
    lines = torch.arange(n) // 10  # lines of 10 tokens
    c, o = skipgram_pairs(ids, lines, window, torch.Generator().manual_seed(0))
    assert torch.all(lines[c] == lines[o])
    dist = (c - o).abs()
    assert dist.min() >= 1 and dist.max() <= window
    for d in range(1, window + 1):
        possible = 2 * (n // 10) * (10 - d)  # both directions
        rate = (dist == d).sum().item() / possible
        assert abs(rate - (window - d + 1) / window) < 0.02


def test_closed_form_gradients_match_autograd():
    g = torch.Generator().manual_seed(0)
    c, o, n = (torch.randn(*s, generator=g, dtype=torch.float64) for s in
               ((7, 5), (7, 5), (7, 3, 5)))
    loss, dc, do, dn = sgns_gradients(c, o, n)
    leaves = [t.clone().requires_grad_() for t in (c, o, n)]
    ref = sgns_loss(*leaves)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item())
    for ours, leaf in zip((dc, do, dn), leaves):
        assert torch.allclose(ours, leaf.grad)


def _planted_corpus(path: Path, groups: int = 12, lines: int = 1500, seed: int = 0) -> list:
    """Lines of random filler words, each holding one planted group {aN, bN, cN}: its three
    words always occur together, side by side in a random order."""
    rng = np.random.default_rng(seed)
    filler = [f"f{i}" for i in range(60)]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            words = list(rng.choice(filler, size=8))
            k = int(rng.integers(groups))
            at = int(rng.integers(len(words) + 1))
            words[at:at] = list(rng.permutation([f"a{k}", f"b{k}", f"c{k}"]))
            f.write(" ".join(words) + "\n")
    return [(f"a{k}", f"b{k}", f"c{k}") for k in range(groups)]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("static")
    corpus = tmp / "planted.txt"
    groups = _planted_corpus(corpus)
    config = SkipGramConfig(dim=24, window=2, negatives=5, epochs=4, min_count=1,
                            subsample=0.0, lr=0.05, batch_size=512, seed=0)
    return corpus, groups, train_static_vectors([corpus], config, progress=False)


def test_planted_cooccurrences_become_nearest_neighbours(planted):
    _, groups, model = planted
    words = [w for g in groups for w in g]
    hits = sum(model.neighbors(w, 1)[0][0] in g for g in groups for w in g)
    assert hits >= 0.9 * len(words), hits
    a, b, _ = groups[0]
    assert model.similarity(a, b) > model.similarity(a, groups[1][1]) + 0.3
    # What the objective itself learns: P(b is a's neighbour) = s(v_a . u_b), high for the
    # planted partner, low for a word of another group.
    v, u, ix = model.vectors, model.context, model.index
    assert v[ix[a]] @ u[ix[b]] > 1.0 > 0.0 > v[ix[a]] @ u[ix[groups[1][1]]]
    assert model.stats["epoch_losses"][-1] < model.stats["epoch_losses"][0]


def test_one_vector_per_type_but_contexts_differ(planted):
    _, _, model = planted
    texts = ["f1 f2 a0 b0 f3", "f7 f8 a0 b0 f9"]
    spans = [(6, 8), (6, 8)]
    same = model.context_vectors(texts, spans, window=0, include_target=True)
    assert np.allclose(same[0], same[1])  # the word alone: one vector whatever the context
    ctx = model.context_vectors(texts, spans, window=2)
    cos = ctx[0] @ ctx[1] / (np.linalg.norm(ctx[0]) * np.linalg.norm(ctx[1]))
    assert cos < 0.999
    assert np.allclose(ctx[0], model.vectors[[model.index[t] for t in ("f1", "f2", "b0", "f3")]]
                       .mean(0), atol=1e-6)


def test_save_load_round_trip(planted, tmp_path):
    _, groups, model = planted
    model.save(tmp_path / "m")
    back = StaticVectors.load(tmp_path / "m")
    assert back.tokens == model.tokens
    assert np.array_equal(back.vectors, model.vectors)
    assert back.config == model.config
    assert back.neighbors(groups[0][0], 3) == model.neighbors(groups[0][0], 3)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_pieces_tokenization(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "bank", "river", "money",
             "##s", "b", "##ank"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    split = Tokenization(tok).split(["the banks"])[0]
    assert [t for t, _, _ in split] == ["the", "bank", "##s"]
    assert split[2][1:] == (8, 9)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the bank river\nthe banks money\n" * 50, encoding="utf-8")
    model = train_static_vectors([corpus], SkipGramConfig(dim=8, epochs=1, min_count=1,
                                                         subsample=0.0), tok, progress=False)
    assert "##s" in model.tokens
    assert np.allclose(model.vector("banks"),
                       model.vectors[[model.index["bank"], model.index["##s"]]].mean(0))
    model.save(tmp_path / "m")
    loaded = StaticVectors.load(tmp_path / "m")
    assert loaded.tokenization.kind == "pieces"
    assert loaded.tokenization.tokens(["the banks"]) == [["the", "bank", "##s"]]


def test_bad_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(UserError, match="fewer than two distinct tokens"):
        read_corpus([empty], Tokenization())
    with pytest.raises(ValueError, match="window"):
        SkipGramConfig(window=0)
    with pytest.raises(UserError, match="not a model directory"):
        StaticVectors.load(tmp_path)


def test_the_corpus_comes_in_any_shape_prepare_reads(planted, tmp_path):
    """Gzipped JSON lines, the text in a field of their own: the corpus of the plain file,
    window boundaries included; the other fields are no words of it."""
    import gzip
    import json

    corpus = planted[0]
    lines = corpus.read_text(encoding="utf-8").splitlines()
    with gzip.open(tmp_path / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps({"body": line, "note": "zzyzx"}) + "\n")
    plain = read_corpus([corpus], Tokenization(), min_count=1)
    records = read_corpus([tmp_path / "c.jsonl.gz"], Tokenization(), min_count=1,
                          text_field="body")
    assert records.tokens == plain.tokens and "zzyzx" not in records.tokens
    np.testing.assert_array_equal(records.ids, plain.ids)
    np.testing.assert_array_equal(np.diff(records.lines) != 0, np.diff(plain.lines) != 0)


def test_cli(planted, tmp_path, capsys):
    corpus, groups, _ = planted
    out = tmp_path / "vec"
    assert cli.main(["static", "train", "--input", str(corpus), "--dim", "16",
                     "--window", "2", "--epochs", "2", "--min-count", "1", "--subsample", "0",
                     "--out", str(out), "--quiet"]) == 0
    assert "words x 16 dimensions" in capsys.readouterr().out
    record = json.loads((out / "training_args.json").read_text())
    assert record["command"].startswith("bertkit static train --input ")
    assert "--dim 16" in record["command"] and record["config"]["dim"] == 16
    assert cli.main(["static", "neighbors", "--model", str(out), "--top-k", "3", "a0"]) == 0
    assert capsys.readouterr().out.startswith("a0: ")
    assert cli.main(["static", "similarity", "--model", str(out), "a0", "a0"]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(1.0, abs=1e-5)
    assert cli.main(["static", "similarity", "--model", str(out), "a0", "zebra"]) == 2
    assert "not in the vocabulary" in capsys.readouterr().err
    assert cli.main(["static", "contexts", "--model", str(out), "--word", "a0",
                     "f1 a0 f2", "f9 f8 A0"]) == 0
    table = capsys.readouterr().out
    assert "[1]   1.000   1.000" in table and "[2]   1.000   1.000" in table
    assert cli.main(["static", "contexts", "--model", str(out), "--word", "a0", "f1 f2"]) == 2
    assert "does not occur as a word" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_in_a_subprocess(planted, tmp_path):
    """One real process: the installed console script."""
    corpus, _, _ = planted
    out = tmp_path / "vec"
    assert cli.main(["static", "train", "--input", str(corpus), "--dim", "16",
                     "--window", "2", "--epochs", "1", "--min-count", "1", "--subsample", "0",
                     "--out", str(out), "--quiet"]) == 0
    exe = Path(sys.executable).parent / "bertkit"
    done = subprocess.run([str(exe), "static", "neighbors", "--model", str(out), "b0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("b0: ")


def test_training_leaves_the_thread_count_as_it_found_it(capsys):
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not the config's 1
    try:
        corpus = Corpus(["a", "b", "c"], np.array([3, 2, 1]), np.array([0, 1, 2, 0, 1, 0]),
                        np.zeros(6, dtype=np.int64))
        _, _, stats = train_skipgram(corpus, SkipGramConfig(dim=4, epochs=2, min_count=1,
                                                            subsample=0.0, threads=1))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"skip-gram: {stats.pairs}/{stats.pairs} pairs (100%)")
    assert last.count("loss per pair by epoch: ") == 1 and "ETA" not in last
