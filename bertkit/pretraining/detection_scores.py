"""ELECTRA's discriminator as a judge of text: how original each piece of a sentence looks,
summed into a sentence's score (minimal pairs), from one pass over the sentence as it is."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.pretraining.sentence_rows import encode, eval_mode, max_length, padded


def detection_log_likelihood(model: nn.Module, tokenizer, sentences: Sequence[str],
                             batch_size: int = 256,
                             device: str | torch.device = "cpu") -> list[float]:
    """ELECTRA's discriminator as a scorer: per sentence, the sum over its non-special pieces
    of log P(original) = log sigmoid(-logit), natural log, from one pass over the sentence as
    it is (no copies, no [MASK]). Each distinct sentence is scored once; a sentence longer
    than the model's positions is a UserError naming it."""
    distinct = list(dict.fromkeys(sentences))
    flat, lengths, special = encode(tokenizer, distinct, max_length(model, tokenizer), False,
                                     names=[f"sentence {s[:60]!r}" for s in distinct])
    starts = np.concatenate(([0], lengths.cumsum()[:-1])).astype(np.int64)
    scores = np.zeros(len(distinct))
    order = np.argsort(lengths, kind="stable")
    device = torch.device(device)
    with eval_mode(model):
        for i in range(0, len(order), batch_size):
            chunk = order[i:i + batch_size]
            pick = np.concatenate([np.arange(starts[c], starts[c] + lengths[c]) for c in chunk])
            rows = padded(flat[pick], lengths[chunk], tokenizer.pad_id)
            keep = padded(~special[pick], lengths[chunk], 0).astype(bool)
            ids = torch.from_numpy(rows).to(device)
            attention = (torch.arange(rows.shape[1])[None, :]
                         < torch.from_numpy(lengths[chunk])[:, None]).long().to(device)
            logits = model(ids, torch.zeros_like(ids), attention).float()  # [C, T]
            original = F.logsigmoid(-logits) * torch.from_numpy(keep).to(device)
            scores[chunk] = original.sum(-1).double().cpu().numpy()
    index = {s: i for i, s in enumerate(distinct)}
    return [float(scores[index[s]]) for s in sentences]


DETECTION_SCORING = "replaced-token detection"
"""How `evaluate` names the ELECTRA discriminator's sentence score (`detection_log_likelihood`)."""


__all__ = ["detection_log_likelihood", "DETECTION_SCORING"]
