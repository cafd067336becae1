"""Every command's --help speaks to the user, not from inside the code: no module paths or
library constants, no field names where the user knows a flag, None spelled as the command
line spells it (none), no words only the project uses; `finetune tag` offers no CNN, and every
--device says that auto is its default."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import re

import pytest

from bertkit.cli.main import build_parser


def _walk(parser: argparse.ArgumentParser, name: str):
    parser.format_help()  # a command's flags (and finetune's tasks) are added on first use
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _walk(sub, f"{name} {sub_name}")


COMMANDS = dict(_walk(build_parser(), "bertkit"))
"""Every command and group, "bertkit finetune tag": its parser, flags added."""

# Words from inside the code or the project; each a pattern and why it is wrong in help.
INSIDE = [
    (r"(?<![\w/])config\.(?!json\b|toml\b)\w", "a module's name (say what it holds: the preset "
     "names, ...)"),
    (r"\bbertkit\.[a-z_]+", "a module path (say what the thing is, or name the docs page)"),
    (r"\bDEFAULT_", "a library constant (say its value)"),
    (r"\bNone\b", "None as Python spells it (the command line says none)"),
    (r"\bthe seeds\b", "the project's word (name the book or paper)"),
    (r"\bsource documents\b", "the project's word (name the book or paper)"),
    (r"\bthe issue\b", "the project's word (name the book or paper)"),
    (r"\bthe textbooks?\b", "the project's word (name the book or paper)"),
]

# Upper-case names with an underscore that help may say: the environment torchrun sets.
ENVIRONMENT = {"LOCAL_RANK"}


def _text(parser: argparse.ArgumentParser) -> str:
    """The help on one line, unwrapped (argparse also breaks lines at hyphens)."""
    formatter = parser.formatter_class
    parser.formatter_class = functools.partial(formatter, width=100_000)
    try:
        return " ".join(parser.format_help().split())
    finally:
        parser.formatter_class = formatter


def _own_fields(parser: argparse.ArgumentParser) -> set[str]:
    """The snake_case names of the parser's own multi-word flags (`--mlm-prob`: mlm_prob)."""
    return {s[2:].replace("-", "_") for a in parser._actions for s in a.option_strings
            if s.startswith("--") and "-" in s[2:] and not s.startswith("--no-")}


def problems(parser: argparse.ArgumentParser) -> list[str]:
    """What in the parser's help speaks from inside the code, and why."""
    text = _text(parser)
    found = [f"{m.group(0)!r}: {why}" for pattern, why in INSIDE
             for m in re.finditer(pattern, text)]
    found += [f"{word!r}: a field's name, the user knows --{word.replace('_', '-')}"
              for word in sorted(_own_fields(parser)) if re.search(rf"\b{word}\b", text)]
    # a constant of the code (the metavars, BATCH_SIZE, are the flags' own: not in any help)
    said = " ".join([parser.description or ""] + [a.help or "" for a in parser._actions])
    found += [f"{word!r}: a constant of the code (say its value)"
              for word in re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", said)
              if word not in ENVIRONMENT]
    return found


def _option_help(parser: argparse.ArgumentParser, flag: str) -> str | None:
    for action in parser._actions:
        if flag in action.option_strings:
            return " ".join((action.help or "").split())
    return None


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_speaks_to_the_user(name):
    found = problems(COMMANDS[name])
    assert not found, f"{name} --help: " + "; ".join(found)


def test_the_check_finds_the_words_it_looks_for():
    parser = argparse.ArgumentParser(prog="p", description="the textbook's way")
    parser.add_argument("--mlm-prob", help="share of tokens (bertkit.config.PRESETS)")
    parser.add_argument("--seq-len", help="from mlm_prob; None = DEFAULT_LEN, not early_seq_len")
    parser.add_argument("--out", help="config.json in OUT, as the seeds' LOCAL_RANK")
    found = " ".join(problems(parser))
    for word in ["'bertkit.config'", "'config.P'", "'None'", "'DEFAULT_'", "'mlm_prob'",
                 "'DEFAULT_LEN'", "'the textbook'", "'the seeds'"]:
        assert word in found, word
    for word in ["seq_len", "config.json", "LOCAL_RANK"]:  # early_seq_len is no flag here
        assert f"'{word}'" not in found, word


def test_the_defaults_help_spells_out_are_the_code_s():
    """Numbers the help gives instead of a constant's or another class's name."""
    from bertkit.pretraining.recipe import PretrainOptions, PretrainSchedule
    from bertkit.road.word2vec import SOFTMAX_MAX_VOCAB
    from bertkit.training.batch_probe import START

    def pretrain_s(flag: str) -> float:
        help = _option_help(COMMANDS["bertkit demo"], flag)
        return float(re.search(r"pretrain's default \(([^)]*)\)", help).group(1))

    defaults = {f.name: f.default for f in dataclasses.fields(PretrainOptions)}
    assert defaults["batch_size"] is None  # auto: measured on a GPU, else START
    assert f"pretrain's default (auto: measured on a CUDA GPU, else {START})" in _option_help(
        COMMANDS["bertkit demo"], "--batch-size")
    assert pretrain_s("--lr") == PretrainSchedule.lr
    assert f"above {SOFTMAX_MAX_VOCAB:,} entries" in _option_help(
        COMMANDS["bertkit static train"], "--loss")


def test_finetune_tag_offers_no_cnn():
    """The CNN family trains classify, pair and regress; tag's --model is a BERT directory."""
    help = _option_help(COMMANDS["bertkit finetune tag"], "--model")
    assert help and "cnn" not in help.lower(), help
    for task in ("classify", "pair", "regress"):
        assert "`cnn`" in _option_help(COMMANDS[f"bertkit finetune {task}"], "--model")


def test_only_the_tasks_the_cnn_trains_offer_it():
    from bertkit.finetuning.cnn import CnnBackbone
    from bertkit.finetuning.tasks import TASKS

    for task in TASKS:
        help = _option_help(COMMANDS[f"bertkit finetune {task.name}"], "--model")
        assert ("cnn" in help.lower()) == CnnBackbone.trains(task), (task.name, help)


DEVICES = [name for name, parser in COMMANDS.items() if _option_help(parser, "--device")]


def test_device_is_found():
    assert {"bertkit pretrain", "bertkit finetune tag", "bertkit embed", "bertkit generate",
            "bertkit road elmo"} <= set(DEVICES)


@pytest.mark.parametrize("name", DEVICES)
def test_every_device_says_auto_is_the_default(name):
    help = _option_help(COMMANDS[name], "--device")
    said, _, default = help.partition("(default:")
    assert "auto" in said and default.strip() == "auto)", help
