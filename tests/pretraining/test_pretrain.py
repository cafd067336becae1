"""Pretraining end to end: two gloo processes equal one process with the same global batch, a
run killed with kill -9 and resumed equals an uninterrupted one, the CLI and its bad input."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.pretraining import objectives
from bertkit.config import TrainConfig
from bertkit.training.loop import train

# Every test here is an integration run: torchrun, kill -9, the CLI on a prepared corpus.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
CONFTEST = REPO / "tests" / "conftest.py"


def _env(threads: int = 1) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("WORLD_SIZE", None)
    return env


class _GlobalBatches:
    """What one process sees when it takes both ranks' shares: their concatenation."""

    def __init__(self, tiny):
        self.parts = [tiny.FakeBatches(B=4, seed=0), tiny.FakeBatches(B=4, seed=1)]
        self.concat = tiny.concat

    def __iter__(self):
        for a, b in zip(*self.parts):
            yield self.concat(a, b)


_DDP_WORKER = """
import importlib.util
import sys
import torch.distributed as dist
from safetensors.torch import save_file
from bertkit.pretraining import objectives
from bertkit.config import TrainConfig
from bertkit.training.loop import train

# the tiny model and its batches, from tests/conftest.py (argv[2])
spec = importlib.util.spec_from_file_location("tiny_setup", sys.argv[2])
tiny = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny)

dist.init_process_group("gloo")
rank = dist.get_rank()
model = tiny.tiny_model()
train(model, objectives.mlm_loss, tiny.FakeBatches(B=4, seed=rank),
      TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=2, grad_accum=2), sys.argv[1],
      save=lambda m, p: save_file(m.state_dict(), str(p / "params.safetensors")),
      target_count=objectives.target_count("mlm"), show_progress=False)
dist.destroy_process_group()
"""


def test_two_gloo_processes_equal_one_process_with_the_global_batch(tmp_path, tiny):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_DDP_WORKER))
    with socket.socket() as s:  # a free port for the ranks to meet on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the two ranks started here, as torchrun would (torchrun's own process, another start-up
    # of torch, adds nothing to what this checks; test_mixture's torchrun relaunch has it)
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    ranks = [subprocess.Popen([PYTHON, str(script), str(tmp_path / "ddp"), str(CONFTEST)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    try:
        logs = [rank.communicate(timeout=300)[0] for rank in ranks]
    finally:
        for rank in ranks:  # one that failed leaves the other waiting for it
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0, 0], "\n".join(logs)[-3000:]
    ddp = load_file(str(tmp_path / "ddp/params.safetensors"))

    model = tiny.model()
    train(model, objectives.mlm_loss, _GlobalBatches(tiny),
          TrainConfig(max_steps=3, lr=1e-3, warmup_steps=0, log_every=2, grad_accum=2), tmp_path / "one",
          save=lambda m, p: None, target_count=objectives.target_count("mlm"),
          show_progress=False)
    start = tiny.model().state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(ddp[k], v, atol=1e-6, rtol=0, msg=k)
        if k.startswith("encoder.blocks"):
            assert not torch.equal(v, start[k])  # training moved it: the check has teeth


# The real pipeline: synthetic text -> vocabulary -> shards -> bertkit pretrain ------------------

def _cli(args: list[str]) -> int:
    return main(args)


TINY = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--lr", "1e-3",
        "--log-every", "2", "--eval-batches", "2"]


STEPS = [("bert", "mlm+nsp", []), ("bert", "span", []), ("modern", "mlm", ["--grad-accum", "2"]),
         ("modern", "mlm", ["--whole-word", "--early-seq-len", "16"]), ("modern", "span", []),
         ("modern", "clm", []), ("bert", "electra", []), ("modern", "electra", [])]


def _steps(prepared, out, architecture, objective, *more) -> int:
    return _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--objective",
                 objective, "--architecture", architecture, "--max-steps", "4", *TINY, *more])


@pytest.mark.parametrize("architecture,objective,extra", STEPS)
def test_the_step_never_makes_the_host_wait(prepared, tmp_path, step_syncs, architecture,
                                            objective, extra):
    """Forward, backward and update of every objective, as HostSyncs sees them (what a GPU
    would wait on); the progress log's read every --log-every steps is outside the step."""
    assert _steps(prepared, tmp_path / "o", architecture, objective, "--precision", "fp32",
                  *extra) == 0
    assert step_syncs.found == []


@pytest.mark.gpu
@pytest.mark.parametrize("architecture,objective,extra", STEPS)
def test_on_a_gpu_the_step_never_syncs(prepared, tmp_path, cuda_sync_errors, architecture,
                                       objective, extra):
    """The eager step (--no-compile); the compiled step, a GPU's default, has its own test
    below (docs/gpu.md, "The goals, and what is left")."""
    assert _steps(prepared, tmp_path / "o", architecture, objective, "--device", "cuda",
                  "--no-compile", *extra) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_on_a_gpu_the_compiled_step_never_syncs_once_compiled(prepared, tmp_path, monkeypatch,
                                                               sync_debug_errors, architecture):
    """`pretrain`'s default on a GPU. Compiling may wait for the device (Triton times a
    kernel's configurations on its first use); the steps after it must not."""
    import contextlib

    from tests.conftest import _around_steps

    calls = iter(range(1_000_000))  # two calls a step: gradients, then the update
    _around_steps(monkeypatch, lambda: (sync_debug_errors() if next(calls) >= 6
                                        else contextlib.nullcontext()))
    assert _steps(prepared, tmp_path / "o", architecture, "mlm", "--device", "cuda",
                  "--max-steps", "8", "--early-fraction", "0", "--compile") == 0  # one shape


