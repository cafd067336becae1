"""Command-line flags generated from options dataclasses, and `--config FILE.toml` under them.

A command's options are typed once, as dataclass fields. From each field come:

- the flag: `--name-with-dashes`, or a positional argument with `metadata={"positional": True}`;
- its type, from the annotation: int, float, str, Path, bool (`--x` / `--no-x`), `X | None`
  (the word `none` gives None for numbers and choices), `list[X]` and `tuple[X, ...]`
  (several values; the flag given twice keeps both), `tuple[X, X]` (exactly two),
  `Literal[...]` or `field(metadata={"choices": ...})` (the allowed values, or "module:NAME"
  naming a library sequence of them, imported when the command's flags are built);
- its default (shown by `--help`); a field without one is required;
- its help: the string literal right under the field, read from the class source with `ast`
  (no help text when the source is not available, nothing else changes);
- a time budget in minutes, `metadata={"duration": True}` on a float: the flag and the
  --config key also take "30s", "10m", "1.5h", "1h30m" (`bertkit.config.parse_minutes`), a
  bare number is minutes; the command gets minutes, and a value that is no duration is a
  one-line UserError from `Command.read`, not argparse's usage;
- its name, the field's unless `metadata={"flag": "other_name"}` spells the flag and the
  --config key otherwise; `metadata={"flag": False}` gives the field no flag (a value the
  program fills in, such as a fine-tuned task's labels).
- for a path that takes a model, `metadata={"model": True}` (or a tuple of the words it takes
  that are no model, `("cnn",)`): a command with one gets `--revision` (the field of
  `bertkit.model.fetch.Revision`, one for all its model options), and `Command.fetched`
  fetches each Hugging Face Hub name given to them at that revision, handing the command the
  snapshot directory in the cache (`bertkit.model.fetch.resolve_model`);
- for a path, whether the command writes it: a field named `out` or `*_out`, or with
  `metadata={"output": True}`; every other path is an input. `Command.check_paths` (called by
  `main` before the command runs) refuses an output that is one of the inputs. An output
  directory says so, `metadata={"output": "directory"}`, and `main` locks it while the command
  runs (`Command.output_dirs`).

A field whose type is a dataclass (PretrainOptions.train: TrainConfig) adds the flags of its
fields, built from that class's own defaults (what --help shows is what runs, not a default
instance of the outer class). A command may take several dataclasses (the command's files and
the library's settings); their flags share one namespace. Annotations are resolved in the
module of each class: define options classes at module level.

`--config FILE.toml` holds the same settings: keys are the field names (a table for a nested
dataclass; a table of paths and weights for a `metadata={"weighted": True}` path, such as
pretrain's mixture of corpora, a weight or `{weight = W, text_field = "FIELD"}` each); flags
given on the command line override it. An unknown key or a value of the wrong type is a
one-line UserError naming the file and the key.

Each field read as an `Option`: `bertkit.cli.fields`; the --config file: `bertkit.cli.config_file`.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bertkit.cli.config_file import (ABSENT, build_options, get_setting, merge_file, minutes,
                                     put_setting, setting_table)
from bertkit.cli.fields import Option, Switch, converter, options_of, show
from bertkit.files import UserError, check_not_input

_NEGATIVE = re.compile(r"^-\.?\d")


@dataclass(frozen=True)
class Command:
    """A command: its name, its options dataclasses and the function that runs them.

    `options` holds classes, or "module:Class" strings for classes whose module imports torch
    (seconds) so that building the parser of another command does not pay for it.
    `run(*instances)` gets one instance per options class and returns the exit status.
    """

    name: str
    run: Callable[..., int]
    options: tuple
    help: str
    description: str | None = None
    omit: tuple[str, ...] = ()
    """Fields (dotted for nested ones) that get no flag; they keep their default."""
    fixed: tuple[tuple[str, Any], ...] = ()
    """(key, value) that the command's name fixes (`finetune tag`: task = "tag"): a --config
    file may hold the key with that value (as one written before the value was part of the
    name), any other value is refused."""
    foreign: tuple[str, ...] = ()
    """--config keys of sibling commands (another task's settings, which one file held for
    every task before each had its own flags): skipped with a warning, not refused."""

    def classes(self) -> list[type]:
        found = []
        for source in self.options:
            if isinstance(source, str):
                module, _, name = source.partition(":")
                source = getattr(importlib.import_module(module), name)
            found.append(source)
        return found

    def flags(self) -> list[Option]:
        found: list[Option] = []
        for i, cls in enumerate(self.classes()):
            found += options_of(cls, i, (), self.omit)
        seen: dict[str, Option] = {}
        for opt in found:
            if opt.name == "config" or opt.flag in seen:
                raise ValueError(f"{self.name}: two options are spelled {opt.flag}")
            seen[opt.flag] = opt
        return found

    def add_flags(self, parser: argparse.ArgumentParser) -> list[argparse.Action]:
        """The command's flags added to `parser`; returns the actions of the required ones
        (optional to argparse, since --config may give them, but required of the user)."""
        required = []
        parser.add_argument("--config", metavar="FILE.toml",
                            help="settings from a TOML file (keys: the option names with "
                                 "underscores, a [table] for nested ones); flags override it")
        flags = self.flags()
        flags += self._revision_flags(flags)
        if any(opt.duration for opt in flags):
            # "--max-time -5m" a value, refused in one line as no duration; argparse before
            # 3.13 takes only "-5" and "-.5" for values and "-5m" for an unknown flag
            parser._negative_number_matcher = _NEGATIVE
        groups: dict[str | None, argparse._ActionsContainer] = {None: parser}
        for opt in flags:
            if opt.group not in groups:
                groups[opt.group] = parser.add_argument_group(opt.group)
            target = groups[opt.group]
            help = opt.help
            if opt.duration:
                help += " Also with units: 30s, 10m, 1.5h, 1h30m; a bare number is minutes."
            if opt.model is not None:
                help += (" Or a model's name on the Hugging Face Hub (ORG/NAME), fetched into "
                         "its cache on first use (--revision).")
            if opt.default is dataclasses.MISSING:
                help += " (required)"
            elif not opt.positional:
                default = opt.none_word if opt.default is None else show(opt.default)
                help += f" (default: {default})"
            help = help.strip().replace("%", "%%")
            metavar = opt.metavar or (("{" + ",".join(map(str, opt.choices)) + "}")
                                      if opt.choices else
                                      "DURATION" if opt.duration else opt.name.upper())
            if opt.kind is bool and opt.nargs is None:
                target.add_argument(opt.flag, "--no-" + opt.flag[2:], dest=opt.dest,
                                    action=Switch, default=argparse.SUPPRESS, help=help)
            elif opt.positional:  # optional here: it may come from --config
                target.add_argument(opt.dest, nargs="*" if opt.nargs else "?", default=None,
                                    type=converter(opt), metavar=metavar, help=help)
            else:  # a list flag given twice keeps both: --model A --model B is --model A B
                action = target.add_argument(
                    opt.flag, dest=opt.dest, nargs=opt.nargs, type=converter(opt),
                    default=argparse.SUPPRESS, metavar=metavar, help=help,
                    **({"action": "extend"} if opt.nargs == "+" else {}))
                if opt.default is dataclasses.MISSING:
                    required.append(action)
        return required

    def read(self, args: argparse.Namespace) -> list:
        """One instance per options class: defaults, then --config, then the flags given. A
        Hugging Face Hub name given to a model option is a str in them (a path is a Path)."""
        return self.read_with_revision(args)[0]

    def read_with_revision(self, args: argparse.Namespace) -> tuple[list, str | None]:
        """`read`'s instances and the --revision given (None where the command takes no
        model, or none was given), for `fetched`."""
        flags = self.flags()
        revision = self._revision_flags(flags)
        flags += revision
        settings: list[dict] = [{} for _ in range(len(self.options) + bool(revision))]
        config = getattr(args, "config", None)
        if config is not None:
            merge_file(settings, flags, Path(config), dict(self.fixed), self.foreign)
        for opt in flags:  # a nested dataclass is built from its own defaults, given or not
            setting_table(settings[opt.source], opt.path[:-1])
        for opt in flags:
            value = getattr(args, opt.dest, ABSENT)
            if value is ABSENT or (opt.positional and value in (None, [])):
                continue
            if opt.duration and isinstance(value, str):
                value = minutes(value, opt.flag)
            put_setting(settings[opt.source], opt.path,
                        tuple(value) if opt.container is tuple else value)
        where = f" (or set it in {config})" if config else ""
        for opt in flags:
            missing = get_setting(settings[opt.source], opt.path) is ABSENT
            if opt.default is dataclasses.MISSING and missing:
                raise UserError(f"missing {opt.flag}{where}")
        classes = self.classes() + [_revision_class()] if revision else self.classes()
        instances = []
        for cls, values in zip(classes, settings):
            try:
                instances.append(build_options(cls, values))
            except UserError:
                raise
            except (ValueError, TypeError) as e:  # a dataclass's own validation
                raise UserError(f"{config}: {e}" if config else str(e)) from None
        return (instances[:-1], instances[-1].revision) if revision else (instances, None)

    def fetched(self, instances: list, revision: str | None) -> list:
        """The instances with each Hugging Face Hub name given to a model option fetched at
        `revision` and replaced by its snapshot directory in the cache (`main` asks, after
        the checks of paths and devices, before the command runs): a name or revision the
        Hub lacks is refused before any work starts."""
        flags = self.flags()
        if not any(opt.model is not None for opt in flags):
            return instances
        return _fetched(flags, instances, revision)

    def _revision_flags(self, flags: list[Option]) -> list[Option]:
        """[--revision] where the command takes a model (an option marked `model`), else []:
        one flag however many models, from one field (`bertkit.model.fetch.Revision`)."""
        if not any(opt.model is not None for opt in flags):
            return []
        return options_of(_revision_class(), len(self.options), (), ())


    def output_dirs(self, instances: list) -> list[Path]:
        """The output directories given (fields with `metadata={"output": "directory"}`)."""
        found = []
        for opt in self.flags():
            if opt.directory:
                value = instances[opt.source]
                for name in opt.path:
                    value = getattr(value, name, None)
                if value is not None:
                    found.append(Path(value))
        return found

    def output_paths(self, instances: list) -> list[Path]:
        """The paths the command writes (files and directories), as given."""
        found = []
        for opt in self.flags():
            if opt.output:
                value = instances[opt.source]
                for name in opt.path:
                    value = getattr(value, name, None)
                found += [Path(v) for v in (value if isinstance(value, (list, tuple))
                                            else [value]) if v is not None]
        return found

    def values(self, instances: list, leaf: str) -> list:
        """The values given to every field named `leaf`, at any depth (e.g. each `device`)."""
        found = []
        for opt in self.flags():
            if opt.path[-1] == leaf:
                value = instances[opt.source]
                for name in opt.path:
                    value = getattr(value, name, None)
                found.append(value)
        return found

    def check_paths(self, instances: list) -> None:
        """Refuse, before anything runs, an output path that is one of the command's inputs
        (the same file or directory however spelled, or a directory that holds one)."""
        inputs: list[tuple[str, Path]] = []
        outputs: list[tuple[str, Path]] = []
        for opt in self.flags():
            if opt.kind is not Path:
                continue
            value = instances[opt.source]
            for name in opt.path:
                value = getattr(value, name, None)
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if v is not None:
                    (outputs if opt.output else inputs).append((opt.flag, Path(v)))
        for i, (flag, out) in enumerate(outputs):
            for other, path in outputs[i + 1:]:
                if out.resolve() == path.resolve():
                    raise UserError(f"{out}: {flag} and {other} name the same path; the second "
                                    f"would overwrite the first")
            others = inputs + [o for j, o in enumerate(outputs) if j != i]
            check_not_input(out, [p for _, p in others], what=flag,
                            names=[name for name, _ in others])


def _revision_class() -> type:
    from bertkit.model.fetch import Revision  # the library's, where resolve_model reads it

    return Revision


def _fetched(flags: list[Option], instances: list, revision: str | None) -> list:
    """`Command.fetched`. A value of a model option that reads as a name was given as one
    (`model_value` made a path that would read so absolute), whether it is still the str it
    read or a dataclass' __post_init__ has made it a Path."""
    from bertkit.model.fetch import is_hub_name, resolve_model

    instances, named = list(instances), False
    for opt in flags:
        if opt.model is None:
            continue
        value = _value(instances[opt.source], opt.path)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        names = [v is not None and str(v) not in opt.model and is_hub_name(v) for v in values]
        if not any(names):
            continue
        named = True
        values = [resolve_model(v, revision) if name else v for v, name in zip(values, names)]
        new = opt.container(values) if opt.container else values[0]
        instances[opt.source] = _replaced(instances[opt.source], opt.path, new)
    if revision is not None and not named:
        warnings.warn(f"--revision {revision}: no model here is given by Hugging Face Hub "
                      f"name, so it has nothing to choose")
    return instances


