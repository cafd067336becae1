"""The "modern" architecture (pre-LN, gated feed-forward, rotary positions, no biases) against
transformers' ModernBERT: directories both ways with no missing or unexpected keys, equal
logits and hidden states, local attention windows, and the speed paths equal to the reference."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import EncoderConfig, preset
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights, rotate, Rotary
from bertkit.model.heads import PretrainingModel

transformers = pytest.importorskip("transformers")

TINY = dict(architecture="modern", vocab_size=101, hidden_size=32, num_layers=3, num_heads=4,
            intermediate_size=48, max_positions=64, layer_norm_eps=1e-5, hidden_dropout=0.0,
            attention_dropout=0.0)


def tiny(cls=PretrainingModel, seed=0, **changes) -> torch.nn.Module:
    cfg = EncoderConfig(**{**TINY, **changes})
    model = cls(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(seed))
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swap shows
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def batch(seed=0, B=3, T=17, V=101):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    if B > 1:
        mask[1, 11:] = 0  # padding in one row
        ids[1, 11:] = 0
    return ids, mask


@pytest.mark.parametrize("window", [0, 6])
def test_masked_lm_equals_modernbert(tmp_path, window):
    changes = dict(local_window=window, global_every=2) if window else {}
    model = tiny(**changes)
    hub.save_model(model, tmp_path / "m")
    theirs, info = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path / "m", output_loading_info=True, attn_implementation="sdpa")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    theirs.eval()
    ids, mask = batch()
    with torch.no_grad():
        ours_logits, nsp, out = model(ids, None, mask, output_hidden_states=True)
        ref = theirs(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert nsp is None
    keep = mask.bool()
    torch.testing.assert_close(ours_logits[keep], ref.logits[keep], atol=1e-4, rtol=1e-4)
    assert len(out.hidden_states) == len(ref.hidden_states)
    for a, b in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a[keep], b[keep], atol=1e-4, rtol=1e-4)
    # and back: the directory loads into bertkit as the same model
    again = hub.load_pretraining_model(tmp_path / "m")
    assert again.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(again(ids, None, mask)[0], ours_logits)


def test_window_is_what_it_says():
    """In a local layer (window 4: two tokens either side) a token changed at the end of the
    sequence reaches the outputs of its neighbours only."""
    model = tiny(Encoder, local_window=4, global_every=2, num_layers=2)
    assert model.config.is_global(0) and not model.config.is_global(1)
    ids, _ = batch(B=1, T=12)
    changed = ids.clone()
    changed[0, 11] = ids[0, 11] % 100 + 1
    block = model.blocks[1]
    mask, rope = model.layer_inputs(None, 12, False, ids.device)[1]
    with torch.no_grad():
        a = block(model.embeddings(ids), mask, False, rope)
        b = block(model.embeddings(changed), mask, False, rope)
    assert torch.equal(a[0, :9], b[0, :9])
    assert not torch.allclose(a[0, 9:], b[0, 9:])


def test_transformers_modernbert_loads_into_bertkit(tmp_path):
    cfg = transformers.ModernBertConfig(
        vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=64, pad_token_id=0,
        global_attn_every_n_layers=3, local_attention=8)
    torch.manual_seed(0)
    theirs = transformers.ModernBertModel(cfg).eval()
    theirs.save_pretrained(tmp_path / "hf")
    ours = hub.load_encoder(tmp_path / "hf")
    assert ours.config.local_window == 8 and ours.config.global_every == 3
    ids, mask = batch()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, None, mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-4, rtol=1e-4)


def test_config_round_trip_and_preset():
    cfg = preset("mini", architecture="modern", vocab_size=1000)
    assert cfg.intermediate_size == 704 and cfg.hidden_dropout == 0.0
    assert EncoderConfig.from_hf(cfg.to_hf()) == cfg
    windowed = cfg.replace(local_window=128, global_every=3)
    assert EncoderConfig.from_hf(windowed.to_hf()) == windowed
    assert [windowed.is_global(i) for i in range(4)] == [True, False, False, True]


def test_rotary_depends_on_distance_only():
    rot = Rotary(8, 10_000.0)
    cos, sin = rot.angles(10, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)
    q_all, k_all = rotate(q.expand(1, 1, 10, 8), cos, sin), rotate(k.expand(1, 1, 10, 8), cos, sin)
    scores = q_all[0, 0] @ k_all[0, 0].T  # [10, 10]
    torch.testing.assert_close(scores[2, 5], scores[4, 7])
    torch.testing.assert_close(scores[7, 1], scores[8, 2])
    assert not torch.allclose(scores[2, 5], scores[2, 6])


def test_fast_paths_equal_reference_and_rows():
    fast = tiny()
    ref = PretrainingModel(fast.config, fast=False)
    ref.load_state_dict(fast.state_dict())
    ref.eval()
    ids, mask = batch()
    rows = torch.tensor([0, 5, 20, 33, 40])
    with torch.no_grad():
        full = ref(ids, None, mask)[0].reshape(-1, 101)
        at_rows = fast(ids, None, mask, positions=rows)[0]
    torch.testing.assert_close(at_rows, full[rows], atol=1e-5, rtol=1e-5)


def test_training_step_has_gradients_everywhere():
    model = tiny()
    model.train()
    ids, mask = batch()
    logits = model(ids, None, mask)[0]
    logits.logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert all(not hasattr(m, "bias") or m.bias is None for m in model.encoder.modules()
               if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm)))


def test_info_counts_every_weight_of_a_modern_directory(tmp_path):
    from bertkit.model.encoder import num_parameters
    from bertkit.model.info import info

    model = tiny()
    hub.save_model(model, tmp_path / "m")
    report = info(tmp_path / "m")
    assert report.total == num_parameters(model)
    assert report.parts["final_norm"] == 32 and "pooler" not in report.parts
    assert report.parts["block.0.attention"] == 4 * 32 * 32  # no norm before block 0
    assert report.parts["block.1.attention"] == 4 * 32 * 32 + 32
    assert "architecture modern" in report.format() and "segments none" in report.format()
