"""Pretraining quality side by side: the same corpus, tokenizer and wall-clock budget for
bertkit's default recipe and for two transformers recipes, each judged by the same functions.

    .venv/bin/python bench/pretrain_quality.py --data runs/data --minutes 30 --out runs/quality
    .venv/bin/python bench/pretrain_quality.py --data runs/data --minutes 5 \
        --sides bert,modernbert --heldout heldout.txt --max-heldout-lines 2000 --out runs/quality-5

The sides, each trained for --minutes of training steps (model building, saving and
evaluation are not counted):
- bertkit: `bertkit.pretraining.recipe.pretrain` with every option at its default (the modern
  architecture, 40% masking, warmup-stable-decay at 1e-3, --precision auto), only the preset
  and the time budget given.
- bert: transformers' `BertForMaskedLM` trained the `run_mlm.py` way: rows of 128 tokens,
  `DataCollatorForLanguageModeling` at 15%, dropout 0.1, AdamW (lr 5e-4, weight decay 0.01 off
  biases and LayerNorm, betas 0.9 / 0.999, eps 1e-6), gradient norm clipped at 1, 6% linear
  warm-up then linear decay to 0, batch 32 (--reference-batch-size), fp32.
- modernbert: transformers' `ModernBertForMaskedLM` of the same width and depth (the feed-forward
  width of bertkit's modern preset, global attention in every layer, no dropout), 30% masking
  by the same collator, the head and the loss at the masked rows only (`sparse_prediction`),
  lr 2e-3 with the same warm-up and decay, fp32 (bf16 autocast where
  `bertkit.runtime.choose_precision` measures bf16 faster).
- bertkit-documents (only when --sides names it): the bertkit side with
  `--document-boundaries` (each document of a packed row attended to alone, its positions
  from 0), every other option at its default; its side of a data directory's held-out split
  is packed so too.
- electra (only when --sides names it): the bertkit side with `--objective electra`, every
  other option at its default. It is judged as its directory allows: the held-out figures and
  accuracies are its small generator's (not the discriminator's quality: fine-tune it with
  bench/finetune_seeds.py for that), with the discriminator's detection accuracy and AUC on a
  data directory's split; minimal pairs are scored by the discriminator.
- distill (only when --sides names it, with --teacher DIR): the bertkit side with `--objective
  distill --teacher DIR` (MiniLM v2's self-attention relations of the teacher beside the masked
  LM), every other option at its default; --data must be prepared with the teacher's tokenizer.
  Its directory is a masked LM's, judged as the bertkit side's.
The transformers schedules run on elapsed time: progress = training seconds / budget.

All three read the train split of --data through bertkit's own reader (`PretrainingBatches`):
bertkit masks its packed rows itself; the transformers sides take the same kind of packed rows
of 128 ids, unmasked (the "clm" rows, which are the "mlm" rows before masking, in another
shuffle), and mask them with the collator. Each side's model is saved as a Hugging Face
directory under --out/SIDE, loaded back with `bertkit.model.hub.load_pretraining_model`, and
scored by `bertkit.pretraining.evaluation`: masked-token accuracy and loss at 15% (seed 0) on
--heldout (text lines, or .jsonl with "text"; default: the held-out split of --data), every
masked piece [MASK], and again with run_mlm.py's 80/10/10 corruption ("acc 80/10/10": the
measure of that script's eval_accuracy; a data directory's split is scored that way throughout),
and minimal-pair accuracy on --pairs. The table and --out/results.json give them with the steps,
tokens and tokens/s of each side.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.config import PRESETS, preset  # noqa: E402
from bertkit.files import UserError, atomic_dir, read_jsonl, read_lines, write_json  # noqa: E402
from bertkit.model.heads import IGNORE_INDEX  # noqa: E402
from bertkit.model.hub import is_electra_dir, load_electra, load_pretraining_model  # noqa: E402
from bertkit.pretraining.distillation import DistillSettings  # noqa: E402
from bertkit.pretraining.evaluation import (heldout_scores, masked_token_scores,  # noqa: E402
                                            minimal_pairs, read_pairs,
                                            recorded_document_boundaries)
from bertkit.pretraining.examples import PretrainingBatches  # noqa: E402
from bertkit.pretraining.recipe import PretrainOptions, PretrainSchedule, pretrain  # noqa: E402
from bertkit.runtime import (choose_precision, describe, keep_freed_memory,  # noqa: E402
                             physical_cores)
from bertkit.text.tokenizer import Tokenizer  # noqa: E402
from bertkit.runtime import autocast  # noqa: E402

SIDES = ("bertkit", "bert", "modernbert", "electra", "bertkit-documents", "distill")
DEFAULT_SIDES = SIDES[:3]
SEQ_LEN = 128  # run_mlm.py's block size
WARMUP = 0.06
HELDOUT_MASK_RATE, HELDOUT_SEED = 0.15, 0
DEFAULT_PAIRS = Path(__file__).resolve().parent / "data" / "minimal_pairs.jsonl"


# The two transformers recipes -------------------------------------------------------------------

def packed_rows(data: Path, batch_size: int, seed: int):
    """Batches of unmasked packed rows [CLS] + 126 ids + [SEP] from the data's train split,
    cut anywhere, as run_mlm.py's group_texts cuts the concatenated corpus."""
    batches = PretrainingBatches(data, objective="clm", seq_len=SEQ_LEN, batch_size=batch_size,
                                 seed=seed, row_ends="anywhere")
    for batch in batches:
        ids = batch["input_ids"]
        attention = batch.get("attention_mask", torch.ones_like(ids))
        yield ids, attention


