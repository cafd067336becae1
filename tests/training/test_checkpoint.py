"""Checkpoints: exact round trip of every piece of state, atomic rotation, exact resume, and
refusal of corrupt or mismatched checkpoints."""
from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.pretraining import objectives
from bertkit.training.checkpoint import (_flatten, _unflatten, check_fingerprint,
                                         latest_checkpoint, list_checkpoints, load_checkpoint,
                                         model_fingerprint, rng_state, save_checkpoint,
                                         set_rng_state)
from bertkit.config import TrainConfig
from bertkit.files import UserError
from bertkit.training.loop import train
from bertkit.training.optimizer import make_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _stepped_model(tiny):
    model = tiny.model()
    opt = make_optimizer([{"params": list(model.parameters())}], TrainConfig(max_steps=1),
                         torch.device("cpu"))
    batch = next(iter(tiny.FakeBatches()))
    objectives.mlm_loss(model, batch)[0].backward()
    opt.step()
    return model, opt


def test_nested_state_round_trips_through_json_and_tensors():
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state(), "ints": {3: [1, 2.5, None, "x"]},
             "tuple": (1, (2, torch.arange(3)))}
    tensors = {}
    back = _unflatten(_flatten(state, tensors, "s"), tensors)
    assert back["python"] == state["python"]
    assert back["numpy"][0] == "MT19937" and np.array_equal(back["numpy"][1], state["numpy"][1])
    assert back["numpy"][1].dtype == np.uint32
    assert torch.equal(back["torch"], state["torch"])
    assert back["ints"] == {3: [1, 2.5, None, "x"]}
    assert back["tuple"][0] == 1 and torch.equal(back["tuple"][1][1], torch.arange(3))


def test_rng_state_restores_every_generator():
    saved = rng_state()
    draws = (random.random(), np.random.rand(), torch.rand(2))
    set_rng_state(saved)
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert draws[0] == again[0] and draws[1] == again[1] and torch.equal(draws[2], again[2])



def test_gpu_generators_saved_on_more_gpus_restore_on_fewer(monkeypatch):
    """A checkpoint made where 2 GPUs were visible resumes where 1 is: its generator gets
    its state, and no GPU that is not there is asked for one."""
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda state, device="cuda": restored.append((int(state[0]), device)))
    saved = {**rng_state(), "cuda": [torch.tensor([7], dtype=torch.uint8),
                                     torch.tensor([8], dtype=torch.uint8)]}
    set_rng_state(saved)
    assert restored == [(7, 0)]

def test_save_load_round_trip_and_keep_last_k(tmp_path, tiny):
    model, opt = _stepped_model(tiny)
    fp = {"model": model_fingerprint(model), "data": "abc"}
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, model=model, optimizer=opt, keep=2,
                        state={"step": step, "fingerprint": fp})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000020", "step-00000030"]
    fresh = tiny.model(seed=1)
    fresh_opt = make_optimizer([{"params": list(fresh.parameters())}], TrainConfig(max_steps=1),
                               torch.device("cpu"))
    state = load_checkpoint(latest_checkpoint(tmp_path), model=fresh, optimizer=fresh_opt,
                            fingerprint=fp)
    assert state["step"] == 30
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)
    a, b = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert a.keys() == b.keys()
    for i in a:
        for name in a[i]:
            assert torch.equal(torch.as_tensor(a[i][name]), torch.as_tensor(b[i][name]))


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path, tiny):
    model, opt = _stepped_model(tiny)
    fp = {"model": model_fingerprint(model)}
    save_checkpoint(tmp_path, 5, model=model, optimizer=opt, keep=2, state={"fingerprint": fp})
    # What a process killed inside atomic_dir leaves: a hidden half-written directory.
    partial = tmp_path / ".step-00000010.abc.tmp"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\0" * 100)
    assert latest_checkpoint(tmp_path).name == "step-00000005"
    load_checkpoint(latest_checkpoint(tmp_path), model=model, optimizer=opt, fingerprint=fp)
    save_checkpoint(tmp_path, 10, model=model, optimizer=opt, keep=2, state={"fingerprint": fp})
    assert not partial.exists()


def test_corrupt_checkpoint_is_refused_with_one_line(tmp_path, tiny):
    model, opt = _stepped_model(tiny)
    fp = {"model": model_fingerprint(model)}
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, keep=1,
                           state={"fingerprint": fp})
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError) as e:
        load_checkpoint(path, model=model, optimizer=opt, fingerprint=fp)
    message = str(e.value)
    assert "model.safetensors: checkpoint is corrupt" in message and "\n" not in message
    (path / "manifest.json").write_text("[1, 2]\n", encoding="utf-8")  # JSON, not a manifest
    with pytest.raises(UserError, match=r"manifest.json: checkpoint is corrupt \(unreadable "):
        load_checkpoint(path, model=model, optimizer=opt, fingerprint=fp)
    (path / "manifest.json").unlink()
    with pytest.raises(UserError, match="corrupt"):
        load_checkpoint(path, model=model, optimizer=opt, fingerprint=fp)


def test_mismatched_model_or_data_is_refused(tmp_path, tiny):
    model, opt = _stepped_model(tiny)
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, keep=1,
                           state={"fingerprint": {"model": model_fingerprint(model), "data": "a"}})
    wider = tiny.model(hidden_size=48, intermediate_size=96)
    wider_opt = make_optimizer([{"params": list(wider.parameters())}], TrainConfig(max_steps=1),
                               torch.device("cpu"))
    with pytest.raises(UserError, match="has shape .* this model has .*different model"):
        load_checkpoint(path, model=wider, optimizer=wider_opt,
                        fingerprint={"model": model_fingerprint(wider), "data": "a"})
    with pytest.raises(UserError, match="made with data = 'a', this run has 'b': other data"):
        load_checkpoint(path, model=model, optimizer=opt,
                        fingerprint={"model": model_fingerprint(model), "data": "b"})


