"""Models given by Hugging Face Hub name: the rule that tells a name from a path, a cache
built by hand read offline, and a stand-in Hub (tests/model/stand_in_hub.py, through
HF_ENDPOINT) that the first use fetches from: only a model's files, then offline, at another
--revision, and each failure one `error:` line with exit status 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.model import fetch, hub
from stand_in_hub import StandInHub

REPO = Path(__file__).resolve().parents[2]
NAME = "org/tiny"
# A model repository as the Hub holds one: what bertkit reads and what it must leave there.
OTHER_RUNTIMES = {"onnx/model.onnx": b"onnx", "onnx/config.json": b"{}",
                  "openvino/openvino_model.xml": b"<xml/>", "tf_model.h5": b"h5",
                  ".gitattributes": b"*.safetensors filter=lfs\n"}


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, tiny) -> dict[str, bytes]:
    """The files of a tiny bertkit model directory (with its tokenizer), by name."""
    root = tmp_path_factory.mktemp("tiny")
    directory = tiny.model_dir(root, tiny.write_corpus(root / "corpus.txt"))
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A working directory with `runs/` in it, and an empty Hugging Face cache beside it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path


@pytest.fixture
def stand_in(here, monkeypatch):
    """A stand-in Hub as HF_ENDPOINT, online (tests/conftest.py sets HF_HUB_OFFLINE)."""
    from huggingface_hub import constants

    server = StandInHub()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    # huggingface_hub read HF_HUB_OFFLINE when a test that had it set imported it
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield server
    server.close()


def say(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def snapshot_files(snapshot: Path) -> set[str]:
    return {str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()}


# The rule ----------------------------------------------------------------------------------------

def test_a_name_is_org_slash_name_or_name_unless_a_path_says_otherwise(here):
    (here / "org" / "mine").mkdir(parents=True)
    (here / "local").mkdir()
    for name in ("google-bert/bert-base-uncased", "bert-base-uncased", "org.x/a_b-1.2",
                 "runsx/model"):
        assert fetch.is_hub_name(name), name
    for path in ("local", "org/mine",  # an existing path always wins
                 "runs/nosuch", "org/other",  # first part an existing directory: a path
                 "./model", "../model", "/abs/model", "~/model", ".hidden",
                 "a/b/c", "org/", "", "-x", "org/-x"):
        assert not fetch.is_hub_name(path), path
    assert fetch.resolve_model("runs/nosuch") == Path("runs/nosuch")  # left to the caller


def test_a_missing_local_path_is_refused_as_one_and_never_sent_to_the_hub(here, capsys):
    status, _, err = say(["info", "--model", "runs/nosuch"], capsys)
    assert (status, err) == (2, "error: runs/nosuch: model directory does not exist\n")
    status, _, err = say(["embed", "--model", "./nosuch", "--input", "x.txt", "--out",
                          "x.npy"], capsys)
    assert status == 2 and "Hugging Face" not in err and len(err.splitlines()) == 1


def test_the_hub_name_of_a_cached_snapshot_is_its_repositorys(here):
    snapshot = here / "cache" / "models--org--tiny" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    assert fetch.hub_name(snapshot) == NAME  # a model card's base_model
    assert fetch.hub_name(NAME) == NAME and fetch.hub_name(here / "runs") is None
    from bertkit.serve.workbench import unique_names

    assert unique_names([snapshot, here / "runs"]) == ["tiny", "runs"]  # serve's, not the commit


# A cache built by hand, read offline ------------------------------------------------------------

def hand_built_cache(cache: Path, files: dict[str, bytes], name: str = NAME,
                     commit: str = "c" * 40) -> Path:
    """huggingface_hub's layout: models--ORG--NAME/refs/main holding the commit whose
    snapshots/COMMIT/ holds the files."""
    repo = cache / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for filename, data in files.items():
        (snapshot / filename).write_bytes(data)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_a_hand_built_cache_is_read_offline_by_name(here, model_files, capsys):
    snapshot = hand_built_cache(here / "cache", model_files)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert hub.resolve_model(NAME) == snapshot.resolve()
    encoder = hub.load_encoder(NAME)
    assert encoder.config.vocab_size == json.loads(model_files["config.json"])["vocab_size"]
    status, out, err = say(["info", "--model", NAME], capsys)
    assert status == 0 and "layers" in out, err
    status, out, _ = say(["tokenize", "--model", NAME, "the cat sat"], capsys)
    assert status == 0 and "cat" in out


# A stand-in Hub, through HF_ENDPOINT -------------------------------------------------------------

def test_first_use_fetches_only_a_models_files_and_later_uses_read_the_cache(
        stand_in, model_files, here, capsys, monkeypatch):
    sentence = {"modules.json": b"[]", "1_Pooling/config.json": b"{}", "README.md": b"# tiny",
                "pytorch_model.bin": b"not read where safetensors are"}
    sha = stand_in.add(NAME, {**model_files, **sentence, **OTHER_RUNTIMES})
    status, out, err = say(["info", "--model", NAME], capsys)
    assert status == 0, err
    snapshot = here / "cache" / "models--org--tiny" / "snapshots" / sha
    assert snapshot_files(snapshot) == set(model_files) | set(sentence) - {"pytorch_model.bin"}
    fetched = [p for p in stand_in.requests if "/resolve/" in p]
    assert not [p for p in fetched if "onnx" in p or "openvino" in p or p.endswith(".bin")]
    assert (here / "cache" / "models--org--tiny" / "refs" / "main").read_text() == sha

    stand_in.close()  # the Hub gone: offline, the cache answers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, again, err = say(["info", "--model", NAME], capsys)
    assert (status, again) == (0, out), err


def test_revision_picks_another_commit_on_the_command_line_and_in_the_library(
        stand_in, model_files, here, capsys):
    older = dict(model_files, **{"config.json": _with(model_files["config.json"],
                                                      hidden_dropout_prob=0.25)})
    stand_in.add(NAME, model_files)
    old = stand_in.add(NAME, older, revision="v1")
    status, out, err = say(["info", "--model", NAME, "--revision", "v1", "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["config"]["hidden_dropout_prob"] == 0.25
    status, out, err = say(["info", "--model", NAME, "--json"], capsys)
    assert json.loads(out)["config"]["hidden_dropout_prob"] == 0.1
    assert hub.load_config(NAME, revision=old).hidden_dropout == 0.25  # a commit too
    assert fetch.resolve_model(NAME, "v1").name == old


def test_revision_reaches_every_model_option_of_a_command(stand_in, model_files, here):
    """pretrain's options make --init a Path as they are built: still a name to fetch."""
    from bertkit.cli.main import build_parser

    stand_in.add(NAME, model_files)
    old = stand_in.add(NAME, model_files, revision="v1")
    args = build_parser().parse_args(["pretrain", "--data", "d.txt", "--out", "o", "--init",
                                      NAME, "--tokenizer", NAME, "--revision", "v1",
                                      "--max-steps", "1"])
    options, revision = args.command.read_with_revision(args)
    assert revision == "v1" and isinstance(options[0].init, Path)
    (opts,) = args.command.fetched(options, revision)
    assert opts.init.name == opts.tokenizer.name == old and opts.init.is_dir()


