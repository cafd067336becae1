"""`bertkit finetune` under torchrun, two gloo processes on the CPU: each task's run equals one
process with the same global batch (the loss of every step, the saved model), a short last
batch included (a rank left without a row runs a stand-in at weight zero), embed's in-batch
negatives gathered across the ranks, a teacher's lesson; a worker killed with kill -9
under --max-restarts is restarted and finishes; a checkpoint resumes at another number of
ranks; more processes than training examples is refused in one line."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.finetuning.data_parallel import ranks_joined
from bertkit.finetuning.recipe import FinetuneConfig, plan_run, read_data, training_items
from bertkit.finetuning.tasks.rerank import Rerank
from tests.finetuning.conftest import PEOPLE, sentiment, write_conll, write_jsonl
from tests.finetuning.test_embed_task import make_file
from tests.finetuning.test_resume import _signal_at

pytestmark = [pytest.mark.slow]

PYTHON = sys.executable
TOLERANCE = 2e-5
"""Weights of one process and of two agree to this: the same rows, targets and schedule, the
sums taken in another order (two halves all-reduced). A step moves them by about lr = 1e-2."""
LOSS_TOLERANCE = 1e-5
UNDETERMINED = ".attention.self.key.bias"
"""Left out of the comparison: softmax ignores a score added to every key alike, so the key
bias's gradient is zero but for rounding, which Adam divides by its own tiny size (eps 1e-8)
into steps of the learning rate's order: one process and two move it by their own noise."""
QUICK = ["--precision", "fp32", "--warmup", "0", "--lr", "1e-2", "--head-lr", "1e-2",
         "--seed", "0", "--quiet"]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT"):
        env.pop(name, None)
    return env


def _args(task: str, model: Path, train: Path, dev: Path, out: Path, *more: str) -> list[str]:
    return ["finetune", task, "--model", str(model), "--train", str(train), "--dev", str(dev),
            "--out", str(out), *QUICK, *more]