@pytest.mark.parametrize("objective,hf_class", [("mlm", "BertForMaskedLM"),
                                               ("clm", "BertLMHeadModel"),
                                               ("mlm+nsp", "BertForPreTraining")])
def test_a_fresh_bert_run_saves_only_the_heads_it_trained_as_the_class_that_has_them(
        prepared, tmp_path, objective, hf_class):
    """NSP and the pooler learn only in mlm+nsp: elsewhere their random draw is left out (it
    would load in BertForPreTraining as if learned) and the directory names the transformers
    class without them, which loads it with no missing or unexpected keys."""
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "run"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--objective",
                 objective, "--architecture", "bert", "--max-steps", "2", *TINY]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == [hf_class]
    _, info = getattr(transformers, hf_class).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    saved = load_file(str(out / "model.safetensors"))
    for name in ("cls.seq_relationship.weight", "bert.pooler.dense.weight"):
        assert (name in saved) == (objective == "mlm+nsp"), name


@pytest.mark.parametrize("architecture,hf_class", [("bert", "BertForMaskedLM"),
                                                  ("modern", "ModernBertForMaskedLM")])
def test_pretrain_cli_writes_a_hugging_face_directory_with_the_sbo_head_beside(
        prepared, tmp_path, architecture, hf_class):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "span"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--objective", "span",
                 "--architecture", architecture, "--max-steps", "4", "--eval-every", "2",
                 *TINY]) == 0
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                 "sbo.safetensors", "metrics.jsonl", "loss.png"):
        assert (out / name).is_file(), name
    model, info = getattr(transformers, hf_class).from_pretrained(out, output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"], info
    sbo = load_file(str(out / "sbo.safetensors"))
    assert "dense1.weight" in sbo and "position.weight" in sbo
    evals = [line for line in (out / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert len(evals) == 2 and "eval_sbo_loss" in evals[-1]


def test_continued_pretraining_saves_no_head_it_neither_loaded_nor_trained(prepared, tmp_path,
                                                                           capsys):
    """--init of an encoder without pretraining heads (a BertModel, as sentence-transformers
    ships them) and an objective without NSP: the MLM head is trained and saved, the random
    NSP head is not, so transformers says it is newly initialised instead of loading it as if
    trained; the pooler the directory had is kept. mlm+nsp then trains the head and saves it."""
    transformers = pytest.importorskip("transformers")
    from bertkit.config import EncoderConfig
    from bertkit.model.encoder import Encoder
    from bertkit.model.hub import save_model
    from bertkit.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(prepared / "tokenizer")
    headless = tmp_path / "headless"
    save_model(Encoder(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                     num_layers=1, num_heads=2, intermediate_size=64,
                                     max_positions=64)), headless, tokenizer=tokenizer)
    pooler = load_file(str(headless / "model.safetensors"))["pooler.dense.weight"]
    mlm, nsp = tmp_path / "mlm", tmp_path / "nsp"

    def continued(init: Path, out: Path, objective: str) -> str:
        assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--init",
                     str(init), "--objective", objective, "--max-steps", "2", *TINY[2:]]) == 0
        return capsys.readouterr().err

    continued(headless, mlm, "mlm")
    _, info = transformers.BertForPreTraining.from_pretrained(mlm, output_loading_info=True)
    assert sorted(info["missing_keys"]) == ["cls.seq_relationship.bias",
                                            "cls.seq_relationship.weight"], info
    assert not info["unexpected_keys"], info
    saved = load_file(str(mlm / "model.safetensors"))
    assert "cls.predictions.transform.dense.weight" in saved  # trained by mlm: kept
    torch.testing.assert_close(saved["bert.pooler.dense.weight"], pooler)  # loaded: kept
    # bertkit says the head is absent too; mlm+nsp trains it, and it is saved
    assert "no weights for nsp.weight, nsp.bias; initialised" in continued(mlm, nsp, "mlm+nsp")
    _, info = transformers.BertForPreTraining.from_pretrained(nsp, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def _saved_for_mlm(init: Path, out: Path) -> set[str]:
    """What transformers' BertForPreTraining finds missing in what an mlm run from `init`
    saves, and that the model keeps the heads it saved without."""
    transformers = pytest.importorskip("transformers")
    from bertkit.model.hub import load_pretraining_model
    from bertkit.pretraining.objectives import objective_named

    with pytest.warns(UserWarning, match="no weights for"):
        model = load_pretraining_model(init)
    assert objective_named("mlm+nsp").untrained_parts(model) == []  # trained: saved
    objective_named("mlm").save(model, out, None)
    assert model.nsp is not None and model.encoder.pooler is not None  # left out of the save only
    _, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["unexpected_keys"], info
    return set(info["missing_keys"])


def test_the_real_minilm_continued_with_mlm_saves_its_pooler_and_no_nsp_head(minilm_dir,
                                                                              tmp_path):
    assert _saved_for_mlm(minilm_dir, tmp_path / "out") == {"cls.seq_relationship.weight",
                                                            "cls.seq_relationship.bias"}


def test_a_pooler_the_init_lacked_is_not_saved_by_a_run_that_does_not_train_it(tmp_path):
    from safetensors.torch import save_file

    from bertkit.config import EncoderConfig
    from bertkit.model.encoder import Encoder
    from bertkit.model.hub import save_model

    bare = save_model(Encoder(EncoderConfig(vocab_size=50, hidden_size=16, num_layers=1,
                                            num_heads=2, intermediate_size=32)), tmp_path / "b")
    weights = load_file(str(bare / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if not k.startswith("pooler.")},
              str(bare / "model.safetensors"), metadata={"format": "pt"})
    assert _saved_for_mlm(bare, tmp_path / "out") == {
        "cls.seq_relationship.weight", "cls.seq_relationship.bias",
        "bert.pooler.dense.weight", "bert.pooler.dense.bias"}


def test_pretrain_cli_electra_writes_the_discriminator_and_its_generator_for_transformers(
        prepared, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "electra"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--objective",
                 "electra", "--architecture", "bert", "--max-steps", "4", "--eval-every", "2",
                 "--generator-fraction", "0.5", "--detection-weight", "20", *TINY]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "electra" and config["architectures"] == [
        "ElectraForPreTraining"]
    generator = json.loads((out / "generator" / "config.json").read_text())
    assert generator["architectures"] == ["ElectraForMaskedLM"]
    assert (generator["hidden_size"], generator["embedding_size"]) == (64, 128)  # tiny: 128
    for cls, where in (("ElectraForPreTraining", out), ("ElectraForMaskedLM", out / "generator")):
        _, info = getattr(transformers, cls).from_pretrained(where, output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys",
                                         "mismatched_keys")), (cls, info)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("split") == "eval"]
    assert len(evals) == 2 and 0.0 <= evals[-1]["eval_detection_auc"] <= 1.0
    assert "eval_detection_accuracy" in evals[-1] and "eval_accuracy" in evals[-1]
    train = [r for r in records if r.get("split") == "train"]
    assert "detection_loss" in json.dumps(train[-1]) and "mlm_loss" in json.dumps(train[-1])
    recorded = json.loads((out / "training_args.json").read_text())
    assert "--detection-weight 20" in json.dumps(recorded)


