"""ONNX export of sparse (SPLADE) encoders: the masked-LM logits, the max over real tokens of
log(1 + relu) and the mask inside the graph; its vectors equal `SparseEncoder.encode`'s and
sentence-transformers' SparseEncoder's within 1e-4 on padded batches; the command."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.embeddings import sparse
from bertkit.embeddings.sparse_encoder import SparseEncoder
from bertkit.export.onnx import export_onnx, onnx_session, run_session
from bertkit.export.sentence import padded_batch
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

pytest.importorskip("onnxruntime")

WORDS = ["the", "film", "was", "good", "bad", "great", "awful", "a", "plot", "mary", "rome",
         "went", "to", ".", "river", "bank", "boat"]
TEXTS = ["good", "the film was good .", "mary went to rome", "a boat on the river",
         "the bank of the river . the film was awful . mary went to rome . the plot", "bad"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    return Tokenizer.from_vocab(vocab)


def _sparse_model(path, tokenizer, architecture: str):
    """A tiny random SPLADE model saved as a SparseEncoder directory."""
    modern = dict(local_window=4, global_every=2) if architecture == "modern" else {}
    cfg = EncoderConfig(architecture=architecture, vocab_size=5 + len(WORDS), hidden_size=32,
                        num_layers=2, num_heads=2, intermediate_size=64, max_positions=32,
                        **modern)
    model = sparse.new_model(Encoder(cfg))
    init_weights(model, cfg, torch.Generator().manual_seed(3))
    return sparse.save_sparse_model(model, path, tokenizer, max_seq_length=32)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_the_graph_gives_the_sparse_encoders_vectors(tmp_path, tokenizer, architecture):
    model = _sparse_model(tmp_path / "s", tokenizer, architecture)
    result = export_onnx(model, tmp_path / "s.onnx")  # auto: SpladePooling makes it sparse
    segments = ["token_type_ids"] if architecture == "bert" else []
    assert (result.kind, result.inputs, result.outputs) == \
        ("sparse", ["input_ids", *segments, "attention_mask"], ["sparse_embedding"])
    assert result.max_abs_diff < 1e-4
    encoded = tokenizer.encode_batch(TEXTS, None, max_length=32, with_offsets=False)
    batch = padded_batch(list(encoded))
    assert batch["attention_mask"].min() == 0  # padded: the mask inside the graph matters
    got, = run_session(onnx_session(result.path), batch)
    want = SparseEncoder.load(model).encode(TEXTS, convert_to_sparse_tensor=False).numpy()
    assert got.shape == (len(TEXTS), 5 + len(WORDS)) and (got > 0).any() and (got == 0).any()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    if architecture == "bert":
        st = pytest.importorskip("sentence_transformers")
        theirs = st.SparseEncoder(str(model), device="cpu").encode(TEXTS).to_dense().numpy()
        np.testing.assert_allclose(got, theirs, atol=1e-4, rtol=0)


def test_the_command_writes_and_reports_and_refuses_a_dev_file(tmp_path, tokenizer, capsys):
    from bertkit.cli.main import main

    model = _sparse_model(tmp_path / "s", tokenizer, "bert")
    assert main(["export", "onnx", "--model", str(model), "--out", str(tmp_path / "s.onnx"),
                 "--quantize"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 's.onnx'}: sparse graph (SPLADE-max over the "
                             f"vocabulary), inputs input_ids, token_type_ids, attention_mask "
                             f"-> sparse_embedding")
    assert float(out[0].rsplit(" ", 1)[1]) < 1e-4
    assert (tmp_path / "s.int8.onnx").is_file()
    assert main(["export", "onnx", "--model", str(model), "--out", str(tmp_path / "x.onnx"),
                 "--dev", str(model / "config.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --dev scores a fine-tuned or sentence model") \
        and err.count("\n") == 1
    assert not (tmp_path / "x.onnx").exists()
