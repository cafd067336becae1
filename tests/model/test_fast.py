"""The speed paths of bertkit.model.fast against the reference model they stand in for."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import EncoderConfig
from bertkit.model import fast
from bertkit.model.encoder import attend as encoder_attend
from bertkit.model.encoder import Encoder, build_attention_mask, init_weights
from bertkit.model.fast import packed_dropout
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel
from bertkit.pretraining import objectives

CFG = EncoderConfig(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4,
                    intermediate_size=64, max_positions=24, hidden_dropout=0.0,
                    attention_dropout=0.0)


def twin_models():
    """The same weights, once with the speed paths and once the reference."""
    models = [PretrainingModel(CFG, fast=f) for f in (True, False)]
    init_weights(models[0], CFG, torch.Generator().manual_seed(3))
    models[1].load_state_dict(models[0].state_dict())
    return models


def test_switch_picks_the_modules():
    quick, plain = twin_models()
    assert isinstance(quick.encoder.blocks[0].dropout, fast.PackedDropout)
    assert isinstance(plain.encoder.blocks[0].dropout, torch.nn.Dropout)
    assert isinstance(quick.encoder.blocks[0].attn.attend, fast.Attend)
    assert quick.encoder.blocks[0].attn.attend.fused is encoder_attend
    assert plain.encoder.blocks[0].attn.attend is encoder_attend
    assert quick.fast and not plain.fast


class Timed(fast.Attend):
    """`Attend` timing every kind of call, with the clock replaced by fixed seconds."""

    def __init__(self, fused_seconds: float, matmul_seconds: float):
        super().__init__(encoder_attend, min_work=0)
        self.timed = []
        self.table = {encoder_attend: fused_seconds, fast.attend_in_matmuls: matmul_seconds}

    def seconds(self, kernel, q, k, v, mask, causal):
        self.timed.append(q.shape)
        return self.table[kernel]


@pytest.mark.parametrize("attention", ["fused", "matmuls"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("objective", ["mlm", "mlm+nsp"])
def test_training_step_with_the_speed_paths_equals_the_reference(padded, objective, attention):
    """Loss and every gradient of one step: fast (rows, fused loss, either attention kernel)
    = reference (full forward, logits, F.cross_entropy), dropout off so that both draw
    nothing."""
    g = torch.Generator().manual_seed(0)
    B, T = 3, 20
    ids = torch.randint(5, CFG.vocab_size, (B, T), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 14:] = 0
    positions = torch.tensor([1, 4, T + 2, 2 * T + 7, 0])
    labels = ids.flatten()[positions].clone()
    labels[-1] = IGNORE_INDEX
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
             "mlm_positions": positions, "mlm_labels": labels,
             "nsp_labels": torch.tensor([0, 1, 0])}
    results = []
    models = twin_models()
    for block in models[0].encoder.blocks:
        block.attn.attend = Timed(1.0, 2.0) if attention == "fused" else Timed(2.0, 1.0)
    for model in models:
        model.train()
        loss, metrics = objectives.loss_for(objective)(model, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (quick_loss, quick_grads), (plain_loss, plain_grads) = results
    torch.testing.assert_close(quick_loss, plain_loss, atol=1e-6, rtol=1e-6)
    assert quick_grads.keys() == plain_grads.keys()
    for name, a in quick_grads.items():
        b = plain_grads[name]
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    chosen = {c for block in models[0].encoder.blocks for c in block.attn.attend.choices.values()}
    assert chosen == {attention == "matmuls"}


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_a_batch_with_much_padding_runs_on_its_real_tokens_equal_to_the_reference(
        architecture, monkeypatch):
    """Texts of mixed lengths (a third of the positions real): the blocks run on the real
    tokens only, and every real position's output, every layer's, the pooled vector and every
    gradient equal the reference's; the padding's outputs are zeros."""
    cfg = dataclasses.replace(CFG, architecture=architecture, max_positions=48)
    quick, plain = Encoder(cfg, fast=True), Encoder(cfg, fast=False)
    init_weights(quick, cfg, torch.Generator().manual_seed(1))
    plain.load_state_dict(quick.state_dict())
    ids = torch.randint(5, cfg.vocab_size, (4, 40), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    for row, length in enumerate((5, 40, 3, 9)):
        mask[row, length:] = 0
    assert fast.real_tokens(mask) is not None
    gathered = []
    monkeypatch.setattr(fast.RealTokens, "gather", lambda self, x, f=fast.RealTokens.gather:
                        gathered.append(x.shape) or f(self, x))
    real = mask.bool()
    outputs, grads = [], []
    for model in (quick, plain):
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        (out.last_hidden_state[real].pow(2).sum() + out.pooled.sum()).backward()
        outputs.append(out)
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert gathered, "the real tokens were never gathered"
    ours, theirs = outputs
    for a, b in zip(ours.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.pooled, theirs.pooled, atol=1e-5, rtol=1e-5)
    assert not ours.last_hidden_state[~real].any() and theirs.last_hidden_state[~real].any()
    for name, a in grads[0].items():
        b = grads[1][name]
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


def test_a_batch_with_little_padding_or_none_runs_padded():
    mask = torch.ones(4, 10, dtype=torch.long)
    assert fast.real_tokens(None) is None and fast.real_tokens(mask) is None
    mask[0, 9:] = 0
    assert fast.real_tokens(mask) is None  # 39 of 40 real: the copies would not pay
    mask[:, 3:] = 0
    assert fast.real_tokens(mask).rows.tolist() == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]


def test_mlm_head_returns_the_logits_the_fused_loss_uses():
    quick, _ = twin_models()
    h = torch.randn(6, CFG.hidden_size)
    weight, bias = quick.mlm.decoder()
    assert weight is quick.encoder.embeddings.word.weight and bias is quick.mlm.bias
    torch.testing.assert_close(quick.mlm(h), F.linear(quick.mlm.transform(h), weight, bias))
    assert "mlm.decoder" not in " ".join(quick.state_dict())  # the tied weight is saved once
    twin = copy.deepcopy(quick)  # a copy's head decodes with the copy's embeddings
    assert twin.mlm.decoder()[0] is twin.encoder.embeddings.word.weight


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keeps_each_value_with_probability_1_minus_p(p):
    """The four-decisions-per-draw mask: keep rate within 5 binomial sigmas of 1 - p, kept
    values scaled by 1 / (1 - p), the gradient the same mask, fresh masks each call."""
    torch.manual_seed(0)
    x = torch.randn(64, 33, 17, requires_grad=True)  # odd sizes: n not a multiple of 4
    y = packed_dropout(x, p, True)
    kept = y != 0
    n = x.numel()
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-4, atol=1e-6)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.to(x.dtype) / (1 - p), rtol=1e-4, atol=1e-6)
    assert not torch.equal(kept, packed_dropout(x, p, True) != 0)
    assert packed_dropout(x, p, False) is x and packed_dropout(x, 0.0, True) is x
    # decisions at different positions are independent: neighbours agree as often as chance
    flat = kept.flatten().double()
    agree = (flat[1:] == flat[:-1]).double().mean().item()
    assert abs(agree - ((1 - p) ** 2 + p ** 2)) < 0.02


def test_under_compile_dropout_is_f_dropout(monkeypatch):
    """torch.compile cannot trace the packed mask's in-place draw (a graph break); inductor
    fuses F.dropout's own, so compiled code gets F.dropout: the same mask for the same seed."""
    x = torch.randn(8, 33)
    torch.manual_seed(1)
    expected = F.dropout(x, 0.1, True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(1)
    torch.testing.assert_close(packed_dropout(x, 0.1, True), expected)


@pytest.mark.parametrize("causal,padded", [(False, False), (False, True), (True, False),
                                           (True, True)])
def test_attention_with_dropout_is_sdpa_math(causal, padded):
    """The spelled-out CPU path used for dropout equals SDPA when no weight is dropped."""
    g = torch.Generator().manual_seed(0)
    B, A, T, D = 2, 3, 7, 4
    q, k, v = (torch.randn(B, A, T, D, generator=g) for _ in range(3))
    padding = torch.ones(B, T, dtype=torch.long)
    if padded:
        padding[1, 5:] = 0
    mask = build_attention_mask(padding, T, causal, q.device)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None)
    # p below 1/65536 rounds to "drop nothing": the explicit path, with no dropout
    attend = fast.Attend(encoder_attend, min_work=0)
    torch.testing.assert_close(attend(q, k, v, mask, causal, 1e-9), expected,
                               atol=1e-6, rtol=1e-5)
    assert attend.choices == {}  # dropout takes the matmuls untimed