@pytest.mark.parametrize("objective", ["mlm+nsp", "electra"])
def test_kill_9_then_resume_equals_an_uninterrupted_run(prepared, tmp_path, objective,
                                                         monkeypatch):
    import signal
    import time

    args = ["pretrain", "--data", str(prepared), "--objective", objective,
            "--architecture", "bert", "--max-steps", "12",
            "--save-every", "3", "--eval-every", "6", *TINY]
    bertkit = [str(Path(PYTHON).parent / "bertkit")]
    # uninterrupted in this process, on one thread as the processes below (OMP_NUM_THREADS=1,
    # which the command heeds): a process start-up (seconds: torch) the fewer
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _cli(args + ["--out", str(tmp_path / "full")]) == 0

    cut = tmp_path / "cut"
    proc = subprocess.Popen(bertkit + args + ["--out", str(cut)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not list((cut / "checkpoints").glob("step-*")) and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGSTOP)  # freeze it wherever it is (even mid-save), then kill
    assert proc.poll() is None and not (cut / "model.safetensors").exists()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    resumed = subprocess.run(bertkit + args + ["--out", str(cut), "--resume"], env=_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stderr
    weights = ["model.safetensors"] + (["generator/model.safetensors"]
                                       if objective == "electra" else [])
    for name in weights:
        a, b = load_file(str(tmp_path / "full" / name)), load_file(str(cut / name))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (name, k)
    steps = [json.loads(line)["step"] for line in (cut / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 12  # no duplicated records after the resume


# Settings and bad input ---------------------------------------------------------------------------

def test_toml_config_with_command_line_overrides(prepared, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f'data = "{prepared}"\npreset = "tiny"\nseq_len = 32\nbatch_size = 8\n'
                      f'[train]\nmax_steps = 2\nlog_every = 1\nschedule = "cosine"\n',
                      encoding="utf-8")
    out = tmp_path / "run"
    assert _cli(["pretrain", "--config", str(config), "--out", str(out), "--max-steps", "3"]) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert steps == [1, 2, 3]
    config.write_text('max_stepz = 3\n', encoding="utf-8")
    assert _cli(["pretrain", "--config", str(config), "--out", str(out)]) == 2


def _error(capsys, args) -> str:
    assert _cli(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: "), err
    return err.strip().splitlines()[-1]


def test_bad_input_is_one_line_and_writes_nothing(prepared, tmp_path, capsys, monkeypatch, tiny):
    from bertkit.config import EncoderConfig
    from bertkit.model.hub import save_model
    from bertkit.model.heads import PretrainingModel
    from bertkit.text.tokenizer import Tokenizer

    out = tmp_path / "out"
    base = ["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2"]
    assert "--init DIR, not both" in _error(capsys, base + ["--preset", "tiny", "--init", "x"])

    tokenizer = Tokenizer.load(prepared / "tokenizer")
    short = tmp_path / "short"
    save_model(PretrainingModel(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                              num_layers=1, num_heads=2, intermediate_size=64,
                                              max_positions=16)), short, tokenizer=tokenizer)
    assert "--seq-len 32 is longer than the model's 16 positions" in _error(
        capsys, base + ["--init", str(short), "--seq-len", "32", "--batch-size", "4"])

    from bertkit.text.vocab import train_tokenizer
    other = tmp_path / "other"
    corpus = tiny.write_corpus(tmp_path / "other.txt", seed=3)
    corpus.write_text(corpus.read_text() + "zebra xylophone quokka\n" * 50)
    other_tok = train_tokenizer([corpus], vocab_size=150, progress=False)
    save_model(PretrainingModel(EncoderConfig(vocab_size=other_tok.vocab_size, hidden_size=32,
                                              num_layers=1, num_heads=2, intermediate_size=64,
                                              max_positions=64)), other, tokenizer=other_tok)
    assert "tokenizer does not match the data" in _error(
        capsys, base + ["--init", str(other), "--seq-len", "32"])

    from bertkit.pretraining.objectives import MaskedLM

    def oom(self, model, batch):
        raise torch.OutOfMemoryError("out of memory: you tried to allocate 1 GB")

    monkeypatch.setattr(MaskedLM, "loss", oom)
    line = _error(capsys, base + ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8"])
    assert "out of memory for a batch of 8 x 32 tokens: lower the batch size" in line
    assert not out.exists()


def test_a_text_file_as_data_is_prepared_into_the_run_and_found_there_again(tmp_path, tiny,
                                                                            capsys, monkeypatch):
    import shlex

    from bertkit.pretraining import run_data

    def looked_up_again(root):
        raise AssertionError("pretrain looks up the latest checkpoint once, before the data")

    monkeypatch.setattr(run_data, "latest_checkpoint", looked_up_again)
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(corpus), "--out", str(out), "--vocab-size", "120",
            "--architecture", "bert", *TINY]
    assert _cli(args + ["--max-steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "WordPiece vocabulary of 120 pieces" in err
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    assert manifest["sources"][0]["path"] == str(corpus.resolve())
    assert (out / "model.safetensors").is_file()
    assert (out / "vocab.txt").read_text() == (out / "data" / "tokenizer" / "vocab.txt").read_text()
    argv = shlex.split(json.loads((out / "training_args.json").read_text())["command"])
    assert argv[argv.index("--data") + 1] == str(corpus)  # what was typed, not OUT/data

    # another corpus into this run without --resume: refused before a vocabulary is trained
    # and OUT/data is prepared again (the run's own data stays)
    other = tiny.write_corpus(tmp_path / "other.txt", seed=7)
    assert _cli(["pretrain", "--data", str(other), *args[3:], "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "holds checkpoints of an earlier run" in err and "WordPiece" not in err
    # ... and with --resume: refused before OUT/data is replaced by the other text's
    before = (out / "data" / "manifest.json").read_bytes()
    assert _cli(["pretrain", "--data", str(other), *args[3:], "--max-steps", "2",
                 "--resume"]) == 2
    err = capsys.readouterr().err
    # another file named: said in the words of --data (same name, other bytes: test_mixture)
    assert f"trained on the corpus {corpus}, this run asks for the corpus {other}" in err
    assert "WordPiece" not in err and len(err.strip().splitlines()) == 1
    assert (out / "data" / "manifest.json").read_bytes() == before

    assert _cli(args + ["--max-steps", "4", "--resume"]) == 0  # the same data, not made again
    captured = capsys.readouterr()
    assert "already prepared from" in captured.err and "WordPiece" not in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["steps"] == 4

    # continued pretraining on another file takes --init's tokenizer, not a new vocabulary
    more = tiny.write_corpus(tmp_path / "more.txt", seed=5)
    further = tmp_path / "further"
    assert _cli(["pretrain", "--data", str(more), "--out", str(further), "--init", str(out),
                 "--max-steps", "2", *TINY[2:]]) == 0
    err = capsys.readouterr().err
    assert "WordPiece" not in err
    assert (further / "data" / "tokenizer" / "vocab.txt").read_text() \
        == (out / "vocab.txt").read_text()
    # the settings and record say what the run used, not the defaults of a fresh model
    used = json.loads((further / "training_args.json").read_text())["options"]
    pieces = len((out / "vocab.txt").read_text().splitlines())
    assert used["architecture"] == "bert" and used["vocab_size"] == pieces != 16000
    assert "architecture=bert" in err and f"vocab_size={pieces}" in err


def test_a_corpus_touched_and_prepared_again_resumes_and_other_text_does_not(tmp_path, tiny,
                                                                            prepared, capsys):
    import os
    import shutil

    root = prepared.parent
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    assert corpus.read_bytes() == (root / "corpus.txt").read_bytes()
    shutil.copytree(root / "tok", tmp_path / "tok")
    data, out = tmp_path / "data", tmp_path / "run"
    prepare = ["prepare", "--input", str(corpus), "--tokenizer", str(tmp_path / "tok"),
               "--out", str(data), "--heldout", "0.1", "--workers", "1", "--quiet"]
    assert _cli(prepare) == 0
    run = ["pretrain", "--data", str(data), "--out", str(out), *TINY]
    assert _cli(run + ["--max-steps", "2"]) == 0
    # the same bytes with a new time, prepared again: its manifest names the new time
    before = json.loads((data / "manifest.json").read_text())["sources"]
    os.utime(corpus, ns=(before[0]["mtime_ns"] + 10**9,) * 2)
    assert _cli(prepare) == 0
    assert json.loads((data / "manifest.json").read_text())["sources"] != before
    capsys.readouterr()
    assert _cli(run + ["--max-steps", "4", "--resume"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 4
    # other text prepared in its place is other data
    tiny.write_corpus(corpus, seed=3)
    assert _cli(prepare) == 0
    assert _cli(run + ["--max-steps", "6", "--resume"]) == 2
    assert "other data" in capsys.readouterr().err


def test_a_checkpoint_of_the_manifests_bytes_resumes_as_it_was_made(prepared):
    # before the data digest left the manifest's sources out, it was of the manifest's bytes
    import hashlib

    from bertkit.pretraining.run_data import data_fingerprint

    parts = [(prepared, 1.0)]
    legacy = hashlib.sha256((prepared / "manifest.json").read_bytes()).hexdigest()[:16]
    now = data_fingerprint(parts)
    assert now != legacy and data_fingerprint(parts, resumed=legacy) == legacy
    assert data_fingerprint(parts, resumed="0" * 16) == now


def test_a_folder_of_text_with_a_shards_folder_in_it_is_a_corpus(tmp_path, tiny, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "shards").mkdir(parents=True)
    tiny.write_corpus(corpus / "shards" / "part-1.txt")
    assert _cli(["pretrain", "--data", str(corpus), "--out", str(tmp_path / "run"),
                 "--vocab-size", "120", *TINY, "--max-steps", "1"]) == 0
    assert "WordPiece vocabulary of 120 pieces" in capsys.readouterr().err


def test_a_text_file_as_data_and_its_bad_input(prepared, tmp_path, capsys):
    out = tmp_path / "run"
    line = _error(capsys, ["pretrain", "--data", str(tmp_path / "missing.txt"), "--out", str(out),
                           "--max-steps", "2"])
    assert "missing.txt: does not exist (give a corpus: a file, folder or glob; a directory" in line
    line = _error(capsys, ["pretrain", "--data", str(prepared), "--out", str(out),
                           "--tokenizer", str(prepared / "tokenizer"), "--max-steps", "2"])
    assert "--tokenizer is for a text file as --data" in line
    # bad input found by reading the whole file is the only line: no "vocabulary ..." before it
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert _cli(["pretrain", "--data", str(empty), "--out", str(out), "--max-steps", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {empty}: no text (only blank lines)"]
    late = tmp_path / "late.txt"  # its first line is UTF-8, as the format's sniffing reads
    late.write_bytes(b"Hello world.\n" * 3 + b"bad \xff here\n")
    assert _cli(["pretrain", "--data", str(late), "--out", str(out), "--max-steps", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {late}:4: not UTF-8 text (byte 0xff at column 5)"]
    assert not out.exists()


def test_a_batch_that_does_not_split_over_the_ranks_is_refused_before_the_text_is_prepared(
        tmp_path, capsys, monkeypatch, tiny):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it: refused before the ranks meet
    out = tmp_path / "run"
    line = _error(capsys, ["pretrain", "--data", str(tiny.write_corpus(tmp_path / "c.txt")),
                           "--out", str(out), "--batch-size", "7", "--max-steps", "2"])
    assert line == "error: a batch of 7 sequences does not split over 2 ranks"
    assert not out.exists()  # nothing prepared


def test_corrupt_checkpoint_is_refused_on_resume(prepared, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(prepared), "--out", str(out), "--save-every", "2", *TINY]
    assert _cli(args + ["--max-steps", "2"]) == 0
    capsys.readouterr()
    weights = out / "checkpoints/step-00000002/optimizer.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    line = _error(capsys, args + ["--max-steps", "4", "--resume"])
    assert "optimizer.safetensors: checkpoint is corrupt" in line
    shutil.rmtree(out / "checkpoints/step-00000002")
    assert _cli(args + ["--max-steps", "2"]) == 0
    line = _error(capsys, ["pretrain", "--data", str(prepared), "--out", str(out), "--resume",
                           "--max-steps", "4", *TINY[:4], "--batch-size", "4"])
    assert "checkpoint was made with batch_size = 8, this run has 4" in line


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file under `root` with its bytes, and every folder (None)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("other,resume", [(["--batch-size", "4"], True),
                                          (["--architecture", "bert"], True),
                                          (["--batch-size", "4"], False)],
                         ids=["other-options", "other-model", "without-resume"])
def test_a_refused_resume_is_one_line_and_leaves_the_run_as_it_was(prepared, tmp_path, capsys,
                                                                  other, resume):
    # the settings file, the log, the plot and the checkpoints: the refused run's settings
    # must not replace the record of the run the checkpoints belong to
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(prepared), "--out", str(out), "--save-every", "2", *TINY]
    assert _cli(args + ["--max-steps", "2"]) == 0
    capsys.readouterr()
    before = _tree(out)
    assert {"training_args.json", "metrics.jsonl", "checkpoints/step-00000002/manifest.json"} \
        <= before.keys()
    assert _cli(args + ["--max-steps", "4", *other, *(["--resume"] if resume else [])]) == 2
    assert _tree(out) == before
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: "), said
    assert ("checkpoint " if resume else "holds checkpoints of an earlier run") in said[0]


def test_a_resume_with_other_settings_is_refused_before_its_text_is_prepared(prepared, tiny,
                                                                            tmp_path, capsys):
    # given as text now, the run's data would be prepared into OUT/data (a vocabulary
    # trained, shards written) before the model's checkpoint could refuse the batch size
    out = tmp_path / "run"
    args = ["--out", str(out), "--save-every", "2", *TINY]
    assert _cli(["pretrain", "--data", str(prepared), *args, "--max-steps", "2"]) == 0
    capsys.readouterr()
    before = _tree(out)
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    assert _cli(["pretrain", "--data", str(corpus), *args, "--vocab-size", "120",
                 "--max-steps", "4", "--batch-size", "4", "--resume"]) == 2
    assert _tree(out) == before
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "checkpoint was made with batch_size = 8, this run has 4" \
        in said[0], said


@pytest.mark.parametrize("other,refusal", [
    (["--preset", "small"], "checkpoint weight encoder.embeddings.word.weight has shape "
                            "[{V}, 128], this model has [{V}, 512]: it was made for a "
                            "different model"),
    (["--architecture", "bert"], "checkpoint has no weight encoder.embeddings.position.weight:"
                                 " it was made for a different model")],
    ids=["other-preset", "other-architecture"])
def test_a_resume_of_another_model_is_refused_before_its_data_is_found_or_prepared(
        tiny, tmp_path, capsys, other, refusal):
    # its text copied elsewhere is found prepared by its bytes (OUT/data's record of its
    # files then brought up to date) or, where OUT/data is gone, prepared again: the model's
    # shape is known before the data (the checkpoint's vocabulary is the data's)
    out = tmp_path / "run"
    args = ["--out", str(out), "--save-every", "2", "--vocab-size", "120", *TINY]
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    assert _cli(["pretrain", "--data", str(corpus), *args, "--max-steps", "2"]) == 0
    copy = shutil.copy(corpus, tmp_path / "copy.txt")
    capsys.readouterr()
    refusal = refusal.format(V=len((out / "vocab.txt").read_text().splitlines()))
    for gone in (False, True):
        if gone:
            shutil.rmtree(out / "data")
        before = _tree(out)
        assert _cli(["pretrain", "--data", str(copy), *args, "--max-steps", "4", *other,
                     "--resume"]) == 2
        assert _tree(out) == before
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and refusal in said[0], said


def test_a_resume_of_another_init_model_is_refused_before_its_text_is_prepared(
        prepared, tiny, tmp_path, capsys):
    # --init's shapes are read from its config.json, its vocabulary with them
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "run"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(first), *TINY,
                 "--max-steps", "1"]) == 0
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(second), *TINY,
                 "--architecture", "bert", "--max-steps", "1"]) == 0
    args = ["--out", str(out), "--save-every", "2", *TINY[2:]]
    assert _cli(["pretrain", "--data", str(prepared), "--init", str(first), *args,
                 "--max-steps", "2"]) == 0
    capsys.readouterr()
    before = _tree(out)
    corpus = tiny.write_corpus(tmp_path / "corpus.txt")
    assert _cli(["pretrain", "--data", str(corpus), "--init", str(second), *args,
                 "--max-steps", "4", "--resume"]) == 2
    assert _tree(out) == before
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "it was made for a different model" in said[0], said
    assert _cli(["pretrain", "--data", str(prepared), "--init", str(first), *args,
                 "--max-steps", "4", "--resume"]) == 0  # the same --init resumes


# What a run records, and extending a finished one --------------------------------------------------

def test_the_run_records_its_settings_and_its_command_reproduces_it(prepared, tmp_path, capsys):
    import shlex

    out = tmp_path / "first"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2",
                 "--precision", "auto", *TINY]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("settings (bertkit ")  # the resolved settings come first
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["stopped_by"] == "max_steps"
    assert {"train_loss", "train_learning_rate", "train_tokens_per_second", "eval_loss",
            "eval_accuracy", "eval_perplexity"} <= summary.keys()
    record = json.loads((out / "training_args.json").read_text())
    precision = record["environment"]["precision"]
    assert precision in ("fp32", "bf16")
    assert record["options"]["train"]["precision"] == precision  # "auto" resolved
    assert record["options"]["preset"] == "tiny" and record["options"]["device"] == "cpu"
    argv = shlex.split(record["command"])
    assert argv[:2] == ["bertkit", "pretrain"]
    assert argv[argv.index("--precision") + 1] == precision
    assert argv[argv.index("--warmup-fraction") + 1] == "0.05"  # defaults spelled out too
    assert record["options"]["train"]["compile"] is False and "--no-compile" in argv  # CPU

    again = tmp_path / "again"
    argv[argv.index("--out") + 1] = str(again)
    assert _cli(argv[1:]) == 0
    a, b = load_file(str(out / "model.safetensors")), load_file(str(again / "model.safetensors"))
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("triton", [True, False])
def test_compile_unset_is_on_for_a_cuda_device_with_triton_and_a_given_choice_stays(
        tmp_path, monkeypatch, triton):
    from bertkit.files import UserError
    from bertkit.pretraining.options import PretrainOptions, PretrainSchedule
    from bertkit.pretraining.plan import resolve
    from bertkit.training.loop import check_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        (object() if triton else None) if name == "triton" else real(name, *a)))

    def compiles(device: str, given: bool | None) -> bool:
        opts = PretrainOptions(data=tmp_path, out=tmp_path / "o", preset="tiny",
                               train=PretrainSchedule(max_steps=1, precision="fp32",
                                                      compile=given))
        return resolve(opts, torch.device(device))[0].train.compile

    assert compiles("cuda", None) is triton
    assert (compiles("cuda", False), compiles("cpu", True), compiles("cpu", None)) == (
        False, True, False)
    asked = PretrainSchedule(max_steps=1, compile=True)
    if not triton:
        with pytest.raises(UserError, match="needs Triton"):
            check_config(asked, torch.device("cuda"))


def test_compile_on_a_cpu_without_a_cpp_compiler_is_one_line(monkeypatch):
    import shutil

    from bertkit.files import UserError
    from bertkit.config import TrainConfig
    from bertkit.training.loop import check_config

    asked = TrainConfig(max_steps=1, compile=True)
    check_config(asked, torch.device("cpu"))  # this machine has one
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="needs a C\\+\\+ compiler"):
        check_config(asked, torch.device("cpu"))
    check_config(TrainConfig(max_steps=1), torch.device("cpu"))  # not asked: no check


def test_a_finished_run_is_extended_by_resume_with_more_steps(prepared, tmp_path, capsys):
    args = ["pretrain", "--data", str(prepared), "--schedule", "constant", "--warmup-steps", "0",
            *TINY]
    out = tmp_path / "run"
    assert _cli(args + ["--out", str(out), "--max-steps", "4"]) == 0
    assert (out / "checkpoints/step-00000004").is_dir()  # no --save-every, still a checkpoint
    four = load_file(str(out / "model.safetensors"))
    capsys.readouterr()
    assert _cli(args + ["--out", str(out), "--max-steps", "6", "--resume"]) == 0
    captured = capsys.readouterr()
    assert "resumed from" in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["steps"] == 6
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6]
    six = load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(four[k], six[k]) for k in four)
    whole = tmp_path / "whole"
    assert _cli(args + ["--out", str(whole), "--max-steps", "6"]) == 0
    uninterrupted = load_file(str(whole / "model.safetensors"))
    for k in six:
        assert torch.equal(six[k], uninterrupted[k]), k


def _resume_from_step_2_equals(whole, cut, args) -> None:
    """A copy of the finished run `whole` at `cut`, cut back to its step-2 checkpoint and
    resumed with `args`, ends with the same weights."""
    shutil.copytree(whole, cut)
    assert (cut / "checkpoints" / "step-00000002").is_dir()
    for late in (cut / "checkpoints").glob("step-*"):
        if late.name != "step-00000002":
            shutil.rmtree(late)
    (cut / "model.safetensors").unlink()
    assert _cli(args + ["--out", str(cut), "--resume"]) == 0
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(cut / "model.safetensors"))
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_short_sequences_first_then_long_resumes_across_the_switch(prepared, tmp_path, capsys):
    args = ["pretrain", "--data", str(prepared), "--max-steps", "6", "--save-every", "2",
            "--keep-checkpoints", "3", "--early-seq-len", "16", "--early-fraction", "0.5", *TINY]
    whole = tmp_path / "whole"
    assert _cli(args + ["--out", str(whole)]) == 0
    assert "16 x 16 -> 32 x 8 (at 50%) tokens per batch" in capsys.readouterr().err
    recorded = json.loads((whole / "training_args.json").read_text())["options"]
    assert (recorded["early_seq_len"], recorded["early_fraction"]) == (16, 0.5)
    # back to step 2, before the switch: the resumed run switches where the whole did
    cut = tmp_path / "cut"
    _resume_from_step_2_equals(whole, cut, args)
    # a resume with other lengths is refused, as another --seq-len is
    assert _cli(args[:-len(TINY)] + ["--early-seq-len", "8", *TINY, "--out", str(cut),
                                     "--resume", "--max-steps", "8"]) != 0
    assert "early_seq_len" in capsys.readouterr().err
    # a length that does not divide the batch's tokens takes about as many; a bad one is refused
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(tmp_path / "odd"),
                 "--max-steps", "2", *TINY, "--early-seq-len", "24"]) == 0
    assert "24 x 11 -> 32 x 8 (at 90%) tokens per batch" in capsys.readouterr().err
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(tmp_path / "bad"),
                 "--max-steps", "2", *TINY, "--early-seq-len", "4"]) != 0
    assert "--early-seq-len must be at least 8" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    # the default 64 applies only below --seq-len, and --early-fraction 0 turns it off
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(tmp_path / "plain"),
                 "--max-steps", "1", *TINY]) == 0
    err = capsys.readouterr().err
    assert " 32 x 8 tokens per batch" in err
    threads = torch.get_num_threads()
    assert f"1 rank on cpu, {threads} thread{'' if threads == 1 else 's'}\n" in err  # no "(s)"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(tmp_path / "off"),
                 "--max-steps", "1", *TINY, "--seq-len", "128", "--batch-size", "2",
                 "--early-fraction", "0"]) == 0
    assert " 128 x 2 tokens per batch" in capsys.readouterr().err


