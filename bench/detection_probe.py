"""What an ELECTRA discriminator can tell: its replaced-token detection on fixed replacements,
independent of any generator, and how fast a discriminator alone learns from each.

    .venv/bin/python bench/detection_probe.py judge --data runs/data --model runs/electra
    .venv/bin/python bench/detection_probe.py learn --data runs/data --replace unigram \
        --steps 300 --out runs/probe-unigram

The replacements, at 15% of each held-out row's pieces (the masking of `--mlm-prob 0.15`):
- uniform: any piece of the vocabulary but the special ones, alike. Most are rare pieces,
  odd in any context: a detector tells them by what they are, without reading the context.
- unigram: pieces drawn by their frequency in the data's train split. They are as common as
  the pieces they replace, so telling them takes the context: what a masked LM learns.
- generator (judge only): the model's own generator, as in training.

`judge` scores each --model on the same held-out rows and the same draws: detection AUC (the
chance a replaced piece scores above an original one), accuracy, and "always original"'s
accuracy beside it. An ELECTRA run is judged by its discriminator; a masked-LM model by how
unlikely it finds each piece where it stands, -log P(piece | the row as it is, unmasked), the
detector a masked LM carries in it (its accuracy is not given: that score has no threshold).
`learn` trains a fresh discriminator of --preset alone (no generator) on one kind of
replacement with bertkit's training loop for --steps, evaluating every --eval-every steps:
--out/metrics.jsonl holds the held-out AUC curve (`bertkit plot runs --run DIR --key
eval_detection_auc --split eval`).
Prints the CPU beside the figures.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.config import TrainConfig, preset  # noqa: E402
from bertkit.model.encoder import init_weights  # noqa: E402
from bertkit.model.heads import ElectraModel  # noqa: E402
from bertkit.model.hub import has_detector, load_electra, load_pretraining_model  # noqa: E402
from bertkit.pretraining import electra, objectives  # noqa: E402
from bertkit.pretraining.examples import PretrainingBatches  # noqa: E402
from bertkit.pretraining.masking import MaskingConfig  # noqa: E402
from bertkit.pretraining.shards import load_array, load_manifest  # noqa: E402
from bertkit.runtime import describe  # noqa: E402
from bertkit.training.loop import train  # noqa: E402

MASKING = MaskingConfig(mlm_prob=0.15, mask_frac=0.85, random_frac=0.0)
KINDS = ("uniform", "unigram", "generator")


class Replacements:
    """Pieces to put at a batch's predicted positions: uniform or by corpus frequency."""

    def __init__(self, data: Path, kind: str):
        manifest = load_manifest(data)
        counts = torch.from_numpy(load_array(data / manifest["token_counts"])).double()
        special = list(manifest["tokenizer"]["special_ids"].values())
        weights = counts if kind == "unigram" else torch.ones_like(counts)
        weights[special] = 0.0
        self.weights = weights / weights.sum()

    def __call__(self, batch: dict, generator: torch.Generator) -> dict:
        """The batch with `input_ids` corrupted at its predicted positions and `replaced`."""
        labels = batch["mlm_labels"]
        drawn = torch.multinomial(self.weights, labels.numel(), replacement=True,
                                  generator=generator).view(labels.shape)
        ids, replaced = electra.corrupt(batch["input_ids"], batch["mlm_positions"], labels, drawn)
        return {**batch, "input_ids": ids, "replaced": replaced}


def detection_loss(model: ElectraModel, batch: dict):
    """The discriminator's mean binary cross-entropy on a corrupted batch, and its accuracy."""
    logits = model(batch["input_ids"], batch.get("token_type_ids"), batch.get("attention_mask"))
    loss_sum, correct, count = electra.detection_terms(logits, batch["replaced"],
                                                       batch.get("attention_mask"))
    loss = loss_sum / count.clamp(min=1)
    return loss, {"detection_loss": loss.detach(), "detection_accuracy": correct / count}


def surprise(model, batch: dict) -> torch.Tensor:
    """A masked LM's score of each piece [B, T]: -log P(the piece | the row as it is)."""
    ids = batch["input_ids"]
    h = model.encoder(ids, batch.get("token_type_ids"), batch.get("attention_mask"))
    logp = model.mlm(h.last_hidden_state).float().log_softmax(-1)  # [B, T, V]
    return -logp.gather(-1, ids[..., None]).squeeze(-1)


