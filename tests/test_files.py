"""Outputs never lose a byte: directories replaced whole, outputs that would clobber inputs refused."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import bertkit.files as files
import bertkit.temporaries as temporaries
from bertkit.files import UserError, atomic_dir, check_not_input, publish_dir
from bertkit.model.hub import load_pretraining_model, save_model


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _old_run(path: Path) -> None:
    """A run directory: a model (config + weights), a checkpoint and a log beside it."""
    (path / "checkpoints" / "step-1").mkdir(parents=True)
    (path / "checkpoints" / "step-1" / "model.safetensors").write_bytes(b"ckpt")
    (path / "metrics.jsonl").write_text('{"step": 1}\n', encoding="utf-8")
    (path / "config.json").write_text("old", encoding="utf-8")
    (path / "weights.bin").write_bytes(b"old weights")


def test_an_existing_directory_is_replaced_whole_keeping_what_the_block_did_not_write(tmp_path):
    _old_run(tmp_path / "run")
    (tmp_path / "run" / "stale.bin").write_bytes(b"from an earlier save")
    with atomic_dir(tmp_path / "run", replaces=["stale.bin"]) as tmp:
        (tmp / "config.json").write_text("new", encoding="utf-8")
        (tmp / "weights.bin").write_bytes(b"new weights")
    assert _tree(tmp_path / "run") == {
        "checkpoints/step-1/model.safetensors": b"ckpt", "config.json": b"new",
        "metrics.jsonl": b'{"step": 1}\n', "weights.bin": b"new weights"}
    assert os.listdir(tmp_path) == ["run"]  # no temporary directory left


def test_a_failed_block_leaves_the_old_directory_and_no_temporary_one(tmp_path):
    _old_run(tmp_path / "run")
    before = _tree(tmp_path / "run")
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "run") as tmp:
            (tmp / "config.json").write_text("new", encoding="utf-8")
            raise RuntimeError("killed midway")
    assert _tree(tmp_path / "run") == before
    assert os.listdir(tmp_path) == ["run"]


def test_without_an_exchange_two_renames_still_publish_it(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    _old_run(tmp_path / "run")
    with atomic_dir(tmp_path / "run") as tmp:
        (tmp / "config.json").write_text("new", encoding="utf-8")
    assert (tmp_path / "run" / "config.json").read_text(encoding="utf-8") == "new"
    assert (tmp_path / "run" / "weights.bin").read_bytes() == b"old weights"
    assert os.listdir(tmp_path) == ["run"]


def test_saving_a_model_that_fails_at_the_swap_leaves_the_old_model(tmp_path, monkeypatch, tiny):
    old, new = tiny.model(seed=0), tiny.model(seed=1)
    save_model(old, tmp_path / "m")
    before = _tree(tmp_path / "m")

    def fail(a, b):
        raise OSError("the machine went down")

    monkeypatch.setattr(files, "_exchange", fail)
    with pytest.raises(OSError):
        save_model(new, tmp_path / "m")
    assert _tree(tmp_path / "m") == before
    assert os.listdir(tmp_path) == ["m"]
    monkeypatch.undo()
    save_model(new, tmp_path / "m")
    loaded = load_pretraining_model(tmp_path / "m").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in new.state_dict().items())


_KILLER = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    import bertkit.files as files

    target, die_at = Path(sys.argv[1]), int(sys.argv[2])
    calls = 0

    def counted(fn):
        def step(*args, **kwargs):
            global calls
            calls += 1
            if calls == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return step

    for name in ("replace", "rename", "link", "unlink", "rmdir"):
        setattr(os, name, counted(getattr(os, name)))
    shutil.rmtree = counted(shutil.rmtree)
    files._exchange = counted(files._exchange)
    with files.atomic_dir(target) as tmp:
        (tmp / "config.json").write_text("new", encoding="utf-8")
        counted(lambda: None)()
        (tmp / "weights.bin").write_bytes(b"new weights")
    print("finished", calls)
""")


@pytest.mark.slow
def test_a_kill_at_any_instant_of_a_save_leaves_the_old_or_the_new_directory_whole(tmp_path):
    """SIGKILL at each file-system step of replacing a run's model, one process per step."""
    outcomes = set()
    for die_at in range(1, 40):
        root = tmp_path / str(die_at)
        _old_run(root / "run")
        done = subprocess.run([sys.executable, "-c", _KILLER, str(root / "run"), str(die_at)],
                              capture_output=True, text=True, env={**os.environ},
                              cwd=Path(__file__).parent.parent)
        tree = _tree(root / "run")
        model = (tree.get("config.json"), tree.get("weights.bin"))
        assert model in {(b"old", b"old weights"), (b"new", b"new weights")}, (die_at, tree)
        assert tree["checkpoints/step-1/model.safetensors"] == b"ckpt"
        assert tree["metrics.jsonl"] == b'{"step": 1}\n'
        outcomes.add(model[0])
        if done.returncode == 0:
            assert done.stdout.startswith("finished")
            assert os.listdir(root) == ["run"]
            break
        assert done.returncode == -9, done.stderr
    else:
        pytest.fail("the save never finished")
    assert outcomes == {b"old", b"new"}  # kills landed both before and after the swap


