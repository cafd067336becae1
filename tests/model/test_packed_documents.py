"""Rows packed from several documents, run with their document ids (`Encoder(...,
document_ids=...)`): each document equals itself run alone, forward and gradients within 1e-5
in fp32, for both architectures, the reference and the speed paths (a long input's local layers
block by block among them), bidirectional and causal, and `forward_rows` likewise."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model.encoder import (Encoder, build_attention_mask, document_positions,
                                   init_weights)
from bertkit.model.local_attention import Band

TINY = dict(vocab_size=101, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
            max_positions=128, layer_norm_eps=1e-5, hidden_dropout=0.0, attention_dropout=0.0)
KINDS = {"bert": dict(architecture="bert"), "modern": dict(architecture="modern"),
         # a window of 6 over 40 tokens: the speed path computes the local layers as a Band
         "modern-local": dict(architecture="modern", local_window=6, global_every=3)}
T = 40
# each row's documents by length; row 1 ends in padding, which belongs to its last document
ROWS = [[13, 20, 7], [9, 15], [T]]
REAL = [T, 24, T]


def packed_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask, document ids [3, T] of ROWS."""
    ids = torch.randint(5, 101, (len(ROWS), T), generator=torch.Generator().manual_seed(7))
    attention = (torch.arange(T)[None, :] < torch.tensor(REAL)[:, None]).long()
    ids = ids * attention
    documents = torch.zeros(len(ROWS), T, dtype=torch.long)
    for r, lengths in enumerate(ROWS):
        bounds = torch.tensor(lengths).cumsum(0)[:-1]
        documents[r] = torch.bucketize(torch.arange(T), bounds, right=True)
    return ids, attention, documents


def segments():
    """(row, start, end) of every document of ROWS."""
    for r, lengths in enumerate(ROWS):
        start = 0
        for n in lengths:
            yield r, start, start + n
            start += n


def model_of(kind: str, fast: bool, causal: bool = False) -> Encoder:
    cfg = EncoderConfig(**TINY, **KINDS[kind], causal=causal)
    model = Encoder(cfg, fast=fast)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    return model


def test_positions_restart_at_each_document():
    documents = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 0, 0]])
    assert document_positions(documents).tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]]


def test_the_mask_is_block_diagonal_within_the_padding():
    documents = torch.tensor([[0, 0, 1, 1]])
    mask = build_attention_mask(torch.tensor([[1, 1, 1, 0]]), 4, True, torch.device("cpu"),
                                documents=documents)
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0],
                                         [0, 0, 1, 0]]
    assert build_attention_mask(None, 4, False, torch.device("cpu")) is None  # as before


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_document_equals_itself_run_alone(kind, fast, causal):
    model = model_of(kind, fast, causal)
    ids, attention, documents = packed_batch()
    if kind == "modern-local" and fast:  # the blocked path is the one under test
        layers = model.layer_inputs(attention, T, causal, ids.device, documents=documents)
        assert isinstance(layers[1][0], Band)
    upstream = torch.randn(len(ROWS), T, 32, generator=torch.Generator().manual_seed(3))
    packed = model(ids, None, attention, document_ids=documents).last_hidden_state
    real = attention[..., None]
    weights = [p for name, p in model.named_parameters() if not name.startswith("pooler")]
    count = sum(REAL)  # losses are means per token
    grads = torch.autograd.grad((packed * upstream * real).sum() / count, weights)
    alone_loss = 0.0
    for r, start, end in segments():
        end = min(end, REAL[r])
        y = model(ids[r:r + 1, start:end]).last_hidden_state[0]  # [n, H]
        torch.testing.assert_close(packed[r, start:end], y, atol=1e-5, rtol=1e-5)
        alone_loss = alone_loss + (y * upstream[r, start:end]).sum()
    alone_grads = torch.autograd.grad(alone_loss / count, weights)
    for a, b in zip(grads, alone_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("kind", list(KINDS))
def test_rows_read_alone_equal_the_documents_alone(kind, fast):
    """`forward_rows` (the masked rows, and few rows: a sentence head's) of packed rows."""
    model = model_of(kind, fast)
    ids, attention, documents = packed_batch()
    alone = torch.zeros(len(ROWS) * T, 32)
    for r, start, end in segments():
        end = min(end, REAL[r])
        alone[r * T + start:r * T + end] = model(ids[r:r + 1, start:end]).last_hidden_state[0]
    many = torch.tensor([3, 14, 15, 39, 40, 52, 63, 80, 100, 119])
    few = torch.tensor([14, 52])  # as few rows as sequences: each query's keys copied out
    for rows in (many, few):
        h, = model.forward_rows(ids, None, attention, rows, document_ids=documents)
        torch.testing.assert_close(h, alone[rows], atol=1e-5, rtol=1e-5)


def test_few_rows_under_a_dense_local_window_read_their_own_query_row():
    """A [T, T] window mask (a local layer of a short input, no padding) at as few rows as
    sequences: each query keeps its own row of the mask."""
    model = model_of("modern-local", True)
    ids = torch.randint(5, 101, (2, 20), generator=torch.Generator().manual_seed(2))
    rows = torch.tensor([3, 37])
    h, = model.forward_rows(ids, None, None, rows)
    torch.testing.assert_close(h, model(ids).last_hidden_state.reshape(-1, 32)[rows],
                               atol=1e-5, rtol=1e-5)
