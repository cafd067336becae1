"""Attention weights re-derived block by block equal transformers' eager attention
(`output_attentions=True`) for BERT and for ModernBERT (rotary positions, pre-norm, local
windows), with padding; and the head summary equals its definition."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model import hub
from bertkit.model.attention import HEAD_TARGETS, attention_weights, head_summary
from bertkit.model.encoder import Encoder, init_weights

transformers = pytest.importorskip("transformers")


def encoder(**changes) -> Encoder:
    cfg = EncoderConfig(**{**dict(vocab_size=101, hidden_size=32, num_layers=3, num_heads=4,
                                  intermediate_size=48, max_positions=64, hidden_dropout=0.0,
                                  attention_dropout=0.0), **changes})
    model = Encoder(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # norms away from 1 and 0, larger weights: the maps differ per head
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            p.add_((0.1 if "norm" in name else 0.2) * torch.randn(p.shape, generator=g))
    return model.eval()


def batch(B=2, T=15):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 101, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:] = 0
    ids[1, 9:] = 0
    return ids, mask


@pytest.mark.parametrize("changes", [dict(architecture="bert"),
                                     dict(architecture="modern", layer_norm_eps=1e-5),
                                     dict(architecture="modern", layer_norm_eps=1e-5,
                                          local_window=6, global_every=2)],
                         ids=["bert", "modern", "modern-local"])
def test_equal_to_transformers_eager_attentions(tmp_path, changes):
    ours = encoder(**changes)
    hub.save_model(ours, tmp_path / "m")
    cls = transformers.BertModel if changes["architecture"] == "bert" \
        else transformers.ModernBertModel
    theirs = cls.from_pretrained(tmp_path / "m", attn_implementation="eager").eval()
    ids, mask = batch()
    types = torch.zeros_like(ids)
    with torch.no_grad():
        ref = theirs(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    weights = attention_weights(ours, ids, types, mask)  # [L, B, A, T, T]
    assert weights.shape == (3, 2, 4, 15, 15)
    for layer, expected in enumerate(ref):
        for b in range(2):
            keep = mask[b].bool()  # transformers' rows at padded queries are not compared
            torch.testing.assert_close(weights[layer, b][:, keep][..., keep],
                                       expected[b][:, keep][..., keep], atol=1e-5, rtol=1e-4)
    assert float(weights[:, 1][..., ~mask[1].bool()].abs().max()) == 0.0  # padded keys


def test_head_summary_equals_its_definition():
    torch.manual_seed(0)
    w = torch.rand(2, 3, 6, 6).softmax(-1)  # [L, A, T, T]
    ids = torch.tensor([2, 7, 8, 3, 9, 3])  # [CLS] a b [SEP] c [SEP]
    got = head_summary(w, ids, cls_id=2, sep_id=3)
    assert set(got) == set(HEAD_TARGETS)
    for layer in range(2):
        for head in range(3):
            m = w[layer, head]
            assert got["cls"][layer, head] == pytest.approx(float(m[:, 0].mean()), abs=1e-6)
            assert got["sep"][layer, head] == pytest.approx(float((m[:, 3] + m[:, 5]).mean()),
                                                            abs=1e-6)
            prev = sum(float(m[t, t - 1]) for t in range(1, 6)) / 6
            nxt = sum(float(m[t, t + 1]) for t in range(5)) / 6
            assert got["previous"][layer, head] == pytest.approx(prev, abs=1e-6)
            assert got["next"][layer, head] == pytest.approx(nxt, abs=1e-6)
            assert got["self"][layer, head] == pytest.approx(float(m.diagonal().mean()),
                                                             abs=1e-6)