def test_publish_dir_into_a_new_path_is_one_rename(tmp_path):
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "a").write_text("1", encoding="utf-8")
    publish_dir(tmp_path / "new", tmp_path / "out")
    assert _tree(tmp_path / "out") == {"a": b"1"} and not (tmp_path / "new").exists()


def test_an_output_that_is_an_input_is_refused_however_spelled(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n", encoding="utf-8")
    os.link(data, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(data)
    (tmp_path / "sub").mkdir()
    for out in (data, tmp_path / "." / "data.jsonl", tmp_path / "hard.jsonl",
                tmp_path / "soft.jsonl"):
        with pytest.raises(UserError, match=r"output is the input .*data.jsonl"):
            check_not_input(out, [data])
    with pytest.raises(UserError, match=r"--out is the --model"):
        check_not_input(tmp_path, [tmp_path / "sub" / ".."], what="--out", names=["--model"])
    with pytest.raises(UserError, match=r"output directory holds the input"):
        check_not_input(tmp_path, [data])
    check_not_input(tmp_path / "new.jsonl", [data])  # a new file is fine
    check_not_input(tmp_path / "sub", [data])  # so is a directory beside it
    check_not_input(None, [data])  # stdout
    assert data.read_text(encoding="utf-8") == "{}\n"


def test_a_linked_output_directory_is_replaced_where_the_link_points(tmp_path):
    _old_run(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with atomic_dir(tmp_path / "link") as tmp:
        (tmp / "config.json").write_text("new", encoding="utf-8")
    assert (tmp_path / "link").is_symlink()
    assert (tmp_path / "real" / "config.json").read_text(encoding="utf-8") == "new"
    assert (tmp_path / "real" / "weights.bin").read_bytes() == b"old weights"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_the_library_writers_refuse_an_output_that_is_an_input(tmp_path):
    from bertkit.finetuning.recipe import finetune
    from bertkit.text.vocab import train_tokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
    with pytest.raises(UserError, match="output directory holds the input"):
        train_tokenizer([corpus], vocab_size=40, out=tmp_path, progress=False)
    with pytest.raises(UserError, match="output is the model"):
        finetune("classify", tmp_path, corpus, None, tmp_path / ".")
    assert sorted(os.listdir(tmp_path)) == ["c.txt"]


_WRITE_EVERYTHING = textwrap.dedent("""
    import os, sys, torch
    from pathlib import Path
    from bertkit.config import EncoderConfig
    from bertkit.files import atomic_file, atomic_path, write_json
    from bertkit.model.heads import PretrainingModel
    from bertkit.model.hub import save_model
    from bertkit.training.checkpoint import save_checkpoint

    model = PretrainingModel(EncoderConfig(vocab_size=20, hidden_size=8, num_layers=1,
                                           num_heads=2, intermediate_size=16, max_positions=8))
    for out, umask in zip(sys.argv[1::2], sys.argv[2::2]):  # the umask read anew each time
        os.umask(int(umask, 8))
        out = Path(out)
        save_model(model, out / "model")
        save_checkpoint(out / "run", 1, model=model, state={"step": 1}, keep=1,
                        optimizer=torch.optim.AdamW(model.parameters()))
        write_json(out / "metrics.json", {})
        with atomic_file(out / "log.txt") as f:
            f.write("x")
        with atomic_path(out / "raw.bin") as tmp:
            tmp.write_bytes(b"x")
""")
UMASKS = [0o022, 0o077, 0o002]


@pytest.fixture(scope="module")
def written_under(tmp_path_factory) -> dict[int, Path]:
    """A folder of everything written under each umask: one process for them all (a start-up
    costs seconds: torch), its umask set before each."""
    root = tmp_path_factory.mktemp("umask")
    folders = {umask: root / oct(umask) for umask in UMASKS}
    for folder in folders.values():
        folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-c", _WRITE_EVERYTHING,
                    *(arg for umask, folder in folders.items()
                      for arg in (str(folder / "out"), oct(umask)))],
                   env=env, check=True, timeout=120)
    return folders


@pytest.mark.slow
@pytest.mark.parametrize("umask", UMASKS)
def test_every_file_written_gets_the_mode_the_umask_gives(written_under, umask):
    """safetensors' save_file and mkstemp create owner-only files; the JSON beside them
    follows the umask, and so must they."""
    tmp_path = written_under[umask]
    written = [p for p in (tmp_path / "out").rglob("*")]
    assert {p.name for p in written} >= {"model.safetensors", "optimizer.safetensors",
                                         "state.safetensors", "config.json", "metrics.json",
                                         "log.txt", "raw.bin"}
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777) for p in written}
    assert modes == {name: oct((0o777 if (tmp_path / name).is_dir() else 0o666) & ~umask)
                     for name in modes}