@pytest.mark.parametrize("causal,padded", [(False, False), (False, True), (True, True)])
def test_attention_in_matmuls_under_bf16_autocast_is_sdpa(causal, padded):
    """The matmul kernel in bf16 (its softmax in fp32): output and gradients within bf16
    rounding of SDPA's."""
    g = torch.Generator().manual_seed(1)
    B, A, T, D = 3, 2, 24, 16
    padding = torch.ones(B, T, dtype=torch.long)
    if padded:
        padding[2, 9:] = 0
    mask = build_attention_mask(padding, T, causal, torch.device("cpu"))
    base = [torch.randn(B, A, T, D, generator=g) for _ in range(3)]
    up = torch.randn(B, A, T, D, generator=g)
    results = []
    for kernel in (encoder_attend, fast.attend_in_matmuls):
        inputs = [t.to(torch.bfloat16).requires_grad_() for t in base]
        y = kernel(*inputs, mask, causal, 0.0)
        assert y.dtype == torch.bfloat16
        results.append([y.float(), *torch.autograd.grad(y, inputs, up.to(torch.bfloat16))])
    for a, b in zip(*results):
        torch.testing.assert_close(a.float(), b.float(), atol=0.03, rtol=0.03)


def test_a_query_with_no_key_gives_finite_values_and_gradients():
    """A padded query under a local window can have no key at all: the matmuls average the
    values there rather than return NaN, and the gradient stays finite."""
    q, k, v = (torch.randn(1, 1, 4, 2, requires_grad=True) for _ in range(3))
    mask = torch.tensor([True, True, False, False]).view(1, 1, 1, 4).expand(1, 1, 4, 4).clone()
    mask[0, 0, 3] = False  # the last query sees nothing
    y = fast.attend_in_matmuls(q, k, v, mask, False, 0.0)
    torch.testing.assert_close(y[0, 0, 3], v[0, 0].mean(0))
    y.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_attend_times_each_kind_of_call_once_and_keeps_the_faster():
    q, k, v = (torch.randn(2, 2, 60, 8, requires_grad=True) for _ in range(3))
    attend = Timed(fused_seconds=1.0, matmul_seconds=0.5)
    y = attend(q, k, v, None, False, 0.0)
    torch.testing.assert_close(y, fast.attend_in_matmuls(q, k, v, None, False, 0.0))
    assert attend.timed == [q.shape, q.shape] and list(attend.choices.values()) == [True]
    attend(q[:, :, :57], k[:, :, :57], v[:, :, :57], None, False, 0.0)  # 57 and 60 round to 64
    attend(q.detach(), k.detach(), v.detach(), None, False, 0.0)  # no gradient: another kind
    attend(q[:, :, :20], k[:, :, :20], v[:, :, :20], None, False, 0.0)  # 20 -> 32: another
    assert len(attend.timed) == 6 and len(attend.choices) == 3
    level = Timed(fused_seconds=1.0, matmul_seconds=0.95)  # within 10%: SDPA keeps it
    level(q, k, v, None, False, 0.0)
    assert list(level.choices.values()) == [False]


