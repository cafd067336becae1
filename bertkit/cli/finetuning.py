"""Commands of fine-tuning: `finetune TASK` (a task head on labelled data), `evaluate` and
`predict` with the directory it writes. `finetune TASK` is one command per task of
`bertkit.finetuning.tasks.TASKS`, read when `finetune` is parsed: its flags are the task
class's settings, the library's FinetuneConfig (how it is trained) and the files.
`evaluate` given a pretrained (not fine-tuned) model judges it as a language model instead
(`bertkit.pretraining.evaluation`)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from bertkit.cli.options import Command, command_line
from bertkit.cli.pretraining import tune_runtime
from bertkit.files import UserError


@dataclass(kw_only=True)
class FinetuneFiles:
    model: Path | None = field(default=None, metadata={"model": True})
    """Pretrained BERT directory (bertkit or Hugging Face); none only with --teacher DIR
    --student-layers N."""
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

    model: Path | None = field(default=None, metadata={"model": ("cnn",)})  # `cnn`: no model
    """Pretrained BERT directory (bertkit or Hugging Face), or `cnn`: a convolutional network
    over the static vectors of --vectors (Kim 2014) instead of BERT; none only with --teacher
    DIR --student-layers N."""


def run_finetune(files: FinetuneFiles, task, cfg, distill=None, cnn=None) -> int:
    """Progress and the baseline beside the result on stderr (a warning when the model does
    not beat it, even with --quiet); the summary, one JSON object, on stdout. `task` is the
    task with the settings given; `distill` the teacher's settings, for the tasks that learn
    from one; `cnn` the CNN family's, for the tasks it trains."""
    from bertkit.finetuning.baselines import baseline_report
    from bertkit.finetuning.cnn import CnnBackbone
    from bertkit.finetuning.recipe import finetune

    tune_runtime(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    cfg = replace(cfg, show_progress=not files.quiet)
    teacher, student, model = _teacher(files, task, cfg, distill)
    if cnn is None and str(files.model) == "cnn":
        raise UserError(f"--model cnn trains a label or a number per text (classify, pair, "
                        f"regress), not the {task.name} task")
    if str(files.model) == "cnn" and (cfg.layer_mix or cfg.train_layers is not None):
        raise UserError(f"--{'layer-mix' if cfg.layer_mix else 'train-layers'} chooses among a "
                        f"transformer's layers; --model cnn has none")
    backbone = CnnBackbone.load(cnn) if str(files.model) == "cnn" else None
    if backbone is None and cnn is not None and cnn.vectors is not None:
        raise UserError("--vectors is read with --model cnn only")
    backbone = backbone or student
    family = {"backbone": backbone} if backbone else {}  # BERT: the recipe's default
    family_options = [o for o in (distill, cnn) if o is not None]
    model = cnn.vectors if str(files.model) == "cnn" else model
    result = finetune(task, model, files.train, files.dev, files.out, cfg, teacher=teacher,
                      command_line=lambda resolved, settled: command_line(
                          task_command(type(settled)),
                          [files, settled, resolved, *family_options]),
                      **family)
    if result.stopped_by == "interrupted":  # the loop said: checkpoint saved, go on with --resume
        return 130
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun rank 0 reports the run
        return 0
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


def _teacher(files: FinetuneFiles, task, cfg, distill):
    """(the teacher, the student's backbone, the model fine-tuned) as --teacher,
    --student-layers and --model say: (None, None, --model) without a teacher; a model given
    twice or not at all refused. A student of --model whose width differs from the
    teacher's learns through a projection (`Teacher.student_of`)."""
    layers = distill is not None and distill.student_layers is not None
    if layers and files.model is not None:
        raise UserError("--student-layers makes the student of the teacher's layers: give no "
                        "--model with it")
    if files.model is None and not layers:
        raise UserError("--model is required" + (" (or --teacher DIR --student-layers N)"
                                                 if distill is not None else ""))
    if distill is None or not distill.active:
        return None, None, files.model
    from bertkit.finetuning.teacher import Teacher

    teacher = Teacher.load(distill, task)
    if layers:
        return teacher, teacher.student(cfg.train_layers, cfg.layer_mix), teacher.path
    if str(files.model) == "cnn":  # the CNN family's own backbone
        return teacher, None, files.model
    return teacher, teacher.student_of(files.model, cfg.train_layers, cfg.layer_mix), files.model


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
    model: list[Path] = field(default_factory=list, metadata={"model": True})
    """Directory written by `bertkit finetune`, a pretrained model (judged as a language
    model), or a sentence model. On a BEIR directory, repeatable: sentence models and sparse
    encoders, fused by --fusion (with --bm25 or not); none: --bm25 alone."""
    input: Path
    """Fine-tuned model: labelled file in the task's format. Pretrained model: a directory
    written by `bertkit prepare` (held-out masked tokens), a .jsonl of minimal pairs or a
    directory of them (BLiMP's layout), or a text file (one text a line). Sentence model or
    --bm25: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/test.tsv). "-": standard
    input."""
    bm25: bool = False
    """On a BEIR directory: rank by BM25 (bm25s), alone or fused with the models."""
    fusion: Literal["rrf", "sum"] | None = None
    """On a BEIR directory, how several retrievers combine: rrf (reciprocal-rank fusion, k
    60) or sum (a weighted sum of min-max normalised scores); none: one retriever."""
    weights: list[float] | None = None
    """With --fusion sum: a weight per retriever, in the order of --model, then --bm25; none: 1
    each."""
    rerank: Path | None = field(default=None, metadata={"model": True})
    """On a BEIR directory: a reranker from `finetune rerank` reorders each query's first
    --rerank-top passages, the rest staying below in their order."""
    rerank_top: int = 100
    """Passages reranked per query."""
    json: bool = False
    """Print one JSON object."""
    batch_size: int = 64
    """Examples per forward pass."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    long_inputs: Literal["cut", "windows"] = "cut"
    """An input longer than the model's length: cut to it, or run in windows half a window
    apart. A fine-tuned classify, pair or regress model predicts from the mean of the windows'
    logits, a tag or spans model labels each word from the window where it is most central (a
    qa model always windows long contexts); a pretrained model on a text file scores each
    piece in the window where it is most central."""
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


def _evaluate_sentence_model(opts: EvaluateOptions, model_path: Path) -> int:
    """STS figures (or retrieval figures) of a sentence model on a labelled file; a sparse
    model's retrieval figures over dot products, with its vectors' density."""
    from bertkit.cli.embeddings import is_sparse
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.sparse_encoder import SparseEncoder
    from bertkit.finetuning.input_sources import input_file
    from bertkit.finetuning.tasks.embed import evaluate_sentence_model
    from bertkit.finetuning.tasks.sparse import evaluate_sparse_model
    from bertkit.runtime import resolve_device

    load, evaluate = (SparseEncoder.load, evaluate_sparse_model) if is_sparse(model_path) \
        else (Embedder.load, evaluate_sentence_model)
    model = load(model_path, device=resolve_device(opts.device))
    with input_file(opts.input) as path:
        scores = evaluate(model, path, opts.batch_size, progress=not opts.quiet)
    _print_scores(scores, opts.json)
    return 0


def _evaluate_beir(opts: EvaluateOptions) -> int:
    """BEIR's figures of sentence models, sparse encoders and/or BM25, fused and reranked, on
    a BEIR directory."""
    from bertkit.retrieval.evaluation import evaluate_beir
    from bertkit.retrieval.fusion import fusion_named
    from bertkit.retrieval.reranking import load_reranker
    from bertkit.retrieval.retrievers import Bm25Retriever, open_model
    from bertkit.runtime import resolve_device

    count = len(opts.model) + opts.bm25
    if not count:
        raise UserError(f"{opts.input} is a BEIR directory: give --model (a sentence model or "
                        f"a sparse encoder), --bm25, or several with --fusion")
    if count > 1 and opts.fusion is None:
        raise UserError(f"{count} retrievers: give --fusion (rrf or sum) to combine them")
    if opts.weights is not None and opts.fusion is None:
        raise UserError("--weights are the weighted sum's: give --fusion sum")
    if opts.rerank_top < 1:
        raise UserError(f"--rerank-top must be at least 1, got {opts.rerank_top}")
    fusion = None if opts.fusion is None else fusion_named(opts.fusion, opts.weights, count)
    device = resolve_device(opts.device)
    reranker = None if opts.rerank is None else load_reranker(opts.rerank, device,
                                                                opts.batch_size,
                                                                progress=not opts.quiet)
    retrievers = [open_model(m, device) for m in opts.model] + [Bm25Retriever()] * opts.bm25
    figures = evaluate_beir(opts.input, retrievers=retrievers, fusion=fusion, reranker=reranker,
                            rerank_top=opts.rerank_top, batch_size=opts.batch_size,
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

    windows = opts.long_inputs == "windows"
    if windows and (is_beir_dir(opts.input) or (len(opts.model) == 1 and _is_sentence_model(
            opts.model[0], opts.input))):
        raise UserError("--long-inputs windows reads a fine-tuned model's inputs, or text by a "
                        "pretrained model; a sentence model's or a BEIR directory's are cut")
    if is_beir_dir(opts.input):  # before any other kind: a BEIR directory is only that
        return _evaluate_beir(opts)
    beir_only = [flag for flag, given in (("--bm25", opts.bm25), ("--fusion", opts.fusion),
                                          ("--weights", opts.weights), ("--rerank", opts.rerank))
                 if given]
    if beir_only:
        raise UserError(f"{beir_only[0]} ranks the passages of a BEIR directory; {opts.input} "
                        f"is none (corpus.jsonl, queries.jsonl and qrels/)")
    if len(opts.model) != 1:
        raise UserError("--model is needed (the model to evaluate)" if not opts.model
                        else "several --model are fused on a BEIR directory only; give one")
    model = opts.model[0]
    if _is_sentence_model(model, opts.input):
        return _evaluate_sentence_model(opts, model)
    if _is_pretrained(model):
        from bertkit.pretraining.evaluation import evaluate_pretrained

        from bertkit.finetuning.input_sources import input_file

        with input_file(opts.input) as path:  # "-": standard input
            report = evaluate_pretrained(model, path, lm, batch_size=opts.batch_size,
                                         device=opts.device, progress=not opts.quiet,
                                         windows=windows)
        if opts.json:
            print(json.dumps(report))
        else:
            _print_lm_report(report)
        return 0
    runner = TaskModel.load(model, device=opts.device, batch_size=opts.batch_size)
    runner = _with_columns(replace(runner, progress=not opts.quiet, windows=windows), columns)
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
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """fp32 (exact) or bf16 autocast (about 2x faster on CPUs with AVX512-BF16 or AMX); auto:
    bf16 on a GPU that runs it natively, else fp32."""
    long_inputs: Literal["cut", "windows"] = "cut"
    """An input longer than the model's --max-length: cut to it, or run in windows half a
    window apart; classify, pair and regress then predict from the mean of the windows'
    logits (a pair's second text windowed, its first kept whole), tag and spans label each
    word from the window where it is most central. A qa model always windows long contexts
    (--stride); the other tasks refuse windows."""
    quiet: bool = False
    """No progress on stderr."""


def run_predict(opts: PredictOptions, columns: ColumnOverrides) -> int:
    from bertkit.finetuning.predict import TaskModel, predict_file
    from bertkit.runtime import resolve_device, warned_precision

    device = resolve_device(opts.device)
    runner = TaskModel.load(opts.model, device=device, batch_size=opts.batch_size,
                            precision=warned_precision(opts.precision, device))
    runner = _with_columns(replace(runner, progress=not opts.quiet,
                                   windows=opts.long_inputs == "windows"), columns)
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
    from bertkit.finetuning.teacher import teaches

    doc = " ".join((task.__doc__ or "").split())
    cnn = CnnBackbone.trains(task)
    return Command(f"finetune {task.name}", run_finetune,
                   (CnnFinetuneFiles if cnn else FinetuneFiles, task,
                    "bertkit.finetuning.recipe:FinetuneConfig",
                    *(["bertkit.finetuning.distillation:Distillation"] if teaches(task) else []),
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
                        "directory (corpus.jsonl, queries.jsonl, qrels/test.tsv), the nDCG@10, "
                        "MRR@10, recall@100 and MAP of the top 1,000 passages of each query by "
                        "a sentence model, a sparse encoder or BM25 (--bm25), or several fused "
                        "(--fusion), the first --rerank-top reranked by --rerank."),
    Command("predict", run_predict, (PredictOptions, ColumnOverrides),
            help="run a fine-tuned model over a file, JSON lines (or CoNLL) out"),
)
