"""The `bertkit` command: the commands of each concept, their parsers generated from their
options dataclasses (bertkit.cli.options), and `main`.

Nothing in the library imports this package. Library code raises `UserError` for bad input;
`main` prints its one line to stderr and exits 2, with no traceback.

Start-up: importing torch takes seconds, so the command modules import the library inside each
command, and a command's flags are generated only when that command is parsed or its help
shown (building them imports the module of its options class): `bertkit --help` and
`bertkit tokenize` stay instant.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import warnings

from bertkit import __version__
from bertkit.cli import embeddings, finetuning, model, pretraining, road, senses, text
from bertkit.cli.options import Command
from bertkit.files import UserError
from bertkit.runlock import RunLock

COMMANDS: tuple[Command, ...] = (*text.COMMANDS, *model.COMMANDS, *pretraining.COMMANDS,
                                 *finetuning.COMMANDS, *embeddings.COMMANDS, *senses.COMMANDS,
                                 *road.COMMANDS)

GROUPS = {
    "tokenizer": "train a WordPiece or Unigram vocabulary",
    "plot": "pictures: word senses, attention",
    "wsd": "word-sense disambiguation with sense embeddings: split, train, predict, evaluate",
    "static": "static word vectors (word2vec: skip-gram or CBOW): train, neighbors, "
              "similarity, contexts, analogy, plot",
    "road": "the source documents' earlier systems beside BERT: entity embeddings, seq2seq "
            "with attention",
}


class _Parser(argparse.ArgumentParser):
    """A parser whose command's flags are added on first use (see the module docstring)."""

    def __init__(self, *args, command: Command | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._command = command

    def _complete(self) -> None:
        if self._command is not None:
            command, self._command = self._command, None
            command.add_flags(self)
            self.set_defaults(command=command)

    def parse_known_args(self, args=None, namespace=None):
        self._complete()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._complete()
        return super().format_usage()

    def format_help(self) -> str:
        self._complete()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bertkit",
                     description="Train, inspect and fine-tune BERT-style masked language models.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    top = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for command in COMMANDS:
        group, _, name = command.name.rpartition(" ")
        if group and group not in groups:
            groups[group] = top.add_parser(group, help=GROUPS[group]).add_subparsers(
                dest=f"{group}_action", required=True, metavar="ACTION")
        (groups[group] if group else top).add_parser(
            name, help=command.help, description=command.description or command.help,
            command=command)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def check_device(name: str | None) -> None:
    """A --device the machine has, or a one-line UserError."""
    if name is None:
        return
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"--device {name}: not a device (cpu, cuda, cuda:1, mps, ...)") from None
    backend = getattr(torch, device.type, None)
    if device.type != "cpu" and not (backend is not None and backend.is_available()):
        raise UserError(f"--device {name}: no {device.type} device available")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise UserError(f"--device {name}: there are {torch.cuda.device_count()} cuda devices")


def _terminated(signum, frame):
    """SIGTERM as an exit that unwinds: temporary files are removed and locks released."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Command = args.command
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    with warnings.catch_warnings():  # warnings as one line each, for this call only
        warnings.showwarning = _warning_line
        try:
            options = command.read(args)
            command.check_paths(options)
            for o in options:
                check_device(getattr(o, "device", None))
            with contextlib.ExitStack() as locks:  # one process writes an output directory
                for directory in command.output_dirs(options):
                    locks.enter_context(RunLock(directory))
                return command.run(*options) or 0
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
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
