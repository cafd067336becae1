"""Validation before output: a command refused for a cheap reason (an output directory another
process holds, a corrupt shard, a bad flag combination, an unreadable input) says so in one
`error:` line on stderr, with nothing before it (no settings, no measurement) and nothing on
stdout."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.runlock import LOCK_FILE

TINY = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--max-steps", "2"]


def _refused(capsys, argv: list[str]) -> str:
    """The one error line of a refused command; fails if anything else was written."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


@pytest.fixture
def held(tmp_path):
    """A run directory whose lock another live process on this host holds."""
    sleeper = subprocess.Popen(["sleep", "60"])
    run = tmp_path / "held"
    run.mkdir()
    (run / LOCK_FILE).write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(),
                                             "started": "earlier"}))
    yield run, sleeper.pid
    sleeper.kill()
    sleeper.wait()


def test_pretrain_into_a_held_directory_says_only_so(prepared, held, capsys):
    run, pid = held
    line = _refused(capsys, ["pretrain", "--data", str(prepared), "--out", str(run), *TINY])
    assert line == f"error: {run} is in use by pid {pid} on {socket.gethostname()} (started " \
                   f"earlier)"
    assert os.listdir(run) == [LOCK_FILE]


def test_pretrain_on_a_corrupt_shard_says_only_so(prepared, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(prepared, bad)
    tokens = next((bad / "shards").glob("*.tokens.bin"))
    raw = bytearray(tokens.read_bytes())
    raw[10] ^= 1
    tokens.write_bytes(bytes(raw))
    out = tmp_path / "run"
    line = _refused(capsys, ["pretrain", "--data", str(bad), "--out", str(out), *TINY])
    assert line == f"error: {tokens}: shard file is corrupt (checksum differs from " \
                   f"manifest.json): re-run bertkit prepare"
    assert not out.exists()


def test_pretrain_with_a_bad_flag_combination_says_only_so(prepared, tmp_path, capsys):
    out = tmp_path / "run"
    line = _refused(capsys, ["pretrain", "--data", str(prepared), "--out", str(out), *TINY,
                             "--objective", "mlm+nsp", "--architecture", "modern"])
    assert "--objective mlm+nsp needs a next-sentence head" in line
    line = _refused(capsys, ["pretrain", "--data", str(prepared), "--out", str(out), *TINY,
                             "--precision", "fp16", "--device", "cpu"])
    assert line == "error: fp16 needs a GPU; use bf16 on the CPU"
    assert not out.exists()


def test_pretrain_without_a_budget_names_the_flags_that_give_one(tmp_path, capsys):
    """The user typed flags: the line names them beside the fields a --config file or
    TrainConfig sets, not the fields alone."""
    out = tmp_path / "run"
    line = _refused(capsys, ["pretrain", "--data", str(tmp_path / "d"), "--out", str(out)])
    assert line == ("error: give max_steps or max_time, or both (--max-steps, --max-time on "
                    "the command line)")
    assert not out.exists()


def test_pretrain_prints_its_settings_once_the_checks_pass(prepared, tmp_path, capsys):
    assert main(["pretrain", "--data", str(prepared), "--out", str(tmp_path / "run"),
                 *TINY]) == 0
    err = capsys.readouterr().err
    assert err.startswith("settings (bertkit ") and "\nprecision " in err


def test_finetune_on_a_bad_training_file_says_only_so(minilm_dir, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\ngood\tpos\none field only\n", encoding="utf-8")
    out = tmp_path / "run"
    line = _refused(capsys, ["finetune", "classify", "--model", str(minilm_dir), "--train",
                             str(train), "--out", str(out), "--epochs", "1"])
    assert line == f"error: {train}:3: 1 fields but the header (line 1) has 2"
    assert not out.exists()


def test_embed_of_a_bad_input_says_only_so(minilm_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff not utf-8\n")
    out = tmp_path / "e.npy"
    line = _refused(capsys, ["embed", "--model", str(minilm_dir), "--input", str(bad),
                             "--out", str(out)])
    assert line == f"error: {bad}:2: not UTF-8 text (byte 0xff at column 1)"
    assert not out.exists()


def test_demo_of_a_bad_input_says_only_so(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe not text\n")
    line = _refused(capsys, ["demo", "--input", str(bad), "--out", str(tmp_path / "d"),
                             "--max-steps", "1"])
    assert line == f"error: {bad}:1: not UTF-8 text (byte 0xff at column 1)"


NO_DURATION = "not a duration (e.g. 90s, 10m, 1.5h, or minutes as a number)"


@pytest.mark.parametrize("command", [
    ["pretrain", "--data", "d", "--max-time"],
    ["finetune", "classify", "--model", "m", "--train", "t.jsonl", "--max-time"],
    ["finetune", "tag", "--model", "m", "--train", "t.conll", "--max-time"],
    ["road", "elmo", "--data", "d.txt", "--max-minutes"],
    ["road", "seq2seq", "--train", "t.tsv", "--max-minutes"],
    ["demo", "--minutes"],
])
@pytest.mark.parametrize("value", ["30 sec", "-5m", "0"])
def test_a_time_budget_that_is_no_duration_says_only_so(command, value, tmp_path, capsys):
    """Not argparse's usage (a float flag's "invalid float value: '30s'"): one line naming the
    flag and the forms, before anything is read or written."""
    out = tmp_path / "run"
    line = _refused(capsys, [*command, value, "--out", str(out)])
    assert line == f"error: {command[-1]} {value}: {NO_DURATION}"
    assert not out.exists()


def test_pretrain_records_a_duration_in_minutes(prepared, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["pretrain", "--data", str(prepared), "--out", str(run), *TINY,
                 "--max-time", "1h30m"]) == 0
    assert "max_time=90.0" in " ".join(capsys.readouterr().err.split())
    recorded = json.loads((run / "training_args.json").read_text())
    assert recorded["options"]["train"]["max_time"] == 90.0
    assert "--max-time 90.0" in recorded["command"]
