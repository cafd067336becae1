"""The speed paths, in one place, behind one switch: `Encoder(cfg, fast=True)` (the default),
`PretrainingModel(cfg, fast=True)`.

`fast=False` gives the reference model of `encoder.py` and `heads.py`: nn.Dropout,
F.scaled_dot_product_attention, every block on every token, the vocabulary projection then
F.cross_entropy. `fast=True` computes the same function with six shortcuts, each worth it on
the CPU bertkit is often trained on. Each is tested equal to the reference: a whole training
step and the shortcuts one by one in tests/model/test_fast.py, `forward_rows` on both attention
paths in tests/model/test_model.py, the fused loss in tests/pretraining/test_objectives.py.

* `packed_dropout` / `PackedDropout`: the keep/drop decisions come four to a 64-bit random
  number, 2-3x faster than F.dropout's one generator call per element (a tenth of a CPU step).
* `Attend`: attention spelled out in matmuls (`attend_in_matmuls`) where that is faster on
  the CPU, timed once per kind of call, and always when dropout is on: SDPA's fused CPU
  kernels take no dropout, and its fallback draws the [B, A, T, T] mask one element at a time.
* `block_at_rows`: `Encoder.forward_rows` runs the last block only at the rows a head reads
  (the masked positions, [CLS]); its attention still reads every token.
* `vocab_cross_entropy`: the vocabulary projection and the cross-entropy fused, the gradient
  made in the forward pass (`objectives.vocab_terms` uses it when gradients are wanted).
* `real_tokens`: a batch with much padding (texts of mixed lengths, as a query's passages
  are) runs its blocks' projections and feed-forward on the real tokens only, attention in
  the padded layout, on the CPU only. The encoder's outputs at the padding are then zeros,
  where the reference's are values that no head reads.
* `blocks_pay`: a local layer (a "modern" local_window) of a long input gets its mask as a
  `Band`, never built as [T, T], and `Attend` computes it block by block
  (`local_attention.local_attention`), O(T x window) instead of O(T^2), on any device.

On a GPU the first two fall back to the fused kernels (F.dropout, SDPA), which are already fast,
and so does the dropout under torch.compile, which fuses F.dropout's mask itself.
This module imports nothing from the model but the local-attention kernel: the modules reach
it, not the other way round.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.local_attention import Band, local_attention
from bertkit.runtime import reads_are_free

BLOCKS_FROM = 4
"""A local layer is computed block by block from BLOCKS_FROM x its window tokens on: there the
dense path computes 2.7 times the scores the blocked one does (T^2 against 1.5 T x window) and
the blocks' copies of the keys cost less than that saves. For `small`'s window of 128 on an AMD
EPYC (one thread, forward and backward), 512 tokens took 1.5x as long dense as blocked, 256
tokens 0.7x (bench/long_context.py --lengths 256 512 --encode)."""


UNPAD_BELOW = 0.8
"""A padded batch runs its blocks on the real tokens only when they are under this share of
its positions: gathering them out and scattering them back for attention costs a few copies
a layer, which a batch with little padding would not win back."""


class RealTokens:
    """The real (unpadded) tokens of a [B, T] batch: the rows of its flattened B*T positions
    that the projections and the feed-forward of a block run on."""

    def __init__(self, padding: torch.Tensor):
        self.shape = tuple(padding.shape)  # (B, T)
        self.rows = padding.reshape(-1).nonzero().squeeze(1)  # [N]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> the real tokens' [N, ...]."""
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.rows)

    def scatter(self, y: torch.Tensor) -> torch.Tensor:
        """The real tokens' [N, ...] -> [B, T, ...], zeros at the padding."""
        B, T = self.shape
        out = y.new_zeros(B * T, *y.shape[1:]).index_copy(0, self.rows, y)
        return out.view(B, T, *y.shape[1:])


def real_tokens(padding: torch.Tensor | None) -> RealTokens | None:
    """A batch's real tokens when running its blocks on those only pays: padding [B, T] (1 =
    a real token) with under UNPAD_BELOW of the positions real, on the CPU (where looking at
    the mask waits for nothing), outside torch.compile, a trace and an ONNX export (whose
    graphs would keep this batch's count as a constant)."""
    if (padding is None or not reads_are_free(padding) or torch.compiler.is_compiling()
            or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()):
        return None
    real = padding.bool()
    if int(real.sum()) >= UNPAD_BELOW * real.numel():
        return None
    return RealTokens(real)