def test_a_masking_rate_that_falls_during_the_run_is_shown_recorded_and_kept_on_resume(
        prepared, tmp_path, capsys):
    args = ["pretrain", "--data", str(prepared), "--max-steps", "4", "--save-every", "2",
            "--mlm-prob-final", "0.15", *TINY]
    whole = tmp_path / "whole"
    assert _cli(args + ["--out", str(whole)]) == 0
    assert "40% -> 15% masked" in capsys.readouterr().err
    recorded = json.loads((whole / "training_args.json").read_text())["options"]
    assert recorded["masking"]["mlm_prob_final"] == 0.15
    cut = tmp_path / "cut"
    _resume_from_step_2_equals(whole, cut, args)
    assert _cli(args[:-len(TINY)] + ["--mlm-prob-final", "0.3", *TINY, "--out", str(cut),
                                     "--resume", "--max-steps", "6"]) != 0
    assert "mlm_prob_final" in capsys.readouterr().err


def test_tensorboard_on_the_command_line(prepared, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2",
                 "--tensorboard", *TINY]) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/learning_rate", "eval/loss"} <= set(events.Tags()["scalars"])


# The model card ---------------------------------------------------------------------------------

def test_the_final_model_has_a_card_with_its_corpus_size_and_held_out_figures(prepared, tmp_path,
                                                                              capsys):
    out = tmp_path / "run"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2",
                 "--save-every", "1", *TINY]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    card = (out / "README.md").read_text()
    assert card.startswith('---\nlibrary_name: "transformers"\npipeline_tag: "fill-mask"\n---\n\n'
                           "## Pretrained with bertkit\n\nThis model was pretrained by "
                           "`bertkit pretrain` on `corpus.txt`")
    for said in ("preset `tiny`", "objective `mlm`", f"{summary['tokens']:,} tokens",
                 "2 steps", "M parameters"):
        assert said in card, said
    rows = {cells[1].strip(): cells[2].strip() for cells in
            (line.split("|") for line in card.splitlines() if line.startswith("| eval_"))}
    assert rows["eval_loss"] == f"{summary['eval_loss']:.4f}"
    assert rows["eval_accuracy"] == f"{summary['eval_accuracy']:.4f}"
    assert not list((out / "checkpoints").rglob("README.md"))  # checkpoints need none


