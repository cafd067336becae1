"""Fine-tuning goes on after an interruption: Ctrl-C or SIGTERM saves a checkpoint on the spot,
a kill leaves the last --save-every one, and `resume` then ends with the model of an
uninterrupted run, bit for bit (dropout on, best-checkpoint tracking and early stopping
included), in process and through the command line."""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.files import UserError, read_jsonl, sha256_file
from bertkit.finetuning import recipe
from bertkit.finetuning.recipe import finetune

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]


def _model_files(out: Path) -> dict:
    """Every tensor the saved directory holds, by file and name."""
    return {(f.name, k): v for f in sorted(out.glob("*.safetensors"))
            for k, v in load_file(str(f)).items()}


def _assert_same_model(a: Path, b: Path) -> None:
    ta, tb = _model_files(a), _model_files(b)
    assert ta and ta.keys() == tb.keys()
    for key in ta:
        assert ta[key].dtype == tb[key].dtype and bool((ta[key] == tb[key]).all()), key
    assert json.loads((a / "dev_metrics.json").read_text()) == \
        json.loads((b / "dev_metrics.json").read_text())


def _signal_at(monkeypatch, batch: int, signum: int = signal.SIGTERM) -> None:
    """The next `finetune` sends itself `signum` as it takes its `batch`-th batch, as if
    Ctrl-C or a scheduler's SIGTERM came during that step."""
    taken = [0]

    class Signalling(recipe.EpochBatches):
        def __iter__(self):
            for b in super().__iter__():
                taken[0] += 1
                if taken[0] == batch:
                    os.kill(os.getpid(), signum)
                yield b

    monkeypatch.setattr(recipe, "EpochBatches", Signalling)


def _crash_at(monkeypatch, batch: int) -> None:
    """The next `finetune` dies as it takes its `batch`-th batch, saving nothing (a kill)."""
    taken = [0]

    class Crashing(recipe.EpochBatches):
        def __iter__(self):
            for b in super().__iter__():
                taken[0] += 1
                if taken[0] == batch:
                    raise KeyboardInterrupt  # a second Ctrl-C: the loop aborts, no checkpoint
                yield b

    monkeypatch.setattr(recipe, "EpochBatches", Crashing)


# 160 training rows at batch 16: 10 steps an epoch, an evaluation at the end of each.
SETTINGS = dict(epochs=3, batch_size=16)


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert_dropout, task_files, quick_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests' runs (one_thread): sums in the same order
    try:
        result = finetune("classify", tiny_bert_dropout, task_files["train"],
                          task_files["dev"], out, quick_config(**SETTINGS))
    finally:
        torch.set_num_threads(threads)
    assert result.stopped_by == "epochs" and result.steps == 30
    return out, result


@pytest.mark.slow
@pytest.mark.parametrize("stops", [[4], [3, 4], [10], [12, 9]],
                         ids=["mid-epoch", "twice-in-one-epoch", "at-an-evaluation",
                              "twice-across-epochs"])
def test_sigterm_then_resume_equals_an_uninterrupted_run(
        uninterrupted, tiny_bert_dropout, task_files, quick_config, tmp_path, monkeypatch,
        capsys, stops):
    full, expected = uninterrupted
    out, done = tmp_path / "out", 0
    for i, batches in enumerate(stops):
        with monkeypatch.context() as patch:
            _signal_at(patch, batches)
            result = finetune("classify", tiny_bert_dropout, task_files["train"],
                              task_files["dev"], out,
                              quick_config(**SETTINGS, resume=i > 0, show_progress=True))
        done += batches
        assert result.stopped_by == "interrupted" and result.steps == done
        assert (out / f"checkpoints/step-{done:08d}/manifest.json").is_file()
        assert not (out / "model.safetensors").exists()  # no model from a cut run
        err = capsys.readouterr().err
        assert f"saved a checkpoint at step {done}; continue with --resume" in err
    result = finetune("classify", tiny_bert_dropout, task_files["train"], task_files["dev"],
                      out, quick_config(**SETTINGS, resume=True, show_progress=True))
    assert f"resumed from {out / 'checkpoints'}/step-{done:08d} at step {done}" in \
        capsys.readouterr().err
    assert (result.stopped_by, result.steps, result.best_step) == \
        (expected.stopped_by, expected.steps, expected.best_step)
    assert result.dev_metrics == expected.dev_metrics
    _assert_same_model(full, out)
    assert not (out / "checkpoints").exists()  # gone once the run is done
    assert _records(out) == _records(full)  # each record once, none lost


