"""Encoder forward throughput, side by side in one process: bertkit's Encoder vs transformers'
BertModel (sdpa) with the same weights on the same padded batch.

    .venv/bin/python bench/encoder_speed.py                          # mini and base, seq 128
    .venv/bin/python bench/encoder_speed.py --presets base --seq-len 256 --batch-size 16

Both sides run under torch.inference_mode in fp32; the two alternate inside every repeat so
that load from elsewhere hits both alike. Prints tokens/s min / median / max, the ratio of
medians, and the largest difference of the real tokens' last hidden states.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.model import hub  # noqa: E402
from bertkit.config import preset  # noqa: E402
from bertkit.model.encoder import Encoder, init_weights  # noqa: E402


def timed(fn, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["mini", "base"])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python "
          f"{platform.python_version()}, {torch.get_num_threads()} threads, fp32, "
          f"CPU kernels {torch.backends.cpu.get_cpu_capability()}")
    B, T = args.batch_size, args.seq_len
    g = torch.Generator().manual_seed(0)
    for name in args.presets:
        cfg = preset(name, vocab_size=30522, max_positions=max(512, T))
        torch.manual_seed(0)
        ours = Encoder(cfg)
        init_weights(ours, cfg)
        ours.eval()
        with tempfile.TemporaryDirectory() as d:
            hub.save_model(ours, d)
            theirs = transformers.BertModel.from_pretrained(d, attn_implementation="sdpa").eval()
        ids = torch.randint(1000, cfg.vocab_size, (B, T), generator=g)
        lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None] < lengths[:, None]).long()  # mixed lengths, as real text
        ids = ids * mask
        segments = torch.zeros_like(ids)
        with torch.inference_mode():
            a = ours(ids, segments, mask).last_hidden_state
            b = theirs(input_ids=ids, token_type_ids=segments, attention_mask=mask).last_hidden_state
            diff = (a - b)[mask.bool()].abs().max().item()
            rates = {"bertkit": [], "transformers": []}
            for _ in range(args.repeats + 1):
                rates["bertkit"].append(B * T / timed(lambda: ours(ids, segments, mask), args.steps))
                rates["transformers"].append(B * T / timed(
                    lambda: theirs(input_ids=ids, token_type_ids=segments, attention_mask=mask),
                    args.steps))
        print(f"\n{name} (L{cfg.num_layers}/H{cfg.hidden_size}), batch {B}, seq {T}, "
              f"{mask.float().mean():.0%} real tokens; max |diff| {diff:.1e}")
        for side, values in rates.items():
            v = values[1:]  # the first repeat warms up
            print(f"  {side:13s} tokens/s  min {min(v):9.0f}  median {statistics.median(v):9.0f}"
                  f"  max {max(v):9.0f}")
        ratio = statistics.median(rates["bertkit"][1:]) / statistics.median(rates["transformers"][1:])
        print(f"  ratio of medians {ratio:.2f}")


if __name__ == "__main__":
    main()
