"""One word's contextual vectors in two texts, layer by layer: equal to a hand computation
over the encoder's hidden states; `bertkit similarity` end to end."""
from __future__ import annotations

import json

import pytest
import torch

import bertkit.cli.main as cli
from bertkit.embeddings.context_similarity import context_similarity, parse_span
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError


def test_spans():
    assert parse_span("we sat on the river bank .", "bank") == (20, 24)
    assert parse_span("we sat on the river bank .", "3:6") == (3, 6)
    with pytest.raises(UserError, match="outside"):
        parse_span("short", "2:40")
    with pytest.raises(UserError, match="does not occur"):
        parse_span("short", "bank")


def test_similarity_equals_a_hand_computation(bank_bert):
    embedder = Embedder.load(bank_bert)
    t1, t2 = "we sat on the river bank .", "the bank raised rates ."
    s1, s2 = parse_span(t1, "bank"), parse_span(t2, "bank")
    cosines = context_similarity(embedder, t1, s1, t2, s2)
    assert len(cosines) == embedder.config.num_layers + 1
    # by hand: the hidden states of the encoder at the piece "bank" in each text
    ids = [embedder.tokenizer.encode(t).ids for t in (t1, t2)]
    rows = [i.index(embedder.tokenizer.get_vocab()["bank"]) for i in ids]
    with torch.no_grad():
        states = [embedder.encoder(torch.tensor([i]), output_hidden_states=True).hidden_states
                  for i in ids]
    for layer, cos in enumerate(cosines):
        a, b = states[0][layer][0, rows[0]], states[1][layer][0, rows[1]]
        assert cos == pytest.approx(torch.nn.functional.cosine_similarity(a, b, 0).item(),
                                    abs=1e-5)
    assert all(c < 0.9999 for c in cosines)  # other positions, other contexts
    # "unbelievable" is three pieces: their mean
    t3 = "unbelievable money"
    three = context_similarity(embedder, t3, parse_span(t3, "unbelievable"), t3, (0, 12))
    assert three == pytest.approx([1.0] * 3, abs=1e-6)


def test_cli(bank_bert, capsys):
    assert cli.main(["similarity", "we sat on the river bank .", "bank",
                     "the bank raised rates .", "bank", "--model", str(bank_bert),
                     "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["layers"]) == 3
    assert cli.main(["similarity", "we sat", "bank", "the bank", "bank", "--model",
                     str(bank_bert)]) == 2
    assert "does not occur" in capsys.readouterr().err