@torch.no_grad()
def judged(model, batches: list[dict]) -> dict:
    """AUC, accuracy and "always original"'s accuracy of a discriminator (or a masked LM's
    surprise) on corrupted batches."""
    model.eval()
    scores, labels = [], []
    for batch in batches:
        replaced = batch["replaced"]
        logits = (model(batch["input_ids"], batch.get("token_type_ids"),
                        batch.get("attention_mask"))
                  if isinstance(model, ElectraModel) else surprise(model, batch))
        mask = batch.get("attention_mask")
        real = mask.bool() if mask is not None else torch.ones_like(replaced)
        scores.append(logits[real].float())
        labels.append(replaced[real])
    s, y = torch.cat(scores), torch.cat(labels)
    return {"auc": electra.auc(s, y), "accuracy": ((s > 0) == y).float().mean().item(),
            "always_original": 1.0 - y.float().mean().item()}


def own_generator(model: ElectraModel, batches: list[dict]) -> dict:
    """judged's figures on the samples of the model's own generator, as training makes them."""
    f = objectives.evaluate_lm(model, batches, "electra")
    return {"auc": f["eval_detection_auc"], "accuracy": f["eval_detection_accuracy"],
            "always_original": 1.0 - f["eval_replaced_share"]}


def held_out(data: Path, n: int) -> list[dict]:
    rows = PretrainingBatches(data, objective="electra", seq_len=128, batch_size=16,
                              split="heldout", masking=MASKING, prefetch=0)
    return [batch for _, batch in zip(range(n), iter(rows))]


def judge(args) -> None:
    held = held_out(args.data, args.batches)
    print(f"# {describe()}")
    print("| model | replacements | AUC | accuracy | always original |")
    print("|---|---|---|---|---|")
    fixed = {}  # every model judged on the same draws
    for kind in KINDS[:2]:
        draw, g = Replacements(args.data, kind), torch.Generator().manual_seed(0)
        fixed[kind] = [draw(b, g) for b in held]
    for path in args.model:
        model = load_electra(path) if has_detector(path) else load_pretraining_model(path)
        for kind in KINDS:
            if kind != "generator":
                f = judged(model, fixed[kind])
            elif getattr(model, "generator", None) is not None:
                f = own_generator(model, held)
            else:
                continue
            accuracy = f"{f['accuracy']:.3f}" if isinstance(model, ElectraModel) else ""
            print(f"| {path} | {kind} | {f['auc']:.3f} | {accuracy} | "
                  f"{f['always_original']:.3f} |", flush=True)


def learn(args) -> None:
    draw = Replacements(args.data, args.replace)
    g_eval = torch.Generator().manual_seed(0)
    held = [draw(b, g_eval) for b in held_out(args.data, args.batches)]
    cfg = preset(args.preset, vocab_size=load_manifest(args.data)["tokenizer"]["vocab_size"],
                 architecture="modern")
    model = ElectraModel(cfg, None)
    init_weights(model, cfg, torch.Generator().manual_seed(args.seed))

    def batches():
        g = torch.Generator().manual_seed(args.seed)
        rows = PretrainingBatches(args.data, objective="electra", seq_len=64, batch_size=32,
                                  masking=MASKING, seed=args.seed)
        for batch in rows:
            yield draw(batch, g)

    def evaluate(m):
        f = judged(m, held)
        m.train()
        return {"eval_detection_auc": f["auc"], "eval_detection_accuracy": f["accuracy"]}

    print(f"# {describe()}")
    result = train(model, detection_loss, batches(), TrainConfig(
        lr=args.lr, max_steps=args.steps, warmup_fraction=0.05, schedule="constant",
        weight_decay=0.01, eps=1e-6, clip_norm=1.0, eval_every=args.eval_every,
        log_every=args.eval_every, seed=args.seed), args.out, evaluate=evaluate,
        save=lambda m, d: None)
    print(f"{args.replace}: {result.step} steps, held-out AUC "
          f"{result.eval_metrics.get('eval_detection_auc', float('nan')):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True)
    j = sub.add_parser("judge", help="score ELECTRA runs on fixed replacements")
    j.add_argument("--model", nargs="+", required=True,
                   help="ELECTRA run directories or masked-LM models")
    lr = sub.add_parser("learn", help="train a discriminator alone on fixed replacements")
    lr.add_argument("--replace", choices=KINDS[:2], required=True)
    lr.add_argument("--out", type=Path, required=True, help="run directory (new or empty)")
    lr.add_argument("--steps", type=int, default=300)
    lr.add_argument("--eval-every", type=int, default=50)
    lr.add_argument("--lr", type=float, default=1e-3)
    lr.add_argument("--preset", default="mini")
    lr.add_argument("--seed", type=int, default=0)
    for s in (j, lr):
        s.add_argument("--data", type=Path, required=True, help="a prepared data directory")
        s.add_argument("--batches", type=int, default=10,
                       help="held-out batches of 16 rows of 128 to judge on")
    args = p.parse_args()
    judge(args) if args.action == "judge" else learn(args)


if __name__ == "__main__":
    main()
