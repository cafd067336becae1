"""Commands of fine-tuning: `finetune TASK` (a task head on labelled data), `evaluate` and
`predict` with the directory it writes. `finetune TASK` is one command per task of
`bertkit.finetuning.tasks.TASKS`, read when `finetune` is parsed: its flags are the task
class's settings, the library's FinetuneConfig (how it is trained) and the files.
`evaluate` given a pretrained (not fine-tuned) model judges it as a language model instead
(`bertkit.pretraining.evaluation`)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from bertkit.cli.options import Command, command_line
from bertkit.cli.pretraining import tune_runtime
from bertkit.files import UserError


@dataclass(kw_only=True)
class FinetuneFiles:
    model: Path = field(metadata={"model": True})
    """Pretrained BERT directory (bertkit or Hugging Face)."""
    train: Path
    """Training file: JSONL/CSV/TSV, CoNLL, CoNLL-U or SQuAD JSON (recognised from the file)."""
    dev: Path | None = None
    """Dev file; none: hold out --dev-fraction of --train."""
    out: Path
    """Output directory: a Hugging Face directory with the task remembered."""
    quiet: bool = False
    """No progress on stderr."""


@dataclass(kw_only=True)
class CnnFinetuneFiles(FinetuneFiles):
    """The files of a task the CNN family also trains (classify, pair, regress): its --model
    may be `cnn`."""

    model: Path = field(metadata={"model": ("cnn",)})  # `cnn` is no model to fetch
    """Pretrained BERT directory (bertkit or Hugging Face), or `cnn`: a convolutional network
    over the static vectors of --vectors (Kim 2014) instead of BERT."""


def run_finetune(files: FinetuneFiles, task, cfg, cnn=None) -> int:
    """Progress and the baseline beside the result on stderr (a warning when the model does
    not beat it, even with --quiet); the summary, one JSON object, on stdout. `task` is the
    task with the settings given; `cnn` the CNN family's, for the tasks it trains."""
    from bertkit.finetuning.baselines import baseline_report
    from bertkit.finetuning.cnn import CnnBackbone
    from bertkit.finetuning.recipe import finetune

    tune_runtime()
    cfg = replace(cfg, show_progress=not files.quiet)
    if cnn is None and str(files.model) == "cnn":
        raise UserError(f"--model cnn trains a label or a number per text (classify, pair, "
                        f"regress), not the {task.name} task")
    backbone = CnnBackbone.load(cnn) if str(files.model) == "cnn" else None
    if backbone is None and cnn is not None and cnn.vectors is not None:
        raise UserError("--vectors is read with --model cnn only")
    family = {"backbone": backbone} if backbone else {}  # BERT: the recipe's default
    family_options = [cnn] if cnn is not None else []
    result = finetune(task, cnn.vectors if backbone else files.model, files.train,
                      files.dev, files.out, cfg,
                      command_line=lambda resolved, settled: command_line(
                          task_command(type(settled)),
                          [files, settled, resolved, *family_options]),
                      **family)
    if result.stopped_by == "interrupted":  # the loop said: checkpoint saved, go on with --resume
        return 130
    if not files.quiet:
        print(f"saved {result.out_dir}: {result.steps} steps, {result.train_seconds:.0f} s, "
              + ("finished its epochs" if result.stopped_by == "epochs"
                 else f"stopped by {result.stopped_by}")
              + f", best step {result.best_step}", file=sys.stderr)
    if result.comparison is not None:
        line, warning = baseline_report(result.comparison, result.baseline.get("predictor"))
        if not files.quiet:
            print(line, file=sys.stderr)
        if warning:
            print(warning, file=sys.stderr)
    print(json.dumps(result.summary()))
    return 0


@dataclass(kw_only=True)
class ColumnOverrides:
    """Where the fields are in the file, when it differs from the data the model was tuned on."""

    text_column: str | None = None
    """Column of the text; none: as when fine-tuned."""
    pair_column: str | None = None
    """Column of the second text of a pair; none: as when fine-tuned."""
    label_column: str | None = None
    """Column of the label; none: as when fine-tuned."""
    conllu_column: Literal["upos", "xpos"] | None = None
    """CoNLL-U tag column; none: as when fine-tuned."""


def _with_columns(runner, columns: ColumnOverrides):
    """The runner with its task reading the columns given on the command line."""
    return runner.with_task(runner.task.with_overrides(
        **{f.name: getattr(columns, f.name) for f in fields(columns)}))