def test_a_private_model_needs_hf_token(stand_in, model_files, capsys, monkeypatch):
    stand_in.add(NAME, model_files, token="hf_secret")
    status, _, err = say(["info", "--model", NAME], capsys)
    assert status == 2 and err.endswith("(or it is private: set HF_TOKEN)\n")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    status, _, err = say(["info", "--model", NAME], capsys)
    assert status == 0, err


def test_a_repository_with_only_pickled_weights_is_fetched_and_read_safely(
        stand_in, model_files, here):
    state = load_file_bytes(model_files["model.safetensors"])
    pickled = here / "pytorch_model.bin"
    torch.save(state, pickled)
    files = {k: v for k, v in model_files.items() if k != "model.safetensors"}
    stand_in.add("legacy", {**files, "pytorch_model.bin": pickled.read_bytes()})
    weights = hub.load_weights("legacy")
    assert set(weights) == set(state)
    torch.testing.assert_close(weights, state)


def test_a_snapshot_a_fetch_left_incomplete_is_said_offline(stand_in, model_files, here,
                                                            monkeypatch):
    if not hasattr(pytest.importorskip("huggingface_hub.errors"), "IncompleteSnapshotError"):
        pytest.skip("this huggingface_hub keeps no listing of a snapshot's files to check")
    stand_in.add(NAME, model_files)
    snapshot = fetch.resolve_model(NAME)
    (snapshot / "vocab.txt").unlink()  # as a fetch killed halfway leaves it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match=r"^org/tiny: its snapshot in the Hugging Face cache "
                                        r"\(.*\) lacks files and HF_HUB_OFFLINE is set"):
        fetch.resolve_model(NAME)


