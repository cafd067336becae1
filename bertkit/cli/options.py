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
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import re
import shlex
import sys
import textwrap
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Union, get_args, get_origin

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib is new in 3.11; tomli is the same parser
    import tomli as tomllib

from bertkit.config import DURATION_FORMS, ConfigError, parse_minutes
from bertkit.files import UserError, check_not_input

_ABSENT = object()
_NEGATIVE = re.compile(r"^-\.?\d")
_PLURALS = {int: "integers", float: "numbers", str: "strings", Path: "paths",
            bool: "true/false values"}
_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", Path: "a path",
               bool: "true or false"}


def field_docs(cls: type) -> dict[str, str]:
    """The string literal right under each field of `cls` (and of the dataclasses it derives
    from), as one line; {} for a class whose source cannot be read."""
    return dict(_field_docs(cls))


@functools.cache  # reading a class's source parses its whole module: a second a command line
def _field_docs(cls: type) -> dict[str, str]:
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        if f.metadata.get("doc"):  # a field made by code, which no source shows
            docs.setdefault(f.name, f.metadata["doc"])
    return docs


@dataclass(frozen=True)
class Option:
    """One leaf field of a command's options and how the command line spells it."""

    source: int
    """Which of the command's dataclasses it belongs to."""
    path: tuple[str, ...]
    """Field names from that dataclass down to the leaf, e.g. ("train", "lr")."""
    kind: type
    """int, float, str, Path or bool: the type of one value."""
    optional: bool
    """None is allowed."""
    choices: tuple | None
    """The allowed values, if limited."""
    nargs: int | str | None
    """None: one value; "+": one or more (a list); an int: exactly that many (a tuple)."""
    container: type | None
    """list or tuple when nargs is not None."""
    default: Any
    """dataclasses.MISSING for a required field."""
    help: str
    positional: bool
    metavar: str | None
    """The name shown for the value; a positional argument is named by it."""
    output: bool = False
    """A path the command writes (see `is_output`); every other path is one it reads."""
    directory: bool = False
    """An output directory (`metadata={"output": "directory"}`): `main` locks it while the
    command runs (bertkit.runlock)."""
    weighted: bool = False
    """A path that may be several, weighted (`metadata={"weighted": True}`): spelled
    PATH=W,PATH=W:FIELD, or in --config a table {PATH = W, PATH = {weight = W, text_field =
    "FIELD"}, ...}."""
    spelled: str | None = None
    """The name of the flag and the --config key (`metadata={"flag": NAME}`); None: the
    field's."""
    duration: bool = False
    """Minutes that may be spelled with units, "90s", "1h30m" (`metadata={"duration": True}`):
    the flag keeps the text, `Command.read` turns it into minutes."""
    model: tuple[str, ...] | None = None
    """A model (`metadata={"model": True}`, or the words it takes that are no model): a Hub
    name given here is fetched before the command runs; None: no model."""
    group: str | None = None
    """The heading the help lists it under (a nested dataclass's field with
    `metadata={"group": TITLE}`: pretrain's "--objective electra"); None: the command's."""

    @property
    def dest(self) -> str:
        return f"{self.source}:{'.'.join(self.path)}"

    @property
    def name(self) -> str:
        return self.spelled or self.path[-1]

    @property
    def flag(self) -> str:
        if self.positional:
            return self.metavar or self.name.upper()
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        return ".".join(self.path[:-1] + (self.name,))