def test_continued_pretraining_keeps_the_init_card_above_its_section(prepared, tmp_path,
                                                                     monkeypatch):
    first = tmp_path / "first"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(first), "--max-steps", "1",
                 *TINY]) == 0
    source = "---\nlicense: mit\n---\n# A tiny model\n\nTrained on synthetic text.\n"
    (first / "README.md").write_text(source)
    cards = []
    for run in ("a", "b"):  # the same run twice (OUT as given the same): the same card
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        assert _cli(["pretrain", "--data", str(prepared), "--out", "more", "--init", str(first),
                     "--max-steps", "1", *TINY[2:]]) == 0
        cards.append((tmp_path / run / "more" / "README.md").read_bytes())
    assert cards[0] == cards[1]
    card = cards[0].decode()
    assert card.startswith('---\nlicense: mit\nlibrary_name: "transformers"\npipeline_tag: '
                           '"fill-mask"\n---\n\n# A tiny model\n\nTrained on synthetic text.\n\n'
                           "## Pretrained with bertkit\n")
    assert f"from `{first}`" in card and f"The card above is `{first}`'s." in card


def test_an_init_card_that_is_not_utf8_is_one_error_before_the_data_or_training(
        prepared, tmp_path, capsys, monkeypatch):
    from bertkit.pretraining import plan

    first = tmp_path / "first"
    assert _cli(["pretrain", "--data", str(prepared), "--out", str(first), "--max-steps", "1",
                 *TINY]) == 0
    (first / "README.md").write_bytes(b"# Caf\xe9\n")
    monkeypatch.setattr(plan, "data_parts", lambda *a, **k: pytest.fail("data read first"))
    out = tmp_path / "more"
    line = _error(capsys, ["pretrain", "--data", str(prepared), "--out", str(out), "--init",
                           str(first), "--max-steps", "1", *TINY[2:]])
    assert line == f"error: {first / 'README.md'}: the model card is not UTF-8 text (byte 5)"
    assert not out.exists()
