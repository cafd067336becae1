"""A pretraining run made of its options once: `PretrainPlan.build` reads `PretrainOptions`
(nothing else in the library does), resolves them, finds or prepares the data, builds the
objective's model and checks it once against the checkpoint it resumes, and holds all the loop
needs; `bertkit.pretraining.recipe` runs it.

    launch = launch_of(options)                      # checks that need no process group
    with RunLock(launch.out):
        plan = PretrainPlan.build(launch)            # everything decided, nothing trained
        result = train(plan.model, plan.objective.loss, plan.batches, ...)

Every refusal comes before anything is printed or measured: the settings and a checkpoint of
another run before the data is prepared, other data as soon as it is known.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bertkit.config import ConfigError, EncoderConfig, TrainConfig, preset
from bertkit.files import UserError
from bertkit.model.card import card_figure, read_card
from bertkit.model.create import local_attention_fields
from bertkit.model.encoder import num_parameters, set_rope_base
from bertkit.model.fetch import is_hub_name, resolve_model
from bertkit.model.hub import hub_name
from bertkit.progress import counted
from bertkit.pretraining.batch_choice import measured_batch, recorded_batch
from bertkit.pretraining.provenance import check_tokenizer
from bertkit.pretraining.shards import load_manifest
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.masking import MaskingConfig
from bertkit.pretraining.mixture import MixedBatches, allocate
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives import objective_type
from bertkit.pretraining.options import PretrainOptions
from bertkit.pretraining.phases import ContextPhase, ContextSchedule
from bertkit.pretraining.run_data import (TEXT_DATA, check_resumed_data, data_fingerprint,
                                          DataOptions, data_parts, given_data)
from bertkit.runtime import allocator, choose_precision, compiles_for
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.batch_probe import START, measures_batch
from bertkit.training.checkpoint import GIVEN, check_fits, saved_fingerprint
from bertkit.training.distributed import rank_device, rank_info
from bertkit.training.loop import TrainResult, check_config
from bertkit.training.resume import check_fresh_start, run_fingerprint
from bertkit.training.settings import run_settings, settings_block


@dataclass(frozen=True)
class Launch:
    """What a run needs before its ranks meet: the options with --init and --tokenizer given
    by Hub name as their snapshot directories, this rank's device, the output directory (its
    lock) and how long a collective waits."""
    options: PretrainOptions
    device: torch.device
    out: Path
    timeout: float


def launch_of(opts: PretrainOptions) -> Launch:
    """The `Launch` of `opts`: batches that do not split over the ranks refused before a text
    --data is prepared and before the ranks meet."""
    device = rank_device(opts.device)
    if opts.batch_size is None and not measures_batch(device):  # auto off a GPU: 16
        opts = dataclasses.replace(opts, batch_size=START)
    check_split(opts, int(os.environ.get("WORLD_SIZE", "1")))
    opts = _fetched(opts)
    return Launch(opts, device, opts.out, opts.dist_timeout)


@dataclass(frozen=True)
class PretrainPlan:
    """A pretraining run with everything decided; see the module docstring."""
    options: PretrainOptions
    """As the run uses them: resolved (device, precision, compile, --init's architecture,
    the vocabulary's size), --data the prepared directory."""
    objective: Objective
    device: torch.device
    rank: int
    world: int
    parts: list[tuple[Path, float]]
    """The prepared corpora and their shares (one, of weight 1, without a mixture)."""
    tokenizer: Tokenizer
    model: nn.Module
    batches: object
    held: list[dict]
    """The fixed held-out batches every evaluation scores (none: no evaluation)."""
    fingerprint: dict
    settings: dict
    why: str
    """Why the precision is what it is."""
    init_card: str | None
    """--init's model card, kept above the run's section."""

    @property
    def out(self) -> Path:
        return self.options.out

    @property
    def train_config(self) -> TrainConfig:
        return self.options.train

    @classmethod
    def build(cls, launch: Launch,
              command_line: Callable[[PretrainOptions], str] | None = None) -> PretrainPlan:
        """The plan of `launch`, in the run's lock: every check of the data and options
        first, a refusal the only thing printed, nothing measured (the bf16 timing of
        precision "auto") before it. `command_line(resolved options)`: the shell line
        recorded in OUT/training_args.json."""
        opts, device = launch.options, launch.device
        rank, world = rank_info()
        check_config(opts.train, device)
        # --init's card, copied into the model's at the end: one that cannot be is refused now
        init_card = read_card(opts.init) if opts.init is not None else None
        objective = the_objective(opts)
        latest = check_fresh_start(opts.out, opts.train.resume)
        if opts.batch_size is None and latest is not None:  # auto resumed: the run's batch
            opts = dataclasses.replace(opts, batch_size=recorded_batch(latest))
        settings = _settings_fingerprint(opts, objective)
        model = None if latest is None else _resumed_model(opts, objective, latest, settings)
        given = given_data(opts.data)
        parts = data_parts(_data_options(opts, objective), rank, keep=latest is not None,
                           resumed=latest)
        fingerprint = _fingerprint(opts, parts, given, latest, settings)  # other data refused
        data = parts[0][0]
        load_manifest(data)
        tokenizer = Tokenizer.load(data / "tokenizer")
        for model_dir in (opts.init, objective.data_tokenizer()):
            if model_dir is not None:
                check_tokenizer(data, model_dir)
        # the command line keeps the text file; what follows reads its prepared directory
        prepared = dataclasses.replace(opts, data=data)
        if model is None:
            model = model_to_pretrain(prepared, objective, tokenizer.vocab_size)
            if latest is not None:  # a checkpoint that records no vocabulary: checked now
                check_fits(latest, run_fingerprint(model, fingerprint),
                           ignore=("world_size", GIVEN))
        if opts.batch_size is None:  # auto on a GPU: measured, the fingerprint made of it
            size = measured_batch(model, objective, data, _data_kwargs(prepared, objective),
                                  opts.train, device, (rank, world))
            opts, prepared = (dataclasses.replace(o, batch_size=size) for o in (opts, prepared))
            check_split(opts, world)  # each phase's batch too
            fingerprint = _fingerprint(opts, parts, given, latest,
                                       _settings_fingerprint(opts, objective))
        phases = _phase_bases(opts.context_phases, model)
        batches = _train_batches(prepared, objective, parts, rank, world, phases,
                                 rope=lambda p: set_rope_base(model, p.rope_base,
                                                              p.local_rope_base))  # sums checked
        # Every rank builds them (a few batches) so that all agree whether to evaluate.
        held = _heldout_batches(prepared, _data_kwargs(prepared, objective),
                                opts.train.seed + 1, parts)
        resolved, why = resolve(_as_used(opts, model, parts, tokenizer.vocab_size,
                                         objective.data_tokenizer() is not None), device, world)
        recorded = run_settings({"options": dataclasses.asdict(resolved)}, device=device,
                                precision=resolved.train.precision,
                                command=command_line(resolved) if command_line else None)
        return cls(dataclasses.replace(resolved, data=data), objective, device, rank, world,
                   parts, tokenizer, model, batches, held, fingerprint, recorded, why,
                   init_card)

    def announce(self) -> None:
        """The settings, the precision and why, the model and batch shape, on stderr."""
        _announce(self.options, self.model, self.parts, self.device, self.world,
                  self.settings, self.why)
        if not self.held:
            print("warning: the held-out split is empty: no evaluation", file=sys.stderr)

    def card_section(self, result: TrainResult) -> str:
        return card_section(self.options, self.model, self.parts, result, self.init_card)

    def front_matter(self) -> dict[str, str | None]:
        return _front_matter(self.options)


def _shape(opts: PretrainOptions) -> str:
    """"128 x 16", or with context phases "64 x 32 -> 128 x 16 (at 90%)", each phase's
    rotary base where given ("1024 x 64 (base 10000) -> 8192 x 8 (base 160000, at 90%)")."""
    shapes, start = [], 0.0
    for phase in opts.context_phases:
        notes = ([f"base {_bases(phase)}"] if phase.based else []) + (
            [f"at {start:.0%}"] if start > 0 else [])
        shapes.append(f"{phase.seq_len} x {opts.phase_batch_size(phase)}"
                      + (f" ({', '.join(notes)})" if notes else ""))
        start += phase.fraction
    return " -> ".join(shapes)


def _bases(phase: ContextPhase) -> str:
    """"10000", with a local base "160000/10000" (the global one "-": the phase before's)."""
    base = "-" if phase.rope_base is None else f"{phase.rope_base:g}"
    return base + ("" if phase.local_rope_base is None else f"/{phase.local_rope_base:g}")


def _rate(masking: MaskingConfig) -> str:
    """"40%", or with a scheduled rate "40% -> 15%"."""
    if masking.mlm_prob_final is None:
        return f"{masking.mlm_prob:.0%}"
    return f"{masking.mlm_prob:.0%} -> {masking.mlm_prob_final:.0%}"


def _accumulation(cfg: TrainConfig) -> str:
    """" x 4 accumulated", " x 1 -> 8 accumulated (batch growth)" or ""."""
    if cfg.grad_accum_final is not None:
        return f" x {cfg.grad_accum} -> {cfg.grad_accum_final} accumulated (batch growth)"
    return f" x {cfg.grad_accum} accumulated" if cfg.grad_accum > 1 else ""




def the_objective(opts: PretrainOptions) -> Objective:
    """The objective --objective names, with its settings."""
    kind = objective_type(opts.objective)
    return kind(None if kind.Settings is None else getattr(opts, kind.settings_key()))


def _data_options(opts: PretrainOptions, objective: Objective) -> DataOptions:
    """What the data is found or prepared with (`run_data.DataOptions`): the options, a text
    --data without --tokenizer or --init prepared with the tokenizer the objective reads (a
    teacher's) in place of a vocabulary trained on it."""
    needed = objective.data_tokenizer()
    init = opts.init if needed is None or opts.tokenizer is not None or opts.init is not None \
        else needed
    return DataOptions(opts.data, opts.out, opts.tokenizer, init, opts.vocab_size,
                       opts.text_field)


def model_to_pretrain(opts: PretrainOptions, objective: Objective, vocab_size: int) -> nn.Module:
    """The model to train: a fresh preset initialised from --seed, its vocabulary of
    `vocab_size`, or --init's, made ready for the objective (`Objective.fit`). torch's global
    generator is left where it was."""
    seed = opts.train.seed
    if opts.init is not None:
        model = objective.loaded_model(opts.init)
    else:
        model = objective.fresh_model(_fresh_config(opts, vocab_size), seed)
    cfg = model.config
    if opts.seq_len > cfg.max_positions:
        what = "--seq-len" if opts.phases is None else "--phases' last length"
        raise UserError(f"{what} {opts.seq_len} is longer than the model's "
                        f"{cfg.max_positions} positions")
    objective.check_seq_len(opts.seq_len)
    return objective.fit(model, opts.init, seed)


def _phase_bases(phases: list[ContextPhase], model: nn.Module) -> list[ContextPhase]:
    """`phases` with their rotary bases each where any gives one: a phase that gives none
    keeps the one before's (the first, the model's own); the model's config takes the last
    phase's, the bases it is saved with. Refused for a model without rotary positions
    ("bert"), and a local base for one without local layers."""
    if not any(p.based for p in phases):
        return phases
    cfg = model.config
    if cfg.architecture != "modern":
        raise UserError(f"--phases: a rotary base is for \"modern\" models; this "
                        f"\"{cfg.architecture}\" model has learned positions")
    if cfg.local_window == 0 and any(p.local_rope_base is not None for p in phases):
        raise UserError("--phases: a local rotary base (/LOCAL) is for a model with "
                        "local layers (--local-window); this one attends globally throughout")
    base, local, resolved = cfg.rope_theta, cfg.local_rope_theta, []
    for phase in phases:
        base = phase.rope_base if phase.rope_base is not None else base
        local = phase.local_rope_base if phase.local_rope_base is not None else local
        resolved.append(dataclasses.replace(phase, rope_base=base, local_rope_base=local))
    set_rope_base(model, base, local, saved=True)
    return resolved


def _fresh_config(opts: PretrainOptions, vocab_size: int) -> EncoderConfig:
    """The config of a fresh --preset of --architecture, sized to the vocabulary."""
    dropout = {} if opts.dropout is None else dict(hidden_dropout=opts.dropout,
                                                   attention_dropout=opts.dropout)
    try:
        return preset(opts.preset, vocab_size=vocab_size, architecture=opts.architecture,
                      max_positions=max(512, opts.seq_len), **dropout,
                      **local_attention_fields(opts.architecture, opts.local_window,
                                               opts.global_every))
    except ConfigError as e:
        raise UserError(str(e)) from None




def _heldout_batches(opts: PretrainOptions, data_kwargs: dict, seed: int,
                     parts: list[tuple[Path, float]] | None = None) -> list[dict]:
    """A fixed list of held-out batches: the same masks at every evaluation; of a mixture
    (`parts`; none: opts.data alone), from each corpus in its proportion."""
    parts = parts or [(Path(opts.data), 1.0)]
    batches = []
    for (data, _), count in zip(parts, allocate(opts.eval_batches, [w for _, w in parts])):
        try:
            held = PretrainingBatches(data, batch_size=opts.batch_size, split="heldout",
                                      seed=seed, prefetch=0, **data_kwargs)
        except UserError as e:
            if "has no text" not in str(e):
                raise
            continue
        batches += itertools.islice(iter(held), count)
    return batches


def resolve(opts: PretrainOptions, device: torch.device, world: int = 1
            ) -> tuple[PretrainOptions, str]:
    """`opts` with what the run decides spelled out: the device (a single process's own;
    under torchrun the one every rank's command line names, cuda for each rank's LOCAL_RANK
    GPU), the precision "auto" picks and whether to compile; and why that precision."""
    why = "given"
    if opts.train.precision == "auto":
        precision, why = choose_precision(device)
        opts = dataclasses.replace(opts, train=opts.train.replace(precision=precision))
    if opts.train.compile is None:
        opts = dataclasses.replace(opts, train=opts.train.replace(
            compile=device.type == "cuda" and compiles_for(device)))
    if opts.device in (None, "auto"):  # under torchrun not rank 0's cuda:0, refused for two ranks
        opts = dataclasses.replace(opts, device=str(device) if world == 1 else device.type)
    return opts, why


def _as_used(opts: PretrainOptions, model: torch.nn.Module, parts: list[tuple[Path, float]],
             vocab_size: int, given_tokenizer: bool = False) -> PretrainOptions:
    """`opts` as the run uses them where it never read them, for its settings and record: the
    architecture of an --init model, and the size of a vocabulary not trained in this run
    (--init's, --tokenizer's, the objective's where `given_tokenizer` (a teacher's), that of
    prepared --data), not the defaults for a fresh one."""
    if opts.init is not None:
        opts = dataclasses.replace(opts, architecture=model.config.architecture)
    given_tokenizer = given_tokenizer or opts.init is not None or opts.tokenizer is not None
    trained_here = not given_tokenizer and any(
        data.is_relative_to(opts.out / TEXT_DATA) for data, _ in parts)
    return opts if trained_here else dataclasses.replace(opts, vocab_size=vocab_size)


def check_split(opts: PretrainOptions, world: int) -> None:
    """Refuse batches that do not split over the ranks: before a text --data is prepared and
    before the ranks meet, so the refusal comes at once."""
    if opts.batch_size is None:  # auto: measured in multiples of the ranks
        return
    for size in {opts.batch_size, *map(opts.phase_batch_size, opts.context_phases)}:
        if size % world:
            raise UserError(f"a batch of {size} sequences does not split over {world} ranks")




def _fetched(opts: PretrainOptions) -> PretrainOptions:
    """`opts` with an --init or --tokenizer given by Hugging Face Hub name as its snapshot
    directory (a library call's; the command line hands directories): every reader of them
    below, the tokenizer's included, takes a directory."""
    named = {name: resolve_model(value) for name in ("init", "tokenizer")
             if (value := getattr(opts, name)) is not None and is_hub_name(value)}
    return dataclasses.replace(opts, **named) if named else opts




def _front_matter(opts: PretrainOptions) -> dict[str, str | None]:
    """The card's fields the hub files the model by: transformers loads it, as a fill-mask
    model (clm: text generation; electra's discriminator: no pipeline), continued from
    --init's hub model if named so."""
    return {"library_name": "transformers", "pipeline_tag": the_objective(opts).pipeline_tag,
            "base_model": None if opts.init is None else hub_name(opts.init)}


CARD_TITLE = "Pretrained with bertkit"
_LISTED_SOURCES = 5
"""Corpus files the card names before it counts the rest."""


def card_section(opts: PretrainOptions, model: nn.Module,
                 parts: list[tuple[Path, float]], result: TrainResult,
                 init_card: str | None = None) -> str:
    """The model card's section on a finished run (`bertkit.model.card`): the corpus files,
    the model's size, the objective, the steps and tokens trained, the held-out figures. No
    date, time or machine in it: the same run writes the same card. `init_card`: --init's,
    kept above the section."""
    cfg, c = opts.train, model.config
    init = hub_name(opts.init) or opts.init if opts.init is not None else None
    size = f"preset `{opts.preset}`" if init is None else f"continued from `{init}`"
    above = f" The card above is `{init}`'s." if init_card and init_card.strip() else ""
    masked = f", {_rate(opts.masking)} masked" if the_objective(opts).masks else ""
    lead = (f"This model was pretrained by `bertkit pretrain` on {_corpus_names(parts)}: a "
            f"\"{c.architecture}\" encoder ({size}) of {counted(c.num_layers, 'layer')}, hidden "
            f"size {c.hidden_size}, {counted(c.num_heads, 'attention head')}, "
            f"{num_parameters(model.encoder) / 1e6:.1f}M parameters, objective "
            f"`{opts.objective}`{masked}.{above} It trained for "
            f"{counted(result.step, 'step')} on {result.tokens:,} tokens ({_shape(opts)} "
            f"tokens per batch{_accumulation(cfg)}), learning rate {cfg.lr:g} ({cfg.schedule} "
            f"schedule), precision {cfg.precision}, seed {cfg.seed}.")
    ask = the_objective(opts).query.format(model=shlex.quote(str(opts.out)))
    return "\n\n".join([lead, _held_out(result.eval_metrics),
                        f"Ask it what it learned:\n\n```bash\n{ask}\n```",
                        f"Use it:\n\n```bash\nbertkit finetune classify --model "
                        f"{shlex.quote(str(opts.out))} --train train.jsonl --dev dev.jsonl "
                        f"--out runs/clf\n```"])


def _corpus_names(parts: list[tuple[Path, float]]) -> str:
    """The files the prepared corpora were made from ("`a.txt`, `b.txt` (30%)"), from their
    manifests: a corpus prepared into OUT/data is named by its text, not by that folder."""
    names = []
    for data, weight in parts:
        files = [Path(str(s.get("path", ""))).name
                 for s in load_manifest(data).get("sources", []) if isinstance(s, dict)]
        files = files or [data.name]  # a manifest older than its sources list
        named = ", ".join(f"`{f}`" for f in files[:_LISTED_SOURCES])
        more = len(files) - _LISTED_SOURCES
        named += f" and {counted(more, 'more file')}" if more > 0 else ""
        names.append(named if len(parts) == 1 else f"{named} ({weight:.0%})")
    return "; ".join(names)


def _held_out(figures: dict) -> str:
    """The last evaluation's figures, as `card_figure` shows them."""
    rows = [f"| {k} | {shown} |" for k, v in figures.items()
            if (shown := card_figure(k, v)) is not None]
    if not rows:
        return "No held-out split: no evaluation."
    return "\n".join(["Its figures on the held-out split, at the last step:", "",
                      "| figure | held out |", "|---|---|", *rows])


def _data_kwargs(opts: PretrainOptions, objective: Objective) -> dict:
    """What PretrainingBatches takes from the options, beside the batch size and seed."""
    return dict(objective=objective, seq_len=opts.seq_len, masking=opts.masking,
                row_ends=opts.row_ends, document_boundaries=opts.document_boundaries)


def _train_batches(opts: PretrainOptions, objective: Objective,
                   parts: list[tuple[Path, float]], rank: int, world: int,
                   phases: list[ContextPhase], rope: Callable[[ContextPhase], None]):
    """The training batches: of one corpus or a mixture, in its context `phases` (`rope`
    told each one's base). Each rank takes its rows of the same global batch: any number of
    ranks trains alike."""
    def of_length(seq_len: int, batch_size: int, seed: int):
        made = [PretrainingBatches(part, batch_size=batch_size // world, split="train",
                                   seed=seed, rank=rank, world_size=world,
                                   **{**_data_kwargs(opts, objective), "seq_len": seq_len})
                for part, _ in parts]
        return made[0] if len(made) == 1 else MixedBatches(made, [w for _, w in parts])

    seed = opts.train.seed
    if len(phases) == 1:
        return of_length(phases[0].seq_len, opts.batch_size, seed)
    # each phase draws its own order, not the first batches again at another length
    return ContextSchedule([of_length(p.seq_len, opts.phase_batch_size(p), seed + i)
                            for i, p in enumerate(phases)], phases, rope)


def _announce(opts: PretrainOptions, model: nn.Module, parts: list[tuple[Path, float]],
              device: torch.device, world: int, settings: dict, why: str) -> None:
    """The settings, the precision and why, the model and batch shape, on stderr."""
    cfg, masking, objective = opts.train, opts.masking, the_objective(opts)
    print(settings_block(settings), file=sys.stderr)
    print(f"precision {cfg.precision}: {why}", file=sys.stderr)
    source = opts.preset or hub_name(opts.init) or opts.init  # a snapshot by its Hub name
    print(f"model: {source} ({model.config.architecture}) with "
          f"{num_parameters(model) / 1e6:.1f}M parameters, objective {opts.objective}, "
          f"{f'{_rate(masking)} masked, ' if objective.masks else ''}"
          f"{_shape(opts)} tokens per batch{_accumulation(cfg)}"
          f", precision {cfg.precision}, {counted(world, 'rank')} on "
          f"{device if world == 1 else opts.device}, "
          f"{counted(torch.get_num_threads(), 'thread')}", file=sys.stderr)
    if (line := objective.describe(model)) is not None:
        print(line, file=sys.stderr)
    if len(parts) > 1:
        print("data: a mixture of " + ", ".join(f"{d} ({w:.0%})" for d, w in parts)
              + ", each batch from one corpus", file=sys.stderr)
    malloc, better = allocator()
    if better and device.type == "cpu":
        print(f"note: steps run faster with another allocator: LD_PRELOAD={better} "
              f"bertkit pretrain ...", file=sys.stderr)


def _fingerprint(opts: PretrainOptions, parts: list[tuple[Path, float]], given: dict,
                 latest: Path | None, settings: dict) -> dict:
    """What a checkpoint must have been trained on to be resumed by this run (`latest`: the
    checkpoint it resumes), and --data as typed (`given`: recorded, not compared; other data
    under another --data is refused here in its words)."""
    resumed = saved_fingerprint(latest).get("data") if latest is not None else None
    data = data_fingerprint(parts, resumed)
    if resumed is not None and data != resumed:
        check_resumed_data(latest, given, opts.out, other_data=True)
    return {"data": data, GIVEN: given, **settings}


_NEEDS_THE_DATA = ("world_size", "data", GIVEN)
"""What a checkpoint is not compared in before the data is prepared: the data's digest, and
the world size, never compared (`train` resumes on any number of ranks)."""
_WORD_ROWS = "encoder.embeddings.word.weight"
"""The weight whose rows are the vocabulary, of a PretrainingModel and of an ElectraModel's
discriminator alike: where a checkpoint's vocabulary size is read."""


def _resumed_model(opts: PretrainOptions, objective: Objective, latest: Path,
                   settings: dict) -> nn.Module | None:
    """The model to train, built before the data is prepared, found prepared or renamed and
    checked once against the checkpoint `latest` it resumes (its shapes and the settings,
    the data's digest aside): a fresh one with the checkpoint's vocabulary (another one is
    other data, refused as such), or --init's. None where the checkpoint records no
    vocabulary: the model is then built, and checked, once the data is known."""
    rows = saved_fingerprint(latest).get("model", {}).get(_WORD_ROWS)
    known = isinstance(rows, list) and rows and isinstance(rows[0], int)
    model = None
    # what loading said (heads the directory lacks) is said once the checkpoint fits: a
    # refusal is the only line printed
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if opts.init is not None or known:
            model = model_to_pretrain(opts, objective, rows[0] if known else 0)
    check_fits(latest, settings if model is None else run_fingerprint(model, settings),
               ignore=_NEEDS_THE_DATA + (("model",) if model is None else ()))
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def _phases_fingerprint(phases: list[ContextPhase]) -> dict:
    """The context phases a checkpoint was trained in: none for one phase without a rotary
    base, two without one as short-then-long runs recorded them (their checkpoints resume),
    else each phase as --phases spells it."""
    unbased = not any(p.based for p in phases)
    if len(phases) == 1 and unbased:
        return {}
    if len(phases) == 2 and unbased:
        return {"early_seq_len": phases[0].seq_len, "early_fraction": phases[0].fraction}
    return {"phases": [p.spelled() for p in phases]}


def _settings_fingerprint(opts: PretrainOptions, objective: Objective) -> dict:
    """The settings of `_fingerprint`: known before the data is prepared."""
    cfg = opts.train
    return {"objective": objective.name,
            "seq_len": opts.seq_len, "batch_size": opts.batch_size,
            # only when not "anywhere": checkpoints of rows cut anywhere resume
            **({"row_ends": opts.row_ends} if opts.row_ends != "anywhere" else {}),
            # only when on: checkpoints of runs before the setting resume
            **({"document_boundaries": True} if opts.document_boundaries else {}),
            **_phases_fingerprint(opts.context_phases),
            # mlm_prob_final only when set: earlier checkpoints still resume
            "masking": {k: v for k, v in dataclasses.asdict(opts.masking).items()
                        if k != "mlm_prob_final" or v is not None},
            "grad_accum": cfg.grad_accum,
            **objective.fingerprint(),
            # only when set: checkpoints written before batch growth still resume
            **({"grad_accum_final": cfg.grad_accum_final}
               if cfg.grad_accum_final is not None else {})}


__all__ = ["PretrainPlan", "Launch", "launch_of", "the_objective", "model_to_pretrain",
           "resolve", "check_split", "card_section", "CARD_TITLE"]
