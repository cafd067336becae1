"""Pretraining entry point: the data --data names (prepared corpora, or text prepared into
OUT/data first: `bertkit.pretraining.run_data`) + a model -> the shared training loop.

    result = pretrain(PretrainOptions(data="data/", out="runs/mini", preset="mini",
                                      objective="mlm", seq_len=128, batch_size=16,
                                      train=TrainConfig(max_steps=10_000, lr=5e-4)))

The model is a fresh `--preset` (its vocabulary sized to the data's tokenizer) or an existing
Hugging Face directory `--init` whose tokenizer must be the data's (continued pretraining).
Under `torchrun` the same call runs data-parallel: each rank reads its own share of every
global batch (gloo on the CPU, NCCL on GPUs) and rank 0 writes.

The final directory at the top of `out` is a Hugging Face BERT directory (BertForPreTraining
weights, config.json, tokenizer files), less the heads never learned that the objective does
not train (`untrained_heads`: a fresh model's NSP head and pooler outside mlm+nsp, saved as
BertForMaskedLM; a BertModel's NSP head). The span objective's
boundary head has no Hugging Face counterpart: it is saved beside the model as
`sbo.safetensors` (transformers ignores that file), and `--init` of such a directory with
`--objective span` picks it up again. An electra run saves the discriminator at the top and
its generator in OUT/generator (`hub.save_electra`). The model's card, README.md, says how it
was trained (`card_section`), below the --init directory's card if it has one.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from bertkit.config import (ARCHITECTURES, Architecture, ConfigError, EncoderConfig, PRESETS,
                            Precision, Schedule, TrainConfig, preset)
from bertkit.files import UserError
from bertkit.model.card import card_figure, read_card, write_card
from bertkit.model.create import local_attention_fields
from bertkit.model.encoder import num_parameters
from bertkit.model.fetch import is_hub_name, resolve_model
from bertkit.model.hub import hub_name
from bertkit.progress import counted
from bertkit.pretraining.electra import ElectraSettings
from bertkit.pretraining.held_out import held_out_figures
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives import (OBJECTIVES, SBO_FILE, objective_named,
                                            objective_type)
from bertkit.pretraining.corpus import check_tokenizer, load_manifest
from bertkit.pretraining.examples import ROW_ENDS, LengthSchedule, PretrainingBatches
from bertkit.pretraining.mixture import MixedBatches, allocate
from bertkit.pretraining.masking import MaskingConfig
from bertkit.pretraining.run_data import (TEXT_DATA, check_resumed_data, data_fingerprint,
                                          data_parts, given_data)
from bertkit.runlock import RunLock
from bertkit.runtime import allocator, choose_precision, compiles_for
from bertkit.text.tokenizer import Tokenizer
from bertkit.training.distributed import (peer_failure, rank_device, rank_info,
                                          start_distributed)
from bertkit.training.checkpoint import (GIVEN, check_fits, model_fingerprint,
                                         saved_fingerprint)
from bertkit.training.loop import (TrainResult, check_config, check_fresh_start, check_resume,
                                   train)
from bertkit.training.settings import run_settings, settings_block

DEFAULT_PRESET = "mini"
"""The size a fresh model gets without --preset: the best held-out quality for an afternoon
on a laptop CPU (docs/recipe.md, "Choosing the recipe")."""


@dataclass
class PretrainMasking(MaskingConfig):
    """MaskingConfig with pretraining's measured default rate (docs/recipe.md)."""
    mlm_prob: float = 0.4
    """Share of the non-special tokens of each sequence that are predicted (BERT 0.15; a
    higher rate learns more per step: Wettig et al. 2023, ModernBERT)."""


@dataclass
class PretrainSchedule(TrainConfig):
    """TrainConfig with pretraining's measured defaults (docs/recipe.md)."""
    lr: float = 1e-3
    """Peak learning rate, reached at the end of warm-up (1e-3 beat 2e-3 for "modern" mini;
    the 2018 "bert" recipe wants about 1e-4 to 5e-4)."""
    schedule: Schedule = "wsd"
    """Decay after warm-up: "linear" to --min-lr-ratio, "cosine", "constant", or "wsd"
    (warmup-stable-decay: the peak until the last --decay-fraction of the run, then linear)."""
    precision: Precision = "auto"
    """"auto": bf16 where this device multiplies it natively (a GPU that has it, a CPU
    measured at start to multiply bf16 faster than fp32), else fp32; or "fp32", "bf16",
    "fp16" (GPU, loss scaling)."""
    compile: bool | None = None
    """Run the model through torch.compile. Unset: on a CUDA GPU with Triton, where it fuses
    the memory-bound kernels between the matmuls (docs/gpu.md), and off on the CPU, where it
    was measured slower. Its first steps compile (a minute or so)."""