@dataclass(kw_only=True)
class EvaluateOptions:
    model: Path | None = field(default=None, metadata={"model": True})
    """Directory written by `bertkit finetune`, a pretrained model (judged as a language
    model), or a sentence model; none: --bm25 on a BEIR directory."""
    input: Path
    """Fine-tuned model: labelled file in the task's format. Pretrained model: a directory
    written by `bertkit prepare` (held-out masked tokens), a .jsonl of minimal pairs or a
    directory of them (BLiMP's layout), or a text file (one text a line). Sentence model or
    --bm25: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/test.tsv). "-": standard
    input."""
    bm25: bool = False
    """On a BEIR directory: rank by BM25 (bm25s) instead of a model."""
    json: bool = False
    """Print one JSON object."""
    batch_size: int = 64
    """Examples per forward pass."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    quiet: bool = False
    """No progress on stderr."""


def _is_pretrained(path: Path) -> bool:
    """A model directory that no task claims: no bertkit_task.json, and a config.json whose
    architecture is no transformers task model (BertForPreTraining, BertForMaskedLM, ...)."""
    from bertkit.finetuning.heads import read_task_file
    from bertkit.finetuning.tasks import TASKS
    from bertkit.model.hub import is_model_dir, load_config, resolve_model

    try:
        path = resolve_model(path)
    except UserError:  # not here, nor in the cache: TaskModel.load says so
        return False
    if not is_model_dir(path) or read_task_file(path) is not None:
        return False
    config = load_config(path).extra
    return all(t.from_transformers(config) is None for t in TASKS)


def _is_sentence_model(model: Path, data: Path) -> bool:
    """A sentence-transformers directory (modules.json) given pairs to score, not text."""
    from bertkit.embeddings.sentence_model import MODULES_FILE
    from bertkit.model.hub import resolve_model

    try:
        return (resolve_model(model) / MODULES_FILE).is_file() and Path(data).suffix != ".txt"
    except UserError:
        return False


def _evaluate_sentence_model(opts: EvaluateOptions) -> int:
    """STS figures (or retrieval figures) of a sentence model on a labelled file; a sparse
    model's retrieval figures over dot products, with its vectors' density."""
    from bertkit.cli.embeddings import is_sparse
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.sparse_encoder import SparseEncoder
    from bertkit.finetuning.input_sources import input_file
    from bertkit.finetuning.tasks.embed import evaluate_sentence_model
    from bertkit.finetuning.tasks.sparse import evaluate_sparse_model
    from bertkit.runtime import resolve_device

    load, evaluate = (SparseEncoder.load, evaluate_sparse_model) if is_sparse(opts.model) \
        else (Embedder.load, evaluate_sentence_model)
    model = load(opts.model, device=resolve_device(opts.device))
    with input_file(opts.input) as path:
        scores = evaluate(model, path, opts.batch_size, progress=not opts.quiet)
    _print_scores(scores, opts.json)
    return 0


def _evaluate_beir(opts: EvaluateOptions) -> int:
    """BEIR's figures of a sentence model, or of BM25, on a BEIR directory."""
    from bertkit.retrieval.evaluation import evaluate_beir

    if (opts.model is None) == (not opts.bm25):
        raise UserError(f"{opts.input} is a BEIR directory: give --model (a sentence model) or "
                        f"--bm25, one of them")
    embedder = None
    if opts.model is not None:
        from bertkit.embeddings.embedder import Embedder
        from bertkit.runtime import resolve_device

        embedder = Embedder.load(opts.model, device=resolve_device(opts.device))
    figures = evaluate_beir(opts.input, embedder, batch_size=opts.batch_size,
                            progress=not opts.quiet).as_dict()
    _print_scores(figures, opts.json)
    return 0


def _print_scores(scores: dict, as_json: bool) -> None:
    """A model's figures on stdout: one JSON object, or a line each, numbers to 4 decimals."""
    if as_json:
        print(json.dumps(scores))
        return
    for key, value in scores.items():
        print(f"{key:>20}  {value:.4f}" if isinstance(value, float) else f"{key:>20}  {value}")


