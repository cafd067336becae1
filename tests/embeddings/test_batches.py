"""Batches with no text twice: on data full of repeats, every example once, deterministic."""
from __future__ import annotations

import random

import pytest
import torch

from bertkit.embeddings.batches import unique_batches


def repetitive(n: int, seed: int = 0) -> list[tuple[str, ...]]:
    """Triplets over a small pool of texts, so that repeats are everywhere; a few examples
    repeat one text within themselves (SimCSE's sentence twice)."""
    rng = random.Random(seed)
    pool = [f"text {i}" for i in range(40)]
    out = []
    for i in range(n):
        example = tuple(rng.choice(pool) for _ in range(3))
        out.append(example if i % 17 else (example[0], example[0]))
    return out


def test_no_batch_holds_a_text_twice():
    examples = repetitive(500)
    for seed in range(3):
        for batch in unique_batches(examples, 8, torch.Generator().manual_seed(seed)):
            texts = [t for i in batch for t in set(examples[i])]
            assert len(texts) == len(set(texts)), batch


def test_every_example_once_and_full_batches_but_the_tail():
    examples = repetitive(500)
    batches = unique_batches(examples, 8, torch.Generator().manual_seed(1))
    used = sorted(i for batch in batches for i in batch)
    assert used == list(range(len(examples)))
    sizes = [len(batch) for batch in batches]
    assert all(size >= 1 for size in sizes) and max(sizes) == 8
    first_short = next(k for k, size in enumerate(sizes + [0]) if size < 8)
    assert first_short > len(batches) // 2  # the short ones are a tail, not spread about


def test_deterministic_for_a_seed_and_different_across_seeds():
    examples = repetitive(200)
    first = unique_batches(examples, 16, torch.Generator().manual_seed(5))
    assert first == unique_batches(examples, 16, torch.Generator().manual_seed(5))
    assert first != unique_batches(examples, 16, torch.Generator().manual_seed(6))


def test_distinct_texts_give_plain_shuffled_batches():
    examples = [(f"a{i}", f"b{i}") for i in range(50)]
    batches = unique_batches(examples, 8, torch.Generator().manual_seed(0))
    order = torch.randperm(50, generator=torch.Generator().manual_seed(0)).tolist()
    assert batches == [order[i:i + 8] for i in range(0, 50, 8)]


def test_one_text_everywhere_gives_batches_of_one():
    examples = [("same", f"other {i}") for i in range(5)]
    batches = unique_batches(examples, 4, torch.Generator().manual_seed(0))
    assert sorted(len(b) for b in batches) == [1] * 5
    assert unique_batches([], 4, torch.Generator()) == []
    with pytest.raises(ValueError):
        unique_batches(examples, 0, torch.Generator())