def linear_warmup_decay(peak: float, progress: float) -> float:
    """Linear warm-up over the first WARMUP of the run, then linear decay to 0 at its end."""
    if progress < WARMUP:
        return peak * progress / WARMUP
    return peak * max(0.0, (1.0 - progress) / (1.0 - WARMUP))


def adamw(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """AdamW as transformers' Trainer sets it up: no weight decay on biases and norm weights."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.999), eps=1e-6)


def train_transformers(side: str, model, hf_tokenizer, mlm_probability: float, lr: float,
                       precision: str, data: Path, batch_size: int, minutes: float, seed: int,
                       log_every: int, device: torch.device) -> dict:
    """A plain loop: collate, forward, backward, clip, step, until `minutes` of it are spent.
    Collating counts as training time (run_mlm.py's data loader does it in the same process)."""
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(hf_tokenizer, mlm_probability=mlm_probability,
                                               seed=seed, return_tensors="pt")
    model.to(device).train()
    optimizer = adamw(model, lr)
    budget = minutes * 60.0
    rows = packed_rows(data, batch_size, seed)
    step, tokens, elapsed = 0, 0, 0.0
    while elapsed < budget:
        start = time.perf_counter()
        ids, attention = next(rows)
        batch = collator([{"input_ids": i, "attention_mask": a}
                          for i, a in zip(ids.tolist(), attention.tolist())])
        batch = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "labels")}
        for group in optimizer.param_groups:
            group["lr"] = linear_warmup_decay(lr, elapsed / budget)
        with autocast(device, precision):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        logging = step % log_every == 0
        if logging:
            last_loss = loss.item()  # waits for the step, as a synchronize would
        elif device.type == "cuda":
            torch.cuda.synchronize(device)  # so that the clock sees the whole step
        elapsed += time.perf_counter() - start
        tokens += int(attention.sum())
        if logging:
            print(f"{side}: step {step}, loss {last_loss:.3f}, lr "
                  f"{optimizer.param_groups[0]['lr']:.2e}, {tokens / elapsed:,.0f} tokens/s, "
                  f"{elapsed / 60:.2f}/{minutes:g} min", file=sys.stderr)
    return {"steps": step, "tokens": tokens, "train_seconds": elapsed, "precision": precision,
            "batch_size": batch_size}


def save_transformers(model, data: Path, path: Path) -> None:
    """The model's save_pretrained plus the shared tokenizer's files, published whole."""
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        for file in (data / "tokenizer").iterdir():
            if file.is_file():
                shutil.copy2(file, tmp / file.name)