def _shape(opts: PretrainOptions) -> str:
    """"128 x 16", or with short sequences first "64 x 32 -> 128 x 16 (at 90%)"."""
    shape = f"{opts.seq_len} x {opts.batch_size}"
    if not opts.short_first:
        return shape
    return (f"{opts.early_seq_len} x {opts.early_batch_size} -> {shape} "
            f"(at {opts.early_fraction:.0%})")


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


@dataclass
class PretrainOptions:
    data: Path = field(metadata={"weighted": True})
    """Directory written by `bertkit prepare` (shards, manifest.json, tokenizer/); or a corpus
    to prepare into OUT/data first, found there by later runs: a text file (one sentence or
    paragraph per line, a blank line between documents), JSONL, CSV, TSV, Parquet, a
    `datasets` directory, a folder or a glob, compressed or not; or several of either mixed by
    proportion, PATH=0.7,PATH=0.3 (a table in --config; docs/pretraining.md, "Mixing corpora"),
    each corpus to prepare into OUT/data/K-NAME (K its place in the mixture), all with one
    tokenizer; PATH=0.3:FIELD reads that corpus' text from its records' FIELD instead of
    --text-field's."""
    out: Path
    """Run directory: checkpoints, metrics.jsonl, loss.png, and the final model at the top."""
    tokenizer: Path | None = field(default=None, metadata={"model": True})
    """A corpus to prepare as --data (or in a mixture) only: the tokenizer (or model)
    directory to prepare it with; none: --init's, a mixture's prepared directories', or a
    WordPiece vocabulary of --vocab-size trained on the text (of all the corpora to prepare)."""
    vocab_size: int = 16000
    """A corpus to prepare as --data only, without --tokenizer or --init: size of the uncased
    WordPiece vocabulary trained on it (16,000 for the measured english_books runs)."""
    text_field: str = "text"
    """A corpus to prepare as --data only: the field of a JSONL object, a CSV row or a table
    row that holds the text (in a mixture, of each corpus that names none: PATH=W:FIELD)."""
    preset: str | None = field(default=None, metadata={"choices": tuple(PRESETS)})
    """Size of a fresh model, layers and width: tiny (2 layers, 128 wide), mini (4, 256), small
    (4, 512), medium (8, 512), base (12, 768: BERT-base), large (24, 1024: BERT-large); none:
    mini unless --init."""
    init: Path | None = field(default=None, metadata={"model": True})
    """Model directory to continue pretraining from (its architecture, size and
    tokenizer)."""
    architecture: Architecture = "modern"
    """Architecture of a fresh model: "modern" (pre-LN, gated feed-forward, rotary positions,
    no biases; saved as ModernBertForMaskedLM) or "bert" (BERT as published; BertForPreTraining)."""
    local_window: int | None = None
    """"modern", a fresh model: ModernBERT's local attention, a window of this many tokens
    (a positive even number; ModernBERT's is 128): the layers that are not global see only
    the tokens within half of it either side; none: every layer attends to the whole input."""
    global_every: int | None = None
    """With --local-window: every n-th layer, from the first, attends to the whole input;
    none: 3, as ModernBERT."""
    dropout: float | None = None
    """Dropout of a fresh model (hidden and attention); none: the architecture's (0 for
    "modern", 0.1 for "bert")."""
    objective: str = field(default="mlm", metadata={"choices": OBJECTIVES})
    """"mlm" (masked language model, as RoBERTa: packed, no NSP), "mlm+nsp" (BERT's: with
    next-sentence prediction, NSP; "bert" only), "span" (SpanBERT), "clm" (causal: left to
    right, as GPT), "electra" (replaced-token detection: a small generator and the
    discriminator, saved at the top, with the generator in OUT/generator)."""
    electra: ElectraSettings = field(default_factory=ElectraSettings)
    """--objective electra: the generator's size and the weight of the detection loss."""
    masking: PretrainMasking = field(default_factory=PretrainMasking)
    """Masking rate, the [MASK] / random / unchanged split, whole words, spans."""
    seq_len: int = 128
    """Tokens per sequence, special tokens included."""
    row_ends: str = field(default="sentence", metadata={"choices": ROW_ENDS})
    """Where the text of an mlm / clm row ends before its [SEP]: "sentence" (at a sentence end,
    as the texts of evaluation and fine-tuning do; 2.2 points more held-out accuracy in 12
    minutes, docs/recipe.md), "anywhere" (the corpus cut into back-to-back rows) or
    "whole-sentences" (each row also starts at a sentence start, as RoBERTa's FULL-SENTENCES:
    the sentences that fit, then padding)."""
    early_seq_len: int = 64
    """Sequence length of the first --early-fraction of the run, with as many more sequences
    per batch (about the same tokens per step); then --seq-len (BERT: 128 for 90% of its steps,
    then 512). 64 then 128 learned more in 12 and 60 minutes than 128 throughout
    (docs/recipe.md). Only where shorter than --seq-len."""
    early_fraction: float = 0.9
    """Share of the run (steps, or the clock for a time budget) at --early-seq-len; 0: --seq-len
    throughout."""
    batch_size: int = 16
    """Sequences per micro-batch, all ranks together (each rank takes an equal share).
    16 learns more per minute than 32 on a 2-core CPU (docs/recipe.md); on a GPU, raise
    it until the device is busy."""
    eval_batches: int = 40
    """Held-out batches per evaluation (the same masks every time, so curves compare)."""
    device: str | None = "auto"
    """Where the model trains: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ...; under torchrun, auto and cuda give each rank its LOCAL_RANK GPU."""
    dist_timeout: float = 600.0
    """Under torchrun: seconds a rank waits for the others in one collective (the gradient
    all-reduce, a barrier) before it ends the run with an error; a peer that died or hangs
    so stops every rank, and torchrun --max-restarts restarts them from the last checkpoint.
    Longer than any wait for rank 0 alone: preparing a text --data, an evaluation, a save."""
    train: PretrainSchedule = field(default_factory=lambda: PretrainSchedule(max_steps=1000))
    """The training loop's settings (lr, steps/time, precision, checkpoints, ...)."""

    def __post_init__(self) -> None:
        self.data, self.out = Path(self.data), Path(self.out)
        self.init = Path(self.init) if self.init is not None else None
        self.tokenizer = Path(self.tokenizer) if self.tokenizer is not None else None
        if self.vocab_size < 8:
            raise UserError(f"--vocab-size must be at least 8 (got {self.vocab_size})")
        if self.preset is not None and self.init is not None:
            raise UserError("give --preset NAME (a fresh model) or --init DIR, not both")
        if self.preset is None and self.init is None:
            self.preset = DEFAULT_PRESET
        if self.preset is not None and self.preset not in PRESETS:
            raise UserError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.architecture not in ARCHITECTURES:
            raise UserError(f"unknown architecture {self.architecture!r}; choose one of "
                            f"{', '.join(ARCHITECTURES)}")
        local_attention_fields(self.architecture, self.local_window, self.global_every)
        if self.init is not None and (self.local_window, self.global_every) != (None, None):
            raise UserError("--local-window and --global-every shape a fresh model; --init "
                            "DIR keeps its own")
        objective_named(self.objective)  # an unknown name refused
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise UserError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.seq_len < 8 or self.batch_size < 1:
            raise UserError(f"--seq-len must be at least 8 and --batch-size at least 1 (got "
                            f"{self.seq_len}, {self.batch_size})")
        if self.row_ends not in ROW_ENDS:
            raise UserError(f"unknown --row-ends {self.row_ends!r}; choose one of "
                            f"{', '.join(ROW_ENDS)}")
        if self.early_seq_len < 8:
            raise UserError(f"--early-seq-len must be at least 8 (got {self.early_seq_len})")
        if not self.dist_timeout > 0:
            raise UserError(f"--dist-timeout must be positive (got {self.dist_timeout})")
        if not 0.0 <= self.early_fraction < 1.0:
            raise UserError(f"--early-fraction must be at least 0 and below 1 (got "
                            f"{self.early_fraction})")

    @property
    def short_first(self) -> bool:
        """Whether the run starts with early_seq_len sequences."""
        return self.early_fraction > 0 and self.early_seq_len < self.seq_len

    @property
    def early_batch_size(self) -> int:
        """Sequences per early batch: about the tokens of a seq_len batch, in early_seq_len rows."""
        if not self.short_first:
            return self.batch_size
        return max(1, round(self.batch_size * self.seq_len / self.early_seq_len))