def _records(out: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["split"]) for r in map(json.loads, (out / "metrics.jsonl").open())]


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_saved_checkpoint(
        uninterrupted, tiny_bert_dropout, task_files, quick_config, tmp_path, monkeypatch,
        capsys):
    full, _ = uninterrupted
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        _crash_at(patch, 12)  # past the checkpoint at 8 and the best saved at 10
        with pytest.raises(KeyboardInterrupt):
            finetune("classify", tiny_bert_dropout, task_files["train"], task_files["dev"],
                     out, quick_config(**SETTINGS, save_every=4))
    assert [p.name for p in sorted((out / "checkpoints").glob("step-*"))] == \
        ["step-00000004", "step-00000008"]
    # a re-run without resume is refused, and the refusal names the way on
    with pytest.raises(UserError, match="holds checkpoints of an earlier run: resume it "
                                        r"\(--resume\)"):
        finetune("classify", tiny_bert_dropout, task_files["train"], task_files["dev"], out,
                 quick_config(**SETTINGS, save_every=4))
    capsys.readouterr()
    finetune("classify", tiny_bert_dropout, task_files["train"], task_files["dev"], out,
             quick_config(**SETTINGS, resume=True, show_progress=True))
    assert "at step 8" in capsys.readouterr().err
    _assert_same_model(full, out)


@pytest.mark.slow
def test_early_stopping_counts_across_a_resume(tiny_bert, task_files, quick_config, tmp_path,
                                               monkeypatch):
    # A learning rate too small to change the dev score: the first evaluation (step 10) stays
    # the best, and patience 2 stops the run at step 30. Cut at 25, the resumed run must know
    # that one evaluation (step 20) has already gone by without a better score.
    settings = dict(epochs=8, batch_size=16, lr=1e-12, head_lr=1e-12, patience=2)
    whole = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                     tmp_path / "whole", quick_config(**settings))
    assert (whole.stopped_by, whole.steps, whole.best_step) == ("early_stop", 30, 10)
    with monkeypatch.context() as patch:
        _signal_at(patch, 25)
        cut = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                       tmp_path / "cut", quick_config(**settings))
    assert cut.stopped_by == "interrupted" and cut.best_step == 10
    resumed = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                       tmp_path / "cut", quick_config(**settings, resume=True))
    assert (resumed.stopped_by, resumed.steps, resumed.best_step) == ("early_stop", 30, 10)
    _assert_same_model(tmp_path / "whole", tmp_path / "cut")


def test_a_resume_with_other_settings_is_refused(tiny_bert, task_files, quick_config,
                                                 tmp_path, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        finetune("classify", tiny_bert, task_files["train"], task_files["dev"], out,
                 quick_config(**SETTINGS))
    with pytest.raises(UserError, match=r"checkpoint was made with lr = 0\.01, this run has "
                                        r"0\.02"):
        finetune("classify", tiny_bert, task_files["train"], task_files["dev"], out,
                 quick_config(**SETTINGS, lr=0.02, resume=True))
    with pytest.raises(UserError, match="--save-every must be at least 1, got 0"):
        finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                 tmp_path / "other", quick_config(**SETTINGS, save_every=0))


