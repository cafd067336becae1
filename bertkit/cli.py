"""The `bertkit` command: argument parsing mapped onto the library's typed functions.

Nothing imports this module. Library code raises `UserError` for bad input; `main` prints its
one line to stderr and exits 2, with no traceback. Library imports happen inside each command
so that `bertkit --help` is instant.
"""
from __future__ import annotations

import argparse
import sys
import warnings

from .files import UserError


def _warning_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Foundation: tokenizer, info, init, tokenize, fill-mask
# ---------------------------------------------------------------------------------------------

def add_foundation_commands(sub) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Pretraining: prepare, pretrain, demo
# ---------------------------------------------------------------------------------------------

def add_pretraining_commands(sub) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Fine-tuning: finetune, evaluate, predict
# ---------------------------------------------------------------------------------------------

def add_finetuning_commands(sub) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Embeddings and analysis: embed, anisotropy, wsd, static, plot
# ---------------------------------------------------------------------------------------------

def add_embedding_commands(sub) -> None:
    pass


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
