"""Commands on contextual embeddings and what they show: `embed`, `sentence-model`,
`anisotropy`, `plot senses`, `plot attention`. Their settings are the library's options
dataclasses (EncoderOptions, SentencePooling in bertkit.embeddings.embedder, EmbedSettings in
bertkit.embeddings.files, AttentionPlotSettings in bertkit.embeddings.plots, SensePlotSettings
in bertkit.senses.plots); the files they read and write, and what they print, are here."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bertkit.cli.options import Command
from bertkit.files import UserError

ENCODER_OPTIONS = "bertkit.embeddings.embedder:EncoderOptions"
"""The model whose vectors a command reads (imports torch: named, not imported, here)."""


def _standardizer(path: Path | None):
    if path is None:
        return None
    from bertkit.embeddings.standardize import Standardizer
    return Standardizer.load(path)


@dataclass(kw_only=True)
class EmbedFiles:
    input: Path
    """UTF-8 text file, one text per line (a tab separates a pair); or JSON lines, CSV, TSV,
    Parquet or Arrow, one text per record (its --text-field); compressed or not; a folder,
    glob or `datasets` directory of them (the index names each row's file); "-": standard
    input."""
    out: Path
    """Output .npy file; its index goes to OUT.index.jsonl. A sparse (SPLADE) model's
    vectors go to a .jsonl file instead, one {token: weight} object per text."""

    def __post_init__(self) -> None:
        from bertkit.embeddings.files import check_npy_out
        if self.out.suffix.lower() != ".jsonl":  # a sparse model's: checked with the model
            check_npy_out(self.out)  # before the model loads


# What a sparse model's vectors are made without: the settings of pooled token states.
_DENSE_ONLY = ("layers", "combine", "pool", "words", "subword_pool", "normalize",
               "standardize", "standardizer", "long_inputs")


def run_sparse_embed(files: EmbedFiles, settings, encoder) -> int:
    """`embed` with a sparse (SPLADE) model: JSON lines of {token: weight}, never a pooling
    of token states."""
    from bertkit.embeddings.files import EmbedSettings
    from bertkit.embeddings.sparse_encoder import SparseEncoder, check_jsonl_out
    from bertkit.finetuning.input_sources import input_file

    check_jsonl_out(files.out)
    given = [name for name in _DENSE_ONLY
             if getattr(settings, name) != getattr(EmbedSettings(), name)]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} shapes pooled token vectors; "
                        f"{encoder.model} is a sparse encoder, whose vectors are its own")
    device, precision = encoder.runs_on()
    model = SparseEncoder.load(encoder.model, device=device, max_length=encoder.max_length,
                               precision=precision)
    with input_file(files.input) as path:  # "-": standard input
        result = model.embed_file(path, files.out, batch_size=settings.batch_size,
                                  text_field=settings.text_field, progress=not settings.quiet)
    print(f"{files.out}: {result['rows']} sparse vectors, "
          f"{result['active_dims']:.1f} non-zero entries each on average")
    return 0


def is_sparse(model: Path) -> bool:
    """Whether `model` is a sparse (SPLADE) encoder, whose vectors no pooling gives."""
    from bertkit.model.kind import ModelKind, model_kind

    try:
        return model_kind(model) is ModelKind.SPARSE
    except UserError:  # no model there: the loader says so in its own words
        return False


def run_embed(files: EmbedFiles, settings, encoder) -> int:
    from bertkit.embeddings.files import check_npy_out
    from bertkit.finetuning.input_sources import input_file

    if is_sparse(encoder.model):
        return run_sparse_embed(files, settings, encoder)
    check_npy_out(files.out)
    embedder = encoder.load()
    try:
        with input_file(files.input) as path:  # "-": standard input
            result = settings.embed(embedder, path, files.out)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(f"{files.out}: {result.rows} rows from {result.lines} lines "
          f"(index: {result.index_path})")
    return 0


@dataclass(kw_only=True)
class SentenceModelFiles:
    out: Path = field(metadata={"output": "directory"})
    """Output directory: the model plus modules.json, 1_Pooling, 2_Normalize and
    sentence_bert_config.json, which sentence-transformers loads."""


def run_sentence_model(files: SentenceModelFiles, pooling, encoder) -> int:
    embedder = pooling.apply(encoder.load())
    path = embedder.save(files.out)
    print(f"{path}: sentence-transformers model ({'+'.join(embedder.pool)} pooling"
          f"{', normalized' if embedder.normalize else ''}, max {embedder.max_length} tokens)")
    return 0


@dataclass(kw_only=True)
class AnisotropyOptions:
    input: Path
    """UTF-8 text, one sentence or paragraph a line; or JSON lines, CSV, TSV, Parquet or
    Arrow, one text per record (its --text-field); compressed or not; a folder, glob or
    `datasets` directory of them."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    layers: str = "all"
    """"all", "last4" or e.g. 0,3,6."""
    sentences: int = 1000
    """Lines sampled from the corpus."""
    seed: int = 0
    """Seeds the sample."""
    rogue: int = 3
    """Rogue dimensions listed per layer."""
    min_count: int = 5
    """Instances a word needs for self-similarity."""
    plot: Path | None = field(default=None, metadata={"output": True})
    """PNG of anisotropy per layer, before and after."""
    json: bool = False
    """The report as one JSON object."""
    standardizer: Path | None = None
    """Standardize with this fitted file (e.g. from another corpus) instead of the statistics
    of the sample itself."""
    fit_standardizer: bool = False
    """Save the corpus mean/std for `embed --standardize`."""
    standardizer_out: Path | None = None
    """Where to save it; none: MODEL/standardize.safetensors."""
    batch_size: int = 32
    """Texts per forward pass."""
    quiet: bool = False
    """No progress on stderr."""

    def __post_init__(self) -> None:
        if self.sentences < 1:
            raise UserError(f"--sentences must be at least 1, got {self.sentences}")


def run_anisotropy(opts: AnisotropyOptions, encoder) -> int:
    from bertkit.embeddings.anisotropy import anisotropy_report, sample_lines
    from bertkit.embeddings.standardize import STANDARDIZER_FILE
    from bertkit.model.hub import resolve_model

    if opts.fit_standardizer and opts.standardizer:
        raise UserError("--fit-standardizer fits a new standardizer; --standardizer applies an "
                        "existing one: give one of them")
    embedder = encoder.load()
    texts = sample_lines(opts.input, opts.sentences, seed=opts.seed, text_field=opts.text_field)
    try:
        report, standardizer = anisotropy_report(
            embedder, texts, layers=opts.layers, standardizer=_standardizer(opts.standardizer),
            rogue_k=opts.rogue, min_count=opts.min_count, batch_size=opts.batch_size,
            model_name=str(encoder.model), corpus_name=str(opts.input), progress=not opts.quiet)
    except ValueError as e:
        raise UserError(str(e)) from None
    if opts.json:
        print(json.dumps(report.to_json()))
    else:
        print(f"{report.words} words in {report.sentences} lines of {opts.input}; "
              f"self-similarity over {report.word_types} word types seen "
              f"{opts.min_count}+ times; standardized with the statistics of "
              f"{report.standardized_with}")
        print(report.table())
        print()
        print(report.rogue_table())
    if opts.plot:
        from bertkit.embeddings.plots import plot_anisotropy
        from bertkit.figures import draw_or_skip
        plot = draw_or_skip(lambda: plot_anisotropy(report, opts.plot), opts.plot)
        if plot is not None:
            print(f"plot: {plot.path}", file=sys.stderr)
    if opts.fit_standardizer:
        where = standardizer.save(opts.standardizer_out
                                  or resolve_model(encoder.model) / STANDARDIZER_FILE)
        print(f"standardizer: {where}", file=sys.stderr)
    return 0


@dataclass(kw_only=True)
class PlotSensesFiles:
    input: Path
    """Sense-labelled JSON lines (text, start, end, lemma, synset or sense, optional gloss)."""
    lemma: str
    """The word to show."""
    out: Path
    """Output PNG."""


def run_plot_senses(files: PlotSensesFiles, settings, encoder) -> int:
    from bertkit.figures import require_matplotlib

    require_matplotlib(files.out)  # before the model is loaded
    instances = settings.instances(files.input, files.lemma)
    print(settings.plot(encoder.load(), instances, files.out, files.lemma).path)
    return 0


@dataclass(kw_only=True)
class PlotAttentionFiles:
    text: str
    """The sentence."""
    out: Path
    """Output PNG."""


def run_plot_attention(files: PlotAttentionFiles, settings, encoder) -> int:
    from bertkit.figures import require_matplotlib

    require_matplotlib(files.out)  # before the model is loaded
    print(settings.plot(encoder.load(), files.text, files.out).path)
    return 0


@dataclass(kw_only=True)
class PlotRunsOptions:
    run: list[str]
    """Run directories (or their metrics.jsonl) to draw, one line each, as DIR or NAME=DIR."""
    out: Path
    """Output PNG."""
    key: str = "loss"
    """The figure to draw, as metrics.jsonl names it (loss, mlm_loss, eval_accuracy, ...)."""
    split: Literal["train", "eval"] = "train"
    """Which records hold it: the training records or the held-out evaluations."""
    x: Literal["step", "seconds"] = "step"
    """Against training steps, or against training time (drawn in minutes)."""


def run_plot_runs(opts: PlotRunsOptions) -> int:
    from bertkit.figures import require_matplotlib
    from bertkit.training.runlog import plot_runs, run_spec

    require_matplotlib(opts.out)
    runs = {}
    for spec in opts.run:
        name, path = run_spec(spec)
        if not (Path(path).is_dir() or Path(path).is_file()):
            raise UserError(f"--run {spec}: {path} does not exist")
        runs[name or Path(path).name] = path
    curves = plot_runs(runs, opts.out, split=opts.split, key=opts.key, x=opts.x)
    missing = [name for name in runs if name not in curves]
    if not curves:
        raise UserError(f"no {opts.split} record of these runs holds {opts.key!r}")
    if missing:
        print(f"warning: no {opts.split} record of {', '.join(missing)} holds {opts.key!r}",
              file=sys.stderr)
    print(opts.out)
    return 0


@dataclass(kw_only=True)
class PlotLayerMixOptions:
    run: list[str]
    """Runs that learned a scalar mix, as DIR or NAME=DIR: `finetune --layer-mix` outputs
    (dev_metrics.json) or `road elmo-tag` outputs (metrics.json)."""
    out: Path
    """Output PNG."""


def run_plot_layer_mix(opts: PlotLayerMixOptions) -> int:
    from bertkit.embeddings.plots import plot_layer_weights
    from bertkit.figures import require_matplotlib
    from bertkit.files import read_json
    from bertkit.training.runlog import run_spec

    require_matplotlib(opts.out)
    mixes = {}
    for spec in opts.run:
        name, path = run_spec(spec)
        found = [Path(path) / f for f in ("dev_metrics.json", "metrics.json")
                 if (Path(path) / f).is_file()]
        weights = next((w for f in found if (w := read_json(f).get("layer_weights"))), None)
        if weights is None:
            raise UserError(f"--run {spec}: no layer_weights in {path}/dev_metrics.json or "
                            "metrics.json (a run of finetune --layer-mix or road elmo-tag)")
        mixes[name or Path(path).name] = weights
    print(plot_layer_weights(mixes, opts.out).path)
    return 0


COMMANDS = (
    Command("embed", run_embed, (EmbedFiles, "bertkit.embeddings.files:EmbedSettings",
                                 ENCODER_OPTIONS),
            help="contextual vectors of each line (or word) into a .npy file",
            description="One float32 row per input line (a tab separates a pair), or with "
                        "--words one row per word, written to --out with an index "
                        "OUT.index.jsonl saying which line / word each row is. A sparse "
                        "(SPLADE) model writes one JSON line per text instead, its "
                        "non-zero {token: weight} entries."),
    Command("sentence-model", run_sentence_model,
            (SentenceModelFiles, "bertkit.embeddings.embedder:SentencePooling", ENCODER_OPTIONS),
            help="write a model as a sentence-transformers directory (pooling, normalize)",
            description="Copy MODEL to --out with sentence-transformers' modules.json, "
                        "1_Pooling/config.json, sentence_bert_config.json (max_seq_length from "
                        "--max-length) and, when normalizing, 2_Normalize, so that "
                        "SentenceTransformer(OUT) gives what `bertkit embed` gives."),
    Command("anisotropy", run_anisotropy, (AnisotropyOptions, ENCODER_OPTIONS),
            help="expected cosine, rogue dimensions and standardization, per layer, on a corpus",
            description="Embed a sample of corpus lines and report, per layer, the expected "
                        "cosine between word vectors of different lines (anisotropy), "
                        "self-similarity, intra-sentence similarity and the rogue dimensions, "
                        "before and after standardization."),
    Command("plot senses", run_plot_senses,
            (PlotSensesFiles, "bertkit.senses.plots:SensePlotSettings", ENCODER_OPTIONS),
            help="2-D projection of one word's vectors, coloured by sense"),
    Command("plot attention", run_plot_attention,
            (PlotAttentionFiles, "bertkit.embeddings.plots:AttentionPlotSettings",
             ENCODER_OPTIONS),
            help="attention heatmap of one sentence (layer, head)"),
    Command("plot runs", run_plot_runs, (PlotRunsOptions,),
            help="one figure of several runs' logs (loss, accuracy) against steps or time"),
    Command("plot layer-mix", run_plot_layer_mix, (PlotLayerMixOptions,),
            help="bars of the layer weights that runs' learned scalar mixes chose"),
)