def test_resume_without_a_checkpoint_starts_afresh(tiny_bert, task_files, quick_config,
                                                   tmp_path, capsys):
    result = finetune("classify", tiny_bert, task_files["train"], task_files["dev"],
                      tmp_path / "out", quick_config(epochs=1, batch_size=16, resume=True,
                                                     show_progress=True))
    assert result.stopped_by == "epochs" and result.steps == 10
    assert "no checkpoint in" in capsys.readouterr().err


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file under `root` with its bytes, and every folder (None)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("other", ["settings", "data", "model", "no-resume"])
def test_a_refused_resume_is_one_line_and_leaves_the_run_as_it_was(
        tiny_bert, tiny_modern, task_files, tmp_path, monkeypatch, capsys, other):
    # the settings file, the log and the checkpoint: the refused run's settings must not
    # replace the record of the run the checkpoint belongs to
    out = tmp_path / "out"
    args = ["finetune", "classify", "--model", str(tiny_bert), "--train",
            str(task_files["train"]), "--dev", str(task_files["dev"]), "--epochs", "1",
            "--batch-size", "16", "--save-every", "1", "--out", str(out)]
    with monkeypatch.context() as patch:
        _signal_at(patch, 3)
        assert main(args) == 130
    capsys.readouterr()
    before = _tree(out)
    assert {"training_args.json", "metrics.jsonl", "checkpoints/step-00000002/manifest.json"} \
        <= before.keys()
    changed = {"settings": ["--lr", "0.02"], "no-resume": ["--lr", "0.02"],
               "data": ["--train", str(task_files["dev"])],
               "model": ["--model", str(tiny_modern)]}[other]
    assert main(args + changed + ([] if other == "no-resume" else ["--resume"])) == 2
    assert _tree(out) == before
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: "), said
    assert ("holds checkpoints of an earlier run" if other == "no-resume"
            else "checkpoint ") in said[0]


def test_a_time_budget_resumes_however_it_is_spelled(tiny_bert, task_files, tmp_path,
                                                      monkeypatch, capsys):
    """The budget is recorded and compared in minutes: 6s is the 0.1 the run was started with
    (a resume is refused for another max_time, so 6s must be that float exactly)."""
    out = tmp_path / "out"
    args = ["finetune", "classify", "--model", str(tiny_bert), "--train",
            str(task_files["train"]), "--dev", str(task_files["dev"]), "--epochs", "1",
            "--batch-size", "16", "--save-every", "1", "--out", str(out), "--quiet"]
    with monkeypatch.context() as patch:
        _signal_at(patch, 3)
        assert main(args + ["--max-time", "0.1"]) == 130
    capsys.readouterr()
    assert main(args + ["--max-time", "7s", "--resume"]) == 2
    assert "checkpoint was made with max_time = 0.1, this run has 0.11" in capsys.readouterr().err
    assert main(args + ["--max-time", "6s", "--resume"]) == 0
    assert "error" not in capsys.readouterr().err
    recorded = json.loads((out / "training_args.json").read_text())
    assert recorded["options"]["max_time"] == 0.1 and "--max-time 0.1" in recorded["command"]


# Data from standard input or rows in memory: staged in a temporary file named anew each run, it
# is known again by its bytes

def _stdin_args(model: Path, files: dict, out: Path) -> list[str]:
    return ["finetune", "classify", "--model", str(model), "--train", "-", "--dev",
            str(files["dev"]), "--epochs", "1", "--batch-size", "16", "--out", str(out),
            "--quiet"]


