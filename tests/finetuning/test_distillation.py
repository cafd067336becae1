"""The distillation losses equal the same sums written as plain loops (KL of the softened
distributions times T^2, a CRF tagger's on its emissions, MSE to scores, vectors and hidden
states), DistilBERT's layer choice, and the settings' checks."""
from __future__ import annotations

import math

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.finetuning import distillation as dist
from bertkit.finetuning.distillation import Distillation
from bertkit.finetuning.tasks import QA, Classify, Regress, Tag
from bertkit.model.encoder import Encoder


def _softmax(row: list[float], t: float) -> list[float]:
    e = [math.exp(x / t) for x in row]
    return [x / sum(e) for x in e]


def _kl_loop(student, teacher, t: float, mask=None) -> float:
    """Mean over kept rows of sum_k p_k log(p_k / q_k), times T^2."""
    total, rows = 0.0, 0
    for r, (s, te) in enumerate(zip(student.tolist(), teacher.tolist())):
        if mask is not None and not mask[r]:
            continue
        p, q = _softmax(te, t), _softmax(s, t)
        total += sum(pk * math.log(pk / qk) for pk, qk in zip(p, q) if pk > 0) * t * t
        rows += 1
    return total / rows


def test_soft_kl_is_the_loop_with_t_squared():
    g = torch.Generator().manual_seed(0)
    s, te = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g) * 3
    for t in (1.0, 2.0, 4.0):
        assert float(dist.soft_kl(s, te, t)) == pytest.approx(_kl_loop(s, te, t), rel=1e-5)
    mask = torch.tensor([True, False, True, True, False])
    assert float(dist.soft_kl(s, te, 2.0, mask)) == pytest.approx(
        _kl_loop(s, te, 2.0, mask.tolist()), rel=1e-5)
    assert float(dist.soft_kl(te, te, 3.0)) == pytest.approx(0.0, abs=1e-6)


def test_soft_kl_survives_impossible_classes_and_padding():
    """A span head's -inf types and padded positions give a finite loss and gradient."""
    s = torch.tensor([[0.0, float("-inf"), 1.0], [2.0, 1.0, 0.0]], requires_grad=True)
    te = torch.tensor([[0.5, float("-inf"), 0.0], [dist.PAD_LOGIT] * 3])
    loss = dist.soft_kl(s, te, 2.0, torch.tensor([True, False]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()
    assert float(loss.detach()) == pytest.approx(_kl_loop(torch.tensor([[0.0, -1e4, 1.0]]),
                                                 torch.tensor([[0.5, -1e4, 0.0]]), 2.0),
                                        rel=1e-5)


def test_soft_bce_is_the_loop():
    s, te, t = torch.tensor([[0.3, -1.0], [2.0, 0.5]]), torch.tensor([[1.0, -2.0], [0.0, 3.0]]), 2.0
    terms = []
    for sr, tr in zip(s.tolist(), te.tolist()):
        for a, b in zip(sr, tr):
            p, q = 1 / (1 + math.exp(-b / t)), 1 / (1 + math.exp(-a / t))
            terms.append(-(p * math.log(q) + (1 - p) * math.log(1 - q)) * t * t)
    assert float(dist.soft_bce(s, te, t)) == pytest.approx(sum(terms) / len(terms), rel=1e-5)


def test_hidden_mse_is_the_loop_over_mapped_layers():
    g = torch.Generator().manual_seed(1)
    student = tuple(torch.randn(2, 3, 4, generator=g) for _ in range(3))  # embeddings + 2
    teacher = tuple(torch.randn(2, 3, 4, generator=g) for _ in range(5))  # embeddings + 4
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    layers = [0, 3]
    pairs = [(0, 0), (1, 1), (2, 4)]
    total, count = 0.0, 0
    for si, ti in pairs:
        for b in range(2):
            for p in range(3):
                if mask[b, p]:
                    total += sum((x - y) ** 2 for x, y in zip(student[si][b, p].tolist(),
                                                              teacher[ti][b, p].tolist()))
                    count += 4
    assert float(dist.hidden_mse(student, teacher, layers, mask)) == pytest.approx(
        total / count, rel=1e-5)
    with pytest.raises(UserError, match="same width"):
        dist.hidden_mse(student, tuple(torch.zeros(2, 3, 8) for _ in range(5)), layers, mask)


@pytest.mark.parametrize("teacher, n, expected", [
    (12, 6, [0, 2, 4, 7, 9, 11]), (6, 3, [0, 2, 5]), (6, 2, [0, 5]), (4, 4, [0, 1, 2, 3]),
    (6, 1, [5])])
def test_student_layers_are_evenly_spaced_with_first_and_last(teacher, n, expected):
    assert dist.student_layers(teacher, n) == expected


def test_student_layers_above_the_teachers_depth_is_one_line():
    with pytest.raises(UserError, match="between 1 and the teacher's 6 layers, got 7"):
        dist.student_layers(6, 7)


@pytest.mark.parametrize("settings, message", [
    (dict(student_layers=2), "--student-layers is read with --teacher"),
    (dict(teacher="t", temperature=0), "--temperature must be positive"),
    (dict(teacher="t", alpha=1.5), r"--alpha must be in \[0, 1\]"),
    (dict(teacher="t", student_layers=0), "--student-layers must be at least 1"),
    (dict(teacher="t", hidden_weight=-1), "--hidden-weight must be at least 0")])
def test_bad_settings_are_one_line(settings, message):
    with pytest.raises(UserError, match=message):
        Distillation(**settings)


def test_stack_outputs_pads_to_the_longest():
    out = dist.stack_outputs([torch.ones(2, 3), torch.zeros(4, 3)])
    assert out.shape == (2, 4, 3) and bool((out[0, 2:] == dist.PAD_LOGIT).all())
    pair = dist.stack_outputs([(torch.ones(2), torch.ones(2)), (torch.ones(3), torch.ones(3))])
    assert [p.shape for p in pair] == [(2, 3), (2, 3)]


# The tasks' losses ------------------------------------------------------------------------------

def _encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(EncoderConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2,
                                 intermediate_size=32, max_positions=16, hidden_dropout=0.0,
                                 attention_dropout=0.0))


def _batch(B: int = 3, T: int = 6) -> dict:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 30, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, 4:] = 0
    word_ids = torch.arange(T).repeat(B, 1) - 1
    word_ids[:, -1] = -1
    word_ids[0, 4:] = -1
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
            "word_ids": word_ids}


