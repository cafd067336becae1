"""SPLADE's pieces against their definitions, written as plain loops: the pooling, the FLOPS
regulariser and its warm-up, the ranking loss; a SparseEncoder directory read alike by
sentence-transformers and by bertkit; `embed` on it writes {token: weight} lines and never
pools token states."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.embeddings import sparse
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.sparse_encoder import SparseEncoder, load_model
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.model.kind import ModelKind, model_kind
from bertkit.text.tokenizer import Tokenizer

from tests.embeddings.conftest import SENTENCES, WORDS

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_pooling_is_the_max_over_real_tokens_of_log1p_relu():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g) * 3
    lengths = [5, 2, 0]  # the last row has no real token
    mask = torch.tensor([[1 if t < n else 0 for t in range(5)] for n in lengths])
    got = sparse.splade_pool(logits, mask)
    for b, n in enumerate(lengths):
        for v in range(7):
            want = max([math.log1p(max(0.0, float(logits[b, t, v]))) for t in range(n)],
                       default=0.0)
            assert float(got[b, v]) == pytest.approx(want, abs=1e-6)


def test_the_pooling_equals_sentence_transformers_splade_pooling():
    st = pytest.importorskip("sentence_transformers.sparse_encoder.modules")
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 6, 11, generator=g) * 2
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in (6, 3, 1, 4)])
    theirs = st.SpladePooling("max", "relu").eval()(
        {"token_embeddings": logits.clone(), "attention_mask": mask})["sentence_embedding"]
    torch.testing.assert_close(sparse.splade_pool(logits, mask), theirs)


def test_flops_is_the_sum_over_the_vocabulary_of_the_squared_mean_weight():
    g = torch.Generator().manual_seed(2)
    vectors = torch.relu(torch.randn(6, 9, generator=g)) * (torch.rand(6, 9, generator=g) > .5)
    want = sum((sum(abs(float(vectors[i, v])) for i in range(6)) / 6) ** 2 for v in range(9))
    assert float(sparse.flops(vectors)) == pytest.approx(want, rel=1e-6)
    assert float(sparse.flops(-vectors)) == pytest.approx(want, rel=1e-6)  # |w|


@pytest.mark.parametrize("total,warmup", [(30, 1 / 3), (10, 0.5), (2, 0.1), (7, 1.0), (9, 0.0)])
def test_the_warm_up_is_quadratic_over_the_first_share_of_the_steps(total, warmup):
    span = max(1, int(total * warmup))
    for step in range(total + 2):
        want = 5e-5 if warmup == 0 or step >= span else 5e-5 * (step / span) ** 2
        got = sparse.regulariser_weight(torch.tensor(step), total, warmup, 5e-5)
        assert float(got) == pytest.approx(want, rel=1e-6, abs=1e-15)


def _plain_ranking(queries, documents) -> float:
    total = 0.0
    for i, q in enumerate(queries.tolist()):
        scores = [sum(a * b for a, b in zip(q, d)) for d in documents.tolist()]
        top = max(scores)
        total += -(scores[i] - top - math.log(sum(math.exp(s - top) for s in scores)))
    return total / len(queries)


def test_the_loss_is_ranking_plus_each_side_s_weighted_flops():
    g = torch.Generator().manual_seed(3)
    q, p, n = (torch.relu(torch.randn(4, 8, generator=g)) for _ in range(3))
    documents = torch.cat([p, n])
    assert float(sparse.ranking_loss(q, documents)) == \
        pytest.approx(_plain_ranking(q, documents), rel=1e-5)
    got = sparse.splade_loss([q, p, n], 0.5, 0.25)
    want = _plain_ranking(q, documents) + 0.5 * float(sparse.flops(q)) \
        + 0.25 * float(sparse.flops(documents))
    assert float(got) == pytest.approx(want, rel=1e-5)


@pytest.fixture(scope="module")
def sparse_dir(tmp_path_factory) -> Path:
    """A random tiny BERT with its masked-LM head, saved as a SparseEncoder directory."""
    root = tmp_path_factory.mktemp("sparse")
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=2, num_heads=4,
                        intermediate_size=64, max_positions=64)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        lm = PretrainingModel(cfg)
        init_weights(lm, cfg)
        with torch.no_grad():  # a head whose logits are not all below zero
            lm.mlm.bias.normal_(0.5, 1.0)
    model = sparse.SpladeModel(lm.encoder, lm.mlm)
    return sparse.save_sparse_model(model, root / "splade", tokenizer, max_seq_length=48)


def test_sentence_transformers_reads_the_directory_as_bertkit_does(sparse_dir):
    st = pytest.importorskip("sentence_transformers")
    ours = SparseEncoder.load(sparse_dir)
    theirs = st.SparseEncoder(str(sparse_dir), device="cpu")
    got, want = ours.encode(SENTENCES), theirs.encode(SENTENCES)
    assert got.is_sparse and got.shape == (len(SENTENCES), 5 + len(WORDS))
    torch.testing.assert_close(got.to_dense(), want.to_dense(), atol=1e-5, rtol=0)
    mine, st_pairs = ours.decode(got[0], top_k=5), theirs.decode(want[0], top_k=5)
    assert [t for t, _ in mine] == [t for t, _ in st_pairs]
    assert [w for _, w in mine] == pytest.approx([w for _, w in st_pairs], abs=1e-5)
    assert theirs.max_seq_length == ours.max_seq_length == 48
    one = ours.encode(SENTENCES[1], convert_to_sparse_tensor=False)
    torch.testing.assert_close(one, got.to_dense()[1])
    torch.testing.assert_close(ours.similarity(got, got), got.to_dense() @ got.to_dense().T)
    modules = json.loads((sparse_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["MLMTransformer", "SpladePooling"]
    assert json.loads((sparse_dir / "config.json").read_text())["architectures"] == \
        ["BertForMaskedLM"]


def test_decode_lists_the_non_zero_entries_heaviest_first(sparse_dir):
    encoder = SparseEncoder.load(sparse_dir)
    vector = encoder.encode("we sat on the river bank .", convert_to_sparse_tensor=False)
    pairs = encoder.decode(vector)
    assert len(pairs) == int((vector != 0).sum())
    assert [w for _, w in pairs] == sorted((w for _, w in pairs), reverse=True)
    token, weight = pairs[0]
    assert weight == pytest.approx(float(vector.max()))
    assert encoder.tokenizer.token_to_id(token) == int(vector.argmax())
    assert encoder.decode(vector, top_k=3) == pairs[:3]


def test_the_directory_is_a_sparse_model_that_the_embedder_refuses(sparse_dir):
    assert model_kind(sparse_dir) is ModelKind.SPARSE
    with pytest.raises(UserError, match="sparse"):
        Embedder.load(sparse_dir)  # never mean-pooled by mistake
    from bertkit.model.info import info

    assert info(sparse_dir).config.vocab_size == 5 + len(WORDS)  # still a masked-LM directory
    assert sum(p.numel() for p in load_model(sparse_dir).mlm.parameters()) > 0


def test_embed_writes_json_lines_of_token_weights_and_never_pools(sparse_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES[:4]) + "\n")
    out = tmp_path / "vectors.jsonl"
    assert main(["embed", "--model", str(sparse_dir), "--input", str(texts), "--out", str(out),
                 "--quiet"]) == 0
    assert "4 sparse vectors" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4] and [r["row"] for r in rows] == [0, 1, 2, 3]
    encoder = SparseEncoder.load(sparse_dir)
    want = encoder.encode(SENTENCES[:4])
    for r, vector in zip(rows, want):
        pairs = encoder.decode(vector)
        assert list(r["vector"]) == [t for t, _ in pairs]
        assert list(r["vector"].values()) == pytest.approx([w for _, w in pairs])
    for argv, message in (([], "name it vectors.jsonl"),
                          (["--pool", "mean"], "--pool shapes pooled token vectors")):
        bad = tmp_path / ("vectors.npy" if not argv else "other.jsonl")
        code = main(["embed", "--model", str(sparse_dir), "--input", str(texts), "--out",
                     str(bad), "--quiet", *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert not bad.exists()


def test_bf16_vectors_are_close_to_fp32_and_the_precision_reaches_the_model(
        sparse_dir, tmp_path, capsys):
    """bf16 autocast changes the vectors a little (so it ran) and keeps their direction; the
    vectors come back in fp32; `embed --precision bf16` writes the bf16 vectors; an unknown
    precision is a programming error."""
    exact = SparseEncoder.load(sparse_dir).encode(SENTENCES, convert_to_sparse_tensor=False)
    encoder = SparseEncoder.load(sparse_dir, precision="bf16")
    fast = encoder.encode(SENTENCES, convert_to_sparse_tensor=False)
    assert fast.dtype == torch.float32 and not torch.equal(fast, exact)
    assert torch.nn.functional.cosine_similarity(fast, exact).min() > 0.99
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES[:3]) + "\n")
    out = tmp_path / "vectors.jsonl"
    assert main(["embed", "--model", str(sparse_dir), "--input", str(texts), "--out", str(out),
                 "--precision", "bf16", "--device", "cpu", "--quiet"]) == 0
    rows = [json.loads(line)["vector"] for line in out.read_text().splitlines()]
    for row, vector in zip(rows, fast[:3]):
        assert list(row.values()) == pytest.approx([w for _, w in encoder.decode(vector)])
    with pytest.raises(ValueError, match="fp16"):
        SparseEncoder.load(sparse_dir, precision="fp16")


def test_the_model_is_the_encoder_with_its_head_on_every_token(sparse_dir):
    """The vectors from the parts by hand: transformers' BertForMaskedLM logits, pooled."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertForMaskedLM.from_pretrained(str(sparse_dir)).eval()
    tokenizer = Tokenizer.load(sparse_dir)
    ids = torch.tensor([tokenizer.encode(SENTENCES[0]).ids])
    with torch.no_grad():
        logits = hf(input_ids=ids).logits[0]
    want = torch.log1p(torch.relu(logits)).amax(0)
    got = SparseEncoder.load(sparse_dir).encode(SENTENCES[0], convert_to_sparse_tensor=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_a_head_that_does_not_fit_its_encoder_is_one_error(sparse_dir, tmp_path):
    from safetensors.torch import load_file, save_file
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sparse_dir, broken)
    weights = load_file(str(broken / "model.safetensors"))
    weights["cls.predictions.bias"] = torch.zeros(3)
    save_file(weights, str(broken / "model.safetensors"))
    model = load_model(sparse_dir)
    with pytest.raises(UserError, match="does not fit"):
        sparse.load_head(model, broken)


