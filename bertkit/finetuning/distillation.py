"""Task distillation: a small student learns a fine-tuned teacher's outputs (Hinton et al.
2015, "Distilling the knowledge in a neural network"; DistilBERT, Sanh et al. 2019).

`Distillation` holds the settings (the flags of `bertkit finetune TASK --teacher DIR`); the
functions here are the losses, pure tensor functions that each task's `Task.taught_loss`
calls on its head's outputs:

    soft_kl        KL(teacher || student) of the distributions softened by T, times T^2
                   (so that the soft term's gradients keep their size as T grows)
    soft_bce       the same for independent sigmoids (multi-label classification)
    mixed          alpha * the teacher's term + (1 - alpha) * the labels' term
    vector_mse     MSE of a sentence encoder's vectors to the teacher's (of the same width)
    hidden_mse     MSE between the student's layers and the teacher's layers they map to
    student_layers which teacher layers a student of N layers starts from (DistilBERT's
                   initialisation: evenly spaced, the first and the last kept)

How the teacher runs (`bertkit.finetuning.teacher`): once over the transfer set before
training, its outputs kept per training item, rather than beside the student at every step.
A run of E epochs would run the teacher E times over the same items in inference mode, for
the same outputs (no dropout), while the cache costs one pass and a few floats per token; a
resumed run computes the same cache again. The hidden-state loss is the exception: a layer's
states are hidden-size floats per token and layer, too many to keep, so the teacher's encoder
runs on each batch when `hidden_weight` is above 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from bertkit.files import UserError
from bertkit.pretraining.distillation import states_mse

PAD_LOGIT = -1e4
"""What pads a teacher's per-token logits to a batch's length: no probability (as the QA
head masks padding)."""


@dataclass
class Distillation:
    """How a student learns from a fine-tuned teacher of the same task."""
    teacher: str | None = None
    """A fine-tuned model directory (or Hub name) of the same task whose outputs the student
    learns, on the training file and --unlabeled texts (embed: a sentence encoder)."""
    student_layers: int | None = None
    """With --teacher and no --model: the student is N of the teacher's layers, evenly spaced
    with the first and the last kept (DistilBERT's initialisation), with the teacher's head
    and tokenizer."""
    temperature: float = 2.0
    """T softening the teacher's and the student's distributions; the soft term is scaled by
    T^2 (Hinton et al. 2015)."""
    alpha: float = 0.5
    """Weight of the teacher's term in the loss, 1 - alpha the labels' (texts of --unlabeled
    learn the teacher's term alone)."""
    hidden_weight: float = 0.0
    """Weight of an added loss: MSE between the student's hidden states (through a learned
    projection where its width differs) and those of the teacher's layers they map to (0:
    none; needs the teacher's tokenizer)."""
    unlabeled: Path | None = None
    """More training texts without labels, in a format `bertkit predict` reads for the task
    (a .txt file of one text a line), that the teacher labels: its outputs their only
    target."""

    def __post_init__(self) -> None:
        if self.teacher is None:
            given = [f"--{name.replace('_', '-')}" for name, value in
                     (("student_layers", self.student_layers), ("unlabeled", self.unlabeled),
                      ("hidden_weight", self.hidden_weight or None)) if value is not None]
            if given:
                raise UserError(f"{given[0]} is read with --teacher DIR, which is not given")
        if self.student_layers is not None and self.student_layers < 1:
            raise UserError(f"--student-layers must be at least 1, got {self.student_layers}")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be positive, got {self.temperature:g}")
        if not 0 <= self.alpha <= 1:
            raise UserError(f"--alpha must be in [0, 1], got {self.alpha:g}")
        if self.hidden_weight < 0:
            raise UserError(f"--hidden-weight must be at least 0, got {self.hidden_weight:g}")

    @property
    def active(self) -> bool:
        """Whether a teacher is given."""
        return self.teacher is not None

    def options(self) -> dict:
        """The settings as training_args.json and a checkpoint's fingerprint record them."""
        return {"teacher": self.teacher, "student_layers": self.student_layers,
                "temperature": self.temperature, "alpha": self.alpha,
                "hidden_weight": self.hidden_weight,
                "unlabeled": None if self.unlabeled is None else str(self.unlabeled)}


def student_layers(teacher_layers: int, n: int) -> list[int]:
    """The teacher's layers (0-based) a student of `n` starts from: evenly spaced, the first
    and the last kept (DistilBERT took every other layer of BERT-base's twelve)."""
    if not 1 <= n <= teacher_layers:
        raise UserError(f"--student-layers must be between 1 and the teacher's "
                        f"{teacher_layers} layers, got {n}")
    if n == 1:
        return [teacher_layers - 1]
    return [round(i * (teacher_layers - 1) / (n - 1)) for i in range(n)]


def soft_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float,
            mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) over the last dimension, times T^2,
    averaged over the positions where `mask` (the leading dimensions; none: all) is true."""
    t = temperature
    # -inf (a span head's impossible types) to a finite floor, and the positions left out to
    # 0, so that no NaN reaches the sum or its gradient
    student, teacher = student.float().clamp(min=PAD_LOGIT), teacher.float().clamp(min=PAD_LOGIT)
    if mask is not None:
        student = torch.where(mask[..., None], student, 0.0)
        teacher = torch.where(mask[..., None], teacher, 0.0)
    log_p = F.log_softmax(teacher / t, -1)
    log_q = F.log_softmax(student / t, -1)
    per = (log_p.exp() * (log_p - log_q)).sum(-1) * t * t
    return _mean(per, mask)


def soft_bce(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Binary cross-entropy of the student's sigmoids against the teacher's, both softened by
    T, times T^2: each label of a multi-label classifier is a distribution of its own."""
    t = temperature
    return F.binary_cross_entropy_with_logits(student.float() / t,
                                              torch.sigmoid(teacher.float() / t)) * t * t


def mixed(alpha: float, taught: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    """alpha * the teacher's term + (1 - alpha) * the labels' (a batch without labels, of
    unlabelled texts: the teacher's term alone)."""
    return taught if labels is None else alpha * taught + (1 - alpha) * labels


def vector_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MSE between the student's sentence vectors [B, D] and the teacher's."""
    if student.shape[-1] != teacher.shape[-1]:
        raise UserError(f"the student's vectors are {student.shape[-1]} wide, the teacher's "
                        f"{teacher.shape[-1]}: a student of another width learns them through "
                        f"a projection, which `bertkit.finetuning.teacher.ProjectedEncoder` "
                        f"builds")
    return F.mse_loss(student.float(), teacher.float())


def hidden_mse(student: tuple[torch.Tensor, ...], teacher: tuple[torch.Tensor, ...],
               layers: list[int], mask: torch.Tensor) -> torch.Tensor:
    """Mean over the student's layers of the MSE between its hidden states [B, T, H] and
    those of the teacher's layer it maps to (`layers`: 0-based blocks, outputs after the
    embeddings), over the real tokens (`mask` [B, T])."""
    if student[0].shape[-1] != teacher[0].shape[-1]:
        raise UserError(f"--hidden-weight compares hidden states of the same width: the "
                        f"student's are {student[0].shape[-1]} wide, the teacher's "
                        f"{teacher[0].shape[-1]} (a projection, `ProjectedEncoder`, maps them)")
    pairs = [(student[0], teacher[0])] + [(student[i + 1], teacher[k + 1])
                                         for i, k in enumerate(layers)]
    return sum(states_mse(s, t, mask) for s, t in pairs) / len(pairs)


def stack_outputs(outputs: list, pad: float = PAD_LOGIT):
    """One batch of per-item teacher outputs: tensors padded along their first dimension to
    the longest and stacked; a tuple of them, each part so."""
    if isinstance(outputs[0], tuple):
        return tuple(stack_outputs([o[k] for o in outputs], pad) for k in range(len(outputs[0])))
    if outputs[0].dim() == 0:
        return torch.stack(outputs)
    longest = max(o.shape[0] for o in outputs)
    out = outputs[0].new_full((len(outputs), longest, *outputs[0].shape[1:]), pad)
    for row, o in enumerate(outputs):
        out[row, :o.shape[0]] = o
    return out


def _mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return values.mean()
    keep = mask.float()
    return (values * keep).sum() / keep.sum().clamp(min=1)


__all__ = ["Distillation", "student_layers", "soft_kl", "soft_bce", "mixed", "vector_mse",
           "hidden_mse", "stack_outputs", "PAD_LOGIT"]