def test_data_known_by_its_bytes_is_refused_as_other_bytes():
    # a name with a digest ("<stdin> (sha256 ...)", what a run records of standard input):
    # the same name with another digest is other bytes; another name says so itself
    then, now = "<stdin> (sha256 1a2b3c4d5e6f7a8b)", "<stdin> (sha256 0f0f0f0f0f0f0f0f)"
    with pytest.raises(UserError, match=r"made with train = '<stdin> \(sha256 1a2b3c4d5e6f7a8b"
                                        r"\)', this run has '<stdin> \(sha256 0f0f0f0f0f0f0f0f"
                                        r"\)': not the bytes it was made from$"):
        check_fingerprint(Path("ck"), {"train": then}, {"train": now})
    with pytest.raises(UserError, match=r"this run has 'a.jsonl'$"):
        check_fingerprint(Path("ck"), {"train": then}, {"train": "a.jsonl"})
    check_fingerprint(Path("ck"), {"train": then}, {"train": then})


def test_a_file_known_by_its_bytes_resumes_under_any_name_and_refuses_other_bytes():
    # a training file is known as "PATH (sha256 ...)": the bytes are what is compared, the
    # name only says which; the same bytes under another path or piped in go on
    then = "data/train.jsonl (sha256 1a2b3c4d5e6f7a8b)"
    for now in (then, "moved/train.jsonl (sha256 1a2b3c4d5e6f7a8b)",
                "<stdin> (sha256 1a2b3c4d5e6f7a8b)"):
        check_fingerprint(Path("ck"), {"train": then}, {"train": now})
    for now in ("data/train.jsonl (sha256 0f0f0f0f0f0f0f0f)",
                "<stdin> (sha256 0f0f0f0f0f0f0f0f)"):
        with pytest.raises(UserError, match=rf"made with train = 'data/train.jsonl \(sha256 "
                                            rf"1a2b3c4d5e6f7a8b\)', this run has "
                                            rf"'{re.escape(now)}': not the bytes it was made "
                                            rf"from$"):
            check_fingerprint(Path("ck"), {"train": then}, {"train": now})


def test_a_file_recorded_by_its_path_alone_is_compared_by_its_path():
    # checkpoints made before files were known by their bytes recorded the path only: they
    # resume on that path as before (whatever its bytes now), and another path is refused in
    # the checkpoint's terms, as it was
    check_fingerprint(Path("ck"), {"train": "data/train.jsonl", "dev": None},
                      {"train": "data/train.jsonl (sha256 0f0f0f0f0f0f0f0f)", "dev": None})
    with pytest.raises(UserError, match=r"made with train = 'data/train.jsonl', this run has "
                                        r"'moved/train.jsonl'$"):
        check_fingerprint(Path("ck"), {"train": "data/train.jsonl"},
                          {"train": "moved/train.jsonl (sha256 0f0f0f0f0f0f0f0f)"})
    with pytest.raises(UserError, match=r"made with dev = None, this run has 'dev.jsonl'$"):
        check_fingerprint(Path("ck"), {"dev": None},
                          {"dev": "dev.jsonl (sha256 0f0f0f0f0f0f0f0f)"})


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, tiny):
    cfg = TrainConfig(max_steps=8, lr=1e-3, warmup_steps=2, save_every=3, log_every=2,
                      keep_checkpoints=5)
    full = tiny.model(hidden_dropout=0.1, attention_dropout=0.1)  # dropout draws from torch RNG
    train(full, objectives.mlm_loss, tiny.FakeBatches(), cfg, tmp_path / "full",
          save=tiny.no_save,
          show_progress=False)
    # A run that died after its step-3 checkpoint: copy that checkpoint alone, then resume.
    cut = tmp_path / "cut/checkpoints"
    cut.mkdir(parents=True)
    shutil.copytree(tmp_path / "full/checkpoints/step-00000003", cut / "step-00000003")
    resumed = tiny.model(seed=7, hidden_dropout=0.1, attention_dropout=0.1)
    torch.manual_seed(1234)  # the resumed process's generators start elsewhere
    result = train(resumed, objectives.mlm_loss, tiny.FakeBatches(seed=0), cfg.replace(resume=True),
                   tmp_path / "cut", save=tiny.no_save, show_progress=False)
    assert result.step == 8
    for k, v in tiny.params(full).items():
        assert torch.equal(resumed.state_dict()[k], v), k
    steps = [line for line in (tmp_path / "cut/metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3  # steps 4, 6 and 8, logged by the resumed run


def test_the_world_size_of_earlier_checkpoints_is_no_longer_a_refusal(tmp_path, tiny):
    """Checkpoints before elastic resumes recorded the world size in their fingerprint; a run
    on another number of ranks now resumes them (the loop takes over each rank's state)."""
    model, opt = _stepped_model(tiny)
    fp = {"model": model_fingerprint(model), "data": "abc"}
    path = save_checkpoint(tmp_path, 3, model=model, optimizer=opt, keep=1,
                           state={"fingerprint": {**fp, "world_size": 1}})
    with pytest.raises(UserError, match="world_size = 1, this run has None"):
        load_checkpoint(path, model=model, optimizer=opt, fingerprint=fp)
    load_checkpoint(path, model=model, optimizer=opt, fingerprint=fp, ignore=("world_size",))
    with pytest.raises(UserError, match="data = 'abc', this run has 'xyz'"):
        load_checkpoint(path, model=model, optimizer=opt, fingerprint={**fp, "data": "xyz"},
                        ignore=("world_size",))