def run_bert(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    cfg = preset(args.preset, vocab_size=tokenizer.vocab_size, architecture="bert",
                 hidden_dropout=0.1, attention_dropout=0.1, pad_token_id=tokenizer.pad_id)
    hf = {k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type")}
    torch.manual_seed(args.seed)  # transformers initialises from the global generator
    model = BertForMaskedLM(BertConfig(**hf, attn_implementation="sdpa"))
    figures = train_transformers("bert", model, hf_tokenizer, 0.15, 5e-4, "fp32", args.data,
                                 args.reference_batch_size, args.minutes, args.seed, args.log_every, device)
    save_transformers(model, args.data, args.out / "bert")
    return figures


def run_modernbert(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device) -> dict:
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    cfg = preset(args.preset, vocab_size=tokenizer.vocab_size, architecture="modern",
                 hidden_dropout=0.0, attention_dropout=0.0, local_window=0,
                 pad_token_id=tokenizer.pad_id)
    hf = {k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type")}
    hf.update(cls_token_id=hf_tokenizer.cls_token_id, sep_token_id=hf_tokenizer.sep_token_id,
              bos_token_id=hf_tokenizer.cls_token_id, eos_token_id=hf_tokenizer.sep_token_id,
              sparse_prediction=True, sparse_pred_ignore_index=IGNORE_INDEX)
    torch.manual_seed(args.seed)
    model = ModernBertForMaskedLM(ModernBertConfig(**hf, attn_implementation="sdpa"))
    precision, why = choose_precision(device)
    print(f"modernbert: precision {precision} ({why})", file=sys.stderr)
    figures = train_transformers("modernbert", model, hf_tokenizer, 0.3, 2e-3, precision,
                                 args.data, args.reference_batch_size, args.minutes, args.seed, args.log_every, device)
    save_transformers(model, args.data, args.out / "modernbert")
    return figures


# bertkit's default ------------------------------------------------------------------------------

def run_bertkit(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device,
                objective: str = "mlm", side: str = "bertkit", **settings) -> dict:
    """`settings`: the objective's own (PretrainOptions' field of its name)."""
    result = pretrain(PretrainOptions(data=args.data, out=args.out / side, preset=args.preset,
                                      device=str(device), objective=objective, **settings,
                                      train=PretrainSchedule(max_time=args.minutes,
                                                             seed=args.seed)))
    return {"steps": result.step, "tokens": result.tokens,
            "train_seconds": result.train_seconds,
            "precision": "auto",  # its log line says which it chose
            # auto: 16 on a CPU, measured on a GPU; the run's record says which
            "batch_size": json.loads((args.out / side / "training_args.json").read_text(
                encoding="utf-8"))["options"]["batch_size"],
            "early_seq_len": PretrainOptions.early_seq_len,
            "early_fraction": PretrainOptions.early_fraction,
            "row_ends": PretrainOptions.row_ends,
            "document_boundaries": settings.get("document_boundaries", False)}


def run_electra(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device) -> dict:
    return run_bertkit(args, tokenizer, hf_tokenizer, device, "electra", "electra")


def run_bertkit_documents(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device) -> dict:
    return run_bertkit(args, tokenizer, hf_tokenizer, device, side="bertkit-documents",
                       document_boundaries=True)


def run_distill(args, tokenizer: Tokenizer, hf_tokenizer, device: torch.device) -> dict:
    return run_bertkit(args, tokenizer, hf_tokenizer, device, "distill", "distill",
                       distill=DistillSettings(teacher=str(args.teacher)))


RUNNERS = {"bertkit": run_bertkit, "bert": run_bert, "modernbert": run_modernbert,
           "electra": run_electra, "bertkit-documents": run_bertkit_documents,
           "distill": run_distill}


# Judging: the same functions for every side -----------------------------------------------------

def heldout_texts(path: Path, max_lines: int) -> list[str]:
    """Non-blank lines of a text file, or the "text" of each record of a .jsonl file."""
    texts = []
    if path.suffix.lower() == ".jsonl":
        for number, record in read_jsonl(path, "held-out file"):
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise UserError(f"{path}:{number}: expected an object with a \"text\" string")
            texts.append(record["text"])
            if len(texts) >= max_lines:
                break
    else:
        for _, line in read_lines(path, "held-out file"):
            if line.strip():
                texts.append(line.strip())
                if len(texts) >= max_lines:
                    break
    if not texts:
        raise UserError(f"{path}: no text to score (an empty file)")
    return texts


def judge(model_dir: Path, heldout, pairs: list[dict], device: torch.device) -> dict:
    """The side's figures; an ELECTRA pair's masked tokens are its generator's, its pairs the
    discriminator's (see the module docstring)."""
    electra = is_electra_dir(model_dir)
    with warnings.catch_warnings():  # a MaskedLM directory has no NSP head: none is used here
        warnings.filterwarnings("ignore", message=".*initialised randomly")
        model = (load_electra if electra else load_pretraining_model)(model_dir, device)
    tokenizer = Tokenizer.load(model_dir)
    lm = model.generator if electra else model
    if isinstance(heldout, Path):  # a prepared directory's held-out split, as pretraining's
        objective = "electra" if electra else "mlm"
        masked = heldout_scores(model, heldout, mask_rate=HELDOUT_MASK_RATE, seed=HELDOUT_SEED,
                                batch_size=32, device=device, objective=objective,
                                document_boundaries=recorded_document_boundaries(model_dir,
                                                                                 objective))
    else:
        masked = masked_token_scores(lm, tokenizer, heldout, mask_rate=HELDOUT_MASK_RATE,
                                     seed=HELDOUT_SEED, device=device)
    figures = {"heldout": masked}
    if not isinstance(heldout, Path):  # a data directory's split is scored 80/10/10 already
        figures["heldout_80_10_10"] = masked_token_scores(
            lm, tokenizer, heldout, mask_rate=HELDOUT_MASK_RATE, seed=HELDOUT_SEED,
            device=device, mask_frac=0.8, random_frac=0.1)
    return {**figures, "pairs": minimal_pairs(model, tokenizer, pairs, device=device)}


def table(results: dict) -> str:
    header = ("side", "batch", "steps", "tokens", "tokens/s", "held-out acc", "held-out loss",
              "acc 80/10/10", "pairs acc")
    rows = [header]
    for side, r in results.items():
        corrupted = r.get("heldout_80_10_10")
        rows.append((side, str(r["batch_size"]), f"{r['steps']:,}", f"{r['tokens']:,}",
                     f"{r['tokens_per_s']:,.0f}", f"{r['heldout']['accuracy']:.4f}",
                     f"{r['heldout']['loss']:.4f}",
                     f"{corrupted['accuracy']:.4f}" if corrupted else "-",
                     f"{r['pairs']['accuracy']:.4f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths)))
                     for row in rows)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True,
                   help="directory written by `bertkit prepare` (its tokenizer/ is shared)")
    p.add_argument("--minutes", type=float, required=True, help="training time of each side")
    p.add_argument("--preset", default="mini", choices=tuple(PRESETS))
    p.add_argument("--sides", default=",".join(DEFAULT_SIDES),
                   help=f"comma-separated subset of {', '.join(SIDES)}")
    p.add_argument("--heldout", type=Path, default=None,
                   help="text lines or .jsonl with \"text\" (default: the held-out split of "
                   "--data)")
    p.add_argument("--max-heldout-lines", type=int, default=2000)
    p.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help="minimal pairs (.jsonl)")
    p.add_argument("--out", type=Path, required=True,
                   help="a new directory: one model directory per side and results.json")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: one per physical core)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of every side: its initial weights, data order and masks")
    p.add_argument("--reference-batch-size", type=int, default=32,
                   help="sequences per step of the transformers sides (bertkit: its default)")
    p.add_argument("--teacher", default=None,
                   help="the distill side's teacher: a BERT-family directory or Hub name whose "
                   "tokenizer --data was prepared with")
    p.add_argument("--log-every", type=int, default=10,
                   help="steps between the transformers sides' progress lines (bertkit: its own)")
    args = p.parse_args(argv)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in args.sides if s not in SIDES]
    if unknown or not args.sides:
        p.error(f"--sides takes a subset of {', '.join(SIDES)}, got {', '.join(unknown) or 'none'}")
    if ("distill" in args.sides) != (args.teacher is not None):
        p.error("--teacher DIR goes with the distill side, and the distill side with it")
    if (args.minutes <= 0 or args.max_heldout_lines < 1 or args.log_every < 1
            or args.reference_batch_size < 1):
        p.error("--minutes, --max-heldout-lines, --log-every and --reference-batch-size must be "
                "positive")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    from transformers import AutoTokenizer
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(args.threads or physical_cores())
    kept = keep_freed_memory()  # as the training commands do, for every side alike
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not (args.data / "manifest.json").is_file():
        raise UserError(f"{args.data}: not a directory written by `bertkit prepare` "
                        f"(no manifest.json)")
    if args.out.exists() and any(args.out.iterdir()):  # results.json describes one run whole
        raise UserError(f"{args.out}: not empty (an earlier comparison?); give a new --out")
    tokenizer = Tokenizer.load(args.data / "tokenizer")
    hf_tokenizer = AutoTokenizer.from_pretrained(args.data / "tokenizer")
    heldout = (heldout_texts(args.heldout, args.max_heldout_lines) if args.heldout
               else args.data)
    pairs = read_pairs(args.pairs)
    environment = describe(freed_memory_kept=kept)
    print(environment, file=sys.stderr)

    results = {}
    for side in args.sides:
        print(f"--- {side}: {args.minutes:g} min of training, preset {args.preset}",
              file=sys.stderr)
        figures = RUNNERS[side](args, tokenizer, hf_tokenizer, device)
        figures["tokens_per_s"] = figures["tokens"] / max(figures["train_seconds"], 1e-9)
        figures.update(judge(args.out / side, heldout, pairs, device))
        results[side] = figures

    report = {"environment": environment, "device": str(device), "preset": args.preset,
              "minutes": args.minutes, "data": str(args.data),
              "heldout": str(args.heldout) if args.heldout else f"{args.data} (held-out split)",
              "heldout_mask_rate": HELDOUT_MASK_RATE, "pairs": str(args.pairs),
              "sides": results}
    write_json(args.out / "results.json", report)
    print(f"\n{environment}\npreset {args.preset}, {args.minutes:g} min of training per side, "
          f"held-out: {report['heldout']} at {HELDOUT_MASK_RATE:.0%}, pairs: {args.pairs}\n")
    print(table(results))
    print(f"\n{args.out / 'results.json'}")


if __name__ == "__main__":
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
