"""The run log: a last line torn by a kill is dropped with a notice, so --resume goes on."""
from __future__ import annotations

import json

import pytest

from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.pretraining import objectives
from bertkit.training.loop import train
from bertkit.training.runlog import metric_curve, plot_loss, read_metrics, scalar_tags


def test_resume_goes_on_past_a_torn_last_line(tmp_path, tiny, capsys):
    cfg = TrainConfig(max_steps=4, lr=1e-3, save_every=2, log_every=1)
    train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
          save=tiny.no_save, show_progress=False)
    log = tmp_path / "run" / "metrics.jsonl"
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"step": 5, "split": "tra')  # killed while writing step 5
    capsys.readouterr()
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(),
                   cfg.replace(max_steps=6, resume=True), tmp_path / "run", save=tiny.no_save,
                   show_progress=False)
    assert result.step == 6
    assert "metrics.jsonl:5: dropped a torn last line" in capsys.readouterr().err
    steps = [json.loads(line)["step"] for line in log.read_text(encoding="utf-8").splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_a_damaged_line_before_the_last_is_one_error(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n{"step": 2, oops\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"metrics.jsonl:2: not a JSON object"):
        read_metrics(log)
    log.write_text('{"step": 1}\n{"step": 2, oops\n\n', encoding="utf-8")
    assert read_metrics(log) == [{"step": 1}]


@pytest.mark.parametrize("line, message", [
    ('{"step": "2", "split": "train"}', "metrics.jsonl:2: \"split\" is not a name or \"step\" "
                                        "not an integer"),
    ('{"step": 2, "split": ["train"]}', "metrics.jsonl:2: \"split\" is not a name"),
    ('{"step": 2, "split": "train", "loss": "nan"}', "metrics.jsonl:2: 'loss' is 'nan', not a "
                                                      "number"),
    ('{"step": 2, "split": "train", "loss": true}', "metrics.jsonl:2: 'loss' is True"),
])
def test_a_record_of_the_wrong_types_is_one_error(tmp_path, line, message):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "split": "train", "loss": 2.0}\n' + line + "\n{}\n",
                   encoding="utf-8")
    with pytest.raises(UserError, match=message):
        read_metrics(log)


def _fine_tuning_log(path):
    records = [{"step": s, "split": "train", "loss": 1.0 / s, "learning_rate": 1e-4}
               for s in (1, 2, 3, 4, 5, 6)]
    for step, f1, precision in ((2, 0.5, 0.4), (4, 0.8, 0.9), (6, 0.7, 0.7)):
        records.append({"step": step, "split": "eval", "dev_precision": precision,
                        "dev_f1": f1, "dev_selection": f1})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_fine_tuning_plot_shows_the_dev_metric_and_the_kept_step(tmp_path):
    log = _fine_tuning_log(tmp_path / "metrics.jsonl")
    curves = plot_loss(log, tmp_path / "loss.png", metric="dev_selection", best_step=4)
    assert list(curves) == ["train loss", "dev_f1", "kept: step 4"]  # named for what it is
    assert curves["dev_f1"] == ([2, 4, 6], [0.5, 0.8, 0.7])
    assert curves["kept: step 4"] == ([4], [0.8])
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert list(metric_curve(read_metrics(log), "dev_precision")) == ["dev_precision"]
    assert metric_curve(read_metrics(log), "eval_loss") == {}


def test_records_become_tensorboard_tags_by_split():
    assert scalar_tags({"step": 3, "split": "train", "loss": 2.0, "learning_rate": 1e-3,
                        "tokens": 100, "seconds": 1.5}) == \
        {"train/loss": 2.0, "train/learning_rate": 1e-3, "train/tokens": 100.0}
    assert scalar_tags({"step": 3, "split": "eval", "eval_loss": 2.0, "dev_f1": 0.5,
                        "seconds": 1.0}) == {"eval/loss": 2.0, "dev/f1": 0.5}
