"""ONNX export of sentence models: the pooling (every sentence-transformers mode, several side by
side) and the normalisation inside the graph; `OnnxEmbedder` (text in, vector out) equal to
`Embedder.encode` within 1e-4 on tiny random models and on the real all-MiniLM-L6-v2; int8;
the dev figures of PyTorch and both graphs; the command."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.sentence_model import POOLING_MODES
from bertkit.export.onnx import export_onnx, onnx_session, run_session
from bertkit.export.sentence import OnnxEmbedder, padded_batch
from bertkit.files import UserError
from bertkit.finetuning.tasks.embed import evaluate_sentence_model
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.text.tokenizer import Tokenizer

pytest.importorskip("onnxruntime")

WORDS = ["the", "film", "was", "good", "bad", "great", "awful", "a", "plot", "mary", "rome",
         "went", "to", ".", "Rome", "Mary", "##s", "cat", "dog", "sat"]

# other lengths than the export's own texts: one token to near the tiny models' 32 positions
TEXTS = ["good", "the film was good .", "mary went to rome", "Mary went to Rome .",
         "a cat sat", "the dogs sat . the cats went to rome . the plot was awful . a film "
         "was great . mary went", "awful", "the plot was bad but the film was great ."]


def _config(architecture: str) -> EncoderConfig:
    modern = dict(local_window=4, global_every=2) if architecture == "modern" else {}
    return EncoderConfig(architecture=architecture, vocab_size=5 + len(WORDS), hidden_size=32,
                         num_layers=2, num_heads=2, intermediate_size=64, max_positions=32,
                         **modern)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    return Tokenizer.from_vocab(vocab, lowercase=False)


def _sentence_model(path, tokenizer, pool, normalize=False, architecture="bert", seed=1,
                    lowercase=False):
    """A tiny random encoder saved as a sentence-transformers directory."""
    cfg = _config(architecture)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(seed))
    Embedder(encoder, tokenizer, pool=pool, normalize=normalize, lowercase=lowercase).save(path)
    return path


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("pool,normalize,architecture", [
    *[((mode,), False, "bert") for mode in POOLING_MODES],
    (("cls", "max", "mean"), True, "bert"),
    (("weightedmean", "lasttoken"), False, "modern"),
    (("mean",), True, "modern")], ids=lambda v: v if isinstance(v, str) else
    "+".join(v) if isinstance(v, tuple) else "norm" if v else "raw")
def test_each_pooling_inside_the_graph_equals_the_embedder(tmp_path, tokenizer, pool,
                                                            normalize, architecture):
    model = _sentence_model(tmp_path / "s", tokenizer, pool, normalize, architecture)
    result = export_onnx(model, tmp_path / "s.onnx")  # auto: modules.json makes it a sentence
    segments = ["token_type_ids"] if architecture == "bert" else []
    assert (result.kind, result.inputs, result.outputs) == \
        ("sentence", ["input_ids", *segments, "attention_mask"], ["sentence_embedding"])
    assert result.detail == "+".join(pool) + " pooling" + (", normalized" if normalize else "")
    assert result.max_abs_diff < 1e-4
    embedder = Embedder.load(model)
    want = embedder.encode(TEXTS)
    assert want.shape == (len(TEXTS), 32 * len(pool))
    onnx = OnnxEmbedder.load(result.path, model)
    onnx.max_padding = 1.0  # texts of any length share a batch: the graph pools past padding
    for batch_size in (1, 3, 32):
        _close(onnx.encode(TEXTS, batch_size=batch_size), want)
    # one padded batch straight into the graph, against each text encoded alone
    got, = run_session(onnx_session(result.path), padded_batch(embedder.tokenize(TEXTS)))
    _close(got, np.stack([embedder.encode(t) for t in TEXTS]))
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    _close(onnx.encode(TEXTS[1]), want[1])  # one string, one vector
    if architecture == "bert":  # pairs, [CLS] a [SEP] b [SEP] with segment 1
        pairs = [(TEXTS[1], TEXTS[2]), (TEXTS[0], TEXTS[5])]
        _close(onnx.encode(pairs), embedder.encode(pairs))


def test_lowercasing_and_the_maximum_length_go_with_the_graph(tmp_path, tokenizer):
    model = _sentence_model(tmp_path / "s", tokenizer, ("mean",), lowercase=True)
    settings = json.loads((model / "sentence_bert_config.json").read_text())
    (model / "sentence_bert_config.json").write_text(json.dumps({**settings,
                                                                 "max_seq_length": 7}))
    result = export_onnx(model, tmp_path / "s.onnx")
    onnx, embedder = OnnxEmbedder.load(result.path, model), Embedder.load(model)
    assert (onnx.max_length, onnx.lowercase) == (7, True)
    with pytest.warns(UserWarning, match="longer than 7 tokens"):
        got = onnx.encode(TEXTS)
    with pytest.warns(UserWarning):
        _close(got, embedder.encode(TEXTS))
    # "Mary" and "mary" are different pieces of this cased vocabulary: lowercasing matters
    np.testing.assert_array_equal(onnx.encode("Mary went to Rome ."),
                                  onnx.encode("mary went to rome ."))
    embedder.lowercase = False
    assert not np.allclose(embedder.encode("Mary went to Rome ."),
                           embedder.encode("mary went to rome ."), atol=1e-3)


def test_a_transformer_in_a_subdirectory(tmp_path, tokenizer):
    """The older sentence-transformers layout: the encoder and tokenizer in 0_Transformer/."""
    model = _sentence_model(tmp_path / "s", tokenizer, ("max",), normalize=True)
    (model / "0_Transformer").mkdir()
    for f in list(model.iterdir()):
        if f.is_file() and f.name != "modules.json":
            f.rename(model / "0_Transformer" / f.name)
    modules = json.loads((model / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (model / "modules.json").write_text(json.dumps(modules))
    result = export_onnx(model, tmp_path / "s.onnx")
    assert (result.kind, result.detail) == ("sentence", "max pooling, normalized")
    _close(OnnxEmbedder.load(result.path, model).encode(TEXTS), Embedder.load(model).encode(TEXTS))


def test_a_plain_encoder_exports_mean_pooling_on_request(tmp_path, tokenizer):
    cfg = _config("bert")
    model = PretrainingModel(cfg, fast=False)
    init_weights(model, cfg, torch.Generator().manual_seed(3))
    hub.save_model(model, tmp_path / "m", tokenizer=tokenizer)
    assert export_onnx(tmp_path / "m", tmp_path / "fill.onnx").kind == "fill-mask"  # as before
    result = export_onnx(tmp_path / "m", tmp_path / "m.onnx", "sentence")
    assert (result.kind, result.detail) == ("sentence", "mean pooling")
    _close(OnnxEmbedder.load(result.path, tmp_path / "m").encode(TEXTS),
           Embedder.load(tmp_path / "m").encode(TEXTS))
    with pytest.raises(UserError, match="not a sentence graph"):
        OnnxEmbedder.load(tmp_path / "fill.onnx", tmp_path / "m")


def _scored_pairs(path):
    rows = [(a, b, float(len(set(a.split()) & set(b.split()))))
            for a in TEXTS for b in TEXTS[:4] if a != b]
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": s}) + "\n"
                            for a, b, s in rows))
    return path


def test_int8_and_the_dev_figures_of_each_runtime(tmp_path, tokenizer):
    model = _sentence_model(tmp_path / "s", tokenizer, ("mean",), normalize=True, seed=4)
    dev = _scored_pairs(tmp_path / "dev.jsonl")
    result = export_onnx(model, tmp_path / "out" / "s.onnx", quantize=True, dev=dev)
    assert result.quantized == tmp_path / "out" / "s.int8.onnx"
    assert result.quantized.stat().st_size < result.path.stat().st_size
    onnx = pytest.importorskip("onnx")
    ops = {node.op_type for node in onnx.load(str(result.quantized)).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear"}
    int8 = OnnxEmbedder.load(result.quantized, model)  # the int8 file keeps the settings
    exact = OnnxEmbedder.load(result.path, model).encode(TEXTS)
    assert 0 < np.abs(int8.encode(TEXTS) - exact).max() < 0.05
    scores = result.dev_scores
    assert set(scores) == {"pytorch", "onnx", "onnx-int8"}
    want = evaluate_sentence_model(Embedder.load(model), dev)
    assert scores["pytorch"] == want
    # a random model's cosines lie close together: a difference of 1e-7 may swap two ranks
    assert scores["onnx"]["spearman"] == pytest.approx(want["spearman"], abs=0.01)
    assert scores["onnx"]["pairs"] == scores["onnx-int8"]["pairs"] == want["pairs"] == 28
    assert -1 <= scores["onnx-int8"]["spearman"] <= 1


def test_refusals_come_before_anything_is_written(tmp_path, tokenizer):
    model = _sentence_model(tmp_path / "s", tokenizer, ("mean",))
    bad = tmp_path / "dev.jsonl"
    bad.write_text('{"text": "only one column"}\n')
    with pytest.raises(UserError):
        export_onnx(model, tmp_path / "x.onnx", dev=bad)
    with pytest.raises(UserError, match="--task must be"):
        export_onnx(model, tmp_path / "x.onnx", "bogus")
    (model / "bertkit_task.json").write_text("{}")  # now a fine-tuned model's directory
    with pytest.raises(UserError, match="a fine-tuned task model, not a BERT encoder"):
        export_onnx(model, tmp_path / "x.onnx", "sentence")
    assert not (tmp_path / "x.onnx").exists()


def test_minilm_graph_equals_pytorch(tmp_path, minilm_dir):
    """The real all-MiniLM-L6-v2 (mean pooling, Normalize, 256 tokens): 1e-4 from PyTorch."""
    result = export_onnx(minilm_dir, tmp_path / "minilm.onnx", quantize=True)
    assert (result.kind, result.detail) == ("sentence", "mean pooling, normalized")
    assert result.max_abs_diff < 1e-4
    texts = ["A man is playing a guitar.", "A woman is slicing an onion.", "Hi",
             "The quick brown fox jumps over the lazy dog near the riverbank at dawn, while "
             "the birds sing and the town slowly wakes up."] * 3
    want = Embedder.load(minilm_dir).encode(texts)
    onnx = OnnxEmbedder.load(result.path, minilm_dir)
    assert onnx.max_length == 256 and want.shape == (12, 384)
    onnx.max_padding = 1.0
    _close(onnx.encode(texts, batch_size=5), want)
    int8 = OnnxEmbedder.load(result.quantized, minilm_dir).encode(texts)
    assert np.min(np.sum(int8 * want, axis=1)) > 0.98  # cosine to the float vectors


def test_the_command_writes_and_reports(tmp_path, tokenizer, capsys):
    from bertkit.cli.main import main

    model = _sentence_model(tmp_path / "s", tokenizer, ("cls", "mean"), normalize=True)
    dev = _scored_pairs(tmp_path / "dev.jsonl")
    assert main(["export", "onnx", "--model", str(model), "--out", str(tmp_path / "s.onnx"),
                 "--quantize", "--dev", str(dev)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 's.onnx'}: sentence graph (cls+mean pooling, "
                             "normalized), inputs input_ids, token_type_ids, attention_mask "
                             "-> sentence_embedding")
    assert float(out[0].rsplit(" ", 1)[1]) < 1e-4
    assert (tmp_path / "s.int8.onnx").is_file() and "int8" in out[1]
    assert [line.split(":")[0] for line in out[2:]] == \
        ["dev    pytorch", "dev       onnx", "dev  onnx-int8"]
    assert all(" spearman " in line for line in out[2:])
    assert out[2].split()[-1] == out[3].split()[-1]
