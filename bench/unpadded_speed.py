"""A padded batch run on its real tokens only (the speed path `fast.real_tokens`) beside the
same batch run on every position, in one process, alternating: a training step (forward and
backward, dropout on) and a forward pass, of an all-MiniLM-L6-v2-shaped encoder (6 layers,
384 wide; random weights, which cost what trained ones do) on 16 texts of 256 tokens at most.

Each batch mixes short texts (12-20 tokens, a query or a SICK sentence) with long ones (140-256,
a paragraph) so that a given share of its positions is real, as a batch of a query's passages
or of mixed triplets is. Printed: the median seconds of each side over --repeats and their
ratio, with the CPU.

    .venv/bin/python bench/unpadded_speed.py [--repeats 5] [--shares 0.3 0.55 0.75]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.config import EncoderConfig  # noqa: E402  (the repository on the path first)
from bertkit.model import fast  # noqa: E402
from bertkit.model.encoder import Encoder, init_weights  # noqa: E402
from bertkit.runtime import describe  # noqa: E402

MINILM = EncoderConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12,
                       intermediate_size=1536, max_positions=512)
ROWS, LONGEST = 16, 256


def batch(share: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """16 texts, one of 256 tokens and the others short or long, as near `share` real
    positions as the draw allows: (input_ids, attention_mask) [16, 256]."""
    rng = random.Random(seed)
    lengths = [LONGEST]
    while len(lengths) < ROWS:
        real = sum(lengths) + 16 * (ROWS - len(lengths))
        lengths.append(rng.randint(140, LONGEST) if real < share * ROWS * LONGEST
                       else rng.randint(12, 20))
    mask = torch.zeros(ROWS, LONGEST, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids = torch.randint(1000, MINILM.vocab_size, (ROWS, LONGEST),
                        generator=torch.Generator().manual_seed(seed))
    return ids * mask, mask


def seconds(encoder: Encoder, ids: torch.Tensor, mask: torch.Tensor, train: bool) -> float:
    encoder.train(train)
    start = time.perf_counter()
    with torch.set_grad_enabled(train):
        out = encoder(ids, attention_mask=mask).last_hidden_state
        if train:
            (out * mask[..., None]).square().mean().backward()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.3, 0.55, 0.75])
    args = parser.parse_args(argv)
    encoder = Encoder(MINILM, fast=True)
    init_weights(encoder, MINILM, torch.Generator().manual_seed(0))
    default = fast.UNPAD_BELOW
    print(f"environment: {describe()}")
    print("| real share | pass | every position s | real tokens s | ratio |")
    print("|---|---|---|---|---|")
    for share in args.shares:
        ids, mask = batch(share)
        for train in (True, False):
            times = {0.0: [], default: []}
            for _ in range(args.repeats + 1):  # the first round warms up
                for threshold in times:
                    fast.UNPAD_BELOW = threshold  # 0: never unpad
                    times[threshold].append(seconds(encoder, ids, mask, train))
            fast.UNPAD_BELOW = default
            padded, real = (statistics.median(times[t][1:]) for t in (0.0, default))
            print(f"| {mask.float().mean():.2f} | {'training step' if train else 'forward'} "
                  f"| {padded:.3f} | {real:.3f} | {real / padded:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
