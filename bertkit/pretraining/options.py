"""The settings of `bertkit pretrain`, as the command line and a --config file give them:
`PretrainOptions`, with pretraining's measured defaults (`PretrainMasking`,
`PretrainSchedule`). They are read once, by `bertkit.pretraining.plan`, which makes the run
of them; nothing else in the library reads them.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.config import ARCHITECTURES, Architecture, PRESETS, Precision, Schedule, TrainConfig
from bertkit.files import UserError
from bertkit.model.create import local_attention_fields
from bertkit.pretraining import objectives
from bertkit.pretraining.examples import ROW_ENDS
from bertkit.pretraining.masking import MaskingConfig
from bertkit.pretraining.objective import Objective
from bertkit.pretraining.objectives import OBJECTIVES, objective_named
from bertkit.pretraining.phases import ContextPhase, parse_phases, phase_batch_size

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


@dataclass
class PretrainSettings:
    """`PretrainOptions` less the objectives' own settings, which `options_class` adds, one
    field each, from the objectives of the moment."""
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
    discriminator, saved at the top, with the generator in OUT/generator), "distill" (masked
    language model and a --teacher's self-attention relations, MiniLM v2, and/or hidden
    states)."""
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
    document_boundaries: bool = False
    """Rows packed from several documents (mlm, clm, electra) run each document as if alone:
    its tokens attend only within it and its positions restart at 0, as transformers'
    DataCollatorWithFlattening ("packing with position ids") and ModernBERT's unpadded
    training pack; a document cut between two rows starts again at 0 in the second. Off:
    attention runs across the documents of a row, as RoBERTa's FULL-SENTENCES
    (docs/pretraining.md, "Document boundaries")."""
    early_seq_len: int = 64
    """Sequence length of the first --early-fraction of the run, with as many more sequences
    per batch (about the same tokens per step); then --seq-len (BERT: 128 for 90% of its steps,
    then 512). 64 then 128 learned more in 12 and 60 minutes than 128 throughout
    (docs/recipe.md). Only where shorter than --seq-len."""
    early_fraction: float = 0.9
    """Share of the run (steps, or the clock for a time budget) at --early-seq-len; 0: --seq-len
    throughout."""
    phases: list[str] | None = field(default=None,
                                     metadata={"metavar": "LENGTH[:BASE[/LOCAL]]@FRACTION"})
    """Context phases, in place of --seq-len and --early-seq-len / --early-fraction: each
    LENGTH[:BASE[/LOCAL]]@FRACTION, the phase's tokens per sequence, for a "modern" model the
    rotary base of its global layers (and after a slash, of its local layers; none: the phase
    before's, the first's the model's own), and its share of the run (steps, or the clock for
    a time budget); the fractions sum to 1 and no phase is shorter than the one before. ModernBERT's: 1024:10000@0.9 8192:160000@0.1. Each phase has about the tokens per
    batch of --batch-size sequences of the last one; the model is made with the last phase's
    positions and saved with its bases (docs/pretraining.md, "Context phases")."""
    batch_size: int | None = field(default=None, metadata={"none": "auto", "metavar": "N|auto"})
    """Sequences per micro-batch, all ranks together (each rank takes an equal share), or
    auto: on a CUDA GPU, measured before training, 16 doubled while a few timed steps' tokens/s
    rise by over 5% and fit in memory (a resumed run keeps the batch it recorded;
    docs/pretraining.md, "The batch on a GPU"); elsewhere 16, which learns more per minute
    than 32 on a 2-core CPU (docs/recipe.md)."""
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
        _check_objective_settings(self)
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise UserError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.seq_len < 8 or (self.batch_size is not None and self.batch_size < 1):
            raise UserError(f"--seq-len must be at least 8 and --batch-size at least 1 (got "
                            f"{self.seq_len}, {self.batch_size})")
        if self.row_ends not in ROW_ENDS:
            raise UserError(f"unknown --row-ends {self.row_ends!r}; choose one of "
                            f"{', '.join(ROW_ENDS)}")
        _check_document_boundaries(self)
        _resolve_phases(self)
        if self.early_seq_len < 8:
            raise UserError(f"--early-seq-len must be at least 8 (got {self.early_seq_len})")
        if not self.dist_timeout > 0:
            raise UserError(f"--dist-timeout must be positive (got {self.dist_timeout})")
        if not 0.0 <= self.early_fraction < 1.0:
            raise UserError(f"--early-fraction must be at least 0 and below 1 (got "
                            f"{self.early_fraction})")

    @property
    def context_phases(self) -> list[ContextPhase]:
        """The run's phases: --phases', or --early-seq-len for --early-fraction of the run
        (where shorter than --seq-len) then --seq-len, or --seq-len throughout."""
        if self.phases is not None:
            return parse_phases(self.phases)
        if self.early_fraction > 0 and self.early_seq_len < self.seq_len:
            return [ContextPhase(self.early_seq_len, self.early_fraction),
                    ContextPhase(self.seq_len, 1.0 - self.early_fraction)]
        return [ContextPhase(self.seq_len, 1.0)]

    def phase_batch_size(self, phase: ContextPhase) -> int:
        """Sequences per batch of `phase`: about the tokens of a --batch-size batch at
        --seq-len (the last phase's length)."""
        return phase_batch_size(phase, self.seq_len, self.batch_size)


