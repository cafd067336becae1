"""Adding a task with a setting of its own is one module and its line in TASKS: the class below
is the whole of it, and the command line offers, parses and records its setting, and the
recipe trains it, with nothing else changed."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import ClassVar

import pytest

import bertkit.finetuning.tasks
from bertkit.cli.main import main
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.tasks import TASKS, Classify

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass(frozen=True)
class Loud(Classify):
    """One text, one class, its loss scaled (a task of the test's own)."""
    name: ClassVar[str] = "loud"

    loudness: float = 1.0
    """How much the loss is scaled by."""

    def loss(self, model, batch):
        return self.loudness * super().loss(model, batch)


@pytest.fixture
def with_loud(monkeypatch):
    """TASKS with the new task's line: the one change outside its module."""
    tasks = (*TASKS, Loud)
    monkeypatch.setattr(bertkit.finetuning.tasks, "TASKS", tasks)
    return tasks


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_a_new_task_gets_its_flag_and_trains_with_it(with_loud, tiny_bert, task_files,
                                                     tmp_path, capsys):
    assert "loud" in _help(["finetune"], capsys)
    text = _help(["finetune", "loud"], capsys)
    assert "--loudness LOUDNESS How much the loss is scaled by. (default: 1.0)" in text
    assert "--multi-label" in text and "--epochs" in text  # its base's settings and training's
    assert "--loudness" not in _help(["finetune", "classify"], capsys)
    with pytest.raises(SystemExit) as stop:  # nor does classify take it
        main(["finetune", "classify", "--loudness", "2", "--model", "m", "--train", "t",
              "--out", "o"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == "error: --loudness is a setting of loud, not of classify\n"

    out = tmp_path / "loud"
    assert main(["finetune", "loud", "--model", str(tiny_bert), "--train",
                 str(task_files["train"]), "--dev", str(task_files["dev"]), "--out", str(out),
                 "--loudness", "3.5", "--epochs", "1", "--batch-size", "16", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] > 0 and summary["dev_accuracy"] >= 0
    saved = json.loads((out / "bertkit_task.json").read_text())
    assert saved["task"] == "loud" and saved["loudness"] == 3.5
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["loudness"] == 3.5
    assert "--loudness 3.5" in record["command"]
    assert shlex.split(record["command"])[1:3] == ["finetune", "loud"]
    runner = TaskModel.load(out, task_types=with_loud)
    assert isinstance(runner.task, Loud) and runner.task.loudness == 3.5
    assert runner.classify("a good film")["label"] in runner.labels


def test_a_config_file_sets_the_new_setting_and_another_tasks_is_skipped(with_loud, tmp_path,
                                                                       capsys):
    from bertkit.cli.main import build_parser

    config = tmp_path / "run.toml"
    config.write_text('task = "loud"\nmodel = "m"\ntrain = "t.jsonl"\nout = "o"\n'
                      'loudness = 0.5\nscheme = "BIO"\n')
    args = build_parser().parse_args(["finetune", "loud", "--config", str(config)])
    with pytest.warns(UserWarning, match="scheme is not a setting of this command"):
        files, task, cfg, *_ = args.command.read(args)  # then the teacher's, the CNN's
    assert task == Loud(loudness=0.5) and str(files.out) == "o"
    config.write_text('task = "tag"\nmodel = "m"\ntrain = "t.jsonl"\nout = "o"\n')
    assert main(["finetune", "loud", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == \
        f"error: {config}: task is 'tag', this command's is 'loud'"
