"""SpanBERT (Joshi et al. 2020): masked spans of whole words, each row from one document, and
the span-boundary objective: each token of a span predicted again from the two tokens just
outside it and its offset in the span, on the same targets as the masked LM.

The span-boundary head has no Hugging Face counterpart: it is saved beside the model as
`sbo.safetensors` (transformers ignores that file), and `--init` of such a directory with
`--objective span` (or `evaluate --objective span`) picks it up again. What a user asks of the
trained model: `bertkit fill-mask`."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from bertkit.files import UserError
from bertkit.model.heads import SBO_FILE, PretrainingModel, SpanBoundaryHead
from bertkit.model.hub import load_config, load_pretraining_model
from bertkit.pretraining.objective import ExampleShape, Objective, save_pretraining_model
from bertkit.pretraining.vocab_loss import decode_terms, mean_terms, mlm_forward, vocab_terms

def _span_forward(model: nn.Module, batch: dict):
    """(MLM terms, span-boundary terms) on the same targets, from one pass; the boundary
    head's states go through the MLM head's decoder."""
    z, (left, right) = mlm_forward(model, batch, batch["span_left"], batch["span_right"])
    labels = batch["mlm_labels"]
    sbo = model.sbo(left, right, batch["span_offset"])  # [N, H]
    return (decode_terms(model, z, labels),
            vocab_terms(sbo, *model.mlm.decoder(), labels, fused=model.fast))


def span_loss(model: nn.Module, batch: dict):
    """SpanBERT: masked LM + the span-boundary objective on the same targets."""
    mlm_terms, sbo_terms = _span_forward(model, batch)
    mlm, metrics = mean_terms(mlm_terms, "mlm")
    sbo, sbo_metrics = mean_terms(sbo_terms, "sbo")
    return mlm + sbo, {**metrics, **sbo_metrics}


class SpanBoundary(Objective):
    name = "span"
    summary = "SpanBERT"
    examples = ExampleShape(rows="documents", targets="spans")

    def extra_heads(self, cfg) -> dict[str, nn.Module]:
        return {"sbo": SpanBoundaryHead(cfg)}

    def extra_state(self, model_dir: Path) -> dict[str, torch.Tensor]:
        file = Path(model_dir) / SBO_FILE
        return {f"sbo.{k}": v for k, v in load_file(str(file)).items()} if file.is_file() \
            else {}

    def skeleton(self, cfg, init: Path | None) -> nn.Module | None:
        cfg = cfg if init is None else load_config(init)
        return PretrainingModel(cfg, sbo=SpanBoundaryHead(cfg))

    def saved_model(self, model_dir: Path, device) -> nn.Module:
        if not (Path(model_dir) / SBO_FILE).is_file():  # held-out figures are then refused
            return load_pretraining_model(model_dir, device)
        return super().saved_model(model_dir, device)

    def check_model(self, model: nn.Module) -> None:
        super().check_model(model)
        if model.sbo is None:
            raise UserError("the span objective's held-out figures need the span-boundary "
                            "head (sbo.safetensors); evaluate with --objective mlm")

    def loss(self, model: nn.Module, batch: dict):
        return span_loss(model, batch)

    def held_out(self, model: nn.Module, batch: dict, add, judged: list):
        terms, sbo_terms = _span_forward(model, batch)
        add("sbo_loss", sbo_terms[0])
        return terms

    def figures(self, values: dict[str, float], judged: list) -> dict[str, float]:
        return {"eval_sbo_loss": values["sbo_loss"] / max(values["count"], 1.0)}

    def save(self, model: nn.Module, path: Path, tokenizer) -> None:
        head = safetensors_bytes({k: v.detach().cpu().contiguous()
                                  for k, v in model.sbo.state_dict().items()})
        save_pretraining_model(model, path, tokenizer, leave_out=self.untrained_parts(model),
                               extra_files={SBO_FILE: head})


__all__ = ["SpanBoundary", "span_loss", "SBO_FILE"]
