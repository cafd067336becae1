"""Pretraining throughput, side by side in one process: bertkit vs transformers.

    .venv/bin/python bench/pretrain_speed.py                      # mini, seq 128, batch 32
    .venv/bin/python bench/pretrain_speed.py --preset small --steps 3 --repeats 3

Both sides train the same configuration on the same random token ids with 15% masking drawn
afresh every step (80/10/10):
- bertkit: `bertkit.training.loop.train` (the real loop: fused AdamW, clipping, logging) with the MLM
  or MLM+NSP objective, predicting only the masked positions; masking is done per step inside
  the timed loop by a vectorised function (the data side's job), shaped as the data side's
  batches: the same count in every row, a prediction buffer of one size (so a compiled step
  compiles once, as in `pretrain`).
- transformers: `BertForMaskedLM` / `BertForPreTraining` (attn_implementation="sdpa") fed by
  `DataCollatorForLanguageModeling`, a plain loop with the same fused AdamW and clipping. Its
  repeats alternate two ways: the collator in the loop, as a script or `Trainer` (no loader
  workers) runs it, and "collated ahead", the batches made before the clock starts, which
  times the model alone (the collator costs tens of ms of host time a batch of 256).
Dropout is on (0.1) on both sides, as in real pretraining.

`--per-block` (with bertkit compiled) adds a row: bertkit with each encoder block compiled apart
(regional compilation), an experiment beside what `pretrain` compiles (the whole objective).
Each compiled bertkit run compiles cold (no inductor caches, as on a fresh machine) and prints
how long its warm-up repeat, the compiling, took.

Reports tokens/s as min / median / max over repeats (each repeat = --steps steps after one
discarded warm-up repeat), the ratio of medians, and MFU: model FLOPs per token (matmuls,
forward + backward; the vocabulary projection counted on the predicted positions only) times
tokens/s, over the matmul GFLOP/s measured here for the same dtype. With a GPU present the
comparison runs there (`--device cuda`, the default then) and reports the GPU MFU.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.pretraining import objectives  # noqa: E402
from bertkit.config import TrainConfig, preset  # noqa: E402
from bertkit.model.encoder import init_weights  # noqa: E402
from bertkit.model.flops import model_flops_per_token  # noqa: E402
from bertkit.peaks import utilisation  # noqa: E402
from bertkit.model.heads import PretrainingModel  # noqa: E402
from bertkit.runtime import DTYPES, describe, keep_freed_memory, matmul_limit  # noqa: E402
from bertkit.runtime import autocast  # noqa: E402
from bertkit.training.loop import train  # noqa: E402
from bertkit.training.optimizer import make_optimizer  # noqa: E402

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # the BERT uncased vocabulary's ids


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def token_stream(vocab: int, B: int, T: int, seed: int):
    """Random 'sentences' with [CLS] ... [SEP] ... [SEP], as the data side yields them."""
    g = torch.Generator().manual_seed(seed)
    while True:
        ids = torch.randint(1000, vocab, (B, T), generator=g)
        ids[:, 0], ids[:, T // 2], ids[:, -1] = CLS, SEP, SEP
        segments = torch.zeros(B, T, dtype=torch.long)
        segments[:, T // 2 + 1:] = 1
        yield ids, segments, g


def predictions_per_row(T: int, rate: float) -> int:
    """Targets in each row, counted as the data side does: `rate` of its non-special tokens
    (all but [CLS] and two [SEP])."""
    return max(1, round((T - 3) * rate))


def bertkit_batches(vocab: int, B: int, T: int, seed: int, rate: float = 0.15):
    """Dynamic 80/10/10 masking, vectorised, shaped as the data side's batches: an exact count
    per row and a prediction buffer of one size all run (a multiple of 8, the rest -100), so
    that a compiled step compiles once, as it does in `pretrain`."""
    k = predictions_per_row(T, rate)
    size = 8 * -(-B * k // 8)
    for ids, segments, g in token_stream(vocab, B, T, seed):
        special = (ids == CLS) | (ids == SEP)
        scores = torch.rand(B, T, generator=g).masked_fill(special, -1.0)
        chosen = scores.topk(k, dim=1).indices + T * torch.arange(B)[:, None]
        chosen = chosen.flatten().sort().values  # [B*k], in order as the data side's
        inputs = ids.flatten().clone()
        r = torch.rand(chosen.numel(), generator=g)
        inputs[chosen[r < 0.8]] = MASK
        swap = chosen[(r >= 0.8) & (r < 0.9)]
        inputs[swap] = torch.randint(1000, vocab, (swap.numel(),), generator=g)
        positions = torch.zeros(size, dtype=torch.long)
        labels = torch.full((size,), -100, dtype=torch.long)
        positions[:chosen.numel()], labels[:chosen.numel()] = chosen, ids.flatten()[chosen]
        # no attention_mask: every row is full, and the data side leaves the mask out of full
        # batches (on a GPU a given mask is used, which keeps SDPA off FlashAttention)
        yield {"input_ids": inputs.view(B, T), "token_type_ids": segments,
               "mlm_positions": positions,
               "mlm_labels": labels, "nsp_labels": torch.randint(0, 2, (B,), generator=g),
               "num_tokens": B * T}


def run_bertkit(cfg, objective: str, precision: str, B: int, T: int, steps: int,
                repeats: int, device: torch.device, compile: bool = False,
                per_block: bool = False) -> list[float]:
    """Tokens/s of each repeat of `train`, compiled as `pretrain` compiles (the objective
    whole) or, with `per_block`, each encoder block apart (regional compilation: a block's
    code compiled once for all of them; the last block and the head then run eagerly), an
    experiment that `pretrain` does not offer. A compiled run prints its warm-up repeat's
    seconds, the compiling in it."""
    torch.manual_seed(0)
    model = PretrainingModel(cfg)
    init_weights(model, cfg)
    if objective == "mlm":
        for head in (model.nsp, model.encoder.pooler):
            if head is not None:
                head.requires_grad_(False)
    if per_block:
        for block in model.encoder.blocks:
            block.compile()
    if compile:  # compiled cold, as on a fresh machine: no kernels from an earlier run
        import torch._inductor.config as inductor_config
        warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
        cold = inductor_config.patch(force_disable_caches=True)
    else:
        cold = contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as out, cold:
        train(model, objectives.loss_for(objective),
              bertkit_batches(cfg.vocab_size, B, T, 0, mask_rate(cfg)),
              TrainConfig(max_steps=steps * (repeats + 1), lr=1e-4, warmup_steps=0,
                          log_every=steps, precision=precision,
                          compile=compile and not per_block), out,
              save=lambda m, p: None, show_progress=False, device=device)
        from bertkit.training.runlog import read_metrics
        records = [r for r in read_metrics(Path(out) / "metrics.jsonl") if r["split"] == "train"]
    if compile:
        print(f"  bertkit{' per block' if per_block else ''}: the warm-up repeat, compiling, "
              f"took {B * T * steps / records[0]['tokens_per_second']:.1f} s", flush=True)
    return [r["tokens_per_second"] for r in records[1:]]


def run_transformers(cfg, objective: str, precision: str, B: int, T: int, steps: int,
                     repeats: int, device: torch.device, compile: bool = False
                     ) -> dict[str, list[float]]:
    """Tokens/s of each repeat, with the collator in the loop as a plain script or `Trainer`
    (no loader workers) runs it ("inline"), and with the batches collated before the clock
    starts ("ahead": the model, optimizer and host-to-device copies alone)."""
    import transformers
    from transformers import BertConfig, DataCollatorForLanguageModeling

    transformers.logging.set_verbosity_error()
    tokenizer = _hf_tokenizer()
    modern = cfg.architecture == "modern"
    fields = {k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type")}
    if modern:  # the modern recipe: loss and head at the masked rows only
        hf_config = transformers.ModernBertConfig(**fields, sparse_prediction=True,
                                                  attn_implementation="sdpa")
    else:
        hf_config = BertConfig(**fields, attn_implementation="sdpa")
    torch.manual_seed(0)
    cls = (transformers.ModernBertForMaskedLM if modern else
           transformers.BertForMaskedLM if objective == "mlm" else transformers.BertForPreTraining)
    model = cls(hf_config).to(device).train()
    forward = torch.compile(model) if compile else model
    assert model.config._attn_implementation == "sdpa"
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mask_rate(cfg),
                                               return_tensors="pt")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = make_optimizer([{"params": decay, "weight_decay": 0.01},
                          {"params": no_decay, "weight_decay": 0.0}],
                         TrainConfig(max_steps=1, lr=1e-4), device)
    stream = token_stream(cfg.vocab_size, B, T, 0)

    def collated() -> dict:
        ids, segments, g = next(stream)
        batch = collator([{"input_ids": row} if modern else
                          {"input_ids": row, "token_type_ids": seg}
                          for row, seg in zip(ids.tolist(), segments.tolist())])
        if objective != "mlm":
            batch["next_sentence_label"] = torch.randint(0, 2, (B,), generator=g)
        return batch

    def train_on(batch: dict) -> None:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(device, precision):
            loss = forward(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    rates = {"inline": [], "ahead": []}
    for repeat in range(repeats + 1):
        for mode in rates:
            ready = [collated() for _ in range(steps)] if mode == "ahead" else None
            start = time.perf_counter()
            for k in range(steps):
                train_on(ready[k] if ready else collated())
            _sync(device)
            if repeat:
                rates[mode].append(B * T * steps / (time.perf_counter() - start))
    return rates


def _hf_tokenizer(vocab_size: int = 30522):
    """A BERT-layout tokenizer for the collator: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103 as in BERT's uncased vocabulary; the collator needs only those ids and the
    vocabulary size, since both sides train on random ids."""
    from transformers import BertTokenizerFast
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                "[MASK]"]
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "vocab.txt"
        vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
        return BertTokenizerFast(vocab_file=str(vocab))


COMPILED = {"none": "", "both": ", torch.compile on both sides",
            "bertkit": ", torch.compile on bertkit's side (each side as it runs on a GPU)"}


def mask_rate(cfg) -> float:
    """Each architecture's recipe: BERT's 15%, bertkit's default 40% for "modern"."""
    return 0.4 if cfg.architecture == "modern" else 0.15


