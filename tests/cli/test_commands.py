"""The whole command line: every command's --help with every default, --version, --device on
every command that runs a model (and handed to the library), one spelling per concept, and no
process-wide state left behind by `main`."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.cli.finetuning import task_commands
from bertkit.cli.fields import show
from bertkit.files import UserError

# `finetune` is a command per task (`finetune tag`), each with its own flags
COMMANDS = [c for c in cli.COMMANDS if c.name != "finetune"] + list(task_commands())
NAMES = [c.name for c in COMMANDS]

# Each command that runs a model, with the least it needs to get there.
MODEL_COMMANDS = {
    "fill-mask": ["--model", "m", "a [MASK]"],
    "finetune tag": ["--model", "m", "--train", "t", "--out", "o"],
    "evaluate": ["--model", "m", "--input", "i"],
    "predict": ["--model", "m", "--input", "i"],
    "embed": ["--model", "m", "--input", "i", "--out", "o.npy"],
    "anisotropy": ["--model", "m", "--input", "i"],
    "plot senses": ["--model", "m", "--input", "i", "--lemma", "w", "--out", "o"],
    "plot attention": ["--model", "m", "--text", "t", "--out", "o"],
    "wsd train": ["--model", "m", "--input", "i", "--out", "o"],
    "wsd predict": ["--wsd", "w", "--input", "i"],
    "wsd evaluate": ["--wsd", "w", "--input", "i"],
    "static contexts": ["--model", "m", "--bert", "b", "--word", "w", "a w"],
    "pretrain": ["--data", "d", "--out", "o", "--preset", "tiny", "--max-steps", "1"],
    "generate": ["--model", "m", "a prompt"],
    "similarity": ["--model", "m", "a w", "w", "b w", "w"],
    "road elmo": ["--data", "d", "--out", "o"],
    "road elmo-tag": ["--model", "m", "--train", "t", "--out", "o"],
}

# Spellings of a concept that has another name on the command line. (`pretrain --data` is the
# directory `prepare --out` wrote: a concept of its own.)
SYNONYMS = {"--corpus": "--input", "--test": "--input",
            "--file": "--input", "--dir": "--model", "--model-dir": "--model",
            "--output": "--out", "--output-dir": "--out", "--out-dir": "--out",
            "-k": "--top-k", "--k": "--top-k", "--topk": "--top-k", "--verbose": "--quiet",
            "--no-progress": "--quiet", "--show-progress": "--quiet", "--silent": "--quiet",
            "--gpu": "--device", "--cuda": "--device", "--dtype": "--precision",
            "--bf16": "--precision", "--fp16": "--precision", "--last4": "--layers"}


def flags_of(name: str) -> dict:
    command = next(c for c in COMMANDS if c.name == name)
    return {opt.flag: opt for opt in command.flags() if not opt.positional}


@pytest.mark.parametrize("name", NAMES)
def test_every_command_has_help_with_every_default(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args([*name.split(), "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--config FILE.toml" in text
    for flag, opt in flags_of(name).items():
        if opt.default is dataclasses.MISSING:
            shown = "(required)"
        else:
            shown = f"(default: {' '.join(show(opt.default).split())})"
        assert flag in text and shown in text, (flag, shown)


def test_version(capsys):
    from bertkit import __version__
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"bertkit {__version__}"


def test_a_glob_the_shell_expanded_into_several_files_says_to_quote_it(tmp_path, capsys):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("text\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["pretrain", "--data", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                  "--out", str(tmp_path / "run"), "--max-steps", "1"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "b.txt (several files where one is taken: quote a glob, 'dir/*.txt', for bertkit to "
        "expand it)")


def test_one_spelling_per_concept():
    seen: dict[str, tuple] = {}
    for name in NAMES:
        for flag, opt in flags_of(name).items():
            assert flag not in SYNONYMS, f"{name}: {flag} is spelled {SYNONYMS[flag]} elsewhere"
            # one type per flag; one file or several (--input) is the same concept
            assert seen.setdefault(flag, opt.kind) == opt.kind, f"{name}: {flag} has two types"
    for name in MODEL_COMMANDS:
        assert "--device" in flags_of(name), name


@pytest.fixture
def reached(monkeypatch, tmp_path):
    """Library entry points replaced by fakes that stop with the device they were given; the
    models `m` and `b` are directories (a name would be fetched from the Hugging Face Hub)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "b").mkdir()
    import bertkit.cli.pretraining
    import bertkit.embeddings.embedder
    import bertkit.finetuning.predict
    import bertkit.finetuning.recipe
    import bertkit.model.fill_mask
    import bertkit.model.generate
    import bertkit.pretraining.recipe
    import bertkit.road.elmo
    import bertkit.road.elmo_tagger
    import bertkit.senses.data
    import bertkit.embeddings.context_similarity
    import bertkit.embeddings.static
    import bertkit.senses.wsd
    import bertkit.senses.plots

    def stop(device):
        raise UserError(f"reached device={device}")

    def load(path, device="cpu", **kwargs):
        stop(device)

    monkeypatch.setattr(bertkit.cli.pretraining, "tune_runtime", lambda *a: None)
    monkeypatch.setattr(bertkit.embeddings.embedder.Embedder, "load", staticmethod(load))
    monkeypatch.setattr(bertkit.model.fill_mask.FillMask, "load", staticmethod(load))
    monkeypatch.setattr(bertkit.finetuning.predict.TaskModel, "load", staticmethod(load))
    monkeypatch.setattr(bertkit.finetuning.recipe, "finetune",
                        lambda *a, **k: stop(a[-1].device))
    monkeypatch.setattr(bertkit.pretraining.recipe, "pretrain", lambda o, **k: stop(o.device))
    monkeypatch.setattr(bertkit.model.generate, "generate",
                        lambda model, prompt, config, device="cpu": stop(device))
    monkeypatch.setattr(bertkit.road.elmo, "train_elmo", lambda o, *a: stop(o.device))
    monkeypatch.setattr(bertkit.road.elmo_tagger, "tag_words", lambda o, *a: stop(o.device))
    monkeypatch.setattr(bertkit.senses.data, "load_source",
                        lambda model, device="cpu", **k: stop(device))
    monkeypatch.setattr(bertkit.senses.data, "read_examples", lambda *a, **k: [])
    monkeypatch.setattr(bertkit.senses.plots, "read_sense_instances", lambda *a: [])
    monkeypatch.setattr(bertkit.senses.wsd.SenseInventory, "load", staticmethod(
        lambda path: SimpleNamespace(model="m", options=bertkit.senses.wsd.WsdOptions())))
    monkeypatch.setattr(bertkit.embeddings.context_similarity, "find_word", lambda text, word: (0, 1))
    monkeypatch.setattr(bertkit.embeddings.static.StaticVectors, "load", staticmethod(
        lambda path: SimpleNamespace(instance_vectors=lambda texts, spans: None)))