def _one_process(args: list[str], status: int = 0) -> None:
    """The run in this process, one thread as each rank has; it exits with `status`."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            patch.delenv(name, raising=False)
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            assert main(args) == status
        finally:
            torch.set_num_threads(threads)


def _torchrun(args: list[str], *launcher: str, module: str = "torch.distributed.run",
              ranks: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", module, "--standalone", "--nproc_per_node", str(ranks),
                           *launcher, "-m", "bertkit.cli", *args],
                          env=_env(), capture_output=True, text=True, timeout=180)


def _two_ranks(args: list[str]) -> str:
    done = _torchrun(args)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _losses(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["split"] == "train"]


def _assert_same_run(one: Path, two: Path, atol: float = TOLERANCE) -> None:
    """The loss curve within LOSS_TOLERANCE, the saved weights within `atol`."""
    a, b = _losses(one), _losses(two)
    assert [s for s, _ in a] == [s for s, _ in b] and len(a) >= 4
    for (step, x), (_, y) in zip(a, b):
        assert abs(x - y) <= LOSS_TOLERANCE, (step, x, y)
    wa, wb = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in (k for k in wa if not k.endswith(UNDETERMINED)):
        torch.testing.assert_close(wa[k], wb[k], atol=atol, rtol=0, msg=k)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """41 sentences to classify (batches of 8: the last holds one row, which rank 1 takes
    while rank 0 runs a stand-in), 40 with names tagged, 40 pairs."""
    d = tmp_path_factory.mktemp("ddp")
    return {"train": write_jsonl(d / "train.jsonl", sentiment(41, 1)),
            "dev": write_jsonl(d / "dev.jsonl", sentiment(20, 2)),
            "pairs": make_file(d, "pairs", 40), "pairs_dev": make_file(d, "pairs", 16, seed=1),
            "names": write_conll(d / "names.conll", _names(40, 5)),
            "names_dev": write_conll(d / "names_dev.conll", _names(16, 6))}


def _names(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """Sentences of 4 to 6 words, some split in two pieces ("film ##s"), holding 0 to 6
    names: rows of like length (a batch's) with unlike numbers of words and of entity spans,
    the targets that the tag and spans losses average over."""
    rng = random.Random(seed)

    def word() -> tuple[str, str]:
        if rng.random() < 0.4:
            return rng.choice(PEOPLE), "B-PER"
        return rng.choice(["film", "plot", "movie"]) + "s" * (rng.random() < 0.5), "O"

    return [[word() for _ in range(rng.randint(4, 6))] for _ in range(n)]


CLASSIFY = ("--epochs", "3", "--batch-size", "8", "--patience", "9")


@pytest.fixture(scope="module")
def classify_one(data, tiny_bert, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    _one_process(_args("classify", tiny_bert, data["train"], data["dev"], out, *CLASSIFY))
    return out


@pytest.fixture(scope="module")
def classify_two(data, tiny_bert, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("two") / "run"
    stdout = _two_ranks(_args("classify", tiny_bert, data["train"], data["dev"], out,
                              *CLASSIFY))
    # rank 0 alone reports and writes
    assert len(stdout.splitlines()) == 1 and json.loads(stdout)["steps"] == 18
    assert not (out / "checkpoints").exists()
    return out


def test_classify_on_two_ranks_equals_one_process(classify_one, classify_two):
    _assert_same_run(classify_one, classify_two)
    assert json.loads((classify_one / "dev_metrics.json").read_text()).keys() == \
        json.loads((classify_two / "dev_metrics.json").read_text()).keys()
    card = (classify_two / "README.md").read_text()
    assert "batch size: 8" in card  # the global batch, as the user gave it


def test_tag_on_two_ranks_equals_one_process(data, tiny_bert, tmp_path):
    """Without a CRF the loss is a mean over labelled word pieces, which the ranks' shares
    hold unequally (batches of 7 split 3 and 4): weighted by them, the step is one process's."""
    args = ("--epochs", "2", "--batch-size", "7", "--no-crf")
    _one_process(_args("tag", tiny_bert, data["names"], data["names_dev"], tmp_path / "one",
                       *args))
    _two_ranks(_args("tag", tiny_bert, data["names"], data["names_dev"], tmp_path / "two",
                     *args))
    _assert_same_run(tmp_path / "one", tmp_path / "two")


def test_embed_with_gathered_negatives_on_two_ranks_equals_one_process(data, tiny_bert,
                                                                       tmp_path):
    """--gather-across-devices: each rank's anchors meet the positives of both ranks' shares,
    the in-batch negatives of one process's batch of 8."""
    args = ("--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--gather-across-devices",
            "--symmetric")
    _one_process(_args("embed", tiny_bert, data["pairs"], data["pairs_dev"], tmp_path / "one",
                       *args))
    _two_ranks(_args("embed", tiny_bert, data["pairs"], data["pairs_dev"], tmp_path / "two",
                     *args))
    _assert_same_run(tmp_path / "one", tmp_path / "two")


@pytest.mark.parametrize("task,train,dev,more", [
    # the loss a mean over the spans inside the sentences, NULL ones weighing 0.25
    ("spans", "names", "names_dev", ("--batch-size", "7")),
    # the ranking loss's negatives and the FLOPS regulariser of the whole batch
    ("sparse", "pairs", "pairs_dev", ("--batch-size", "8", "--lr", "1e-3",
                                      "--gather-across-devices"))])
def test_spans_and_gathered_sparse_on_two_ranks_equal_one_process(task, train, dev, more, data,
                                                                   tiny_bert, tmp_path):
    args = _args(task, tiny_bert, data[train], data[dev], tmp_path / "one", "--epochs", "1",
                 *more)
    _one_process(args)
    _two_ranks([str(tmp_path / "two") if a == str(tmp_path / "one") else a for a in args])
    _assert_same_run(tmp_path / "one", tmp_path / "two")


def _triplets(path: Path, pairs: Path) -> Path:
    """Queries with a positive and another row's positive as a negative."""
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    return write_jsonl(path, [{"query": r["anchor"], "positive": r["positive"],
                               "negative": rows[(i + 7) % len(rows)]["positive"]}
                              for i, r in enumerate(rows)])


def test_rerank_shares_with_in_batch_negatives_make_the_whole_batchs_loss(data, tiny_bert,
                                                                           tmp_path):
    """--in-batch-negatives: a cross-encoder reads a query and a passage together, so each
    rank's share pairs its queries with positives of the whole batch, drawn as the whole
    batch draws them (`training_batch`'s `share`): the shares' losses, weighted by their
    queries as the loop weighs the ranks, are the whole batch's loss, and so are their
    gradients."""
    train = _triplets(tmp_path / "train.jsonl", data["pairs"])
    dev = _triplets(tmp_path / "dev.jsonl", data["pairs_dev"])
    plan = plan_run(Rerank(in_batch_negatives=4), tiny_bert, train, dev, tmp_path / "run",
                    FinetuneConfig(show_progress=False), None)
    task, examples, held = read_data(plan)
    batch = training_items(plan, task, examples, held)[:7]
    model = plan.backbone.build(task, 0)

    def loss_and_grads(collated: list[dict]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        loss = sum(task.loss(model, b) * task.target_count(b) / len(batch) for b in collated)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    def drawn(share=None) -> dict:  # each time the batch's own generator, as every rank has
        return task.training_batch(batch, torch.Generator().manual_seed(5), share)

    whole, whole_grads = loss_and_grads([drawn()])
    shared, shared_grads = loss_and_grads([drawn([0, 1, 2]), drawn([3, 4, 5, 6])])
    torch.testing.assert_close(shared, whole, atol=1e-6, rtol=0)
    assert len(shared_grads) == len(whole_grads)
    for mine, theirs in zip(shared_grads, whole_grads):
        torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
    # the cross pairs are what they add: without them the shares' loss is another
    alone = sum(task.loss(model, task.training_batch(batch[s], torch.Generator().manual_seed(5)))
                * (s.stop - s.start) / len(batch) for s in (slice(0, 3), slice(3, 7)))
    assert abs(float(alone.detach()) - float(whole)) > 1e-3


def test_a_teacher_teaches_on_two_ranks_as_in_one_process(data, tiny_bert, classify_one,
                                                           tmp_path):
    """--teacher: its outputs computed on every rank, its loss weighted as the task's."""
    args = ("--epochs", "1", "--batch-size", "8", "--teacher", str(classify_one))
    _one_process(_args("classify", tiny_bert, data["train"], data["dev"], tmp_path / "one",
                       *args))
    _two_ranks(_args("classify", tiny_bert, data["train"], data["dev"], tmp_path / "two",
                     *args))
    _assert_same_run(tmp_path / "one", tmp_path / "two")


def _workers(agent: subprocess.Popen) -> list[int]:
    return [int(p) for p in subprocess.run(["pgrep", "-P", str(agent.pid)],
                                           capture_output=True, text=True).stdout.split()]


def _stopped_at_a_checkpoint(args: list[str], out: Path, *launcher: str) -> tuple:
    """torchrun started on `args`, its two workers frozen (SIGSTOP) once the first checkpoint
    is written: (the agent, the workers' pids)."""
    agent = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node", "2", *launcher, "-m", "bertkit.cli", *args],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    deadline = time.time() + 90
    while not list((out / "checkpoints").glob("step-*")) and time.time() < deadline:
        assert agent.poll() is None, agent.stdout.read()[-3000:]
        time.sleep(0.01)
    workers = _workers(agent)
    assert len(workers) == 2, workers
    for worker in workers:
        os.kill(worker, signal.SIGSTOP)
    assert not (out / "model.safetensors").exists()
    return agent, workers


def test_a_worker_killed_with_kill_9_is_restarted_and_finishes(data, tiny_bert, classify_one,
                                                                 tmp_path):
    out = tmp_path / "run"
    args = _args("classify", tiny_bert, data["train"], data["dev"], out, *CLASSIFY,
                 "--save-every", "2", "--resume")
    agent, workers = _stopped_at_a_checkpoint(args, out, "--max-restarts", "1")
    try:
        os.kill(workers[1], signal.SIGKILL)
        os.kill(workers[0], signal.SIGCONT)
        log = agent.communicate(timeout=150)[0]
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    assert agent.returncode == 0, log[-4000:]
    assert "exitcode: -9" in log and "resumed from" in log, log[-4000:]
    _assert_same_run(classify_one, out)


def test_two_ranks_resumed_as_one(data, tiny_bert, classify_one, tmp_path):
    out = tmp_path / "run"
    args = _args("classify", tiny_bert, data["train"], data["dev"], out, *CLASSIFY,
                 "--save-every", "2")
    agent, workers = _stopped_at_a_checkpoint(args, out)
    for worker in workers:
        os.kill(worker, signal.SIGKILL)
    agent.communicate(timeout=60)
    _one_process(args + ["--resume"])
    _assert_same_run(classify_one, out)


def test_one_rank_resumed_as_two(data, tiny_bert, classify_one, tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = _args("classify", tiny_bert, data["train"], data["dev"], out, *CLASSIFY)
    _signal_at(monkeypatch, 7)  # SIGTERM: the step finishes and a checkpoint is saved
    _one_process(args, status=130)
    monkeypatch.undo()
    assert list((out / "checkpoints").glob("step-*"))
    _two_ranks(args + ["--resume"])
    _assert_same_run(classify_one, out)


def test_more_processes_than_training_examples_is_refused_in_one_line(data, tiny_bert,
                                                                      tmp_path):
    two = write_jsonl(tmp_path / "two.jsonl", [{"text": "a good film", "label": "positive"},
                                               {"text": "a bad film", "label": "negative"}])
    done = _torchrun(_args("classify", tiny_bert, two, data["dev"], tmp_path / "run"),
                     module="bertkit.cli.torchrun", ranks=3)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert lines == [f"error: {two}: 2 training example(s) for 3 processes: each process "
                     f"needs one; run fewer processes (torchrun --nproc_per_node)"], \
        done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "run" / "model.safetensors").exists()


def test_standard_input_is_refused_under_torchrun(monkeypatch):
    """Every rank reads the data itself: one would drain standard input before the others."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="^--train -: under torchrun every process reads"):
        with ranks_joined("cpu", 5.0, {"--train": "-", "--dev": None}):
            pass
