"""The flag generator (bertkit.cli.options): types, defaults, choices, switches, nested
dataclasses and help from field docstrings; `--config FILE.toml` under the flags, and its
errors."""
from __future__ import annotations

import argparse
import inspect
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from bertkit.cli import fields
from bertkit.cli.main import build_parser
from bertkit.cli.fields import field_docs
from bertkit.cli.options import Command, command_line
from bertkit.files import UserError


@dataclass(kw_only=True)
class Inner:
    rate: float = 0.5
    """How fast."""
    steps: int | None = None
    """How long."""


@dataclass(kw_only=True)
class Opts:
    path: Path
    """Where to read."""
    count: int = 3
    """How many: 100% of them."""
    name: str | None = None
    """A name."""
    mode: Literal["a", "b"] = "a"
    """The mode."""
    pick: str = field(default="x", metadata={"choices": ("x", "y")})
    """A pick."""
    limit: int | None = 7
    """A limit."""
    flag: bool = False
    """A switch."""
    keep: bool = True
    """Kept."""
    files: list[Path] = field(default_factory=list)
    """Files."""
    pair: tuple[float, float] = (0.9, 0.99)
    """Two numbers."""
    words: list[str] = field(default_factory=list, metadata={"positional": True})
    """Words."""
    inner: Inner = field(default_factory=Inner)
    """Nested."""


@dataclass(kw_only=True)
class Extra:
    verbose_name: str = "v"
    """Another source's option."""


COMMAND = Command("t", lambda *o: 0, (Opts, Extra), help="t")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    COMMAND.add_flags(p)
    return p


def parse(*argv):
    return COMMAND.read(parser().parse_args([str(a) for a in argv]))


def test_types_from_annotations():
    opts, extra = parse("--path", "p", "--count", "4", "--name", "n", "--limit", "none",
                        "--files", "a", "b", "--pair", "0.8", "0.95", "--rate", "0.1",
                        "--steps", "9", "--verbose-name", "w", "one", "two")
    assert opts == Opts(path=Path("p"), count=4, name="n", limit=None,
                        files=[Path("a"), Path("b")], pair=(0.8, 0.95),
                        inner=Inner(rate=0.1, steps=9), words=["one", "two"])
    assert isinstance(opts.path, Path) and isinstance(opts.pair, tuple)
    assert extra == Extra(verbose_name="w")


def test_defaults_come_from_the_fields():
    opts, extra = parse("--path", "p")
    assert opts == Opts(path=Path("p")) and extra == Extra()


def test_switches():
    assert parse("--path", "p", "--flag", "--no-keep")[0].flag is True
    assert parse("--path", "p", "--flag", "--no-keep")[0].keep is False
    assert parse("--path", "p", "--flag", "--no-flag")[0].flag is False  # the last one wins


def test_choices_and_bad_values_are_refused(capsys):
    assert parse("--path", "p", "--mode", "b", "--pick", "y")[0].mode == "b"
    for argv in (["--mode", "c"], ["--pick", "z"], ["--count", "many"], ["--pair", "1"]):
        with pytest.raises(SystemExit) as e:
            parse("--path", "p", *argv)
        assert e.value.code == 2
    assert "invalid choice: 'z' (choose from x, y)" in capsys.readouterr().err


def test_a_missing_required_option_is_a_user_error():
    with pytest.raises(UserError, match="^missing --path$"):
        parse("--count", "2")


def test_help_shows_every_default_and_the_docstrings():
    text = " ".join(parser().format_help().split())
    for expected in ("--path PATH Where to read. (required)",
                     "How many: 100% of them. (default: 3)", "A name. (default: none)",
                     "--mode {a,b} The mode. (default: a)", "--pick {x,y} A pick. (default: x)",
                     "--flag, --no-flag A switch. (default: off)", "Kept. (default: on)",
                     "--pair PAIR PAIR Two numbers. (default: 0.9 0.99)",
                     "--rate RATE How fast. (default: 0.5)", "How long. (default: none)",
                     "Another source's option. (default: v)", "WORDS Words."):
        assert expected in text, expected


