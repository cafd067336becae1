"""The `bertkit` command: the commands of each concept, their parsers generated from their
options dataclasses (bertkit.cli.options), and `main`.

Nothing in the library imports this package. Library code raises `UserError` for bad input;
`main` prints its one line to stderr and exits 2, with no traceback. So does an error of the
machine in any command (a full disk, a read-only or forbidden path, a directory where a file
is written, memory exhausted: `bertkit.files.environment_error`) and a --device this machine
lacks, checked before any work starts. A model given by Hugging Face Hub name is fetched after
those checks, before the command runs (`Command.fetched`).

Start-up: importing torch takes seconds, so the command modules import the library inside each
command, and a command's flags are generated only when that command is parsed or its help
shown (building them imports the module of its options class): `bertkit --help` and
`bertkit tokenize` stay instant.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import hashlib
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

from bertkit import __version__, signals
from bertkit.cli import (embeddings, export, finetuning, model, pretraining, retrieval, road,
                         senses, serve, text)
from bertkit.cli.options import Command
from bertkit.files import SaidElsewhere, UserError, environment_error
from bertkit.runlock import RunLock

COMMANDS: tuple[Command, ...] = (*text.COMMANDS, *model.COMMANDS, *pretraining.COMMANDS,
                                 *finetuning.COMMANDS, *embeddings.COMMANDS, *retrieval.COMMANDS,
                                 *senses.COMMANDS,
                                 *road.COMMANDS, *export.COMMANDS, *serve.COMMANDS)

GROUPS = {
    "tokenizer": "train a WordPiece or Unigram vocabulary, or extend a model's",
    "plot": "pictures: word senses, attention, training runs side by side",
    "wsd": "word-sense disambiguation with sense embeddings: split, train, predict, evaluate",
    "static": "static word vectors (word2vec: skip-gram or CBOW): train, neighbors, "
              "similarity, contexts, analogy, plot",
    "export": "a model in another runtime's format: ONNX",
    "road": "the systems before BERT, runnable: entity embeddings, seq2seq with attention, ELMo",
}


class _Parser(argparse.ArgumentParser):
    """A parser whose command's flags are added on first use (see the module docstring)."""

    def __init__(self, *args, command: Command | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._command = command
        self._required: list[argparse.Action] = []

    def _complete(self) -> None:
        if self._command is not None:
            command, self._command = self._command, None
            self._required = command.add_flags(self)
            self.set_defaults(command=command, command_parser=self)

    def parse_known_args(self, args=None, namespace=None):
        self._complete()
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):
        # An unknown flag is the command's error, said with its usage: argparse would say it
        # with the top-level usage, which shows no flag at all.
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            parser = getattr(parsed, "command_parser", self)
            parser.error(f"unrecognized arguments: {' '.join(extra)}{parser.nearest(extra)}")
        return parsed

    def nearest(self, extra: list[str]) -> str:
        """' (did you mean --normalize?)' for the first unknown flag near one of ours."""
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        for word in extra:
            if word.startswith("--"):
                close = difflib.get_close_matches(word.partition("=")[0], flags, n=1, cutoff=0.75)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""

    def error(self, message: str):
        extra = message.partition("unrecognized arguments: ")[2].split()
        if extra and all(Path(a).exists() for a in extra):  # `--data dir/*.txt`, unquoted
            message += (" (several files where one is taken: quote a glob, 'dir/*.txt', for "
                        "bertkit to expand it)")
        super().error(message)

    def _formatted(self, format) -> str:
        # the required flags without brackets, as the user must give them; argparse itself
        # must not require them, since --config may give them instead
        self._complete()
        for action in self._required:
            action.required = True
        try:
            return format()
        finally:
            for action in self._required:
                action.required = False

    def format_usage(self) -> str:
        return self._formatted(super().format_usage)

    def format_help(self) -> str:
        return self._formatted(super().format_help)


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


def _say(line: str) -> None:
    # One write per line: stderr writes through, so print's two writes (text, then newline)
    # interleave when several ranks share one terminal or pipe.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _say_error(line: str) -> None:
    """`line`, unless a rank of this node said it first (under bertkit-torchrun, which names a
    folder for the lines said: every rank reads the same command line and fails alike)."""
    folder = os.environ.get(SaidElsewhere.lines)
    if folder:
        # a restart of the workers fails again and says so again
        said = f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '')}\n{line}"
        try:
            os.close(os.open(os.path.join(folder, hashlib.sha256(said.encode()).hexdigest()),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        except OSError:  # no folder to tell the others: say it, twice rather than never
            pass
    _say(line)


def _warning_line(message, category, filename, lineno, file=None, line=None):
    _say(f"warning: {message}")


def check_device(name: str | None) -> None:
    """A --device the machine has, or a one-line UserError (bertkit.runtime.parse_device)."""
    if name is None:
        return
    from bertkit.runtime import parse_device  # imports torch: not for `bertkit --help`

    parse_device(name)


def resolve_auto_device(options):
    """The options with --device auto made the device this machine has (CUDA, else CPU)."""
    if getattr(options, "device", None) != "auto":
        return options
    from bertkit.runtime import resolve_device

    return dataclasses.replace(options, device=str(resolve_device("auto")))


def _terminated(signum, frame):
    """SIGTERM as an exit that unwinds: temporary files are removed and locks released."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Command = args.command
    previous = None
    if threading.current_thread() is threading.main_thread():
        # watched: SIGTERM stops a process stuck in native code too (bertkit.signals)
        previous = signals.handle(signal.SIGTERM, _terminated)
    with warnings.catch_warnings():  # warnings as one line each, for this call only
        warnings.showwarning = _warning_line
        options = None
        try:
            options, revision = command.read_with_revision(args)
            command.check_paths(options)
            options = [resolve_auto_device(o) for o in options]
            for device in command.values(options, "device"):
                check_device(device)
            options = command.fetched(options, revision)  # Hub names: the network, last
            with contextlib.ExitStack() as locks:  # one process writes an output directory
                for directory in command.output_dirs(options):
                    locks.enter_context(RunLock(directory))
                return command.run(*options) or 0
        except SaidElsewhere as e:  # its line would be a second one for one failure
            return e.status
        except UserError as e:
            _say_error(f"error: {e}")
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader of stdout has gone (`| head`): stop, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # exit's flush too
            return 141  # 128 + SIGPIPE, what the shell says of cat
        except Exception as e:  # noqa: BLE001 - re-raised unless it is the machine's
            # A full disk, a read-only directory, no memory. An error that names no file
            # (a write to an open file) is about the command's output.
            outputs = command.output_paths(options) if options is not None else []
            error = environment_error(e, outputs[0] if len(outputs) == 1 else None)
            if error is None:
                raise
            _say_error(f"error: {error}")
            return 2
        finally:
            if previous is not None:
                signals.restore(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