def architectures(value: str) -> list[str]:
    """--architecture: one or more of bert and modern, comma-separated."""
    names = value.split(",")
    if not names or any(n not in ("bert", "modern") for n in names) \
            or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{value}: bert, modern or bert,modern")
    return names


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--architecture", type=architectures, default=["bert"],
                    help="modern: bertkit's modern encoder against transformers' "
                         "ModernBertForMaskedLM, 40%% masked, mlm only; bert,modern: one "
                         "table after the other in one process (transformers imported and "
                         "the matmul limit measured once)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--objectives", default="mlm,mlm+nsp")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--only", choices=("bertkit", "transformers"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cpu or cuda (default: cuda when present: GPU MFU)")
    ap.add_argument("--compile", nargs="?", const="both", default="none",
                    choices=("none", "both", "bertkit"),
                    help="torch.compile both sides (--compile alone), or bertkit's alone: each "
                    "side as it runs by default on a GPU (the warm-up repeat absorbs "
                    "compilation)")
    ap.add_argument("--per-block", action="store_true",
                    help="with bertkit compiled: one more row, bertkit with each encoder block "
                    "compiled apart (regional compilation), for its compile time and speed "
                    "against the whole objective compiled")
    ap.add_argument("--malloc", choices=("keep", "default"), default="keep",
                    help="keep: glibc keeps freed memory, as bertkit's training commands set it "
                    "(both sides share the process, so both get it); default: glibc as it comes")
    ap.add_argument("--matmul-seconds", type=float, default=2.0,
                    help="how long the matmul limit is measured, the best product kept "
                    "(default 2; a toy run that checks the bench itself can take 0.2)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    kept = args.malloc == "keep" and keep_freed_memory()
    device = torch.device(args.device)
    print(f"environment: {describe(freed_memory_kept=kept)}, oneDNN fp32 matmul precision "
          f"{torch.backends.mkldnn.matmul.fp32_precision}")
    limits = {p: matmul_limit(DTYPES[p], device, seconds=args.matmul_seconds)
              for p in args.precisions.split(",")}  # bf16 emulated takes seconds a product
    print("matmul limit: " + ", ".join(f"{p} {v:.0f} GFLOP/s" for p, v in limits.items()))
    for n, architecture in enumerate(args.architecture):
        print("\n" if n else "", end="")
        compare(args, architecture, limits, device)


def compare(args: argparse.Namespace, architecture: str, limits: dict[str, float],
            device: torch.device) -> None:
    """One architecture's table: each objective and precision, bertkit then transformers."""
    B, T = args.batch_size, args.seq_len
    cfg = preset(args.preset, vocab_size=30522, architecture=architecture)
    # neither side has a next-sentence head in the modern architecture
    objectives_run = "mlm" if architecture == "modern" else args.objectives
    flops = model_flops_per_token(cfg, T, predictions_per_row(T, mask_rate(cfg)) / T)
    print(f"model: {args.preset} ({architecture}) L{cfg.num_layers}/H{cfg.hidden_size}, "
          f"seq {T}, batch {B}, "
          f"{flops / 1e6:.1f} MFLOP per token (training, sparse head)"
          f"{COMPILED[args.compile]}\n")
    print(f"{'objective':9} {'dtype':5} {'implementation':17} {'tokens/s min/median/max':>28} "
          f"{'MFU':>6}  ratio  (4x transformers would need)")
    for objective in objectives_run.split(","):
        for precision in args.precisions.split(","):
            medians = {}
            sides = [("bertkit", run_bertkit), ("transformers", run_transformers)]
            if args.per_block and args.compile in ("both", "bertkit"):  # last: an experiment
                sides.append(("bertkit per block",
                              functools.partial(run_bertkit, per_block=True)))
            for name, run in sides:
                if args.only and not name.startswith(args.only):
                    continue
                rates = run(cfg, objective, precision, B, T, args.steps, args.repeats, device,
                            args.compile in ("both", name.split()[0]))
                rows = ({"transformers": rates["inline"], "collated ahead": rates["ahead"]}
                        if name == "transformers" else {name: rates})  # as run, model alone
                for label, values in rows.items():
                    medians[label] = statistics.median(values)
                    mfu = medians[label] * flops / 1e9 / limits[precision]
                    ratio = (f"{medians['bertkit'] / medians[label]:.2f}x"
                             if label != "bertkit" and "bertkit" in medians else "")
                    if label == "transformers":
                        ratio += f"  ({4 * mfu:.0%} MFU)"
                    print(f"{objective:9} {precision:5} {label:17} {min(values):8,.0f} / "
                          f"{medians[label]:8,.0f} / {max(values):8,.0f} {mfu:6.1%}  {ratio}",
                          flush=True)
                    if device.type == "cuda":  # MFU as published figures give it, too
                        print(" " * 34 + utilisation(medians[label] * flops, limits[precision],
                                                     torch.cuda.get_device_name(device),
                                                     precision), flush=True)


if __name__ == "__main__":
    main()