def test_the_ranking_loss_equals_sentence_transformers(sparse_dir):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss

    theirs = SparseMultipleNegativesRankingLoss(st.SparseEncoder(str(sparse_dir), device="cpu"))
    g = torch.Generator().manual_seed(4)
    q, p, n = (torch.relu(torch.randn(5, 12, generator=g)) for _ in range(3))
    assert float(theirs.compute_loss_from_embeddings([q, p, n], None)) == \
        pytest.approx(float(sparse.ranking_loss(q, torch.cat([p, n]))), rel=1e-5)


def test_a_pooling_bertkit_does_not_compute_is_one_error(sparse_dir, tmp_path):
    import shutil

    other = tmp_path / "sum"
    shutil.copytree(sparse_dir, other)
    (other / sparse.POOLING_DIR / "config.json").write_text(
        json.dumps({"pooling_strategy": "sum", "activation_function": "relu"}))
    with pytest.raises(UserError, match="max pooling of relu activations"):
        SparseEncoder.load(other)


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_the_fast_pool_equals_the_plain_logits_values_and_gradients(rows):
    """`splade_head_pool` (max first, a sparse backward) against `splade_pool` of the full
    [B, T, V] logits: the vectors and every gradient (states, decoder, bias, transform)."""
    from bertkit.model.heads import MaskedLMHead

    torch.manual_seed(0)
    cfg = EncoderConfig(vocab_size=97, hidden_size=16, num_layers=1, num_heads=2,
                        intermediate_size=32, max_positions=32)
    words = torch.nn.Embedding(97, 16)
    head = MaskedLMHead(cfg, words)
    torch.nn.init.normal_(head.bias)
    states = torch.randn(5, 7, 16, requires_grad=True)
    mask = torch.ones(5, 7, dtype=torch.long)
    mask[1, 4:] = 0
    mask[3, 1:] = 0
    probe = torch.randn(5, 97)

    def run(pool):
        for p in [*head.parameters(), words.weight, states]:
            p.grad = None
        out = pool()
        (out * probe).sum().backward()
        return out.detach(), [t.grad.clone() for t in
                              (states, words.weight, head.bias, head.dense.weight)]

    plain = run(lambda: sparse.splade_pool(head(states), mask))
    fast = run(lambda: sparse.splade_head_pool(states, head, mask, rows=rows))
    torch.testing.assert_close(fast[0], plain[0], atol=1e-6, rtol=1e-5)
    for ours, theirs in zip(fast[1], plain[1]):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert (plain[0] == 0).any() and (plain[0] > 0).any()  # relu cuts some entries, not all


def test_the_model_s_vectors_are_the_same_with_speed_paths_on_and_off(sparse_dir):
    model = load_model(sparse_dir)
    ids = torch.tensor([[2, 7, 8, 9, 3, 0], [2, 10, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        on = model(ids, attention_mask=mask)
        model.encoder.fast = False
        off = model(ids, attention_mask=mask)
    torch.testing.assert_close(on, off, atol=1e-5, rtol=1e-5)
    assert (on > 0).any()