def test_files_linked_from_elsewhere_keep_their_mode(tmp_path):
    private = tmp_path / "secret.bin"
    private.write_bytes(b"x")
    private.chmod(0o600)
    with atomic_dir(tmp_path / "out") as tmp:
        os.link(private, tmp / "secret.bin")
    assert private.stat().st_mode & 0o777 == 0o600


def test_the_umask_is_read_without_changing_it():
    before = os.umask(0o027)
    try:
        assert files._umask() == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(before)
# The machine's refusals and the leftovers of killed processes ------------------------------

@pytest.mark.parametrize("error,message", [
    (OSError(28, "No space left on device"), "out/x.bin: no space left on the device"),
    (OSError(30, "Read-only file system", "/ro/.x.bin.123-abcdef.k2j3h4g5.tmp"),
     "/ro/x.bin: read-only file system"),
    (OSError(21, "Is a directory", "/d/..m.1-abcdef.aaaaaaaa.tmp.2-abcdef.bbbbbbbb.tmp/vocab."
                                   "txt"), "/d/m/vocab.txt: is a directory"),  # nested
    (Exception("Error while serializing: I/O error: No space left on device (os error 28)"),
     "out/x.bin: no space left on the device"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"),
     "out of memory; lower --batch-size"),
    (MemoryError(), "out of memory; lower --batch-size"),
])
def test_the_machines_errors_are_one_line_naming_the_output(error, message):
    assert str(files.environment_error(error, "out/x.bin")).startswith(message)


@pytest.mark.parametrize("error", [OSError(9, "Bad file descriptor"), ValueError("a bug"),
                                   RuntimeError("shape mismatch"), Exception("(os error 9)")])
def test_a_bug_keeps_its_traceback(error):
    assert files.environment_error(error, "out/x.bin") is None


def test_an_atomic_writer_removes_its_temporary_on_any_error(tmp_path):
    (tmp_path / "x.txt").write_text("before", encoding="utf-8")
    for error in (OSError(28, "No space left on device"), KeyboardInterrupt(), ValueError()):
        with pytest.raises((UserError, KeyboardInterrupt, ValueError)):
            with files.atomic_file(tmp_path / "x.txt") as f:
                f.write("half")
                raise error
        with pytest.raises((UserError, KeyboardInterrupt, ValueError)):
            with files.atomic_dir(tmp_path / "d") as d:
                (d / "half").write_text("half", encoding="utf-8")
                raise error
    assert sorted(os.listdir(tmp_path)) == ["x.txt"]
    assert (tmp_path / "x.txt").read_text(encoding="utf-8") == "before"


