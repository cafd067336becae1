"""$BERTKIT_MAX_TIME caps every training run in the one loop: a run of steps alone stops by
the clock, a shorter budget of the run's own wins, the cap is said once and recorded, and a
value that is no duration is one line."""
from __future__ import annotations

import json

import pytest

from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.pretraining import objectives
from bertkit.runtime import MAX_TIME, max_time_cap
from bertkit.training.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")

LINE = f"{MAX_TIME}=1s caps this run's time"


def test_a_run_of_steps_alone_stops_at_the_cap(tmp_path, tiny, capsys, monkeypatch):
    monkeypatch.setenv(MAX_TIME, "1s")
    cfg = TrainConfig(max_steps=10**7, log_every=5)
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   save=tiny.no_save, settings={"command": "test", "environment": {}})
    assert result.stopped_by == "max_time"
    assert 1.0 <= result.train_seconds < 30 and 0 < result.step < 10**7  # one step past 1 s
    assert capsys.readouterr().err.count(LINE) == 1
    record = json.loads((tmp_path / "run" / "training_args.json").read_text())
    assert record["environment"][MAX_TIME] == "1s"


def test_a_budget_shorter_than_the_cap_is_kept_and_nothing_is_said(tmp_path, tiny, capsys,
                                                                     monkeypatch):
    monkeypatch.setenv(MAX_TIME, "1h")
    cfg = TrainConfig(max_time=1e-9, log_every=50)
    result = train(tiny.model(), objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "run",
                   save=tiny.no_save)
    assert result.stopped_by == "max_time" and result.step == 1
    assert MAX_TIME not in capsys.readouterr().err


def test_the_cap_takes_the_durations_of_max_time(monkeypatch):
    monkeypatch.delenv(MAX_TIME, raising=False)
    assert max_time_cap() is None
    for value, minutes in [("20s", 1 / 3), ("2m", 2.0), ("1h30m", 90.0), ("0.5", 0.5)]:
        monkeypatch.setenv(MAX_TIME, value)
        assert max_time_cap() == (pytest.approx(minutes), value)
    for value in ("soon", "0s", "-1"):
        monkeypatch.setenv(MAX_TIME, value)
        with pytest.raises(UserError, match=rf"^{MAX_TIME}={value}: not a duration \(e\.g\."):
            max_time_cap()
