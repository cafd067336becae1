"""Pretraining entry point: the data --data names (prepared corpora, or text prepared into
OUT/data first: `bertkit.pretraining.run_data`) + a model -> the shared training loop.

    result = pretrain(PretrainOptions(data="data/", out="runs/mini", preset="mini",
                                      objective="mlm", seq_len=128, batch_size=16,
                                      train=TrainConfig(max_steps=10_000, lr=5e-4)))

The model is a fresh `--preset` (its vocabulary sized to the data's tokenizer) or an existing
Hugging Face directory `--init` whose tokenizer must be the data's (continued pretraining).
Under `torchrun` the same call runs data-parallel: each rank reads its own share of every
global batch (gloo on the CPU, NCCL on GPUs) and rank 0 writes.

The run is made of its options once (`bertkit.pretraining.plan.PretrainPlan`), in the output
directory's lock, and handed to the one training loop. The final directory at the top of `out`
is what the objective saves (`Objective.save`): a Hugging Face directory less the heads never
learned (a fresh model's NSP head and pooler outside mlm+nsp: BertForMaskedLM), the span
objective's boundary head beside it in sbo.safetensors, an ELECTRA discriminator with its
generator in OUT/generator. The model's card, README.md, says how it was trained, below the
--init directory's card if it has one.
"""
from __future__ import annotations

from typing import Callable


from bertkit.model.card import write_card
from bertkit.pretraining.held_out import held_out_figures
from bertkit.pretraining.options import (PretrainMasking, PretrainOptions,  # noqa: F401 - the
                                         PretrainSchedule)  # API's names, as before
from bertkit.pretraining.plan import CARD_TITLE, PretrainPlan, launch_of
from bertkit.runlock import RunLock
from bertkit.training.distributed import process_group, rank_info
from bertkit.training.loop import TrainResult, train


def pretrain(opts, command_line: Callable | None = None) -> TrainResult:
    """Pretrain per `opts` (`PretrainOptions`); see the module docstring.
    `command_line(resolved options)` gives the shell line recorded in
    OUT/training_args.json (the CLI's; none from a library call)."""
    launch = launch_of(opts)
    with process_group(launch.device, launch.timeout), \
            RunLock(launch.out, enabled=rank_info()[0] == 0):  # the run's one lock
        return run(PretrainPlan.build(launch, command_line))


def run(plan: PretrainPlan) -> TrainResult:
    """The plan through the training loop, and the model's card once it is saved."""
    if plan.rank == 0:
        plan.announce()
    objective, held, device = plan.objective, plan.held, plan.device

    def evaluate(m):
        return held_out_figures(m, held, objective, device)

    result = train(plan.model, objective.loss, plan.batches, plan.train_config, plan.out,
                   evaluate=evaluate if held else None,
                   save=lambda m, path: objective.save(m, path, plan.tokenizer),
                   target_count=objective.target_count, fingerprint=plan.fingerprint,
                   device=device, settings=plan.settings,
                   find_unused_parameters=False,  # Objective.fit froze the unused heads
                   checked=True,  # the plan holds the lock and checked the checkpoint
                   flops=objective.flops(plan.model.config))
    if plan.rank == 0 and result.stopped_by != "interrupted":  # a model was saved: its card
        write_card(plan.out, plan.init_card, CARD_TITLE, plan.card_section(result),
                   plan.front_matter())
    return result


__all__ = ["pretrain", "run", "PretrainOptions", "PretrainMasking", "PretrainSchedule"]