def the_objective(opts: PretrainOptions) -> Objective:
    """The objective --objective names, with its settings."""
    kind = objective_type(opts.objective)
    settings = [value for f in dataclasses.fields(opts) if kind.Settings is not None
                and isinstance(value := getattr(opts, f.name), kind.Settings)]
    return kind(settings[0] if settings else None)


def model_to_pretrain(opts: PretrainOptions, vocab_size: int, seed: int) -> nn.Module:
    """The model to train: a fresh preset initialised from `seed` or a loaded directory, made
    ready for the objective (`Objective.fit`). torch's global generator is left where it
    was."""
    objective = the_objective(opts)
    if opts.init is not None:
        check_tokenizer(opts.data, opts.init)
        model = objective.loaded_model(opts.init)
    else:
        model = objective.fresh_model(_fresh_config(opts, vocab_size), seed)
    cfg = model.config
    if opts.seq_len > cfg.max_positions:
        raise UserError(f"--seq-len {opts.seq_len} is longer than the model's "
                        f"{cfg.max_positions} positions")
    return objective.fit(model, opts.init, seed)


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


def untrained_heads(model: nn.Module, objective: str | Objective) -> list[str]:
    """The heads a run of `objective` does not save (`Objective.untrained_parts`)."""
    return objective_named(objective).untrained_parts(model)


