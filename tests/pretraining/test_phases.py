"""Context phases (`--phases`): the spelling and its refusals, the schedule of lengths and
rotary bases, the base a model's global layers turn by, the early phase of --early-seq-len
as the same batches, resumes in either phase, and no compile again at a phase change."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import Encoder, Rotary, set_rope_base
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.phases import (ContextPhase, ContextSchedule, parse_phases,
                                        phase_batch_size)

TINY = ["--preset", "tiny", "--batch-size", "8", "--lr", "1e-3", "--log-every", "2",
        "--eval-batches", "2", "--precision", "fp32", "--device", "cpu", "--seed", "3"]


# The spelling ------------------------------------------------------------------------------------

def test_modernberts_schedule_is_spelled_as_its_recipe_says_it():
    phases = parse_phases(["1024:10000@0.9", "8192:160000@0.1"])
    assert phases == [ContextPhase(1024, 0.9, 10000.0), ContextPhase(8192, 0.1, 160000.0)]
    assert parse_phases(["1024:10000@0.9,8192:160000@0.1"]) == phases  # one text, commas
    assert [p.spelled() for p in phases] == ["1024:10000@0.9", "8192:160000@0.1"]
    # a local layers' base after the global one's, or alone
    assert parse_phases(["1024:10000/5000@0.9", "8192:/20000@0.1"]) == [
        ContextPhase(1024, 0.9, 10000.0, 5000.0), ContextPhase(8192, 0.1, None, 20000.0)]
    assert ContextPhase(8192, 0.1, None, 20000.0).spelled() == "8192:/20000@0.1"
    thirds = parse_phases(["16@0.3333333333", "32@0.3333333333", "64@0.3333333334"])
    assert parse_phases([p.spelled() for p in thirds]) == thirds  # spelled back, read alike
    # each phase about the tokens of a batch of the longest
    assert [phase_batch_size(p, 8192, 16) for p in phases] == [128, 16]
    assert phase_batch_size(ContextPhase(24, 1.0), 32, 8) == 11


@pytest.mark.parametrize("texts,said", [
    (["128@0.5", "512@0.4"], "must sum to 1 (they sum to 0.9)"),
    (["128:0@0.9", "512@0.1"], "a rotary base must be a positive number"),
    (["128:-5@0.9", "512@0.1"], "a rotary base must be a positive number"),
    (["128:nan@0.9", "512@0.1"], "a rotary base must be a positive number"),
    (["512@0.9", "128@0.1"], "at least as long as the one before"),
    (["128", "512@1"], "has no @FRACTION"),
    (["128@0", "512@1"], "fraction must be above 0"),
    (["4@0.5", "512@0.5"], "length must be at least 8"),
    (["long@1"], "is not LENGTH[:BASE[/LOCAL]]@FRACTION"),
    (["128:1000/0@1"], "a rotary base must be a positive number"),
    (["128:1000/x@1"], "is not LENGTH"),
    ([","], "at least one phase"),
])
def test_a_bad_schedule_is_one_line_naming_the_phase(texts, said):
    with pytest.raises(UserError) as e:
        parse_phases(texts)
    assert said in str(e.value) and "\n" not in str(e.value)


# The schedule ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data(prepared):
    return prepared


def _three(data, told):
    phases = [ContextPhase(16, 0.25, 1000.0), ContextPhase(32, 0.5, 2000.0),
              ContextPhase(64, 0.25, 3000.0)]
    batches = [PretrainingBatches(data, objective="mlm", seq_len=p.seq_len,
                                  batch_size=phase_batch_size(p, 64, 2), seed=10 + i, prefetch=0)
               for i, p in enumerate(phases)]
    return ContextSchedule(batches, phases, rope=lambda phase: told.append(phase.rope_base))


def _take(schedule, progress):
    out, it = [], None
    for fraction in progress:
        schedule.set_progress(fraction)
        it = it or iter(schedule)
        out.append(next(it))
    return out


def test_three_phases_hand_out_each_length_and_tell_its_base_as_it_begins(data):
    told = []
    steps = [i / 8 for i in range(8)]
    got = _take(_three(data, told), steps)
    assert [tuple(b["input_ids"].shape) for b in got] == (
        [(8, 16)] * 2 + [(4, 32)] * 4 + [(2, 64)] * 2)
    assert told == [1000.0, 2000.0, 3000.0]
    # resumed in the second phase: its batches from where they were, its base told first
    first_schedule = _three(data, [])
    head = _take(first_schedule, steps[:4])
    resumed_told = []
    resumed = _three(data, resumed_told)
    resumed.load_state_dict(first_schedule.state_dict())
    tail = _take(resumed, steps[4:])
    assert resumed_told == [2000.0, 3000.0]
    for a, b in zip(got, head + tail):
        assert torch.equal(a["input_ids"], b["input_ids"])
    with pytest.raises(UserError, match="saved with 3 context phases, this run has 2"):
        ContextSchedule(resumed.batches[:2], [ContextPhase(16, 0.5), ContextPhase(32, 0.5)]
                        ).load_state_dict(first_schedule.state_dict())


# The model's rotary base -------------------------------------------------------------------------

def test_a_base_set_on_a_model_turns_as_a_model_made_with_it():
    cfg = EncoderConfig(architecture="modern", vocab_size=50, hidden_size=32, num_layers=3,
                        num_heads=2, intermediate_size=48, local_window=4, global_every=2,
                        hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    made = Encoder(cfg, fast=False).eval()
    ids = torch.randint(5, 50, (2, 12))
    before = made(ids).last_hidden_state
    set_rope_base(made, 1000.0)
    other = Encoder(EncoderConfig(**{**cfg.__dict__, "rope_theta": 1000.0}), fast=False).eval()
    other.load_state_dict(made.state_dict())
    assert torch.equal(made.rotary[0].inv_freq, Rotary(cfg.head_dim, 1000.0).inv_freq)
    assert torch.equal(made.rotary[1].inv_freq, Rotary(cfg.head_dim, 10_000.0).inv_freq)
    assert torch.equal(made(ids).last_hidden_state, other(ids).last_hidden_state)
    assert not torch.allclose(before, other(ids).last_hidden_state)  # the base matters
    assert made.config.rope_theta == 160_000.0  # unsaved unless asked
    set_rope_base(made, 1000.0, saved=True)
    assert made.config.rope_theta == 1000.0
    # the local layers' own base
    set_rope_base(made, None, 500.0, saved=True)
    local = Encoder(EncoderConfig(**{**cfg.__dict__, "rope_theta": 1000.0,
                                     "local_rope_theta": 500.0}), fast=False).eval()
    local.load_state_dict(made.state_dict())
    assert torch.equal(made(ids).last_hidden_state, local(ids).last_hidden_state)
    assert not torch.allclose(local(ids).last_hidden_state, other(ids).last_hidden_state)
    assert (made.config.rope_theta, made.config.local_rope_theta) == (1000.0, 500.0)


# End to end --------------------------------------------------------------------------------------

def _pretrain(prepared, out, *more) -> int:
    return main(["pretrain", "--data", str(prepared), "--out", str(out), *TINY, *more])


def _weights(path: Path) -> dict:
    return load_file(str(path / "model.safetensors"))


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_early_seq_len_is_the_first_phase_and_the_same_run(prepared, tmp_path, capsys):
    args = ["--max-steps", "4", "--seq-len", "32"]
    assert _pretrain(prepared, tmp_path / "early", *args, "--early-seq-len", "16",
                     "--early-fraction", "0.5") == 0
    early_err = capsys.readouterr().err
    assert _pretrain(prepared, tmp_path / "phases", "--max-steps", "4", "--phases", "16@0.5",
                     "32@0.5") == 0
    err = capsys.readouterr().err
    assert "16 x 16 -> 32 x 8 (at 50%) tokens per batch" in early_err
    assert "16 x 16 -> 32 x 8 (at 50%) tokens per batch" in err
    assert _equal(_weights(tmp_path / "early"), _weights(tmp_path / "phases"))
    recorded = json.loads((tmp_path / "phases" / "training_args.json").read_text())["options"]
    assert (recorded["phases"], recorded["seq_len"], recorded["early_fraction"]) == (
        ["16@0.5", "32@0.5"], 32, 0.0)
    # either spelling resumes the other's checkpoint: the same phases
    assert _pretrain(prepared, tmp_path / "early", *args, "--early-seq-len", "16",
                     "--early-fraction", "0.5") != 0  # (without --resume: refused)
    capsys.readouterr()
    assert _pretrain(prepared, tmp_path / "early", "--max-steps", "5", "--resume",
                     "--phases", "16@0.5", "32@0.5") == 0


@pytest.mark.slow
def test_a_run_stopped_in_either_phase_resumes_to_the_uninterrupted_weights(prepared,
                                                                             tmp_path, capsys):
    phases = ["--phases", "16:1000@0.5", "32:40000@0.5"]
    args = ["--architecture", "modern", "--max-steps", "6", "--save-every", "2",
            "--keep-checkpoints", "3", *phases]
    whole = tmp_path / "whole"
    assert _pretrain(prepared, whole, *args) == 0
    err = capsys.readouterr().err
    assert "16 x 16 (base 1000) -> 32 x 8 (base 40000, at 50%) tokens per batch" in err
    saved = json.loads((whole / "config.json").read_text())
    assert saved["global_rope_theta"] == 40000.0 and saved["local_rope_theta"] == 10000.0
    assert saved["max_position_embeddings"] >= 32
    from transformers import AutoConfig
    read = AutoConfig.from_pretrained(whole).rope_parameters
    assert (read["full_attention"]["rope_theta"], read["sliding_attention"]["rope_theta"]) == (
        40000.0, 10000.0)
    # the bases matter: the same phases at the model's own base train other weights
    assert _pretrain(prepared, tmp_path / "unbased", *args[:-3], "--phases", "16@0.5",
                     "32@0.5") == 0
    assert not _equal(_weights(whole), _weights(tmp_path / "unbased"))
    # step 2 is in the first phase (16 tokens, base 1000), step 4 in the second
    for step in (2, 4):
        cut = tmp_path / f"cut-{step}"
        shutil.copytree(whole, cut)
        for late in (cut / "checkpoints").glob("step-*"):
            if late.name != f"step-{step:08d}":
                shutil.rmtree(late)
        (cut / "model.safetensors").unlink()
        assert _pretrain(prepared, cut, *args, "--resume") == 0
        assert _equal(_weights(whole), _weights(cut)), step
    # other phases do not resume it
    capsys.readouterr()
    assert _pretrain(prepared, tmp_path / "cut-4", *args[:-3], "--phases", "16:1000@0.5",
                     "32:50000@0.5", "--resume", "--max-steps", "8") == 2
    assert "phases" in capsys.readouterr().err
    # one phase at its own base is a phase too: another base does not resume it
    one = ["--architecture", "modern", "--max-steps", "2", "--seq-len", "32"]
    assert _pretrain(prepared, tmp_path / "one", *one, "--phases", "32:1000@1") == 0
    assert json.loads((tmp_path / "one" / "config.json").read_text())["global_rope_theta"] == 1000
    capsys.readouterr()
    assert _pretrain(prepared, tmp_path / "one", *one, "--phases", "32:2000@1", "--resume",
                     "--max-steps", "3") == 2
    assert "phases" in capsys.readouterr().err


def _error(capsys, args) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: "), err
    return err.strip().splitlines()[-1]


@pytest.mark.slow
def test_local_layers_take_their_own_base_and_keep_the_one_before(prepared, tmp_path, capsys):
    args = ["--architecture", "modern", "--local-window", "8", "--max-steps", "4"]
    assert _pretrain(prepared, tmp_path / "local", *args, "--phases", "16:1000/500@0.5",
                     "32:40000@0.5") == 0
    assert "16 x 16 (base 1000/500) -> 32 x 8 (base 40000, at 50%)" in capsys.readouterr().err
    saved = json.loads((tmp_path / "local" / "config.json").read_text())
    assert (saved["global_rope_theta"], saved["local_rope_theta"]) == (40000.0, 500.0)
    assert _pretrain(prepared, tmp_path / "global", *args, "--phases", "16:1000@0.5",
                     "32:40000@0.5") == 0
    assert not _equal(_weights(tmp_path / "local"), _weights(tmp_path / "global"))


def test_bad_phases_are_one_line_before_anything_is_written(prepared, tmp_path, capsys):
    from bertkit.model.heads import PretrainingModel
    from bertkit.model.hub import save_model
    from bertkit.text.tokenizer import Tokenizer

    out = tmp_path / "out"
    base = ["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2", *TINY]
    assert "must sum to 1" in _error(capsys, base + ["--phases", "16@0.5", "32@0.4"])
    assert "a rotary base must be a positive number" in _error(
        capsys, base + ["--phases", "16:0@0.5", "32@0.5"])
    assert "a rotary base is for \"modern\" models" in _error(
        capsys, base + ["--architecture", "bert", "--phases", "16:1000@0.5", "32@0.5"])
    assert "a local rotary base (/LOCAL) is for a model with local layers" in _error(
        capsys, base + ["--phases", "16:1000/500@0.5", "32@0.5"])
    tokenizer = Tokenizer.load(prepared / "tokenizer")
    short = tmp_path / "short"
    save_model(PretrainingModel(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                              num_layers=1, num_heads=2, intermediate_size=64,
                                              max_positions=24)), short, tokenizer=tokenizer)
    init = ["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2",
            "--init", str(short), "--batch-size", "4", "--device", "cpu"]
    assert "--phases' last length 32 is longer than the model's 24 positions" in _error(
        capsys, init + ["--phases", "16@0.5", "32@0.5"])
    assert "a rotary base is for \"modern\" models; this \"bert\" model" in _error(
        capsys, init + ["--phases", "16:1000@0.5", "24@0.5"])
    assert not out.exists()


def test_a_config_file_takes_the_phases_as_a_list(prepared, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f'data = "{prepared}"\npreset = "tiny"\nbatch_size = 8\n'
                      f'phases = ["16@0.5", "32@0.5"]\n[train]\nmax_steps = 2\n'
                      f'precision = "fp32"\n', encoding="utf-8")
    out = tmp_path / "run"
    assert main(["pretrain", "--config", str(config), "--out", str(out)]) == 0
    recorded = json.loads((out / "training_args.json").read_text())
    assert recorded["options"]["phases"] == ["16@0.5", "32@0.5"]
    assert "--phases 16@0.5 32@0.5" in json.dumps(recorded)


# Compiled -----------------------------------------------------------------------------------------

def _compiled_with(monkeypatch, backend: str) -> list[int]:
    """torch.compile with `backend`, its counters cleared; the list returned gets the graphs
    compiled so far as each step starts (what the timed run would compile: the last less the
    first)."""
    from bertkit.training import loop

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compile_(module, backend=backend))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    at_steps = []
    step = loop._optimisation_step

    def counted(run, state):
        at_steps.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        step(run, state)
    monkeypatch.setattr(loop, "_optimisation_step", counted)
    return at_steps


def _graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


PHASED = ["--max-steps", "4", "--phases", "16:1000@0.5", "32:40000@0.5"]


@pytest.mark.parametrize("backend", [
    "eager", pytest.param("inductor", marks=pytest.mark.skipif(
        not os.environ.get("BERTKIT_TEST_COMPILE"),
        reason="inductor takes a minute or more on CPU; set BERTKIT_TEST_COMPILE=1"))])
def test_compiled_phases_run_on_one_graph_made_before_the_clock(prepared, tmp_path,
                                                                monkeypatch, backend):
    """torch.compile's graph capture (dynamo; with the eager backend, its guards, which
    decide a compile, without inductor's code generation): one graph for both lengths and
    both bases, made before the first step; and the weights of the uncompiled run (each
    phase's base read by the graph; the shapes' run before the clock leaves no gradient)."""
    assert _pretrain(prepared, tmp_path / "plain", *PHASED) == 0
    at_steps = _compiled_with(monkeypatch, backend)
    assert _pretrain(prepared, tmp_path / "c", *PHASED, "--compile") == 0
    assert at_steps == [1] * 4 and _graphs() == 1
    torch._dynamo.reset()
    plain, compiled = _weights(tmp_path / "plain"), _weights(tmp_path / "c")
    for k in plain:
        torch.testing.assert_close(compiled[k], plain[k], atol=1e-5, rtol=1e-4)


def test_compiled_shapes_that_need_two_graphs_make_both_before_the_clock(prepared, tmp_path,
                                                                        monkeypatch):
    """A local layer runs blocked from 4 windows on (`model/fast.py`): 16 then 64 tokens
    with a window of 8 cross that line, a guard of the graph, so two graphs; both are made
    before the first step. Without the run of each shape before the clock (the test's
    teeth), the second is made in the middle of the timed run."""
    from bertkit.training import loop

    args = ["--max-steps", "4", "--local-window", "8", "--phases", "16:1000@0.5",
            "64:40000@0.5", "--compile"]
    at_steps = _compiled_with(monkeypatch, "eager")
    assert _pretrain(prepared, tmp_path / "c", *args) == 0
    assert at_steps == [2] * 4 and _graphs() == 2
    monkeypatch.setattr(loop, "_compile_each_shape", lambda run: None)
    at_steps = _compiled_with(monkeypatch, "eager")
    assert _pretrain(prepared, tmp_path / "late", *args) == 0
    assert at_steps == [0, 1, 1, 2]  # the first graph in step 1, the second in step 3
    # with dropout: the shapes' run before the clock draws none of the steps' (torch.compile
    # draws dropout its own way, so the uncompiled run is no reference here)
    for out in ("c", "late"):
        shutil.rmtree(tmp_path / out)
    assert _pretrain(prepared, tmp_path / "late", *args, "--dropout", "0.1") == 0
    monkeypatch.undo()
    _compiled_with(monkeypatch, "eager")
    assert _pretrain(prepared, tmp_path / "c", *args, "--dropout", "0.1") == 0
    assert _equal(_weights(tmp_path / "c"), _weights(tmp_path / "late"))
    # unmarked sizes: a graph of each shape, both before the clock still
    monkeypatch.undo()
    monkeypatch.setattr(loop, "dynamic_shapes", lambda batch: batch)
    at_steps = _compiled_with(monkeypatch, "eager")
    assert _pretrain(prepared, tmp_path / "static", *PHASED, "--compile") == 0
    assert at_steps == [2] * 4
    torch._dynamo.reset()