def packed_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout. On the CPU the keep/drop decisions come four to a 64-bit random number
    (16 bits each; p is rounded to a multiple of 1/65536 and the kept values scaled by
    1 / (1 - that p)). Elsewhere F.dropout, whose GPU kernel is already fused."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():  # inductor fuses its own
        return F.dropout(x, p, True)
    cut = round(p * 65536)
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1)
    keep = bits.view(torch.int16)[:n].view(x.shape) >= cut - 32768  # P(keep) = 1 - cut/65536
    return x * (keep.to(x.dtype) * (65536 / (65536 - cut)))


class PackedDropout(nn.Module):
    """nn.Dropout drawing its mask with `packed_dropout`."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attend_in_matmuls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, causal: bool, dropout_p: float) -> torch.Tensor:
    """`encoder.attend` (SDPA) spelled out: two matmuls in the inputs' dtype around a
    softmax in fp32, dropout on the weights by `packed_dropout`. q, k, v: [B, A, T, D]."""
    T = q.shape[-2]
    scores = ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).float()  # [B, A, T, T]
    if mask is None and causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        # the lowest finite score, not -inf: a query with no key at all (padding, under a
        # local window) averages the values instead of turning into NaN
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = packed_dropout(scores.softmax(-1).to(v.dtype), dropout_p, True)
    return weights @ v  # [B, A, T, D]


def blocks_pay(T: int, window: int) -> bool:
    """Whether a layer of `window` (0: global) over T tokens should run blocked: a local
    layer from BLOCKS_FROM windows on, but not under a trace, which would keep this length's
    block arithmetic as constants of the graph."""
    return 0 < window and T >= BLOCKS_FROM * window and not torch.jit.is_tracing()


class Attend:
    """Attention on the CPU by whichever of `fused` (`encoder.attend`: SDPA) and
    `attend_in_matmuls` is faster there, timed once per kind of call (`key`); with dropout
    always the matmuls.

    Neither kernel wins everywhere: on an AMD Zen 4 in bf16, SDPA's flash kernel takes 5.5x
    as long as the matmuls for `mini`'s training attention at 32 x 64 tokens, yet 0.6x as
    long for `base`'s inference at 16 x 128; in fp32 they are within a factor of 1.45 of each
    other, either way round, up to 128 tokens, and SDPA is 1.7-3.2x faster at 512.
    So each kind of call times both (best of three after a warm-up, forward and backward when
    the inputs want gradients, on the call's own tensors, about 20 ms for `mini`) and keeps
    the faster; SDPA keeps ties (within 10%), since it never materialises the [B, A, T, T]
    scores. Calls under `min_work` multiply-adds (tiny models, single rows) and calls whose
    scores would pass `max_scores` elements take SDPA untimed, and so does anything under
    `torch.compile`, under an export's trace or on a GPU. The choices live in this object
    (`choices`), one per attention module: a new model times again. `bench/attention_speed.py`
    prints both kernels' times and the choice for the shapes of bertkit's presets."""

    def __init__(self, fused, min_work: int = 1 << 24, max_scores: int = 1 << 26):
        self.fused = fused
        self.min_work = min_work
        self.max_scores = max_scores
        self.choices: dict[tuple, bool] = {}  # key -> the matmuls are faster

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | Band | None, causal: bool,
                 dropout_p: float) -> torch.Tensor:
        if isinstance(mask, Band):  # a long input's local layer, on any device (with
            # dropout, SDPA's slow CPU fallback, but over the band's scores only)
            return local_attention(q, k, v, mask.padding, mask.window, causal, dropout_p,
                                   mask.documents)
        if q.device.type != "cpu":
            return self.fused(q, k, v, mask, causal, dropout_p)
        if dropout_p > 0.0:
            # SDPA's fused CPU kernels take no dropout; its fallback draws the [B, A, T, T]
            # mask one element at a time
            return attend_in_matmuls(q, k, v, mask, causal, dropout_p)
        B, A, T, D = q.shape
        scores = B * A * T * k.shape[-2]
        if (scores * D < self.min_work or scores > self.max_scores
                or torch.compiler.is_compiling() or torch.jit.is_tracing()):
            return self.fused(q, k, v, mask, causal, 0.0)
        key = self.key(q, k, mask, causal)
        if key not in self.choices:
            self.choices[key] = self.matmuls_faster(q, k, v, mask, causal)
        kernel = attend_in_matmuls if self.choices[key] else self.fused
        return kernel(q, k, v, mask, causal, 0.0)

    @staticmethod
    def key(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> tuple:
        """What the faster kernel depends on: batch and length to the next power of two (so
        that dynamic padding does not time every length), heads, head width, dtype, a mask,
        causality and whether gradients will flow back."""
        B, A, T, D = q.shape
        up = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
        return (up(B), A, up(T), up(k.shape[-2]), D, q.dtype, mask is not None, causal,
                q.requires_grad)

    def matmuls_faster(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None, causal: bool) -> bool:
        """Times both kernels on these tensors and compares them by `prefer_matmuls`."""
        return self.prefer_matmuls(*(self.seconds(kernel, q, k, v, mask, causal)
                                     for kernel in (self.fused, attend_in_matmuls)))

    @staticmethod
    def prefer_matmuls(fused_seconds: float, matmul_seconds: float) -> bool:
        """The matmuls only when they take under 0.9 of SDPA's time: SDPA keeps ties, since it
        never materialises the scores."""
        return matmul_seconds < 0.9 * fused_seconds

    @staticmethod
    def seconds(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None, causal: bool) -> float:
        """The best of three timed calls of `kernel` after a warm-up, on detached copies of
        the inputs: forward, and backward too when q wants a gradient."""
        train = q.requires_grad
        inputs = [t.detach().requires_grad_(train) for t in (q, k, v)]
        best = float("inf")
        for i in range(4):
            start = time.perf_counter()
            y = kernel(*inputs, mask, causal, 0.0)
            if train:
                torch.autograd.grad(y, inputs, torch.ones_like(y))
            if i:
                best = min(best, time.perf_counter() - start)
        return best


def attention_at_rows(attn: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                      rows: torch.Tensor,
                      rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """`encoder.SelfAttention` (bidirectional) at `rows` only: x [B, T, H] -> [N, H], rows [N]
    flat indices into B*T; `rope` as in `SelfAttention.forward`."""
    B, T, H = x.shape
    A, D = attn.num_heads, H // attn.num_heads
    p = attn.dropout_p if attn.training else 0.0
    q, k, v = attn.project(x, rope)  # 3 x [B, A, T, D]
    if rows.shape[0] <= B and not isinstance(mask, Band):  # a Band has no rows to select
        # As few rows as sequences (a sentence head's [CLS]): each row's query against its
        # own sequence's keys, copied out per row.
        N = rows.shape[0]
        q = q.transpose(1, 2).reshape(B * T, A, D).index_select(0, rows)  # [N, A, D]
        seq = torch.div(rows, T, rounding_mode="floor")  # [N]
        k, v = k.index_select(0, seq), v.index_select(0, seq)  # 2 x [N, A, T, D]
        mask = _mask_at_rows(mask, seq, rows - seq * T, B, T)  # [N, 1, 1, T]
        y = attn.attend(q.view(N, A, 1, D), k, v, mask, False, p)  # [N, A, 1, D]
        return attn.out(y.reshape(N, H))
    # Many rows: attention for every token, the output projection only at the rows.
    y = attn.attend(q, k, v, mask, False, p).transpose(1, 2).reshape(B * T, H)  # [B*T, H]
    return attn.out(y.index_select(0, rows))  # [N, H]


def _mask_at_rows(mask: torch.Tensor | None, seq: torch.Tensor, at: torch.Tensor, B: int,
                  T: int) -> torch.Tensor | None:
    """The keys each of N queries (sequence `seq` [N], position `at` [N]) may see:
    [N, 1, 1, T], of a mask of one row of keys per sequence ([B, 1, 1, T], padding) or of one
    per query ([T, T] or [B, 1, T, T]: a local window, packed documents)."""
    if mask is None:
        return None
    if mask.dim() == 4 and mask.shape[-2] == 1:
        return mask.index_select(0, seq)
    return mask.expand(B, 1, T, T)[seq, :, at].unsqueeze(-2)


def block_at_rows(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                  rows: torch.Tensor,
                  rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """`encoder.Block` (bidirectional) at `rows` only: x [B, T, H] -> [N, H]. Attention still
    reads every token; the output projection and the feed-forward run on N rows, not B*T."""
    if block.pre_norm:
        y = attention_at_rows(block.attn, block.attn_norm(x), mask, rows, rope)  # [N, H]
        x = x.reshape(-1, x.shape[-1]).index_select(0, rows) + block.attn_dropout(y)
        return x + block.ffn(block.ffn_norm(x))
    y = attention_at_rows(block.attn, x, mask, rows)  # [N, H]
    x = x.reshape(-1, x.shape[-1]).index_select(0, rows)  # [N, H]
    return block.feed_forward(block.attn_norm(x + block.dropout(y)))


class _VocabCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of the vocabulary projection z @ weight.T + bias, and the number of
    correct guesses (the label's logit is the largest), for labels != ignore_index.

    The plain path (F.linear, F.cross_entropy, argmax) allocates and sweeps three [N, V]
    tensors a step (logits, log-probabilities, their gradient), tens of MB each for a 30k
    vocabulary; here the forward pass turns the logits, in place, into their gradient
    (softmax - one-hot), which is all the backward pass needs.
    """

    @staticmethod
    def forward(ctx, z, weight, bias, labels, ignore_index):
        # [N, V]; autocast picks the matmul dtype. (mm, then add_: addmm would first fill the
        # whole output with the broadcast bias, one more sweep of it.)
        logits = torch.mm(z, weight.t())
        ctx.matmul_dtype = logits.dtype
        logits = logits.float().add_(bias)
        valid = labels != ignore_index
        safe = labels.clamp(min=0)
        target = logits.gather(1, safe[:, None]).squeeze(1)  # [N]
        top = logits.amax(1)  # a sixth of the time of max(), which also finds the index
        correct = ((target >= top) & valid).sum()
        logits.sub_(top[:, None]).exp_()
        total = logits.sum(1)
        loss_sum = ((top + total.log() - target) * valid).sum()
        keep = valid.to(logits.dtype)
        logits.mul_((keep / total)[:, None])  # softmax; ignored rows get no gradient
        rows = torch.arange(labels.numel(), device=labels.device)
        logits.index_put_((rows, safe), -keep, accumulate=True)  # - one-hot
        ctx.save_for_backward(logits, z, weight)
        ctx.mark_non_differentiable(correct)
        return loss_sum, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        d, z, weight = ctx.saved_tensors  # d: [N, V], d loss_sum / d logits
        need_z, need_w, need_b = ctx.needs_input_grad[:3]
        dm = d.to(ctx.matmul_dtype)
        grad_z = (dm @ weight.to(dm.dtype)).mul_(grad_loss).to(z.dtype) if need_z else None
        # grad_loss scales z [N, H] rather than the product [V, H]
        grad_w = (dm.t() @ (z * grad_loss).to(dm.dtype)).to(weight.dtype) if need_w else None
        grad_b = d.sum(0).mul_(grad_loss) if need_b else None
        return grad_z, grad_w, grad_b, None, None


def vocab_cross_entropy(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        labels: torch.Tensor, ignore_index: int):
    """(summed cross-entropy, correct guesses) of F.linear(z, weight, bias) [N, V] at
    labels [N] != ignore_index, without keeping the logits and their softmax apart."""
    return _VocabCrossEntropy.apply(z, weight, bias, labels, ignore_index)


__all__ = ["packed_dropout", "PackedDropout", "attend_in_matmuls", "BLOCKS_FROM", "blocks_pay", "Attend",
           "attention_at_rows", "block_at_rows", "vocab_cross_entropy"]