def test_each_bad_input_is_one_line_and_exit_2(stand_in, model_files, here, capsys,
                                               monkeypatch):
    stand_in.add(NAME, model_files)
    cases = [
        (["info", "--model", "org/nosuch"],
         "error: org/nosuch: no such model on the Hugging Face Hub (or it is private: set "
         "HF_TOKEN)\n"),
        (["info", "--model", NAME, "--revision", "v9"],
         "error: org/tiny: no revision 'v9' on the Hugging Face Hub (a branch, tag or commit "
         "of the model)\n"),
    ]
    for argv, said in cases:
        assert say(argv, capsys)[0::2] == (2, said)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, _, err = say(["embed", "--model", "org/other", "--input", "x", "--out", "x.npy"],
                         capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: org/other: not in the Hugging Face cache (") and \
        "HF_HUB_OFFLINE is set" in err and "`hf download org/other`" in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    stand_in.close()  # nothing listens there now: no network
    status, _, err = say(["info", "--model", "org/other", "--revision", "v2"], capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: org/other: cannot reach the Hugging Face Hub (")
    assert "`hf download org/other --revision v2`" in err


def test_the_command_says_a_missing_name_in_one_line_with_no_traceback(stand_in, here):
    """`python -m bertkit.cli`, as a user runs it, HF_ENDPOINT read when huggingface_hub is
    imported too."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", "info", "--model",
                           "google-bert/nosuch"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: google-bert/nosuch: no such model on the Hugging Face Hub "
                           "(or it is private: set HF_TOKEN)\n")


def test_pretrain_init_takes_a_name_for_its_model_and_tokenizer(stand_in, model_files, here,
                                                                tiny, capsys):
    sha = stand_in.add(NAME, model_files)
    corpus = tiny.write_corpus(here / "corpus.txt", documents=20)
    status, _, err = say(["pretrain", "--data", str(corpus), "--out", "runs/continued",
                          "--init", NAME, "--max-steps", "1", "--seq-len", "32",
                          "--batch-size", "4", "--eval-batches", "1"], capsys)
    assert status == 0, err
    prepared = here / "runs" / "continued" / "data" / "tokenizer" / "vocab.txt"
    assert prepared.read_bytes() == model_files["vocab.txt"]  # --init's tokenizer
    card = (here / "runs" / "continued" / "README.md").read_text()
    assert f"base_model: \"{NAME}\"" in card and f"continued from `{NAME}`" in card
    assert f"model: {NAME} (" in err and sha in str(fetch.resolve_model(NAME))


def test_revision_without_a_name_warns_that_it_chooses_nothing(here, model_files, capsys):
    local = here / "local"
    local.mkdir()
    for filename, data in model_files.items():
        (local / filename).write_bytes(data)
    status, _, err = say(["info", "--model", "local", "--revision", "v1"], capsys)
    assert status == 0 and "warning: --revision v1: no model here is given by Hugging " in err


def test_the_library_refuses_a_missing_name_offline_as_a_user_error(here):
    with pytest.raises(UserError, match=r"^org/absent: not in the Hugging Face cache"):
        fetch.resolve_model("org/absent")


def _with(config: bytes, **changes) -> bytes:
    return json.dumps({**json.loads(config), **changes}).encode()


def load_file_bytes(data: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return load(data)



def test_revision_is_one_flag_where_a_command_takes_models_and_none_elsewhere():
    import argparse

    from bertkit.cli.finetuning import task_commands
    from bertkit.cli.main import COMMANDS

    def flags(name: str) -> list[str]:
        parser = argparse.ArgumentParser()
        next(c for c in COMMANDS + task_commands() if c.name == name).add_flags(parser)
        return [s for a in parser._actions for s in a.option_strings]

    assert flags("serve").count("--revision") == 1  # --model A --model B: one revision
    assert flags("pretrain").count("--revision") == 1  # --init and --tokenizer
    assert flags("finetune classify").count("--revision") == 1  # --model, or the word cnn
    assert "--revision" not in flags("demo") and "--revision" not in flags("tokenizer train")
