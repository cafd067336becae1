"""A full disk, a read-only or forbidden directory, a path of the wrong kind, in every command
that writes: one line `error:` naming the path, exit 2, no traceback, no temporary left, the
previous output as it was."""
from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
import tempfile

import pytest

import bertkit.files


def _commands(world, out, again: bool):
    """Each writing command, its output; `again`: a second run that writes something else."""
    seed = "1" if again else "0"
    return {
        "init": ["init", "--preset", "tiny", "--tokenizer", world / "tok", "--max-positions",
                 "32", "--seed", seed, "--out", out],
        "prepare": ["prepare", "--input", world / "corpus.txt", "--tokenizer", world / "tok",
                    "--workers", "1", "--heldout", "0.1" if again else "0.05", "--out", out],
        "embed": ["embed", "--model", world / "model", "--input", world / "lines.txt",
                  "--pool", "cls" if again else "mean", "--out", out],
    }


OUTPUT = {"init": "model", "prepare": "data", "embed": "vectors.npy"}
# Past the small files a command writes (its lock, plans, logs), short of its big one.
FULL_AFTER = {"init": 64 << 10, "prepare": 1 << 10, "embed": 1 << 10}


@pytest.fixture
def previous(tmp_path, world, tools, capsys, request):
    """The command's output from an earlier run that succeeded, and how to run it again."""
    name = request.param
    out = tmp_path / "outputs" / OUTPUT[name]
    code, err = tools.cli(capsys, *_commands(world, out, again=False)[name])
    assert code == 0, err
    return name, out, _commands(world, out, again=True)[name]


def _assert_unharmed(tools, tmp_path, out, before):
    assert tools.snapshot(out) == before  # the previous output, byte for byte
    assert tools.leftovers(tmp_path / "outputs") == []


@pytest.mark.parametrize("previous", list(OUTPUT), indirect=True)
def test_a_disk_that_fills_up_midway(previous, tmp_path, tools, capsys):
    name, out, again = previous
    before = tools.snapshot(out)
    with tools.disk_full_after(FULL_AFTER[name]):
        code, err = tools.cli(capsys, *again)
    line = tools.assert_one_error(code, err, out)
    assert "file too large" in line
    _assert_unharmed(tools, tmp_path, out, before)


def _refuse(monkeypatch, code: int, *targets):
    """Make the system calls `targets` (module, name) fail with `code`, as a full disk or a
    read-only / forbidden directory fails them."""
    for module, name in targets:
        def refused(*args, _name=name, **kwargs):
            where = kwargs.get("dir") or next(
                (a for a in args if isinstance(a, (str, os.PathLike))), None)
            raise OSError(code, os.strerror(code), None if _name == "fsync" else where)
        monkeypatch.setattr(module, name, refused)


@pytest.mark.parametrize("previous", list(OUTPUT), indirect=True)
@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_directory_that_refuses_new_files(previous, code, tmp_path, tools, capsys,
                                            monkeypatch):
    """Read-only or forbidden: creating the temporary beside the output fails (as root,
    chmod forbids nothing, so the refusal is injected)."""
    name, out, again = previous
    before = tools.snapshot(out)
    _refuse(monkeypatch, code, (tempfile, "mkstemp"), (tempfile, "mkdtemp"))
    code_, err = tools.cli(capsys, *again)
    line = tools.assert_one_error(code_, err, out.parent)
    assert ("read-only" if code == errno.EROFS else "permission denied") in line
    _assert_unharmed(tools, tmp_path, out, before)


@pytest.mark.parametrize("previous", list(OUTPUT), indirect=True)
def test_no_space_for_the_last_step(previous, tmp_path, tools, capsys, monkeypatch):
    """ENOSPC where the output is put in place (the rename of a file, the carrying over of a
    directory's other files): the temporary goes, the previous output stays."""
    name, out, again = previous
    before = tools.snapshot(out)
    _refuse(monkeypatch, errno.ENOSPC, (os, "replace"), (bertkit.files, "publish_dir"))
    code, err = tools.cli(capsys, *again)
    line = tools.assert_one_error(code, err, out if name != "embed" else out.parent)
    assert "no space left on the device" in line
    _assert_unharmed(tools, tmp_path, out, before)


def test_no_space_while_saving_a_checkpoint(tmp_path, world, tools, capsys, monkeypatch):
    """pretrain: the files of step 2 cannot be synced; the checkpoint of step 1 stays whole."""
    out = tmp_path / "outputs" / "run"
    code, err = tools.cli(capsys, *tools.pretrain_args(world, out, steps=1))
    assert code == 0, err
    before = tools.snapshot(out / "checkpoints")
    _refuse(monkeypatch, errno.ENOSPC, (os, "fsync"))
    code, err = tools.cli(capsys, *tools.pretrain_args(world, out, steps=2), "--resume")
    line = tools.assert_one_error(code, err, out)
    assert "no space left on the device" in line
    assert tools.snapshot(out / "checkpoints") == before
    assert tools.leftovers(tmp_path / "outputs") == []