def _print_lm_report(report: dict) -> None:
    """The figures of `evaluate_pretrained` as a table."""
    def show(value):
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    titles = {"heldout": "held-out masked tokens", "text": "masked tokens and pseudo-perplexity",
              "minimal_pairs": f"minimal pairs (good > bad by "
                               f"{report.get('scored_by', 'pseudo-log-likelihood')}; ties 1/2)",
              "next_token": "next tokens, left to right"}
    print(titles.get(report.get("kind"), ""))
    for key, value in report.items():
        if key in ("kind", "groups", "group_by", "scored_by") or value is None:
            continue
        print(f"{key:>22}  {show(value)}")
    groups = report.get("groups") or {}
    if groups:
        width = max(len(str(g)) for g in groups)
        print(f"\n{report['group_by']:<{width}}  accuracy  pairs  mean difference (nats)")
        for name, g in groups.items():
            print(f"{name:<{width}}  {g['accuracy']:>8.4f}  {g['pairs']:>5}  "
                  f"{g['mean_pll_difference']:>22.4f}")


def run_evaluate(opts: EvaluateOptions, columns: ColumnOverrides, lm) -> int:
    from bertkit.finetuning.predict import TaskModel
    from bertkit.retrieval.beir import is_beir_dir

    if is_beir_dir(opts.input):  # before any other kind: a BEIR directory is only that
        return _evaluate_beir(opts)
    if opts.bm25:
        raise UserError(f"--bm25 ranks the passages of a BEIR directory; {opts.input} is none "
                        f"(corpus.jsonl, queries.jsonl and qrels/)")
    if opts.model is None:
        raise UserError("--model is needed (the model to evaluate)")
    if _is_sentence_model(opts.model, opts.input):
        return _evaluate_sentence_model(opts)
    if _is_pretrained(opts.model):
        from bertkit.pretraining.evaluation import evaluate_pretrained

        from bertkit.finetuning.input_sources import input_file

        with input_file(opts.input) as path:  # "-": standard input
            report = evaluate_pretrained(opts.model, path, lm, batch_size=opts.batch_size,
                                         device=opts.device, progress=not opts.quiet)
        if opts.json:
            print(json.dumps(report))
        else:
            _print_lm_report(report)
        return 0
    runner = TaskModel.load(opts.model, device=opts.device, batch_size=opts.batch_size)
    runner = _with_columns(replace(runner, progress=not opts.quiet), columns)
    scores = runner.evaluate(opts.input)  # a file, or "-": standard input
    if opts.json:
        print(json.dumps(scores, default=float))
        return 0
    for key, value in scores.items():
        if isinstance(value, float):
            print(f"{key:>20}  {value:.4f}")
        elif isinstance(value, int):
            print(f"{key:>20}  {value}")
    per = scores.get("per_type") or scores.get("per_label") or {}
    for name, s in per.items():
        print(f"{name:>20}  precision {s['precision']:.4f}  recall {s['recall']:.4f}  "
              f"f1 {s['f1']:.4f}  support {s['support']}")
    if "confusion_matrix" in scores:
        labels = [str(label)[:12] for label in scores["labels"]]
        print("confusion (rows gold, columns predicted):")
        print(" " * 14 + "".join(f"{label:>13}" for label in labels))
        for label, row in zip(labels, scores["confusion_matrix"]):
            print(f"{label:>13} " + "".join(f"{n:>13}" for n in row))
    return 0