def test_attend_leaves_small_and_huge_calls_to_sdpa_untimed():
    q, k, v = (torch.randn(2, 2, 16, 8) for _ in range(3))
    small = fast.Attend(encoder_attend)  # 2*2*16*16*8 multiply-adds: under the default floor
    huge = fast.Attend(encoder_attend, min_work=0, max_scores=2 * 2 * 16 * 16 - 1)
    for attend in (small, huge):
        torch.testing.assert_close(attend(q, k, v, None, False, 0.0),
                                   F.scaled_dot_product_attention(q, k, v))
        assert attend.choices == {}


def test_attend_times_both_kernels_on_the_clock():
    """No stand-in: both kernels really run, forward and backward, and the choice gives
    SDPA's output either way."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(4, 2, 32, 16, generator=g, requires_grad=True) for _ in range(3))
    attend = fast.Attend(encoder_attend, min_work=0)
    assert attend.seconds(encoder_attend, q, k, v, None, False) > 0
    y = attend(q, k, v, None, False, 0.0)
    assert len(attend.choices) == 1 and q.grad is None  # timing left the inputs untouched
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_on_a_gpu_a_training_step_equals_the_reference_on_the_cpu(architecture):
    """The speed paths on CUDA (fused SDPA and F.dropout there, rows, the fused loss) give the
    loss and gradients of the reference model on the CPU, in fp32 (TF32 off: torch's default
    for matmuls, which bertkit leaves alone)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cfg = dataclasses.replace(CFG, architecture=architecture)
    quick, plain = (PretrainingModel(cfg, fast=f) for f in (True, False))
    init_weights(quick, cfg, torch.Generator().manual_seed(3))
    plain.load_state_dict(quick.state_dict())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, cfg.vocab_size, (3, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    positions = torch.tensor([1, 4, 22, 47])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
             "mlm_positions": positions, "mlm_labels": ids.flatten()[positions].clone()}
    results = []
    for model, device in ((quick.cuda(), "cuda"), (plain, "cpu")):
        model.train()
        loss, _ = objectives.loss_for("mlm")(model, {k: v.to(device) for k, v in batch.items()})
        loss.backward()
        results.append((loss.detach().cpu(), {n: p.grad.cpu() for n, p in
                                              model.named_parameters() if p.grad is not None}))
    (gpu_loss, gpu_grads), (cpu_loss, cpu_grads) = results
    torch.testing.assert_close(gpu_loss, cpu_loss, atol=1e-5, rtol=1e-5)
    assert gpu_grads.keys() == cpu_grads.keys()
    for name, a in gpu_grads.items():
        torch.testing.assert_close(a, cpu_grads[name], atol=1e-5, rtol=1e-4, msg=name)
