"""Attention kernels on this CPU, side by side: torch's SDPA against attention spelled out in
matmuls (`bertkit.model.fast.attend_in_matmuls`), for the shapes bertkit's models train and
infer at, and which of the two `fast.Attend` keeps.

    .venv/bin/python bench/attention_speed.py
    .venv/bin/python bench/attention_speed.py --shapes 32x4x64x64 16x12x128x64 --dtypes bf16

Each row times one call, forward and backward ("train") or forward only under no_grad
("infer"), best of three after a warm-up, with and without a padding mask, with the
same timer `Attend` uses when a model meets a new kind of call. The ratio is SDPA's time over
the matmuls' (above 1: the matmuls are faster).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bertkit.model.encoder import attend as sdpa  # noqa: E402
from bertkit.model.fast import Attend, attend_in_matmuls  # noqa: E402
from bertkit.runtime import DTYPES, describe  # noqa: E402



def shape(text: str) -> tuple[int, int, int, int]:
    """BxAxTxD: batch, heads, tokens, head width."""
    parts = tuple(int(x) for x in text.split("x"))
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BxAxTxD, e.g. 32x4x64x64")
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=shape,
                        default=[(32, 4, 64, 64), (16, 4, 128, 64), (64, 4, 32, 64),
                                 (16, 12, 128, 64), (4, 12, 512, 64)],
                        help="BxAxTxD (default: mini at 64, 128 and 32 tokens; base at 128 and 512)")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["bf16", "fp32"])
    args = parser.parse_args()
    print(f"environment: {describe()}")
    print(f"{'B x A x T x D':>16} {'dtype':>5} {'pass':>5} {'mask':>4} {'SDPA ms':>8} "
          f"{'matmuls ms':>10} {'ratio':>6}  Attend keeps")
    g = torch.Generator().manual_seed(0)
    for B, A, T, D in args.shapes:
        for name in args.dtypes:
            for train in (True, False):
                for masked in (False, True):
                    q, k, v = (torch.randn(B, A, T, D, generator=g).to(DTYPES[name])
                               .requires_grad_(train) for _ in range(3))
                    mask = None
                    if masked:  # the last quarter of every other row padded
                        keep = torch.ones(B, T, dtype=torch.bool)
                        keep[::2, T - T // 4:] = False
                        mask = keep[:, None, None, :]
                    with torch.set_grad_enabled(train):
                        a = Attend.seconds(sdpa, q, k, v, mask, False)
                        b = Attend.seconds(attend_in_matmuls, q, k, v, mask, False)
                    keeps = "matmuls" if Attend.prefer_matmuls(a, b) else "SDPA"
                    print(f"{f'{B}x{A}x{T}x{D}':>16} {name:>5} {'train' if train else 'infer':>5} "
                          f"{'yes' if masked else 'no':>4} {a * 1e3:8.2f} {b * 1e3:10.2f} "
                          f"{a / b:6.2f}  {keeps}")


if __name__ == "__main__":
    main()