def _value(instance, path: tuple[str, ...]):
    for name in path:
        instance = getattr(instance, name)
    return instance


def _replaced(instance, path: tuple[str, ...], value):
    """`instance` with the field at `path` (nested dataclasses) set to `value`."""
    inner = value if len(path) == 1 else _replaced(getattr(instance, path[0]), path[1:], value)
    return dataclasses.replace(instance, **{path[0]: inner})


def command_line(command: Command, instances: list, program: str = "bertkit") -> str:
    """The shell line that runs `command` with these options instances (one per class of
    `command.options`): every flag spelled out with its value, defaults included, so that it
    runs the same settings again whatever the defaults become. A None that the command line
    cannot say (a path or free string) is left out: its default is None."""
    positional, flags = [], []
    for opt in command.flags():
        value = instances[opt.source]
        for name in opt.path:
            value = getattr(value, name)
        if opt.positional:
            positional += [str(v) for v in value] if opt.nargs else [str(value)]
        elif opt.kind is bool and opt.nargs is None:
            if value is not None:  # None (an optional switch's "decide for me") has no flag
                flags.append(opt.flag if value else "--no-" + opt.flag[2:])
        elif value is None:
            if opt.optional and (opt.kind in (int, float) or opt.choices):
                flags += [opt.flag, opt.none_word]
        elif opt.nargs is not None:
            if value:
                flags += [opt.flag, *(_spelled(v) for v in value)]
        else:
            flags += [opt.flag, _spelled(value)]
    return shlex.join([program, *command.name.split(), *positional, *flags])


def _spelled(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


__all__ = ["Command", "command_line"]
