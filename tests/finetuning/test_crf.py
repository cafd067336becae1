"""CRF: log-likelihood and Viterbi against brute-force enumeration of all K^T paths; BIO and
BIOES constraints; gradients."""
from __future__ import annotations

import itertools

import pytest
import torch

from bertkit.finetuning import crf as crf_module
from bertkit.finetuning.crf import CRF, FORBIDDEN, allowed_transitions
from bertkit.finetuning.tagging import tags_to_spans, spans_to_tags


@pytest.fixture(params=["cpu", "as on a gpu"])
def host_reads(request, monkeypatch) -> str:
    """The CRF as it runs on a CPU (it reads lengths and underflow flags on the host) and as on
    a GPU (it never does: the time axis stays whole, and every step computes the exact sum
    beside the fast one)."""
    if request.param != "cpu":
        monkeypatch.setattr(crf_module, "reads_are_free", lambda t: False)
    return request.param


def _random_crf(K: int, g: torch.Generator, allowed=None) -> CRF:
    crf = CRF(K, allowed).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return crf


@torch.no_grad()
def _brute(crf: CRF, em: torch.Tensor, forbidden: float) -> tuple[float, list[int], dict]:
    """log Z, best path and the score of every path of one (unpadded) sequence em [T, K],
    each path scored on its own."""
    T, K = em.shape
    trans = crf.transitions.masked_fill(~crf.trans_ok, forbidden)
    start = crf.start.masked_fill(~crf.start_ok, forbidden)
    end = crf.end.masked_fill(~crf.end_ok, forbidden)
    paths = torch.tensor(list(itertools.product(range(K), repeat=T)))        # [K^T, T]
    scores = start[paths[:, 0]] + end[paths[:, -1]] + em[torch.arange(T), paths].sum(1) \
        + trans[paths[:, :-1], paths[:, 1:]].sum(1)
    log_z = torch.logsumexp(scores, 0).item()
    table = dict(zip(map(tuple, paths.tolist()), scores.tolist()))
    return log_z, paths[scores.argmax()].tolist(), table


def _random_mask(B: int, T: int, g: torch.Generator, holes: bool) -> torch.Tensor:
    if holes:
        mask = torch.rand(B, T, generator=g) < 0.6
    else:
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None] < lengths[:, None]
    mask[0] = True  # always one full-length row
    return mask


@pytest.mark.parametrize("holes", [False, True])
@pytest.mark.parametrize("constrained", [False, True])
def test_log_likelihood_and_viterbi_equal_brute_force(holes, constrained, host_reads):
    g = torch.Generator().manual_seed(7 + holes + 2 * constrained)
    labels = ["O", "B-A", "I-A", "B-B", "I-B"] if constrained else ["a", "b", "c"]
    K, B, T = len(labels), 6, 4
    allowed = allowed_transitions(labels, "BIO") if constrained else None
    for _ in range(3):
        crf = _random_crf(K, g, allowed)
        em = torch.randn(B, T, K, generator=g, dtype=torch.float64) * 2
        mask = _random_mask(B, T, g, holes)
        tags = torch.randint(0, K, (B, T), generator=g)
        tags[~mask] = -100
        ll = crf.log_likelihood(em, tags, mask)
        paths = crf.decode(em, mask)
        for b in range(B):
            keep = mask[b].nonzero().squeeze(1)
            if len(keep) == 0:
                assert ll[b].item() == 0.0 and paths[b] == []
                continue
            sub = em[b, keep]
            log_z, _, scores = _brute(crf, sub, FORBIDDEN)
            gold = tuple(tags[b, keep].tolist())
            assert ll[b].item() == pytest.approx(scores[gold] - log_z, abs=1e-8)
            # Viterbi forbids with -inf: the best path among the allowed ones
            _, best, viterbi_scores = _brute(crf, sub, float("-inf"))
            assert viterbi_scores[tuple(paths[b])] == pytest.approx(
                max(viterbi_scores.values()), abs=1e-9)
            assert len(paths[b]) == len(keep)


def test_probabilities_sum_to_one():
    g = torch.Generator().manual_seed(3)
    crf = _random_crf(3, g)
    em = torch.randn(1, 3, 3, generator=g, dtype=torch.float64)
    paths = torch.tensor(list(itertools.product(range(3), repeat=3)))
    ll = crf.log_likelihood(em.expand(len(paths), 3, 3), paths)
    assert ll.exp().sum().item() == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("scheme", ["BIO", "BIOES"])