@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_device_reaches_the_library(name, reached, capsys):
    assert cli.main([*name.split(), *MODEL_COMMANDS[name], "--device", "cpu:0"]) == 2
    assert capsys.readouterr().err.strip() == "error: reached device=cpu:0"


@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_the_default_device_is_auto(name, reached, capsys):
    """No --device: CUDA when the machine has it, else the CPU."""
    assert cli.main([*name.split(), *MODEL_COMMANDS[name]]) == 2
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert capsys.readouterr().err.strip() == f"error: reached device={want}"
    assert show(next(o.default for o in COMMANDS[NAMES.index(name)].flags()
                     if o.flag == "--device")) == "auto"


@pytest.mark.parametrize("device,message", [
    ("gpu", "--device gpu: not a device"),
    pytest.param("cuda", "--device cuda: no cuda device available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")),
])
def test_a_bad_device_is_one_line(device, message, capsys):
    assert cli.main(["embed", "--model", "m", "--input", "i", "--out", "o.npy",
                     "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and len(err.strip().splitlines()) == 1, err


def test_main_leaves_the_warning_handler_as_it_was(monkeypatch, capsys, tmp_path):
    import bertkit.model.info

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()  # a directory, not a name to fetch

    def warn(model):
        warnings.warn("careful")
        raise UserError("stop")

    monkeypatch.setattr(bertkit.model.info, "info", warn)
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["info", "--model", "m"]) == 2
    assert warnings.showwarning is before
    assert capsys.readouterr().err.splitlines() == ["warning: careful", "error: stop"]


def test_config_errors_through_main(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text("top_k = 'five'\n", encoding="utf-8")
    for config, message in ((tmp_path, "config file is a directory, expected a TOML file"),
                            (tmp_path / "none.toml", "config file does not exist"),
                            (tmp_path / "bad.toml", "top_k: expected an integer, got 'five'")):
        assert cli.main(["fill-mask", "--config", str(config), "--model", "m", "t"]) == 2
        err = capsys.readouterr().err
        assert err == f"error: {config}: {message}\n", err


@pytest.mark.slow
def test_help_does_not_import_torch():
    code = ("import sys; from bertkit.cli.main import build_parser; "
            "p = build_parser(); p.format_help(); p.parse_args(['tokenize', '--model', 'm', 'x']);"
            " print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False"]