def _unwrap(tp) -> tuple[Any, bool]:
    """(the type without None, whether None was allowed)."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"no command-line flag for the union {tp}")
        return args[0], len(args) < len(get_args(tp))
    return tp, False


def _scalar_kind(tp, metadata) -> tuple[type, tuple | None]:
    if get_origin(tp) is Literal:
        choices = get_args(tp)
        return type(choices[0]), choices
    if tp in _TYPE_WORDS:
        choices = metadata.get("choices")
        if isinstance(choices, str):  # "module:NAME": the library's own list, read when needed
            module, _, name = choices.partition(":")
            choices = getattr(importlib.import_module(module), name)
        return tp, (tuple(choices) if choices is not None else None)
    raise TypeError(f"no command-line flag for the type {tp}")


def _options_of(cls: type, source: int, prefix: tuple[str, ...], omit: tuple[str, ...],
                group: str | None = None) -> list[Option]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    found = []
    for f in dataclasses.fields(cls):
        path = prefix + (f.name,)
        if ".".join(path) in omit or not f.init or f.metadata.get("flag") is False:
            continue
        tp, optional = _unwrap(hints[f.name])
        if dataclasses.is_dataclass(tp):
            found += _options_of(tp, source, path, omit, f.metadata.get("group", group))
            continue
        nargs = container = None
        origin = get_origin(tp)
        if origin in (list, tuple):
            args = get_args(tp)
            container = origin
            if origin is tuple and args and args[-1] is not Ellipsis:
                if len(set(args)) != 1:
                    raise TypeError(f"{cls.__name__}.{f.name}: tuple items must share a type")
                nargs = len(args)
            else:
                nargs = "+"
            tp = args[0]
        kind, choices = _scalar_kind(tp, f.metadata)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        found.append(Option(source, path, kind, optional, choices, nargs, container, default,
                            docs.get(f.name, ""), bool(f.metadata.get("positional")),
                            f.metadata.get("metavar"), kind is Path and is_output(f),
                            kind is Path and f.metadata.get("output") == "directory",
                            bool(f.metadata.get("weighted")), f.metadata.get("flag"),
                            _duration(cls, f, kind, nargs), _model(cls, f, kind), group))
    return found


def _model(cls: type, f: dataclasses.Field, kind: type) -> tuple[str, ...] | None:
    marked = f.metadata.get("model")
    if marked is None or marked is False:
        return None
    if kind is not Path:
        raise TypeError(f"{cls.__name__}.{f.name}: a model option is a path")
    return () if marked is True else tuple(marked)


def _duration(cls: type, f: dataclasses.Field, kind: type, nargs) -> bool:
    if not f.metadata.get("duration"):
        return False
    if kind is not float or nargs is not None:
        raise TypeError(f"{cls.__name__}.{f.name}: a duration is one float (minutes)")
    return True


def is_output(f: dataclasses.Field) -> bool:
    """A path field the command writes: `field(metadata={"output": True})`, or by name, `out`
    and `*_out`; every other path field is an input. `Command.check_paths` refuses an output
    that is one of the inputs."""
    return bool(f.metadata.get("output", f.name == "out" or f.name.endswith("_out")))


def show(value) -> str:
    """A default as the user would type it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return shlex.join(show(v) for v in value) or "none"
    return str(value)


def _converter(opt: Option) -> Callable[[str], Any]:
    def convert(text: str):
        if opt.optional and text.lower() == "none" and (opt.kind in (int, float) or opt.choices):
            return None
        if opt.duration:  # read by Command.read: a bad one is one line, not the usage
            return text
        if opt.model is not None:
            return _model_value(text, opt.model)
        value = opt.kind(text)
        if opt.choices is not None and value not in opt.choices:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(map(str, opt.choices))})")
        return value
    convert.__name__ = opt.kind.__name__  # argparse names it in "invalid int value"
    return convert


class _Switch(argparse.Action):
    """`--x` sets True, `--no-x` sets False."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no-"))


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
            found += _options_of(cls, i, (), self.omit)
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
                help += f" (default: {show(opt.default)})"
            help = help.strip().replace("%", "%%")
            metavar = opt.metavar or (("{" + ",".join(map(str, opt.choices)) + "}")
                                      if opt.choices else
                                      "DURATION" if opt.duration else opt.name.upper())
            if opt.kind is bool and opt.nargs is None:
                target.add_argument(opt.flag, "--no-" + opt.flag[2:], dest=opt.dest,
                                    action=_Switch, default=argparse.SUPPRESS, help=help)
            elif opt.positional:  # optional here: it may come from --config
                target.add_argument(opt.dest, nargs="*" if opt.nargs else "?", default=None,
                                    type=_converter(opt), metavar=metavar, help=help)
            else:  # a list flag given twice keeps both: --model A --model B is --model A B
                action = target.add_argument(
                    opt.flag, dest=opt.dest, nargs=opt.nargs, type=_converter(opt),
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
            _merge_file(settings, flags, Path(config), dict(self.fixed), self.foreign)
        for opt in flags:  # a nested dataclass is built from its own defaults, given or not
            _table(settings[opt.source], opt.path[:-1])
        for opt in flags:
            value = getattr(args, opt.dest, _ABSENT)
            if value is _ABSENT or (opt.positional and value in (None, [])):
                continue
            if opt.duration and isinstance(value, str):
                value = _minutes(value, opt.flag)
            _put(settings[opt.source], opt.path, tuple(value) if opt.container is tuple else value)
        where = f" (or set it in {config})" if config else ""
        for opt in flags:
            missing = _get(settings[opt.source], opt.path) is _ABSENT
            if opt.default is dataclasses.MISSING and missing:
                raise UserError(f"missing {opt.flag}{where}")
        classes = self.classes() + [_revision_class()] if revision else self.classes()
        instances = []
        for cls, values in zip(classes, settings):
            try:
                instances.append(_build(cls, values))
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
        return _options_of(_revision_class(), len(self.options), (), ())


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


def _model_value(text: str, keywords: tuple[str, ...]) -> Path | str:
    """A model option's value as given: a Hugging Face Hub name stays a str, for `_fetched`;
    a path is a Path, made absolute where losing its "./" to Path would make it read as a
    name (`./nosuch` is a missing directory, `nosuch` a name), so that whatever reads as a
    name was given as one."""
    from bertkit.model.fetch import is_hub_name

    if text in keywords or not is_hub_name(text):
        path = Path(text)
        return path.absolute() if text not in keywords and is_hub_name(path) else path
    return text


def _fetched(flags: list[Option], instances: list, revision: str | None) -> list:
    """`Command.fetched`. A value of a model option that reads as a name was given as one
    (`_model_value` made a path that would read so absolute), whether it is still the str it
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
                flags += [opt.flag, "none"]
        elif opt.nargs is not None:
            if value:
                flags += [opt.flag, *(_spelled(v) for v in value)]
        else:
            flags += [opt.flag, _spelled(value)]
    return shlex.join([program, *command.name.split(), *positional, *flags])


