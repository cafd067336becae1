"""The batch found by measurement: doubled while tokens/s rise by more than 5% and the steps
fit in memory, within a bounded search; the measure of a model trains a copy and leaves the
model as it was."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import TrainConfig
from bertkit.pretraining import objectives
from bertkit.training.batch_probe import choose_batch_size, timed_steps

pytestmark = pytest.mark.usefixtures("one_thread")


def fake(rates: dict[int, float | None]):
    """A measure of made-up rates that records the sizes asked for."""
    asked = []

    def measure(size: int):
        asked.append(size)
        return rates[size]
    return measure, asked


def test_the_batch_doubles_while_it_pays_and_stops_where_the_gain_flattens():
    measure, asked = fake({16: 1000.0, 32: 1900.0, 64: 3000.0, 128: 3100.0, 256: 9e9})
    choice = choose_batch_size(measure)
    assert choice.size == 64 and asked == [16, 16, 32, 64, 128]  # the first a warm-up
    # 3,100 is under 5% over 3,000
    assert choice.stop == "128 was not 5% faster"
    line = choice.line()
    assert line.startswith("batch 64 sequences, measured before training (16: 1,000 tokens/s")
    assert "128: 3,100 tokens/s): 128 was not 5% faster" in line


def test_out_of_memory_keeps_the_last_batch_that_fitted():
    measure, asked = fake({16: 1000.0, 32: 1900.0, 64: 3000.0, 128: None, 256: 9e9})
    choice = choose_batch_size(measure)
    assert choice.size == 64 and asked == [16, 16, 32, 64, 128]
    assert choice.stop == "128 did not fit" and "128: did not fit" in choice.line()
    first, _ = fake({16: None})
    assert choose_batch_size(first).size == 16  # the run then says what to lower
    assert choose_batch_size(first).stop == "not even 16 fitted"


def test_the_search_is_capped_in_sizes_and_in_time():
    doubling = {16 * 2 ** k: 1000.0 * 2 ** k for k in range(12)}
    measure, asked = fake(doubling)
    choice = choose_batch_size(measure)
    assert asked == [16, 16, 32, 64, 128, 256, 512] and choice.size == 512
    assert choice.stop == "the cap of 6 sizes"
    clock = iter([0.0, 10.0, 20.0, 31.0, 99.0])  # the third size ends past 30 s
    measure, asked = fake(doubling)
    choice = choose_batch_size(measure, clock=lambda: next(clock))
    assert asked == [16, 16, 32, 64] and choice.size == 64
    assert choice.stop == "the search's 30 s were spent"
    measure, asked = fake({24: 1.0, 48: 2.0, 96: 4.0, 192: 8.0})
    assert choose_batch_size(measure, start=24, max_sizes=3).size == 96  # 3 ranks' multiples
    assert asked == [24, 24, 48, 96]


def test_timed_steps_trains_a_copy_and_reads_out_of_memory_as_did_not_fit(tiny):
    model = tiny.model()
    before = tiny.params(model)
    cfg = TrainConfig(max_steps=1, precision="fp32")

    def batches_of(size):
        g = torch.Generator().manual_seed(size)
        return (tiny.batch(g, size) for _ in range(10))

    measure = timed_steps(model, objectives.mlm_loss, batches_of, cfg, torch.device("cpu"))
    rate = measure(4)
    assert rate is not None and rate > 0
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    def out_of_memory(m, batch):
        if batch["input_ids"].shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return objectives.mlm_loss(m, batch)

    measure = timed_steps(model, out_of_memory, batches_of, cfg, torch.device("cpu"))
    assert measure(4) is not None and measure(8) is None
    assert timed_steps(model, objectives.mlm_loss, lambda size: iter([]), cfg,
                       torch.device("cpu"))(4) is None  # no batches of that size


def test_the_first_size_is_measured_again_once_the_process_is_warm():
    first = iter([50.0, 1000.0])  # cold, then warm
    rates = {32: 1020.0}

    def measure(size):
        return next(first) if size == 16 else rates[size]
    choice = choose_batch_size(measure)
    assert choice.rates == ((16, 1000.0), (32, 1020.0)) and choice.size == 16