def test_classify_loss_mixes_kl_and_labels_by_alpha():
    task = Classify(labels=("a", "b", "c"), pooling="cls")
    model = task.make_model(_encoder()).eval()
    batch = {**_batch(), "labels": torch.tensor([0, 2, 1])}
    batch["teacher"] = torch.randn(3, 3, generator=torch.Generator().manual_seed(3))
    settings = Distillation(teacher="t", temperature=2.0, alpha=0.3)
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    ce = sum(-math.log(_softmax(row, 1.0)[y]) for row, y in
             zip(logits.tolist(), batch["labels"].tolist())) / 3
    expected = 0.3 * _kl_loop(logits.detach(), batch["teacher"], 2.0) + 0.7 * ce
    assert float(task.taught_loss(model, batch, settings).detach()) == pytest.approx(
        expected, rel=1e-4)
    unlabelled = {k: v for k, v in batch.items() if k != "labels"}
    assert float(task.taught_loss(model, unlabelled, settings).detach()) == pytest.approx(
        _kl_loop(logits.detach(), batch["teacher"], 2.0), rel=1e-4)


def test_regress_learns_the_teachers_score_by_mse():
    task = Regress(pooling="cls")
    model = task.make_model(_encoder()).eval()
    batch = {**_batch(), "labels": torch.tensor([1.0, -1.0, 0.5]),
             "teacher": torch.tensor([[0.2], [0.4], [-0.3]])}
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])[:, 0]
    mse_t = sum((a - b) ** 2 for a, b in zip(out.tolist(), [0.2, 0.4, -0.3])) / 3
    mse_y = sum((a - b) ** 2 for a, b in zip(out.tolist(), [1.0, -1.0, 0.5])) / 3
    loss = task.taught_loss(model, batch, Distillation(teacher="t", alpha=0.5, temperature=3))
    assert float(loss.detach()) == pytest.approx(0.5 * mse_t + 0.5 * mse_y, rel=1e-4)


@pytest.mark.parametrize("crf", [False, True])
def test_a_tagger_distils_on_its_emissions(crf):
    task = Tag(labels=("B-PER", "I-PER", "O"), scheme="BIO", crf=crf)
    model = task.make_model(_encoder()).eval()
    batch = _batch()
    labels = torch.where(batch["word_ids"] >= 0, 2, -100)
    batch.update(labels=labels, teacher=torch.randn(3, 6, 3,
                                                    generator=torch.Generator().manual_seed(4)))
    emissions = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    keep = (batch["word_ids"] >= 0).flatten().tolist()
    kl = _kl_loop(emissions.detach().flatten(0, 1), batch["teacher"].flatten(0, 1), 2.0, keep)
    own = float(model.loss(emissions, labels).detach())  # cross-entropy, or the CRF's likelihood
    loss = task.taught_loss(model, batch, Distillation(teacher="t", alpha=0.25))
    assert float(loss.detach()) == pytest.approx(0.25 * kl + 0.75 * own, rel=1e-4)


def test_qa_distils_start_and_end_distributions():
    task = QA()
    model = task.make_model(_encoder()).eval()
    batch = _batch()
    g = torch.Generator().manual_seed(5)
    batch["teacher"] = (torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g))
    batch["teacher"][0][0, 4:] = dist.PAD_LOGIT  # padding, as the teacher's are padded
    batch["teacher"][1][0, 4:] = dist.PAD_LOGIT
    start, end = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    expected = _kl_loop(start.detach().clamp(min=-1e4), batch["teacher"][0], 2.0) + \
        _kl_loop(end.detach().clamp(min=-1e4), batch["teacher"][1], 2.0)
    loss = task.taught_loss(model, batch, Distillation(teacher="t", alpha=0.5))
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-4)