def test_only_a_dead_processes_temporaries_are_swept(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    with files.atomic_path(tmp_path / "x.npy") as mine:  # this process's own: alive
        host = mine.name.rsplit(".", 3)[1].split("-")[1]  # .x.npy.PID-HOST.XXXXXXXX.tmp
        stale = tmp_path / f".x.npy.{dead}-{host}.abcdefgh.tmp"
        stale.write_bytes(b"half")
        others = [tmp_path / f".x.npy.{dead}-ffffff.abcdefgh.tmp" if host != "ffffff" else
                  tmp_path / f".x.npy.{dead}-000000.abcdefgh.tmp",  # another machine's
                  tmp_path / f".y.npy.{dead}-{host}.abcdefgh.tmp",  # another output's
                  tmp_path / ".x.npy.backup.tmp", tmp_path / "x.npy.tmp"]  # the user's
        for other in others:
            other.write_bytes(b"keep")
        assert temporaries.sweep_leftovers(tmp_path, "x.npy") == [stale]
        assert mine.exists() and all(p.exists() for p in others)
        mine.write_bytes(b"new")
    assert (tmp_path / "x.npy").read_bytes() == b"new"
    assert temporaries.sweep_leftovers(tmp_path) == [
        tmp_path / f".y.npy.{dead}-{host}.abcdefgh.tmp"]
    with files.atomic_file(tmp_path / "z.txt") as f:
        f.write("z")
    stale.write_bytes(b"half")
    with files.atomic_file(tmp_path / "x.npy", "wb") as f:
        f.write(b"newer")
    assert not stale.exists()
    assert capsys.readouterr().err.strip() == (f"note: removed 1 leftover temporary of killed "
                                               f"bertkit runs: {stale}")


def test_a_directory_is_flushed_to_the_disk_before_it_is_published(tmp_path, monkeypatch):
    """atomic_dir fsyncs every file it wrote (and the folders) before the swap, as atomic_path
    does for one file: a power cut must not publish empty files."""
    from bertkit import files

    synced, published = [], []
    real_fsync, real_publish = os.fsync, files.publish_dir

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    def publish(new, path, replaces=()):
        published.append(list(synced))
        return real_publish(new, path, replaces)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(files, "publish_dir", publish)
    with files.atomic_dir(tmp_path / "model") as tmp:
        (tmp / "weights.bin").write_bytes(b"w" * 10)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
    names = {os.path.basename(p) for p in published[0]}
    assert {"weights.bin", "config.json", "sub"} <= names
    assert (tmp_path / "model" / "weights.bin").read_bytes() == b"w" * 10


@pytest.mark.parametrize("compression", ["gzip", "bzip2", "zstd"])
def test_every_reader_opens_a_compressed_file_as_what_it_holds(tmp_path, compression):
    """read_lines and read_json, under every reader: a file compressed by any name, known by
    its first bytes; its lines numbered as in the plain file; corrupt data one line."""
    import bz2
    import gzip

    if compression == "zstd":
        zstandard = pytest.importorskip("zstandard")
        pack = zstandard.ZstdCompressor().compress
    else:
        pack = gzip.compress if compression == "gzip" else bz2.compress
    text = "one\n\ntwo ü\r\nthree\n"
    (tmp_path / "lines.data").write_bytes(pack(text.encode()))
    assert files.compression_of(tmp_path / "lines.data") == compression
    assert list(files.read_lines(tmp_path / "lines.data")) == [(1, "one"), (2, ""), (3, "two ü"),
                                                               (4, "three")]
    (tmp_path / "c.json").write_bytes(pack(b'{"a": [1, 2]}'))
    assert files.read_json(tmp_path / "c.json") == {"a": [1, 2]}
    (tmp_path / "cut").write_bytes(pack("".join(f"line {i}\n" for i in range(20000)).encode())[:-30])
    with pytest.raises(UserError, match=rf"cut:\d+: corrupt {compression} data \(.+\)$"):
        list(files.read_lines(tmp_path / "cut"))
    (tmp_path / "bad").write_bytes(pack(b"fine\n\xff\n"))
    with pytest.raises(UserError, match=r"bad:2: not UTF-8 text"):
        list(files.read_lines(tmp_path / "bad"))


def test_text_not_utf8_says_when_it_reads_as_windows_1252(tmp_path):
    # Excel's "CSV (Comma delimited)" on Western Windows: "Très" as T r 0xe8 s
    (tmp_path / "excel.csv").write_bytes("text\nTrès “bon” café\n".encode("cp1252"))
    with pytest.raises(UserError) as caught:
        list(files.read_lines(tmp_path / "excel.csv"))
    assert str(caught.value).endswith("excel.csv:2: not UTF-8 text (byte 0xe8 at column 3): "
                                      "'è' in Windows-1252, as Excel saves a CSV? iconv -f "
                                      "cp1252 -t utf-8 converts it")
    for binary in (b"ok\n\xff\xfe\x00\n", b"ok\n\x81\n", b"ok\n\xa7\n"):
        (tmp_path / "data").write_bytes(binary)  # 0xff, none in cp1252, not a letter
        with pytest.raises(UserError, match=r"data:2: not UTF-8 text \(byte 0x[0-9a-f]+ at "
                                            r"column 1\)$"):
            list(files.read_lines(tmp_path / "data"))


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path):
    # what Notepad and PowerShell write first: every reader leaves it out, as CSV's did
    bom = b"\xef\xbb\xbf"
    (tmp_path / "a.jsonl").write_bytes(bom + b'{"text": "a"}\r\n{"text": "b"}\r\n')
    assert list(files.read_jsonl(tmp_path / "a.jsonl")) == [(1, {"text": "a"}), (2, {"text": "b"})]
    assert list(files.read_lines(tmp_path / "a.jsonl"))[0] == (1, '{"text": "a"}')
    (tmp_path / "s.json").write_bytes(bom + b'{"data": []}')
    assert files.read_json(tmp_path / "s.json") == {"data": []}
    (tmp_path / "bad.json").write_bytes(bom + b'{"a":\n"\xff"}')
    with pytest.raises(UserError, match=r"bad.json:2: not UTF-8 text \(byte 0xff\)"):
        files.read_json(tmp_path / "bad.json")