def _file_size_limit(nbytes: int):
    """What `disk_full_after` does, for a child process (and the processes it starts)."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE,
                           (nbytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return limit


@pytest.mark.slow
def test_a_full_disk_under_torchrun_is_one_line(tmp_path, world, tools):
    """Two ranks: rank 0 cannot write the checkpoint and says so; rank 1, whose collective
    fails as rank 0 leaves, exits 2 without a line of its own ('another rank left the run')."""
    out = tmp_path / "outputs" / "run"
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run(
        [sys.executable, "-m", "bertkit.cli.torchrun", "--standalone", "--nproc_per_node", "2",
         "-m", "bertkit.cli", *map(str, tools.pretrain_args(world, out, steps=2))],
        env=dict(env, OMP_NUM_THREADS="1"), preexec_fn=_file_size_limit(64 << 10),
        capture_output=True, text=True, timeout=120)
    line = tools.assert_one_error(done.returncode, done.stderr, out)
    assert "file too large" in line
    assert tools.leftovers(tmp_path / "outputs") == []


def test_a_full_disk_while_saving_a_fine_tuned_model(tmp_path, world, tools, capsys):
    out = tmp_path / "outputs" / "clf"
    with tools.disk_full_after(64 << 10):
        code, err = tools.cli(capsys, *tools.finetune_args(world, out))
    tools.assert_one_error(code, err, out)
    assert not (out / "model.safetensors").exists()
    assert tools.leftovers(tmp_path / "outputs") == []


# Paths of the wrong kind ----------------------------------------------------------------------

def test_a_file_output_that_names_a_directory(tmp_path, world, tools, capsys):
    (tmp_path / "vectors.npy").mkdir()
    (tmp_path / "vectors.npy" / "mine.txt").write_text("keep", encoding="utf-8")
    code, err = tools.cli(capsys, "embed", "--model", world / "model", "--input",
                          world / "lines.txt", "--out", tmp_path / "vectors.npy")
    assert "is a directory" in tools.assert_one_error(code, err, tmp_path / "vectors.npy")
    assert os.listdir(tmp_path / "vectors.npy") == ["mine.txt"]
    assert tools.leftovers(tmp_path) == []


def test_a_file_where_a_directory_is_needed(tmp_path, world, tools, capsys):
    (tmp_path / "notes").write_text("mine", encoding="utf-8")
    code, err = tools.cli(capsys, "embed", "--model", world / "model", "--input",
                          world / "lines.txt", "--out", tmp_path / "notes" / "vectors.npy")
    tools.assert_one_error(code, err, tmp_path / "notes")
    for args in (["init", "--preset", "tiny", "--tokenizer", world / "tok"],
                 ["prepare", "--input", world / "corpus.txt", "--tokenizer", world / "tok"]):
        code, err = tools.cli(capsys, *args, "--out", tmp_path / "notes")
        assert "is not a directory" in tools.assert_one_error(code, err, tmp_path / "notes")
    assert (tmp_path / "notes").read_text(encoding="utf-8") == "mine"
    assert sorted(os.listdir(tmp_path)) == ["notes"]


def test_a_forbidden_directory_for_real(tmp_path, world, tools, capsys):
    """chmod, where it binds (not as root)."""
    if os.geteuid() == 0:
        pytest.skip("root writes into a directory whatever its mode (the injected refusal "
                    "above covers it)")
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    try:
        code, err = tools.cli(capsys, "embed", "--model", world / "model", "--input",
                              world / "lines.txt", "--out", tmp_path / "ro" / "v.npy")
        assert "permission denied" in tools.assert_one_error(code, err, tmp_path / "ro")
        assert os.listdir(tmp_path / "ro") == []
    finally:
        os.chmod(tmp_path / "ro", 0o755)


def test_no_room_even_for_the_lock(tmp_path, world, tools, capsys):
    """The lock file cannot be written: one line, and no unreadable lock left to block the
    next run."""
    out = tmp_path / "outputs" / "model"
    with tools.disk_full_after(8):
        code, err = tools.cli(capsys, "init", "--preset", "tiny", "--tokenizer", world / "tok",
                              "--out", out)
    assert "file too large" in tools.assert_one_error(code, err, out)
    assert os.listdir(tmp_path / "outputs") == []  # not even the directory the lock made
    code, err = tools.cli(capsys, "init", "--preset", "tiny", "--tokenizer", world / "tok",
                          "--out", out)
    assert code == 0, err
