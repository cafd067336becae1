"""Each field of a command's options dataclass as an `Option`: its flag, its type from the
annotation, its default, its help (the string literal right under the field, `field_docs`), and
what the command line does with it (a switch, a duration, a model, an output); see
`bertkit.cli.options` for the whole of what a field may say.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import shlex
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Union, get_args, get_origin

PLURALS = {int: "integers", float: "numbers", str: "strings", Path: "paths",
            bool: "true/false values"}
TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", Path: "a path",
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
    none_word: str = "none"
    """How the command line and --config spell an optional number's None
    (`metadata={"none": WORD}`: pretrain's --batch-size auto)."""

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


def unwrap(tp) -> tuple[Any, bool]:
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
    if tp in TYPE_WORDS:
        choices = metadata.get("choices")
        if isinstance(choices, str):  # "module:NAME": the library's own list, read when needed
            module, _, name = choices.partition(":")
            choices = getattr(importlib.import_module(module), name)
        return tp, (tuple(choices) if choices is not None else None)
    raise TypeError(f"no command-line flag for the type {tp}")


def options_of(cls: type, source: int, prefix: tuple[str, ...], omit: tuple[str, ...],
               group: str | None = None) -> list[Option]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    found = []
    for f in dataclasses.fields(cls):
        path = prefix + (f.name,)
        if ".".join(path) in omit or not f.init or f.metadata.get("flag") is False:
            continue
        tp, optional = unwrap(hints[f.name])
        if dataclasses.is_dataclass(tp):
            found += options_of(tp, source, path, omit, f.metadata.get("group", group))
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
                            _duration(cls, f, kind, nargs), _model(cls, f, kind), group,
                            f.metadata.get("none", "none")))
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


def converter(opt: Option) -> Callable[[str], Any]:
    def convert(text: str):
        if opt.optional and text.lower() == opt.none_word \
                and (opt.kind in (int, float) or opt.choices):
            return None
        if opt.duration:  # read by Command.read: a bad one is one line, not the usage
            return text
        if opt.model is not None:
            return model_value(text, opt.model)
        value = opt.kind(text)
        if opt.choices is not None and value not in opt.choices:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(map(str, opt.choices))})")
        return value
    convert.__name__ = opt.kind.__name__  # argparse names it in "invalid int value"
    return convert


def model_value(text: str, keywords: tuple[str, ...]) -> Path | str:
    """A model option's value as given: a Hugging Face Hub name stays a str, for
    `options._fetched`; a path is a Path, made absolute where losing its "./" to Path would make
    it read as a name (`./nosuch` is a missing directory, `nosuch` a name), so that whatever
    reads as a name was given as one."""
    from bertkit.model.fetch import is_hub_name

    if text in keywords or not is_hub_name(text):
        path = Path(text)
        return path.absolute() if text not in keywords and is_hub_name(path) else path
    return text


class Switch(argparse.Action):
    """`--x` sets True, `--no-x` sets False."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no-"))