def save_pretrained(model: nn.Module, path: Path, tokenizer,
                    objective: str | Objective = "mlm") -> None:
    """The model as `objective` saves it (`Objective.save`): a Hugging Face directory."""
    objective_named(objective).save(model, path, tokenizer)


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
             vocab_size: int) -> PretrainOptions:
    """`opts` as the run uses them where it never read them, for its settings and record: the
    architecture of an --init model, and the size of a vocabulary not trained in this run
    (--init's, --tokenizer's, that of prepared --data), not the defaults for a fresh one."""
    if opts.init is not None:
        opts = dataclasses.replace(opts, architecture=model.config.architecture)
    trained_here = opts.init is None and opts.tokenizer is None and any(
        data.is_relative_to(opts.out / TEXT_DATA) for data, _ in parts)
    return opts if trained_here else dataclasses.replace(opts, vocab_size=vocab_size)


def check_split(opts: PretrainOptions, world: int) -> None:
    """Refuse batches that do not split over the ranks: before a text --data is prepared and
    before the ranks meet, so the refusal comes at once."""
    for size in {opts.batch_size, opts.early_batch_size}:
        if size % world:
            raise UserError(f"a batch of {size} sequences does not split over {world} ranks")


def pretrain(opts: PretrainOptions,
             command_line: Callable[[PretrainOptions], str] | None = None) -> TrainResult:
    """Pretrain per `opts`; see the module docstring. `command_line(resolved options)` gives
    the shell line recorded in OUT/training_args.json (the CLI's; none from a library call)."""
    check_split(opts, int(os.environ.get("WORLD_SIZE", "1")))
    opts = _fetched(opts)
    device = rank_device(opts.device)
    joined = start_distributed(device, opts.dist_timeout)
    try:
        return _pretrain(opts, device, command_line)
    except (RuntimeError, dist.DistError) as e:
        if not joined or (error := peer_failure(e, dist.get_rank(), opts.dist_timeout)) is None:
            raise
        raise error from None
    finally:
        if joined:
            dist.destroy_process_group()


