"""`--config FILE.toml` under a command's flags: the file's keys are the options' field names (a
table for a nested dataclass, a table of paths and weights for a weighted path), each value
checked against its field's type; flags given on the command line override it. An unknown key
or a value of the wrong type is a one-line UserError naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import sys
import typing
import warnings
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib is new in 3.11; tomli is the same parser
    import tomli as tomllib

from bertkit.cli.fields import PLURALS, TYPE_WORDS, Option, model_value, unwrap
from bertkit.config import DURATION_FORMS, ConfigError, parse_minutes
from bertkit.files import UserError

ABSENT = object()
"""A key the settings do not hold."""


def minutes(text: str, name: str) -> float:
    try:
        return parse_minutes(text, name)
    except ConfigError as e:
        raise UserError(str(e)) from None


def setting_table(tree: dict, path: tuple[str, ...]) -> dict:
    for name in path:
        tree = tree.setdefault(name, {})
    return tree


def put_setting(tree: dict, path: tuple[str, ...], value) -> None:
    setting_table(tree, path[:-1])[path[-1]] = value


def get_setting(tree: dict, path: tuple[str, ...]):
    for name in path:
        if not isinstance(tree, dict) or name not in tree:
            return ABSENT
        tree = tree[name]
    return tree


def build_options(cls: type, values: dict):
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        tp, _ = unwrap(hints[name])
        kwargs[name] = build_options(tp, value) if dataclasses.is_dataclass(tp) else value
    return cls(**kwargs)


def merge_file(settings: list[dict], flags: list[Option], path: Path,
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
                put_setting(settings[opt.source], opt.path, _checked(opt, value, path))
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
            raise fail(f"a list of {count}{PLURALS[opt.kind]}")
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
    if opt.optional and opt.none_word != "none" and value == opt.none_word:
        return None  # batch_size = "auto"
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
        raise fail(TYPE_WORDS[kind])
    if opt.model is not None:
        return model_value(value, opt.model)
    value = kind(value)
    if opt.choices is not None and value not in opt.choices:
        raise fail("one of " + ", ".join(map(str, opt.choices)))
    return value