def test_docstrings_are_read_from_the_class_source():
    assert field_docs(Inner) == {"rate": "How fast.", "steps": "How long."}


def test_without_source_the_flags_still_work(monkeypatch):
    def no_source(obj):
        raise OSError("could not get source code")

    monkeypatch.setattr(inspect, "getsource", no_source)
    fields._field_docs.cache_clear()  # docs are read once per class: read them again here
    try:
        assert field_docs(Opts) == {}
        assert "(default: 3)" in parser().format_help()
        assert parse("--path", "p", "--count", "5")[0].count == 5
    finally:
        fields._field_docs.cache_clear()


def test_the_library_options_all_have_help():
    from bertkit.config import TrainConfig
    from bertkit.demo import DemoOptions
    from bertkit.finetuning.recipe import FinetuneConfig
    from bertkit.pretraining.recipe import PretrainOptions
    from bertkit.road.word2vec import SkipGramConfig
    from bertkit.senses.wsd import WsdOptions

    for cls in (TrainConfig, DemoOptions, FinetuneConfig, PretrainOptions, SkipGramConfig,
                WsdOptions):
        docs = field_docs(cls)
        assert all(docs.get(f) for f in cls.__dataclass_fields__), cls


def test_two_options_spelled_alike_are_refused():
    @dataclass
    class Twice:
        count: int = 1

    with pytest.raises(ValueError, match="two options are spelled --count"):
        Command("t", lambda *o: 0, (Opts, Twice), help="t").flags()


def test_a_type_without_a_flag_is_refused():
    @dataclass
    class Odd:
        table: dict = field(default_factory=dict)

    with pytest.raises(TypeError, match="no command-line flag"):
        Command("t", lambda *o: 0, (Odd,), help="t").flags()


# --config FILE.toml ---------------------------------------------------------------------------