def test_a_resume_from_stdin_goes_on_with_the_same_bytes_and_refuses_others(
        tiny_bert, task_files, tmp_path, monkeypatch, capsys):
    out, same = tmp_path / "out", task_files["train"].read_text()
    args = _stdin_args(tiny_bert, task_files, out)
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        patch.setattr("sys.stdin", io.StringIO(same))
        assert main(args) == 130
    capsys.readouterr()
    fewer = "".join(same.splitlines(keepends=True)[1:])  # one row left out
    monkeypatch.setattr("sys.stdin", io.StringIO(fewer))
    assert main(args + ["--resume"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and re.fullmatch(
        r"error: \S+step-00000002: checkpoint was made with train = '<stdin> \(sha256 (\w{16})"
        r"\)', this run has '<stdin> \(sha256 (?!\1)\w{16}\)': not the bytes it was "
        r"made from", said[0]), said
    monkeypatch.setattr("sys.stdin", io.StringIO(same))
    assert main(args + ["--resume"]) == 0
    assert (out / "model.safetensors").is_file() and not (out / "checkpoints").exists()


def test_a_resume_from_rows_in_memory_goes_on_with_the_same_rows_and_refuses_others(
        tiny_bert, task_files, quick_config, tmp_path, monkeypatch):
    out, rows = tmp_path / "out", [obj for _, obj in read_jsonl(task_files["train"])]
    settings = dict(epochs=1, batch_size=16)
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        finetune("classify", tiny_bert, rows, task_files["dev"], out, quick_config(**settings))
    with pytest.raises(UserError, match=r"checkpoint was made with train = '<rows> \(sha256 "
                                        r"\w{16}\)', this run has '<rows> \(sha256 \w{16}\)': "
                                        r"not the bytes"):
        finetune("classify", tiny_bert, rows[1:], task_files["dev"], out,
                 quick_config(**settings, resume=True))
    result = finetune("classify", tiny_bert, rows, task_files["dev"], out,
                      quick_config(**settings, resume=True))
    assert result.stopped_by == "epochs" and result.steps == 10


# A training or dev file is known by its bytes too: edited or replaced, it is other data; the
# same bytes under another path or piped in are the same data

def _file_args(model: Path, train, dev: Path, out: Path) -> list[str]:
    return ["finetune", "classify", "--model", str(model), "--train", str(train), "--dev",
            str(dev), "--epochs", "1", "--batch-size", "16", "--out", str(out), "--quiet"]


def _files_of(out: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_resume_on_an_edited_file_is_refused_and_the_same_bytes_anywhere_go_on(
        tiny_bert, task_files, tmp_path, monkeypatch, capsys):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    train, dev = data / "train.jsonl", data / "dev.jsonl"
    same, same_dev = task_files["train"].read_bytes(), task_files["dev"].read_bytes()
    train.write_bytes(same), dev.write_bytes(same_dev)
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        assert main(_file_args(tiny_bert, train, dev, out)) == 130
    capsys.readouterr()
    cut = _files_of(out / "checkpoints")
    for edited, key in ((train, "train"), (dev, "dev")):
        edited.write_bytes(b"".join((same if key == "train" else same_dev)
                                    .splitlines(keepends=True)[1:]))  # one row left out
        assert main(_file_args(tiny_bert, train, dev, out) + ["--resume"]) == 2
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and re.fullmatch(
            rf"error: \S+step-00000002: checkpoint was made with {key} = "
            rf"'{re.escape(str(edited))} \(sha256 (\w{{16}})\)', this run has "
            rf"'{re.escape(str(edited))} \(sha256 (?!\1)\w{{16}}\)': not the bytes it was "
            rf"made from", said[0]), said
        assert _files_of(out / "checkpoints") == cut  # the checkpoint as it was
        train.write_bytes(same), dev.write_bytes(same_dev)
    # the same bytes moved elsewhere go on (and are cut again at step 4) ...
    moved = tmp_path / "elsewhere" / "copy.jsonl"
    moved.parent.mkdir()
    os.replace(train, moved)
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        assert main(_file_args(tiny_bert, moved, dev, out) + ["--resume"]) == 130
    assert (out / "checkpoints" / "step-00000004").is_dir()
    # ... and so do they piped in
    monkeypatch.setattr("sys.stdin", io.StringIO(same.decode("utf-8")))
    assert main(_file_args(tiny_bert, "-", dev, out) + ["--resume"]) == 0
    assert (out / "model.safetensors").is_file() and not (out / "checkpoints").exists()


def _record_the_path_only(checkpoint: Path, train: Path) -> None:
    """`checkpoint` as runs before files were known by their bytes left it: the training
    file recorded by its path alone."""
    state = json.loads((checkpoint / "state.json").read_text())
    state["state"]["__dict__"]["fingerprint"]["__dict__"]["train"] = str(train)
    (checkpoint / "state.json").write_text(json.dumps(state))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["state.json"] = sha256_file(checkpoint / "state.json")
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def test_a_checkpoint_that_recorded_a_path_only_resumes_on_that_path_as_before(
        tiny_bert, task_files, quick_config, tmp_path, monkeypatch):
    out, train, moved = tmp_path / "out", tmp_path / "train.jsonl", tmp_path / "moved.jsonl"
    train.write_bytes(task_files["train"].read_bytes())
    moved.write_bytes(train.read_bytes())
    settings = dict(epochs=1, batch_size=16)
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        finetune("classify", tiny_bert, train, task_files["dev"], out, quick_config(**settings))
    _record_the_path_only(out / "checkpoints" / "step-00000002", train)
    # compared by its path, as then: another path is refused, whatever its bytes
    with pytest.raises(UserError, match=rf"made with train = '{re.escape(str(train))}', this "
                                        rf"run has '{re.escape(str(moved))}'$"):
        finetune("classify", tiny_bert, moved, task_files["dev"], out,
                 quick_config(**settings, resume=True))
    with monkeypatch.context() as patch:
        _signal_at(patch, 2)
        result = finetune("classify", tiny_bert, train, task_files["dev"], out,
                          quick_config(**settings, resume=True))
    assert result.stopped_by == "interrupted" and result.steps == 4
    # the checkpoints it goes on to write know the file by its bytes
    state = json.loads((out / "checkpoints" / "step-00000004" / "state.json").read_text())
    assert re.fullmatch(rf"{re.escape(str(train))} \(sha256 \w{{16}}\)",
                        state["state"]["__dict__"]["fingerprint"]["__dict__"]["train"])


@pytest.mark.slow
def test_a_run_from_stdin_resumed_equals_an_uninterrupted_run(
        uninterrupted, tiny_bert_dropout, task_files, quick_config, tmp_path, monkeypatch):
    full, expected = uninterrupted  # from the file whose bytes go to standard input here
    out = tmp_path / "out"
    for resume in (False, True):
        with monkeypatch.context() as patch:
            if not resume:
                _signal_at(patch, 4)
            patch.setattr("sys.stdin", io.StringIO(task_files["train"].read_text()))
            result = finetune("classify", tiny_bert_dropout, "-", task_files["dev"], out,
                              quick_config(**SETTINGS, resume=resume))
    assert (result.stopped_by, result.steps, result.best_step) == \
        (expected.stopped_by, expected.steps, expected.best_step)
    _assert_same_model(full, out)


# The command line: a real process killed with SIGKILL or stopped with SIGTERM --------------------

def _cli_args(model: Path, files: dict) -> list[str]:
    # 20 steps an epoch, 120 in all: time enough to stop the run well before its end
    return ["finetune", "classify", "--model", str(model), "--train", str(files["train"]),
            "--dev", str(files["dev"]), "--epochs", "6", "--batch-size", "8", "--lr", "1e-2",
            "--head-lr", "1e-2", "--warmup", "0", "--patience", "none", "--save-every", "5",
            "--quiet"]


def _bertkit(args: list[str], **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return [sys.executable, "-m", "bertkit.cli", *args], dict(env=env, cwd=REPO, **kw)


def _run(args: list[str], stdin: Path | None = None) -> subprocess.CompletedProcess:
    """The command run to its end; `stdin`: a file its standard input reads."""
    command, kw = _bertkit(args)
    with open(stdin or os.devnull, "rb") as given:
        return subprocess.run(command, capture_output=True, text=True, timeout=300,
                              stdin=given, **kw)


def _saved_steps(out: Path) -> list[int]:
    return sorted(int(p.name[len("step-"):]) for p in (out / "checkpoints").glob("step-*")
                  if re.fullmatch(r"step-\d+", p.name))


def _start_and_wait_for_a_checkpoint(args: list[str], out: Path, err_file: Path,
                                     stdin: Path | None = None, after: int = 0):
    """The command started, and stopped with SIGSTOP once it has saved a checkpoint of a step
    past `after`."""
    command, kw = _bertkit(args)
    with open(err_file, "w") as err, open(stdin or os.devnull, "rb") as given:
        proc = subprocess.Popen(command, stdin=given, stdout=subprocess.DEVNULL, stderr=err,
                                **kw)
    deadline = time.time() + 240
    while not [s for s in _saved_steps(out) if s > after] and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its next checkpoint: " + \
            err_file.read_text()[-2000:]
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGSTOP)  # frozen wherever it is (even mid-save)
    assert proc.poll() is None and not (out / "model.safetensors").exists()
    return proc


def main_on_one_thread(args: list[str]) -> int:
    """The command in this process, on one thread as the processes of `_bertkit` run
    (OMP_NUM_THREADS=1): a run resumed there ends as one run here, bit for bit."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            return main(args)
        finally:
            torch.set_num_threads(threads)


def kill_9_then_resume(args: list[str], whole: Path, cut: Path, err: Path) -> None:
    """`args` run to its end into `whole` here; into `cut` as a process killed with kill -9
    once it has saved a checkpoint, then resumed here: both end alike."""
    assert main_on_one_thread(args + ["--out", str(whole)]) == 0
    proc = _start_and_wait_for_a_checkpoint(args + ["--out", str(cut)], cut, err)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (cut / "model.safetensors").exists()
    assert main_on_one_thread(args + ["--out", str(cut), "--resume"]) == 0
    _assert_same_model(whole, cut)


@pytest.fixture(scope="module")
def cli_uninterrupted(tiny_bert_dropout, task_files, tmp_path_factory) -> Path:
    """The command run to its end in this process, on one thread as the processes below run
    (OMP_NUM_THREADS=1, which the command heeds): their resumed runs must end as it did, bit
    for bit, and a process start-up (seconds: torch) is spared."""
    out = tmp_path_factory.mktemp("cli") / "full"
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            assert main(_cli_args(tiny_bert_dropout, task_files) + ["--out", str(out)]) == 0
        finally:
            torch.set_num_threads(threads)
    return out


@pytest.mark.slow
def test_sigterm_then_kill_9_then_resume_equals_an_uninterrupted_run(
        cli_uninterrupted, tiny_bert_dropout, task_files, tmp_path, capsys):
    """One run stopped both ways, each a process start-up the fewer: SIGTERM saves and says
    how to go on; the resumed run, killed with kill -9 past its next checkpoint, leaves that
    one; a re-run without --resume is refused; the resume ends as the uninterrupted run."""
    cut, err = tmp_path / "cut", tmp_path / "err"
    args = _cli_args(tiny_bert_dropout, task_files) + ["--out", str(cut)]
    proc = _start_and_wait_for_a_checkpoint(args, cut, err)
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=120) == 130, err.read_text()[-2000:]
    said = err.read_text()
    assert "continue with --resume" in said and "Traceback" not in said
    assert not (cut / "model.safetensors").exists()
    proc = _start_and_wait_for_a_checkpoint(args + ["--resume"], cut, err,
                                            after=_saved_steps(cut)[-1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert "resumed from" in err.read_text()
    capsys.readouterr()
    assert main(args) == 2  # refused: in this process, no start-up
    assert "(--resume)" in capsys.readouterr().err.strip().splitlines()[-1]
    # the last resume in this process too, on one thread as the processes ran: the resume
    # above was a process of its own
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            assert main(args + ["--resume"]) == 0
        finally:
            torch.set_num_threads(threads)
    assert "resumed from" in capsys.readouterr().err
    _assert_same_model(cli_uninterrupted, cut)


@pytest.mark.slow
def test_kill_9_of_a_run_from_stdin_then_resume_equals_an_uninterrupted_run(
        cli_uninterrupted, tiny_bert_dropout, task_files, tmp_path, monkeypatch, capsys):
    # `--train -` is staged in a temporary file named anew each run: the resume knows the data
    # by its bytes, not by that file's name
    args = _cli_args(tiny_bert_dropout, task_files)
    args[args.index("--train") + 1] = "-"
    cut = tmp_path / "cut"
    proc = _start_and_wait_for_a_checkpoint(args + ["--out", str(cut)], cut, tmp_path / "err",
                                            stdin=task_files["train"])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO(task_files["dev"].read_text()))
    assert main(args + ["--out", str(cut), "--resume"]) == 2  # in this process, no start-up
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("error: ") and said.endswith(": not the bytes it was made from"), \
        said
    resumed = _run(args + ["--out", str(cut), "--resume"], stdin=task_files["train"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stderr
    _assert_same_model(cli_uninterrupted, cut)