def _resolve_phases(opts: PretrainSettings) -> None:
    """--phases checked and spelled alike (`ContextPhase.spelled`); its last phase's length
    the run's --seq-len, and --early-fraction 0, so that the record reads as the run ran."""
    if opts.phases is None:
        return
    if isinstance(opts.phases, str):  # a library call's "16@0.9,128@0.1": not its characters
        opts.phases = [opts.phases]
    phases = parse_phases(opts.phases)
    if opts.architecture == "bert" and opts.init is None \
            and any(p.based for p in phases):
        raise UserError("--phases: a rotary base is for \"modern\" models; \"bert\" has "
                        "learned positions")
    opts.phases = [p.spelled() for p in phases]
    opts.seq_len, opts.early_fraction = phases[-1].seq_len, 0.0


def _check_document_boundaries(opts: PretrainSettings) -> None:
    """Refuse --document-boundaries where the rows are not packed: given, it would do
    nothing."""
    if opts.document_boundaries and objective_named(opts.objective).examples.rows != "packed":
        packed = [t.name for t in objectives.OBJECTIVE_TYPES if t.examples.rows == "packed"]
        raise UserError(f"--document-boundaries keeps the documents of a packed row apart "
                        f"(--objective {', '.join(packed)}); --objective {opts.objective}'s "
                        f"rows are not packed")


def _check_objective_settings(opts: PretrainSettings) -> None:
    """Refuse a setting of another objective than --objective's, in one line (as `finetune`
    refuses another task's): given, it would be silently ignored."""
    for f in dataclasses.fields(opts):
        owner = f.metadata.get("objective")
        if owner is None or owner == opts.objective:
            continue
        given, default = getattr(opts, f.name), f.default_factory()
        for setting in dataclasses.fields(given):
            if getattr(given, setting.name) != getattr(default, setting.name):
                raise UserError(f"--{setting.name.replace('_', '-')} is a setting of "
                                f"--objective {owner}, not of {opts.objective}")


@functools.cache
def options_class(types: tuple[type[Objective], ...]) -> type:
    """PretrainOptions for the objectives `types`: PretrainSettings, --objective's choices
    theirs, and a field for each one's `Settings` (its flags, shown as its group in the help:
    "--objective electra")."""
    fields = [("objective", str, dataclasses.field(
        default="mlm", metadata={"choices": tuple(t.name for t in types)}))]
    fields += [(t.settings_key(), t.Settings, dataclasses.field(
        default_factory=t.Settings, metadata={
            "objective": t.name, "group": f"--objective {t.name}",
            "doc": f"--objective {t.name}'s own settings ({t.summary})."}))
               for t in types if t.Settings is not None]
    cls = dataclasses.make_dataclass("PretrainOptions", fields, bases=(PretrainSettings,))
    cls.__module__ = __name__
    cls.__doc__ = "The settings of `bertkit pretrain`, the objectives' own included."
    return cls


def __getattr__(name: str):
    # PretrainOptions is made from the objectives listed when it is asked for: a new one's
    # settings become flags with nothing else changed
    if name == "PretrainOptions":
        return options_class(tuple(objectives.OBJECTIVE_TYPES))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PretrainOptions", "PretrainSettings", "PretrainMasking", "PretrainSchedule",
           "DEFAULT_PRESET", "options_class"]