def _minutes(text: str, name: str) -> float:
    try:
        return parse_minutes(text, name)
    except ConfigError as e:
        raise UserError(str(e)) from None


def _spelled(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _table(tree: dict, path: tuple[str, ...]) -> dict:
    for name in path:
        tree = tree.setdefault(name, {})
    return tree


def _put(tree: dict, path: tuple[str, ...], value) -> None:
    _table(tree, path[:-1])[path[-1]] = value


def _get(tree: dict, path: tuple[str, ...]):
    for name in path:
        if not isinstance(tree, dict) or name not in tree:
            return _ABSENT
        tree = tree[name]
    return tree


def _build(cls: type, values: dict):
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        tp, _ = _unwrap(hints[name])
        kwargs[name] = _build(tp, value) if dataclasses.is_dataclass(tp) else value
    return cls(**kwargs)


def _merge_file(settings: list[dict], flags: list[Option], path: Path,
                fixed: dict[str, Any] | None = None, foreign: tuple[str, ...] = ()) -> None:
    if not path.exists():
        raise UserError(f"{path}: config file does not exist")
    if path.is_dir():
        raise UserError(f"{path}: config file is a directory, expected a TOML file")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a valid TOML file ({e})") from None
    by_key = {opt.key: opt for opt in flags}
    tables = {".".join(opt.path[:i]) for opt in flags for i in range(1, len(opt.path))}

    def walk(tree: dict, prefix: str) -> None:
        for name, value in tree.items():
            key = f"{prefix}{name}"
            if key in tables:
                if not isinstance(value, dict):
                    raise UserError(f"{path}: {key}: expected a table [{key}]")
                walk(value, key + ".")
            elif key in by_key:
                opt = by_key[key]
                _put(settings[opt.source], opt.path, _checked(opt, value, path))
            elif key in (fixed or {}):
                if value != fixed[key]:
                    raise UserError(f"{path}: {key} is {value!r}, this command's is "
                                    f"{fixed[key]!r}")
            elif key in foreign:
                warnings.warn(f"{path}: {key} is not a setting of this command; ignored")
            else:
                raise UserError(f"{path}: unknown setting {key!r}")

    walk(table, "")


def _checked(opt: Option, value, path: Path):
    """A TOML value as the field wants it, or a UserError naming the file and the key."""
    def fail(what: str):
        return UserError(f"{path}: {opt.key}: expected {what}, got {value!r}")

    if opt.nargs is not None:
        if not isinstance(value, list) or (isinstance(opt.nargs, int)
                                           and len(value) != opt.nargs):
            count = f"{opt.nargs} " if isinstance(opt.nargs, int) else ""
            raise fail(f"a list of {count}{_PLURALS[opt.kind]}")
        return opt.container(_scalar(opt, v, fail) for v in value)
    return _scalar(opt, value, fail)


def _weighted(entry) -> str | None:
    """The W or W:FIELD of one path of a weighted table (a number, or {weight = W, text_field =
    "FIELD"}); None for anything else. A field holding ',' or '=' could not be spelled."""
    field = None
    if isinstance(entry, dict) and set(entry) <= {"weight", "text_field"}:
        entry, field = entry.get("weight"), entry.get("text_field")
        if field is not None and not (isinstance(field, str) and field.strip()
                                      and not set(",=") & set(field)):
            return None
    if not isinstance(entry, (int, float)) or isinstance(entry, bool) or not entry > 0:
        return None
    return repr(entry) + ("" if field is None else f":{field}")


def _scalar(opt: Option, value, fail):
    kind = opt.kind
    if opt.weighted and isinstance(value, dict):  # {PATH = W, ...}: the PATH=W,... spelling
        spelled = [_weighted(w) for w in value.values()]
        if not value or None in spelled:
            raise fail("a table of paths with positive numbers (their weights), or tables "
                       "{weight = W, text_field = \"FIELD\"} (a field without ',' or '=')")
        return Path(",".join(f"{k}={w}" for k, w in zip(value, spelled)))
    if opt.duration and isinstance(value, str):  # max_time = "90s"
        try:
            return parse_minutes(value)
        except ConfigError:
            raise fail(f"a duration ({DURATION_FORMS})") from None
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise fail(_TYPE_WORDS[kind])
    if opt.model is not None:
        return _model_value(value, opt.model)
    value = kind(value)
    if opt.choices is not None and value not in opt.choices:
        raise fail("one of " + ", ".join(map(str, opt.choices)))
    return value


__all__ = ["Command", "Option", "command_line", "field_docs", "show"]