def _fetched(opts: PretrainOptions) -> PretrainOptions:
    """`opts` with an --init or --tokenizer given by Hugging Face Hub name as its snapshot
    directory (a library call's; the command line hands directories): every reader of them
    below, the tokenizer's included, takes a directory."""
    named = {name: resolve_model(value) for name in ("init", "tokenizer")
             if (value := getattr(opts, name)) is not None and is_hub_name(value)}
    return dataclasses.replace(opts, **named) if named else opts


def _pretrain(opts: PretrainOptions, device: torch.device,
              command_line: Callable[[PretrainOptions], str] | None) -> TrainResult:
    """`pretrain` in the process group, if any, it has joined. The output directory's lock and
    every check of the data and options come first: a refusal is the only thing printed, and
    nothing is measured (the bf16 timing of precision "auto") before it."""
    rank, world = rank_info()
    with RunLock(opts.out, enabled=rank == 0):  # train() takes it again, as the same process
        check_config(opts.train, device)
        # --init's card, copied into the model's at the end: one that cannot be is refused now
        card = read_card(opts.init) if opts.init is not None else None
        latest = check_fresh_start(opts.out, opts.train.resume)
        if latest is not None:  # another model, other settings refused before the data is
            _check_before_the_data(opts, latest)  # prepared, found prepared or renamed
        given = given_data(opts.data)
        parts = data_parts(opts, rank, keep=latest is not None, resumed=latest)
        fingerprint = _fingerprint(opts, parts, given, latest)  # other data refused at once
        data = parts[0][0]
        load_manifest(data)
        tokenizer = Tokenizer.load(data / "tokenizer")
        # the command line keeps the text file; what follows reads its prepared directory
        prepared = dataclasses.replace(opts, data=data)
        batches = _train_batches(prepared, parts, rank, world)  # checks the shards' sums
        # Every rank builds them (a few batches) so that all agree whether to evaluate.
        held = _heldout_batches(prepared, _data_kwargs(prepared), opts.train.seed + 1, parts)
        model = model_to_pretrain(prepared, tokenizer.vocab_size, opts.train.seed)
        # a checkpoint of another run refused before the settings are said (or measured)
        check_resume(opts.out, opts.train.resume, model, fingerprint)
        opts, why = resolve(_as_used(opts, model, parts, tokenizer.vocab_size), device, world)
        cfg = opts.train
        settings = run_settings({"options": opts}, device=device, precision=cfg.precision,
                                command=command_line(opts) if command_line else None)
        opts = dataclasses.replace(opts, data=data)
        if rank == 0:
            _announce(opts, model, parts, device, world, settings, why)
            if not held:
                print("warning: the held-out split is empty: no evaluation", file=sys.stderr)

        objective = the_objective(opts)

        def evaluate(m):
            return held_out_figures(m, held, objective, device)

        result = train(model, objective.loss, batches, cfg, opts.out,
                       evaluate=evaluate if held else None,
                       save=lambda m, path: objective.save(m, path, tokenizer),
                       target_count=objective.target_count,
                       fingerprint=fingerprint, device=device,
                       settings=settings,
                       find_unused_parameters=False)  # model_to_pretrain froze the unused heads
        if rank == 0 and result.stopped_by != "interrupted":  # a model was saved: its card
            write_card(opts.out, card, CARD_TITLE, card_section(opts, model, parts, result, card),
                       _front_matter(opts))
        return result


