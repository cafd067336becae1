"""The left-to-right language model (as GPT): each position predicts the next token, seeing only
its left. Saved with `"is_decoder": true`, so that it runs causally wherever it is read. What a
user asks of the trained model: `bertkit generate`."""
from __future__ import annotations

from pathlib import Path

from torch import nn

from bertkit.pretraining.objective import ExampleShape, Objective, save_pretraining_model
from bertkit.pretraining.vocab_loss import decode_terms, mean_terms


def _clm_terms(model: nn.Module, batch: dict):
    h = model.encoder(batch["input_ids"], batch.get("token_type_ids"),
                      batch.get("attention_mask"), causal=True,
                      document_ids=batch.get("document_ids")).last_hidden_state  # [B, T, H]
    return decode_terms(model, h.reshape(-1, h.shape[-1]), batch["clm_labels"].reshape(-1))


def clm_loss(model: nn.Module, batch: dict):
    """Left-to-right LM: each position predicts the next token, seeing only its left."""
    return mean_terms(_clm_terms(model, batch), "clm")


class LeftToRight(Objective):
    name = "clm"
    summary = "causal: left to right, as GPT"
    examples = ExampleShape(targets="next-token")
    pipeline_tag = "text-generation"
    masks = False  # it predicts every token: no masking rate to report
    label_key = "clm_labels"
    query = 'bertkit generate --model {model} "The cat"'

    def loss(self, model: nn.Module, batch: dict):
        return clm_loss(model, batch)

    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        return _clm_terms(model, batch)

    def save(self, model: nn.Module, path: Path, tokenizer) -> None:
        save_pretraining_model(model, path, tokenizer, leave_out=self.untrained_parts(model),
                               causal=True)


__all__ = ["LeftToRight", "clm_loss"]
