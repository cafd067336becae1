"""Linear-chain conditional random field over per-token emission scores.

score(y) = start[y_1] + sum_t emission[t, y_t] + sum_t transition[y_{t-1}, y_t] + end[y_T]
log p(y | x) = score(y) - log Z, with log Z from the forward algorithm and the best path from
Viterbi; both loop over time only, vectorised over the batch and the tags.

Masks may have holes (e.g. only the first subword of each word is labelled): the chain links
consecutive kept positions, as if the others were not there.

Transition constraints (no O -> I-X in BIO) are applied as a large negative score in the
likelihood, so that a gold path that breaks them costs a lot but stays finite, and as -inf in
Viterbi, so that decoding never returns one.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from bertkit.finetuning.tagging import detect_scheme, split_tag
from bertkit.runtime import reads_are_free

FORBIDDEN = -1e4  # a transition score that no trained emission difference outweighs


def _allowed(prev: tuple[str, str] | None, cur: tuple[str, str] | None, scheme: str) -> bool:
    # prev None = start of sentence, cur None = end; tags are (prefix, type).
    if scheme == "IO":
        return True
    p_prefix, p_type = prev if prev is not None else ("O", "")
    c_prefix, c_type = cur if cur is not None else ("O", "")
    if "" in (p_prefix, c_prefix):  # plain labels (POS) are not chunked: unconstrained
        return True
    inside = p_prefix in ("B", "I")
    if scheme == "BIO":  # I-X only continues a chunk of type X
        return c_prefix != "I" or (inside and p_type == c_type)
    if inside:  # BIOES: an open chunk must go on (I-X) or close (E-X)
        return c_prefix in ("I", "E") and c_type == p_type
    return c_prefix in ("O", "B", "S")


def allowed_transitions(labels: Sequence[str], scheme: str | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Boolean masks (transitions [K, K] from -> to, start [K], end [K]) of what `scheme`
    (IO, BIO, BIOES; detected from the labels when None) allows between `labels`."""
    scheme = scheme or detect_scheme(labels)
    parts = [split_tag(t) for t in labels]
    K = len(labels)
    trans = torch.tensor([[_allowed(a, b, scheme) for b in parts] for a in parts],
                         dtype=torch.bool).reshape(K, K)
    start = torch.tensor([_allowed(None, b, scheme) for b in parts], dtype=torch.bool)
    end = torch.tensor([_allowed(a, None, scheme) for a in parts], dtype=torch.bool)
    return trans, start, end


def _left_align(mask: torch.Tensor, *tensors: torch.Tensor):
    """Move the kept positions of each row to the front, in order, and cut the time axis to the
    longest row (where reading its length is free; elsewhere it stays T): [B, T, ...] ->
    [B, T', ...], with the new mask a prefix of `lengths` ones."""
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices
    lengths = mask.sum(1)
    if not reads_are_free(lengths):
        T = mask.shape[1]
    else:
        T = int(lengths.max()) if len(lengths) else 0
    order = order[:, :T]
    moved = [t.gather(1, order if t.dim() == 2 else order[..., None].expand(-1, -1, t.shape[2]))
             for t in tensors]
    steps = torch.arange(T, device=mask.device)
    return lengths, steps[None, :] < lengths[:, None], moved