@dataclass(kw_only=True)
class PredictOptions:
    model: Path = field(metadata={"model": True})
    """Directory written by `bertkit finetune`."""
    input: Path
    """Texts: .txt (one per line; pair models: TEXT<TAB>PAIR), JSONL/CSV/TSV; tag: also CoNLL;
    qa: SQuAD JSON or JSONL with question/context. "-": standard input (JSON lines, CoNLL or
    SQuAD JSON by their content, else one text a line)."""
    out: Path | None = None
    """Output file; none: stdout."""
    format: Literal["jsonl", "conll"] = "jsonl"
    """jsonl: one JSON object per input, one shape per task (README); conll (tagging models):
    word TAB predicted tag per line (word TAB gold TAB predicted for tagged input), a blank
    line after each sentence."""
    batch_size: int = 64
    """Examples per forward pass."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    quiet: bool = False
    """No progress on stderr."""


def run_predict(opts: PredictOptions, columns: ColumnOverrides) -> int:
    from bertkit.finetuning.predict import TaskModel, predict_file

    runner = TaskModel.load(opts.model, device=opts.device, batch_size=opts.batch_size)
    runner = _with_columns(replace(runner, progress=not opts.quiet), columns)
    n = predict_file(runner, opts.input, opts.out, opts.format)
    print(f"{n} predictions" + (f" written to {opts.out}" if opts.out else ""), file=sys.stderr)
    return 0


_FINETUNE_DESCRIPTION = ("Fine-tune a BERT directory on a task; the result is a Hugging Face "
                         "directory (transformers loads it) with the task remembered.")


def task_command(task: type) -> Command:
    """`finetune TASK` for a task class: its flags are the files (--model may be `cnn` for the
    tasks the CNN family trains), the task's settings (its fields but those fine-tuning fills
    in), the training settings and, for the tasks the CNN family trains, its settings."""
    from bertkit.finetuning.cnn import CnnBackbone

    doc = " ".join((task.__doc__ or "").split())
    cnn = CnnBackbone.trains(task)
    return Command(f"finetune {task.name}", run_finetune,
                   (CnnFinetuneFiles if cnn else FinetuneFiles, task,
                    "bertkit.finetuning.recipe:FinetuneConfig",
                    *(["bertkit.finetuning.cnn:CnnOptions"] if cnn else [])),
                   omit=("show_progress",), help=doc.split(". ")[0].rstrip("."),
                   description=f"{_FINETUNE_DESCRIPTION} The {task.name} task: {doc}",
                   fixed=(("task", task.name),))


def task_commands() -> tuple[Command, ...]:
    """`finetune TASK` for every task of TASKS (as they are now), each knowing the settings
    of the others (`Command.foreign`), which one --config file held for all before."""
    from bertkit.finetuning.tasks import TASKS

    commands = [task_command(task) for task in TASKS]
    names = [{opt.name for opt in c.flags()} for c in commands]
    every = set().union(*names)
    return tuple(replace(c, foreign=tuple(sorted(every - own)))
                 for c, own in zip(commands, names))


@dataclass(frozen=True)
class TaskCommands(Command):
    """`finetune`: a command per task, `finetune TASK`, whose parsers are made when `finetune`
    is parsed (the tasks import torch), from the TASKS of that moment."""

    def add_flags(self, parser) -> list:
        """A subcommand a task, each with its own flags (added when it is parsed); none of
        finetune's own is required."""
        commands = task_commands()
        owners: dict[str, list[str]] = {}  # a setting -> the tasks that have it
        for command in commands:
            for opt in command.flags():
                owners.setdefault(opt.name, []).append(command.name.split()[-1])
        tasks = parser.add_subparsers(dest="task_name", required=True, metavar="TASK")
        for command in commands:
            name = command.name.split()[-1]
            # the task's command is the one main runs (its values win over ours); the parser
            # (the command line's own class) adds its flags
            sub = tasks.add_parser(name, help=command.help, description=command.description,
                                   command=command)
            for setting in command.foreign:  # another task's flag: said in one line
                flag = "--" + setting.replace("_", "-")
                sub.add_argument(flag, "--no-" + flag[2:], nargs="?", action=_OtherTasks,
                                 dest=f"foreign:{setting}", default=argparse.SUPPRESS,
                                 help=argparse.SUPPRESS, message=(
                                     f"{flag} is a setting of {', '.join(owners[setting])}, "
                                     f"not of {name}"))
        return []


class _OtherTasks(argparse.Action):
    """A flag of other tasks given to this one: one error line, exit 2 (as main's errors)."""

    def __init__(self, option_strings, dest, message: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(2, f"error: {self.message}\n")


FINETUNE = TaskCommands("finetune", run_finetune, (), help="train a task head on labelled data",
                        description=_FINETUNE_DESCRIPTION + " TASK is what the head learns; "
                        "`finetune TASK --help` lists its settings.")

COMMANDS = (
    FINETUNE,
    Command("evaluate", run_evaluate,
            (EvaluateOptions, ColumnOverrides, "bertkit.pretraining.evaluation:LMEvalOptions"),
            help="score a fine-tuned model on a labelled file, or judge a pretrained one",
            description="A fine-tuned model is scored on a labelled file in its task's format. "
                        "A pretrained model is judged as a language model: on a directory "
                        "written by `bertkit prepare`, held-out masked-token accuracy, loss and "
                        "perplexity (as pretraining logs them); on a .jsonl of minimal pairs "
                        "(sentence_good, sentence_bad) or a directory of them, how often the "
                        "good sentence has the higher pseudo-log-likelihood; on a text file, "
                        "masked-token figures and pseudo-perplexity of its lines. On a BEIR "
                        "directory (corpus.jsonl, queries.jsonl, qrels/test.tsv), a sentence "
                        "model's or BM25's (--bm25) nDCG@10, MRR@10, recall@100 and MAP of the "
                        "top 1,000 passages of each query."),
    Command("predict", run_predict, (PredictOptions, ColumnOverrides),
            help="run a fine-tuned model over a file, JSON lines (or CoNLL) out"),
)