def test_constraints_never_decoded_and_valid_gold_is_finite(scheme):
    types = ["LOC", "PER"]
    prefixes = "BI" if scheme == "BIO" else "BIES"
    labels = ["O"] + [f"{p}-{t}" for t in types for p in prefixes]
    K = len(labels)
    trans_ok, start_ok, end_ok = allowed_transitions(labels, scheme)
    i = {t: n for n, t in enumerate(labels)}
    assert not trans_ok[i["O"], i["I-LOC"]] and not start_ok[i["I-LOC"]]
    assert not trans_ok[i["B-PER"], i["I-LOC"]] and trans_ok[i["B-LOC"], i["I-LOC"]]
    if scheme == "BIOES":
        assert not trans_ok[i["B-LOC"], i["O"]] and not end_ok[i["B-LOC"]]
        assert not trans_ok[i["O"], i["E-LOC"]] and trans_ok[i["I-LOC"], i["E-LOC"]]
        assert trans_ok[i["E-LOC"], i["S-PER"]] and not start_ok[i["E-PER"]]

    g = torch.Generator().manual_seed(11)
    crf = CRF(K, (trans_ok, start_ok, end_ok))
    # emissions that push hard towards invalid tags (I-X first, I-X after O)
    em = torch.randn(32, 12, K, generator=g) * 5
    em[:, :, i["I-LOC"]] += 3
    mask = torch.arange(12)[None] < torch.randint(1, 13, (32,), generator=g)[:, None]
    for path in crf.decode(em, mask):
        tags = [labels[k] for k in path]
        # a valid sequence is unchanged by a round trip through its spans
        assert spans_to_tags(tags_to_spans(tags), len(tags), scheme) == tags

    gold = []
    for _ in range(32):
        spans = [(0, 2, "PER"), (3, 4, "LOC"), (5, 9, "LOC")]
        gold.append([i[t] for t in spans_to_tags(spans, 12, scheme)])
    ll = crf.log_likelihood(em, torch.tensor(gold), torch.ones(32, 12, dtype=torch.bool))
    assert torch.isfinite(ll).all() and (ll > FORBIDDEN / 2).all()


def test_gradients_reach_emissions_and_parameters():
    g = torch.Generator().manual_seed(5)
    labels = ["O", "B-X", "I-X"]
    crf = CRF(3, allowed_transitions(labels))
    em = torch.randn(4, 6, 3, generator=g, requires_grad=True)
    tags = torch.tensor([[0, 1, 2, 2, 0, 0]] * 4)
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1, 0, 1, 0, 1, 0], [0] * 6]).bool()
    loss = -crf.log_likelihood(em, tags, mask).sum()
    loss.backward()
    assert torch.isfinite(em.grad).all() and em.grad.abs().sum() > 0
    assert (em.grad[3] == 0).all()           # an all-masked row contributes nothing
    assert (em.grad[1, 3:] == 0).all()       # nor do masked positions
    for p in crf.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    # training the transitions alone (no emissions) learns a deterministic chain
    target = torch.tensor([[1, 2, 0, 1, 2, 0]])
    em0 = torch.zeros(1, 6, 3)
    for _ in range(50):  # plain gradient ascent (torch.optim takes seconds to import)
        crf.zero_grad()
        crf.log_likelihood(em0, target).sum().backward()
        with torch.no_grad():
            for p in crf.parameters():
                p += 0.5 * p.grad
    assert crf.decode(em0) == target.tolist()


def test_float32_batch_matches_float64():
    g = torch.Generator().manual_seed(2)
    crf = CRF(5)
    em = torch.randn(3, 7, 5, generator=g)
    tags = torch.randint(0, 5, (3, 7), generator=g)
    a = crf.log_likelihood(em, tags)
    b = crf.double().log_likelihood(em.double(), tags)
    assert torch.allclose(a.double(), b, atol=1e-4) and a.dtype == torch.float32


def test_large_emissions_match_a_logsumexp_reference(host_reads):
    """The exp-space forward pass floors underflowing sums; with scores spread over hundreds of
    nats it must still agree with a plain float64 logsumexp recursion, and its gradient stays
    finite (the fast branch of an underflowed row must not send NaN through torch.where)."""
    g = torch.Generator().manual_seed(9)
    labels = ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B"]
    allowed = allowed_transitions(labels, "BIOES")
    crf = CRF(len(labels), allowed)
    with torch.no_grad():
        crf.transitions.copy_(torch.randn(9, 9, generator=g) * 3)
    em = (torch.randn(8, 30, 9, generator=g) * 60).requires_grad_()
    tags = torch.zeros(8, 30, dtype=torch.long)  # all O: a valid path
    ll = crf.log_likelihood(em, tags)
    ll.sum().backward()
    assert torch.isfinite(em.grad).all() and torch.isfinite(crf.transitions.grad).all()
    ll, em = ll.detach(), em.detach()
    trans, start, end = (x.double() for x in crf._scores(torch.float64, FORBIDDEN))
    e = em.double()
    alpha = start + e[:, 0]
    for t in range(1, 30):
        alpha = torch.logsumexp(alpha[:, :, None] + trans + e[:, t, None, :], dim=1)
    log_z = torch.logsumexp(alpha + end, dim=1)
    gold = e[:, :, 0].sum(1) + trans[0, 0] * 29 + start[0] + end[0]
    assert torch.allclose(ll.double(), gold - log_z, rtol=1e-5, atol=1e-2)