class CRF(nn.Module):
    """Transition, start and end scores for `num_tags` tags, learned; optional constraints as
    given by `allowed_transitions`."""

    def __init__(self, num_tags: int,
                 allowed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None):
        super().__init__()
        self.num_tags = num_tags
        # Zero start: the emissions break the symmetry, and no generator is needed.
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        yes = torch.ones(num_tags + 2, num_tags, dtype=torch.bool)
        trans_ok, start_ok, end_ok = allowed if allowed is not None else (yes[2:], yes[0], yes[1])
        if trans_ok.shape != (num_tags, num_tags) or start_ok.shape != (num_tags,) \
                or end_ok.shape != (num_tags,):
            raise ValueError(f"constraint shapes do not match {num_tags} tags")
        self.register_buffer("trans_ok", trans_ok.clone(), persistent=False)
        self.register_buffer("start_ok", start_ok.clone(), persistent=False)
        self.register_buffer("end_ok", end_ok.clone(), persistent=False)

    def _scores(self, dtype: torch.dtype, forbidden: float):
        return (self.transitions.to(dtype).masked_fill(~self.trans_ok, forbidden),
                self.start.to(dtype).masked_fill(~self.start_ok, forbidden),
                self.end.to(dtype).masked_fill(~self.end_ok, forbidden))

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
        """log p(tags | emissions) per sequence [B]. emissions [B, T, K]; tags [B, T] (any value,
        e.g. -100, where mask is False); mask [B, T] bool. An all-masked row gives 0."""
        B, T, K = emissions.shape
        mask = torch.ones(B, T, dtype=torch.bool, device=emissions.device) if mask is None \
            else mask.bool()
        dtype = torch.promote_types(emissions.dtype, torch.float32)
        trans, start, end = self._scores(dtype, FORBIDDEN)
        lengths, mask, (em, tags) = _left_align(mask, emissions.to(dtype),
                                                tags.long().clamp(0, K - 1))
        T = em.shape[1]
        if T == 0:
            return emissions.new_zeros(B, dtype=dtype) + em.sum()  # keeps the graph connected
        keep = mask[:, 1:]

        # gold path score
        emitted = em.gather(2, tags[..., None]).squeeze(-1)                  # [B, T]
        moved = trans[tags[:, :-1], tags[:, 1:]] + emitted[:, 1:]             # [B, T-1]
        last = tags.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
        gold = start[tags[:, 0]] + emitted[:, 0] + torch.where(keep, moved, 0).sum(1) + end[last]

        # forward algorithm: alpha[b, k] = log-sum of all paths ending in tag k. The sum over
        # the previous tag is a matrix product in exp space, shifted by each row's maximum
        # (3x faster than logsumexp over [B, K, K]). Where a tag's sum falls below ~e^-43 of
        # the best tag's (reachable only from very unlikely tags) precision would be lost to
        # underflow, and that row's step is taken exactly with logsumexp. On a CPU the exact
        # step is computed only when some row needs it; on a GPU asking would wait for the
        # device at every step, so both are computed and each row takes its own.
        top = trans.max()
        exp_trans = (trans - top).exp()                                       # [K, K]
        floor = torch.finfo(dtype).tiny ** 0.5
        alpha = start + em[:, 0]                                              # [B, K]
        for t in range(1, T):
            shift = alpha.max(dim=1, keepdim=True).values                     # [B, 1]
            total = (alpha - shift).exp() @ exp_trans                         # [B, K]
            # clamped: an underflowed row takes the exact step, and log(0) would give its
            # unused branch an infinite gradient (0 * inf = NaN through torch.where)
            step = total.clamp(min=floor).log() + shift + top + em[:, t]
            low = (total < floor).any(dim=1, keepdim=True)                    # [B, 1]
            if not reads_are_free(low) or bool(low.any()):
                exact = torch.logsumexp(alpha[:, :, None] + trans, dim=1) + em[:, t]
                step = torch.where(low, exact, step)
            alpha = torch.where(mask[:, t, None], step, alpha)
        log_z = torch.logsumexp(alpha + end, dim=1)
        return torch.where(lengths > 0, gold - log_z, 0)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """Viterbi: the best tag sequence of each row, over its kept positions in order."""
        B, T, K = emissions.shape
        mask = torch.ones(B, T, dtype=torch.bool, device=emissions.device) if mask is None \
            else mask.bool()
        dtype = torch.promote_types(emissions.dtype, torch.float32)
        trans, start, end = self._scores(dtype, float("-inf"))
        lengths, mask, (em,) = _left_align(mask, emissions.to(dtype))
        T = em.shape[1]
        if T == 0:
            return [[] for _ in range(B)]

        score = start + em[:, 0]                                              # [B, K]
        back = []
        for t in range(1, T):
            best, arg = (score[:, :, None] + trans).max(dim=1)                # [B, K]
            back.append(arg)
            score = torch.where(mask[:, t, None], best + em[:, t], score)
        cur = (score + end).argmax(dim=1)                                     # [B]
        path = torch.empty(B, T, dtype=torch.long, device=em.device)
        for t in range(T - 1, -1, -1):
            path[:, t] = cur
            if t > 0:
                # rows shorter than t+1 keep their last tag until their own end is reached
                cur = torch.where(t < lengths, back[t - 1].gather(1, cur[:, None]).squeeze(1),
                                  cur)
        rows = path.tolist()
        return [row[:n] for row, n in zip(rows, lengths.tolist())]