# The model card ---------------------------------------------------------------------------------

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
    return "\n\n".join([lead, _held_out(result.eval_metrics),
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


def _data_kwargs(opts: PretrainOptions) -> dict:
    """What PretrainingBatches takes from the options, beside the batch size and seed."""
    return dict(objective=the_objective(opts), seq_len=opts.seq_len, masking=opts.masking,
                row_ends=opts.row_ends)


def _train_batches(opts: PretrainOptions, parts: list[tuple[Path, float]], rank: int,
                   world: int):
    """The training batches: of one corpus or a mixture, with short sequences first when
    asked. Each rank takes its rows of the same global batch: any number of ranks trains
    alike."""
    def of_length(seq_len: int, batch_size: int, seed: int):
        made = [PretrainingBatches(part, batch_size=batch_size // world, split="train",
                                   seed=seed, rank=rank, world_size=world,
                                   **{**_data_kwargs(opts), "seq_len": seq_len})
                for part, _ in parts]
        return made[0] if len(made) == 1 else MixedBatches(made, [w for _, w in parts])

    seed = opts.train.seed
    if not opts.short_first:
        return of_length(opts.seq_len, opts.batch_size, seed)
    # the long phase draws its own order, not the first batches again at another length
    return LengthSchedule(of_length(opts.early_seq_len, opts.early_batch_size, seed),
                          of_length(opts.seq_len, opts.batch_size, seed + 1),
                          switch_at=opts.early_fraction)


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
                 latest: Path | None = None) -> dict:
    """What a checkpoint must have been trained on to be resumed by this run (`latest`: the
    checkpoint it resumes), and --data as typed (`given`: recorded, not compared; other data
    under another --data is refused here in its words)."""
    resumed = saved_fingerprint(latest).get("data") if latest is not None else None
    data = data_fingerprint(parts, resumed)
    if resumed is not None and data != resumed:
        check_resumed_data(latest, given, opts.out, other_data=True)
    return {"data": data, GIVEN: given, **_settings_fingerprint(opts)}


_NEEDS_THE_DATA = ("world_size", "data", GIVEN)
"""What a checkpoint is not compared in before the data is prepared: the data's digest, and
the world size, never compared (`train` resumes on any number of ranks)."""
_WORD_ROWS = "encoder.embeddings.word.weight"
"""The weight whose rows are the vocabulary, of a PretrainingModel and of an ElectraModel's
discriminator alike: where a checkpoint's vocabulary size is read."""


def _check_before_the_data(opts: PretrainOptions, latest: Path) -> None:
    """Refuse the checkpoint `latest` when it was made with other settings or for another
    model shape, before the data is prepared (`check_resume` compares all again once it is):
    with the refusal `check_resume` would give, and OUT as it was."""
    shapes = _shapes(opts, latest)
    fingerprint = _settings_fingerprint(opts)
    if shapes is not None:
        fingerprint["model"] = shapes
    check_fits(latest, fingerprint, ignore=_NEEDS_THE_DATA + (("model",) if shapes is None
                                                             else ()))


def _shapes(opts: PretrainOptions, latest: Path) -> dict | None:
    """The `model_fingerprint` of the model `model_to_pretrain` builds, known without the data:
    built on the meta device (no weights), a fresh one with the vocabulary of the checkpoint
    `latest` (another vocabulary is other data, refused as such), an --init one from its
    config.json. None where it is not known so (a checkpoint without the weight, an --init
    that is no model of the objective): `model_to_pretrain` and `check_resume` say why."""
    rows = saved_fingerprint(latest).get("model", {}).get(_WORD_ROWS)
    if opts.init is None and not (isinstance(rows, list) and rows and isinstance(rows[0], int)):
        return None
    try:
        cfg = _fresh_config(opts, rows[0]) if opts.init is None else None
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            model = the_objective(opts).skeleton(cfg, opts.init)
            return None if model is None else model_fingerprint(model)
    except (UserError, ValueError):  # ValueError: a generator that cannot share the embeddings
        return None


def _settings_fingerprint(opts: PretrainOptions) -> dict:
    """The settings of `_fingerprint`: known before the data is prepared."""
    cfg = opts.train
    objective = the_objective(opts)
    return {"objective": objective.name,
            "seq_len": opts.seq_len, "batch_size": opts.batch_size,
            # only when not "anywhere": checkpoints of rows cut anywhere resume
            **({"row_ends": opts.row_ends} if opts.row_ends != "anywhere" else {}),
            **({"early_seq_len": opts.early_seq_len, "early_fraction": opts.early_fraction}
               if opts.short_first else {}),
            # mlm_prob_final only when set: earlier checkpoints still resume
            "masking": {k: v for k, v in dataclasses.asdict(opts.masking).items()
                        if k != "mlm_prob_final" or v is not None},
            "grad_accum": cfg.grad_accum,
            **objective.fingerprint(),
            # only when set: checkpoints written before batch growth still resume
            **({"grad_accum_final": cfg.grad_accum_final}
               if cfg.grad_accum_final is not None else {})}


__all__ = ["PretrainOptions", "PretrainMasking", "PretrainSchedule", "DEFAULT_PRESET", "pretrain",
           "resolve", "model_to_pretrain", "save_pretrained", "untrained_heads",
           "SBO_FILE"]

