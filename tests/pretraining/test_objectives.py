"""Objectives: the sparse MLM head equals the full one and transformers' loss, NSP, the span
boundary head, the causal LM, and held-out evaluation."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertkit.model.encoder import init_weights
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel, SpanBoundaryHead
from bertkit.pretraining import objectives

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(tiny, B=4, seed=0):
    return tiny.batch(torch.Generator().manual_seed(seed), B)


def test_sparse_mlm_loss_equals_full_vocabulary_projection(tiny):
    model = tiny.model().eval()
    batch = _batch(tiny)
    loss, metrics = objectives.mlm_loss(model, batch)
    full, _, _ = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    labels = torch.full((batch["input_ids"].numel(),), IGNORE_INDEX)
    valid = batch["mlm_labels"] != IGNORE_INDEX
    labels[batch["mlm_positions"][valid]] = batch["mlm_labels"][valid]
    expected = F.cross_entropy(full.reshape(-1, tiny.V), labels)
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)
    kept = labels != IGNORE_INDEX
    acc = (full.reshape(-1, tiny.V).argmax(-1)[kept] == labels[kept]).float().mean()
    torch.testing.assert_close(metrics["mlm_accuracy"], acc)


def test_padding_entries_do_not_count(tiny):
    model = tiny.model().eval()
    batch = _batch(tiny)
    valid = batch["mlm_labels"] != IGNORE_INDEX
    trimmed = dict(batch, mlm_positions=batch["mlm_positions"][valid],
                   mlm_labels=batch["mlm_labels"][valid])
    torch.testing.assert_close(objectives.mlm_loss(model, batch)[0],
                               objectives.mlm_loss(model, trimmed)[0])
    assert int(objectives.target_count("mlm")(batch)) == int(valid.sum())


def test_mlm_nsp_loss_matches_transformers_bert_for_pretraining(tmp_path, tiny):
    transformers = pytest.importorskip("transformers")
    from bertkit.model.hub import save_model

    model = tiny.model().eval()
    save_model(model, tmp_path / "m")
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path / "m").eval()
    batch = _batch(tiny)
    labels = torch.full((batch["input_ids"].numel(),), IGNORE_INDEX)
    valid = batch["mlm_labels"] != IGNORE_INDEX
    labels[batch["mlm_positions"][valid]] = batch["mlm_labels"][valid]
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=batch["attention_mask"], labels=labels.view_as(batch["input_ids"]),
                 next_sentence_label=batch["nsp_labels"])
        loss, metrics = objectives.mlm_nsp_loss(model, batch)
    torch.testing.assert_close(loss, out.loss, atol=1e-5, rtol=1e-5)
    nsp = F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"])
    torch.testing.assert_close(metrics["nsp_loss"], nsp, atol=1e-5, rtol=1e-5)
    nsp_acc = (out.seq_relationship_logits.argmax(-1) == batch["nsp_labels"]).float().mean()
    torch.testing.assert_close(metrics["nsp_accuracy"], nsp_acc)


def test_span_boundary_head_reads_boundaries_and_offsets(tiny):
    cfg = tiny.config()
    model = PretrainingModel(cfg, sbo=SpanBoundaryHead(cfg))
    init_weights(model, cfg)
    batch = _batch(tiny)
    loss, metrics = objectives.span_loss(model, batch)
    torch.testing.assert_close(loss, metrics["mlm_loss"] + metrics["sbo_loss"])
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.sbo.parameters())
    model.zero_grad()
    h = torch.randn(5, cfg.hidden_size)
    states = model.sbo(h, h, torch.tensor([0, 1, 2, 3, 4]))
    assert states.shape == (5, cfg.hidden_size)
    assert not torch.allclose(states[0], states[1])  # the offset embedding matters
    far = model.sbo(h[:1], h[:1], torch.tensor([1000]))  # long spans share the last row
    torch.testing.assert_close(far, model.sbo(h[:1], h[:1], torch.tensor([31])))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_fused_vocabulary_loss_equals_the_plain_path(dtype, tiny):
    """vocab_terms (projection and cross-entropy fused, the gradient made in the forward pass)
    gives the loss, accuracy and gradients of F.linear + F.cross_entropy."""
    g = torch.Generator().manual_seed(0)
    N, H = 40, 16
    z = torch.randn(N, H, generator=g)
    weight, bias = torch.randn(tiny.V, H, generator=g), torch.randn(tiny.V, generator=g)
    labels = torch.randint(0, tiny.V, (N,), generator=g)
    labels[[3, 17]] = IGNORE_INDEX  # padding entries of a fixed-size target list
    labels[5] = int((z[5] @ weight.T + bias).argmax())  # at least one right guess

    def run(fused: bool):
        leaves = [t.clone().requires_grad_() for t in (z, weight, bias)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            if fused:
                loss_sum, correct, count = objectives.vocab_terms(*leaves, labels)
            else:
                logits = F.linear(*leaves).float()
                loss_sum = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX,
                                           reduction="sum")
                correct = ((logits.argmax(-1) == labels) & (labels >= 0)).sum()
        (loss_sum * 0.5).backward()
        return loss_sum.detach(), correct, [t.grad for t in leaves]

    tol = dict(atol=1e-5, rtol=1e-5) if dtype == "fp32" else dict(atol=2e-2, rtol=2e-2)
    (fused_loss, fused_correct, fused_grads), (loss, correct, grads) = run(True), run(False)
    torch.testing.assert_close(fused_loss, loss, **tol)
    assert int(fused_correct) == int(correct) >= 1
    for a, b in zip(fused_grads, grads):
        torch.testing.assert_close(a, b, **tol)
    assert fused_grads[0][3].abs().max() == 0  # ignored rows get no gradient
    with torch.no_grad():  # evaluation: the plain path, same figures
        plain = objectives.vocab_terms(z, weight, bias, labels)
    torch.testing.assert_close(plain[0], loss, **tol)


def test_fused_training_step_equals_the_plain_one(tiny):
    """A whole mlm step through vocab_terms matches the model's full-logits forward."""
    model = tiny.model()
    batch = _batch(tiny)
    loss, metrics = objectives.mlm_loss(model, batch)
    loss.backward()
    fused = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    logits, _, _ = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                         positions=batch["mlm_positions"])
    plain = F.cross_entropy(logits, batch["mlm_labels"], ignore_index=IGNORE_INDEX)
    plain.backward()
    torch.testing.assert_close(loss, plain, atol=1e-6, rtol=1e-6)
    for a, b in zip(fused, [p.grad for p in model.parameters() if p.grad is not None]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_causal_lm_sees_only_the_left(tiny):
    model = tiny.model().eval()
    batch = _batch(tiny)
    loss, metrics = objectives.clm_loss(model, batch)
    assert math.isfinite(float(loss.detach())) and "clm_accuracy" in metrics
    changed = batch["input_ids"].clone()
    changed[:, tiny.T // 2:] = 7
    a, _, _ = model(batch["input_ids"], causal=True)
    b, _, _ = model(changed, causal=True)
    torch.testing.assert_close(a[:, : tiny.T // 2], b[:, : tiny.T // 2])
    assert not torch.allclose(a[:, -1], b[:, -1])
    assert int(objectives.target_count("clm")(batch)) == 4 * (tiny.T - 1)


def test_evaluate_weights_by_tokens_and_reports_perplexity(tiny):
    model = tiny.model().eval()
    batches = [_batch(tiny, 2, 1), _batch(tiny, 4, 2)]
    result = objectives.evaluate_lm(model, batches, "mlm+nsp")
    sums = counts = nsp_right = 0.0
    for b in batches:
        with torch.no_grad():
            loss, _ = objectives.mlm_loss(model, b)
            _, nsp_logits, _ = model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
        n = float((b["mlm_labels"] != IGNORE_INDEX).sum())
        sums, counts = sums + float(loss) * n, counts + n
        nsp_right += float((nsp_logits.argmax(-1) == b["nsp_labels"]).sum())
    assert result["eval_loss"] == pytest.approx(sums / counts, rel=1e-5)
    assert result["eval_perplexity"] == pytest.approx(math.exp(result["eval_loss"]), rel=1e-5)
    assert result["eval_tokens"] == counts
    assert result["eval_nsp_accuracy"] == pytest.approx(nsp_right / 6)  # over all 2 + 4 pairs


def test_unknown_objective():
    from bertkit.files import UserError

    with pytest.raises(UserError, match="choose one of mlm, mlm\\+nsp, span, clm, electra"):
        objectives.loss_for("xlnet")