def write(tmp_path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_file_under_the_flags(tmp_path):
    config = write(tmp_path, 'path = "data.txt"\ncount = 8\nmode = "b"\nflag = true\n'
                             'files = ["a", "b"]\npair = [0.5, 0.6]\nverbose_name = "file"\n'
                             '[inner]\nrate = 2\nsteps = 100\n')
    opts, extra = parse("--config", config, "--count", "9", "--no-flag", "--steps", "5")
    assert opts == Opts(path=Path("data.txt"), count=9, mode="b", flag=False,
                        files=[Path("a"), Path("b")], pair=(0.5, 0.6),
                        inner=Inner(rate=2.0, steps=5))
    assert extra.verbose_name == "file"
    assert isinstance(opts.inner.rate, float)


@pytest.mark.parametrize("text,message", [
    ("cont = 3", "unknown setting 'cont'"),
    ("[inner]\nspeed = 3", "unknown setting 'inner.speed'"),
    ('count = "3"', "count: expected an integer, got '3'"),
    ("count = true", "count: expected an integer, got True"),
    ("flag = 1", "flag: expected true or false, got 1"),
    ('mode = "c"', "mode: expected one of a, b, got 'c'"),
    ('files = "a.txt"', "files: expected a list of paths, got 'a.txt'"),
    ("pair = [1.0]", "pair: expected a list of 2 numbers, got [1.0]"),
    ('[inner]\nrate = "fast"', "inner.rate: expected a number, got 'fast'"),
    ("inner = 3", "inner: expected a table"),
    ("count = ", "not a valid TOML file"),
])
def test_config_errors_name_the_file_and_the_key(tmp_path, text, message):
    config = write(tmp_path, 'path = "p"\n' + text + "\n")
    with pytest.raises(UserError) as e:
        parse("--config", config)
    line = str(e.value)
    assert line.startswith(f"{config}: ") and message in line and "\n" not in line, line


def test_config_that_is_missing_or_a_directory(tmp_path):
    with pytest.raises(UserError, match="none.toml: config file does not exist"):
        parse("--config", tmp_path / "none.toml", "--path", "p")
    with pytest.raises(UserError, match="config file is a directory"):
        parse("--config", tmp_path, "--path", "p")


def test_a_required_option_may_come_from_the_file(tmp_path):
    config = write(tmp_path, "count = 2\n")
    with pytest.raises(UserError, match=r"^missing --path \(or set it in .*run.toml\)$"):
        parse("--config", config)



@dataclass
class Stop:
    steps: int | None = None
    """Steps."""

    def __post_init__(self):
        if self.steps is None:
            raise ValueError("give steps")


@dataclass
class Run:
    stop: Stop = field(default_factory=lambda: Stop(steps=1000))
    """A library default that the command line does not use."""


def test_a_nested_dataclass_is_built_from_its_own_defaults():
    command = Command("t", lambda *o: 0, (Run,), help="t")
    p = argparse.ArgumentParser()
    command.add_flags(p)
    assert "(default: none)" in p.format_help()  # what --help says is what runs
    with pytest.raises(UserError, match="^give steps$"):
        command.read(p.parse_args([]))
    assert command.read(p.parse_args(["--steps", "3"])) == [Run(stop=Stop(steps=3))]


# Outputs that would clobber inputs ------------------------------------------------------------

_WRITES = ("Output", "Directory for", "Run directory", "Where to save", "PNG")


def test_every_path_a_command_writes_is_an_output_and_every_other_an_input():
    from bertkit.cli.main import COMMANDS

    for command in COMMANDS:
        for opt in command.flags():
            if opt.kind is Path:
                writes = opt.help.startswith(_WRITES)
                assert opt.output == writes, (command.name, opt.flag, opt.help)


def _run(capsys, argv: list[str]) -> str:
    from bertkit.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    return err


def test_an_output_that_is_an_input_is_refused_before_the_command_runs(tmp_path, capsys):
    labelled = tmp_path / "s.jsonl"
    text = '{"lemma": "bank", "synset": "a", "text": "the bank", "start": 4, "end": 8}\n' * 84
    labelled.write_text(text, encoding="utf-8")
    cases = [
        (["predict", "--model", str(tmp_path / "m"), "--input", str(labelled), "--out",
          str(tmp_path / "." / "s.jsonl")], "--out is the --input"),
        (["wsd", "split", "--input", str(labelled), "--train-out", str(tmp_path / "t.jsonl"),
          "--test-out", str(labelled)], "--test-out is the --input"),
        (["wsd", "split", "--input", str(labelled), "--train-out", str(tmp_path / "t.jsonl"),
          "--test-out", str(tmp_path / "t.jsonl")], "--train-out and --test-out name the same"),
        (["embed", "--model", str(tmp_path), "--input", str(labelled), "--out",
          str(tmp_path / "v.npy")], "--out is the --model"),
        (["finetune", "classify", "--model", str(tmp_path), "--train", str(labelled), "--out",
          str(tmp_path)], "--out is the --model"),
        (["tokenizer", "train", "--input", str(labelled), "--out", str(tmp_path)],
         "--out directory holds the --input"),
    ]
    (tmp_path / "v.npy").symlink_to(tmp_path)  # an output spelled otherwise
    for argv, message in cases:
        assert message in _run(capsys, argv), argv
    assert labelled.read_text(encoding="utf-8") == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl", "v.npy"]


# The command line that runs the same settings again -------------------------------------------

def test_command_line_spells_every_option_and_parses_back_to_the_same_settings():
    cases = [parse("--path", "p q"),  # defaults, and a path with a space
             parse("w1", "w2", "--path", "p", "--count", "9", "--name", "n", "--mode", "b",
                   "--pick", "y", "--limit", "none", "--flag", "--no-keep", "--files", "a", "b",
                   "--pair", "0.1", "1e-07", "--rate", "0.125", "--steps", "4",
                   "--verbose-name", "x y")]
    for instances in cases:
        line = command_line(COMMAND, instances)
        argv = shlex.split(line)
        assert argv[:2] == ["bertkit", "t"]
        assert "--count" in argv and "--rate" in argv and "--pair" in argv  # defaults spelled
        assert parse(*argv[2:]) == instances, line
    assert "--limit none" in command_line(COMMAND, cases[1])
    assert "--no-keep" in command_line(COMMAND, cases[1])


@pytest.mark.parametrize("name", ["pretrain", "finetune"])
def test_the_training_commands_lines_parse_back(name):
    from bertkit.cli.finetuning import task_command
    from bertkit.cli.main import COMMANDS
    from bertkit.finetuning.tasks import Tag

    command = next(c for c in COMMANDS if c.name == name) if name == "pretrain" \
        else task_command(Tag)
    argv = {"pretrain": ["--data", "d", "--out", "o", "--preset", "tiny", "--max-steps", "3",
                         "--lr", "3e-4", "--betas", "0.9", "0.98", "--tensorboard"],
            "finetune": ["--model", "m", "--train", "t", "--out", "o", "--epochs", "2",
                         "--scheme", "BIO", "--crf", "--head-lr", "0.002"]}[name]
    p = argparse.ArgumentParser(prog=name)
    command.add_flags(p)
    instances = command.read(p.parse_args(argv))
    line = command_line(command, instances)
    words = shlex.split(line)
    assert words[:len(command.name.split()) + 1] == ["bertkit", *command.name.split()]
    again = command.read(p.parse_args(words[len(command.name.split()) + 1:]))
    assert again == instances


def test_an_undecided_switch_stays_undecided_on_the_command_line():
    # finetune's --crf / --case-feature are None ("decide from the data and the model") unless
    # given; the line that reruns a run must not turn that into --no-crf.
    from bertkit.cli.finetuning import task_command
    from bertkit.finetuning.tasks import Tag

    command = task_command(Tag)
    p = argparse.ArgumentParser(prog="finetune tag")
    command.add_flags(p)
    instances = command.read(p.parse_args(["--model", "m", "--train", "t", "--out", "o",
                                           "--no-case-feature"]))
    line = command_line(command, instances)
    assert line.startswith("bertkit finetune tag --model m ")
    assert "--crf" not in line and "--no-crf" not in line and "--no-case-feature" in line
    again = command.read(p.parse_args(shlex.split(line)[3:]))
    assert again == instances
    assert again[1].crf is None and again[1].case_feature is False


# Time budgets: minutes, also spelled with units ----------------------------------------------

@dataclass
class Budget:
    max_time: float | None = field(default=None, metadata={"duration": True})
    """Minutes."""
    minutes: float = field(default=5.0, metadata={"duration": True})
    """Minutes too."""


BUDGET = Command("b", lambda *o: 0, (Budget,), help="b")


def budget(*argv) -> Budget:
    p = argparse.ArgumentParser(prog="b")
    BUDGET.add_flags(p)
    return BUDGET.read(p.parse_args([str(a) for a in argv]))[0]


@pytest.mark.parametrize("given,minutes", [("30s", 0.5), ("90s", 1.5), ("10m", 10.0),
                                           ("1.5h", 90.0), ("1h30m", 90.0), ("45", 45.0),
                                           ("0.1", 0.1), ("6s", 0.1), ("none", None)])
def test_a_duration_flag_takes_units_and_gives_minutes(given, minutes):
    assert budget("--max-time", given).max_time == minutes
    assert budget().minutes == 5.0 and budget("--minutes", "2m").minutes == 2.0


@pytest.mark.parametrize("given", ["30 sec", "-5m", "-5", "0", "10x", "1h 30m", "none"])
def test_a_flag_that_is_no_duration_is_one_line_naming_the_flag(given):
    with pytest.raises(UserError) as e:
        budget("--minutes", given)
    assert str(e.value) == (f"--minutes {given}: not a duration (e.g. 90s, 10m, 1.5h, or "
                            f"minutes as a number)")


def test_a_duration_in_the_config_file(tmp_path):
    config = write(tmp_path, 'max_time = "1h30m"\nminutes = 2\n')
    assert budget("--config", config) == Budget(max_time=90.0, minutes=2.0)
    assert budget("--config", config, "--max-time", "30s").max_time == 0.5
    config = write(tmp_path, 'max_time = "30 sec"\n')
    with pytest.raises(UserError) as e:
        budget("--config", config)
    assert str(e.value) == (f"{config}: max_time: expected a duration (e.g. 90s, 10m, 1.5h, or "
                            f"minutes as a number), got '30 sec'")


def test_the_help_says_the_forms_and_the_line_spells_minutes():
    p = argparse.ArgumentParser(prog="b")
    BUDGET.add_flags(p)
    text = " ".join(p.format_help().split())
    assert ("--max-time DURATION Minutes. Also with units: 30s, 10m, 1.5h, 1h30m; a bare number "
            "is minutes. (default: none)") in text
    line = command_line(BUDGET, [budget("--max-time", "90s", "--minutes", "10s")])
    assert line == f"bertkit b --max-time 1.5 --minutes {1 / 6!r}"
    assert budget(*shlex.split(line)[2:]) == Budget(max_time=1.5, minutes=1 / 6)


def test_a_duration_is_one_float():
    @dataclass
    class Bad:
        budget: int = field(default=1, metadata={"duration": True})

    with pytest.raises(TypeError, match="Bad.budget: a duration is one float"):
        Command("t", lambda *o: 0, (Bad,), help="t").flags()


def test_every_time_budget_of_the_commands_takes_units():
    """No flag in minutes takes only a bare number (finetune's --max-time did). pretrain's
    --dist-timeout is seconds, not a budget: left as it is."""
    from bertkit.cli.finetuning import task_commands
    from bertkit.cli.main import COMMANDS

    budgets = {(c.name, opt.flag): opt.duration for c in (*COMMANDS, *task_commands())
               for opt in c.flags() if opt.kind is float and "minutes" in opt.help}
    assert not [name for name, duration in budgets.items() if not duration], budgets
    assert {("pretrain", "--max-time"), ("finetune classify", "--max-time"),
            ("road elmo", "--max-minutes"), ("road seq2seq", "--max-minutes"),
            ("demo", "--minutes")} <= set(budgets)


@pytest.mark.parametrize("argv,last", [
    (["embed", "--normalise"], "bertkit embed: error: unrecognized arguments: --normalise "
                               "(did you mean --normalize?)"),
    (["finetune", "classify", "--epoch-count", "3"],
     "bertkit finetune classify: error: unrecognized arguments: --epoch-count 3"),
    (["finetune", "embed", "--matryoshka", "8", "--lr=1", "--scle=2"],
     "bertkit finetune embed: error: unrecognized arguments: --scle=2 (did you mean --scale?)"),
])
def test_an_unknown_flag_is_the_commands_error_with_the_nearest_flag(argv, last, capsys):
    """Said with the command's usage, which shows its flags (the top-level usage shows none),
    and with a flag spelled nearly as the unknown one."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {last.partition(':')[0]} [-h]"), err
    assert err.strip().splitlines()[-1] == last


def test_required_flags_are_shown_without_brackets_and_still_come_from_a_config(tmp_path, capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "classify", "--help"])
    usage = capsys.readouterr().out
    assert "--train TRAIN" in usage and "[--train TRAIN]" not in usage
    assert "--out OUT" in usage and "[--dev DEV]" in usage
    assert "[--model MODEL]" in usage  # none with --teacher DIR --student-layers N
    config = tmp_path / "run.toml"  # argparse itself still lets --config give them
    config.write_text('model = "m"\ntrain = "t.jsonl"\nout = "o"\n')
    args = parser.parse_args(["finetune", "classify", "--config", str(config)])
    assert args.config == str(config)
