"""`finetune rerank`'s in-batch negatives and chunked steps: the negatives are drawn from the
batch's generator, reproducibly, uniformly, and never a row's own positive (nor its query's);
the loss over a sampled batch equals a plain loop over its rows' candidates; `auto` takes them
for triplets and NLI files only and explicit settings are kept; the chunked step's gradients
equal the whole step's; a step that may not fit is said before training; the setting
resolved is recorded, parsed from the command line, and a few triplets train end to end."""
from __future__ import annotations

import dataclasses
import json
import math
import warnings

import pytest
import torch

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.finetuning import backbone, heads
from bertkit.finetuning.ranking import sample_in_batch
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.tasks import Rerank
from bertkit.finetuning.tasks.rerank import IN_BATCH_NEGATIVES
from bertkit.model import hub
from bertkit.model.memory import step_activation_bytes
from bertkit.text.tokenizer import Tokenizer

from tests.finetuning.test_rerank import _write, make_file

pytestmark = pytest.mark.usefixtures("one_thread")


# The draw -----------------------------------------------------------------------------------------

def _allowed(B: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(B, B, generator=g) < 0.7
    allowed.fill_diagonal_(False)
    return allowed


def test_the_draw_takes_count_of_the_allowed_reproducibly():
    allowed = _allowed(9, 0)
    for count in (0, 1, 3, 8, 20):
        chosen = sample_in_batch(allowed, count, torch.Generator().manual_seed(5))
        assert not (chosen & ~allowed).any()  # never the row itself nor a barred column
        assert chosen.sum(1).tolist() == allowed.sum(1).clamp(max=count).tolist()
        again = sample_in_batch(allowed, count, torch.Generator().manual_seed(5))
        assert torch.equal(chosen, again)
    draws = {tuple(sample_in_batch(allowed, 3, torch.Generator().manual_seed(s)).flatten()
                   .tolist()) for s in range(20)}
    assert len(draws) > 15  # the generator decides


def test_each_allowed_column_is_drawn_alike():
    """Uniform without replacement: each of a row's A allowed columns is drawn with
    probability count / A (4,000 draws: within 5 standard errors)."""
    allowed = _allowed(8, 1)
    g, n, count = torch.Generator().manual_seed(0), 4000, 3
    hits = sum(sample_in_batch(allowed, count, g).double() for _ in range(n))
    for i in range(8):
        a = int(allowed[i].sum())
        p = min(count, a) / a
        rate = hits[i][allowed[i]] / n
        assert (rate - p).abs().max() <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12, (i, rate, p)


# The batch and its loss ---------------------------------------------------------------------------

def _rows_task(tiny_bert, tmp_path, count: int, n: int = 8):
    """Triplets with a query asked twice (its two rows are no negatives of each other)."""
    train = make_file(tmp_path, "triplets", n)
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    rows.append({**rows[0], "positive": rows[1]["positive"] + " " + rows[0]["positive"]})
    _write(train, rows)
    task = dataclasses.replace(Rerank(in_batch_negatives=count).configure(train),
                               max_length=32, pooling="cls")
    tokenizer = Tokenizer.load(tiny_bert)
    examples = task.read(train)
    return task, tokenizer, examples, task.encode(tokenizer, examples, training=True)


def _drawn(batch: dict, items) -> list[list[int]]:
    """Per row, the rows whose positives the batch scores as its negatives."""
    return [[j for j in range(len(items)) if batch["cross_index"][i, j] >= 0]
            for i in range(len(items))]


def test_a_batch_draws_its_negatives_from_its_generator(tiny_bert, tmp_path):
    task, _, _, items = _rows_task(tiny_bert, tmp_path, 2)
    batch = task.training_batch(items, torch.Generator().manual_seed(3))
    drawn = _drawn(batch, items)
    for i, js in enumerate(drawn):
        mine = items[i].extra
        assert len(js) == 2 and i not in js
        assert all(items[j].extra.query != mine.query for j in js)  # its own query's: never
        assert all(items[j].extra.positive not in mine.relevant for j in js)
    again = task.training_batch(items, torch.Generator().manual_seed(3))
    assert _drawn(again, items) == drawn and torch.equal(again["input_ids"], batch["input_ids"])
    others = [_drawn(task.training_batch(items, torch.Generator().manual_seed(s)), items)
              for s in range(4, 10)]
    assert any(o != drawn for o in others)
    # the pairs through the model: each row's positive, its negatives and the two drawn
    assert len(batch["input_ids"]) == len(items) + sum(
        len(it.extra.negatives) for it in items) + 2 * len(items)


def test_the_sampled_loss_is_a_plain_loop_over_each_rows_candidates(tiny_bert, tmp_path):
    task, tokenizer, examples, items = _rows_task(tiny_bert, tmp_path, 3)
    model = task.make_model(hub.load_encoder(tiny_bert)).eval()
    heads.init_head(model, torch.Generator().manual_seed(1))
    batch = task.training_batch(items, torch.Generator().manual_seed(0))

    def logit(query, passage):
        e = tokenizer.encode(query, passage)
        return float(model(torch.tensor([e.ids]), torch.tensor([e.type_ids]),
                           torch.ones(1, len(e.ids), dtype=torch.long))[0, 0])

    with torch.no_grad():
        loss = float(task.loss(model, batch))
        total = 0.0
        for it, js in zip(items, _drawn(batch, items)):
            ex = examples[it.example]
            candidates = [logit(it.extra.query, it.extra.positive)]
            candidates += [logit(ex.query, ex.passages[n]) for n in ex.negatives()[:4]]
            candidates += [logit(it.extra.query, items[j].extra.positive) for j in js]
            total += -candidates[0] + math.log(sum(math.exp(c) for c in candidates))
    assert loss == pytest.approx(total / len(items), rel=1e-5)


@pytest.mark.parametrize("size", [1, 4, 7])
def test_chunked_steps_give_the_whole_steps_gradients(size, tiny_bert, tmp_path):
    """Dropout 0: the chunks' logits, loss and every weight's gradient equal the whole
    step's at 1e-5; each forward (and each recomputation in the backward pass) sees at most
    `size` pairs."""
    task, _, _, items = _rows_task(tiny_bert, tmp_path, 2)
    batch = task.training_batch(items, torch.Generator().manual_seed(0))
    model = task.make_model(hub.load_encoder(tiny_bert)).train()
    heads.init_head(model, torch.Generator().manual_seed(1))
    grads = []
    for chunked in (None, size):
        model.zero_grad()
        seen = []
        hook = model.register_forward_pre_hook(lambda m, args: seen.append(len(args[0])))
        loss = dataclasses.replace(task, mini_batch_size=chunked).loss(model, batch)
        loss.backward()
        hook.remove()
        grads.append((float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()
                                    if p.grad is not None}))
        pairs = len(batch["input_ids"])
        if chunked:
            assert max(seen) <= size and sum(seen) == 2 * pairs  # forward, then recomputed
        else:
            assert seen == [pairs]
    (whole, mine), (chunks, theirs) = grads
    assert chunks == pytest.approx(whole, abs=1e-5)
    assert mine.keys() == theirs.keys() and len(mine) > 10
    for name, g in mine.items():
        torch.testing.assert_close(theirs[name], g, atol=1e-5, rtol=1e-5, msg=name)


# Settings -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,settings,loss,in_batch", [
    ("triplets", {}, "listwise", IN_BATCH_NEGATIVES),
    ("nli", {}, "listwise", IN_BATCH_NEGATIVES),
    ("pairs", {}, "listwise", 0),  # its negatives are other queries' positives already
    ("queries", {}, "listwise", 0),  # its own negatives, as named
    ("scored", {}, "bce", 0),
    ("triplets", {"in_batch_negatives": 0}, "listwise", 0),  # what the user says is kept
    ("triplets", {"in_batch_negatives": 9}, "listwise", 9),
    ("pairs", {"in_batch_negatives": 2}, "listwise", 2),
    ("triplets", {"objective": "bce"}, "bce", 0),
    ("nli", {"objective": "bce"}, "bce", 0),
    ("triplets", {"teacher": "TEACHER"}, "margin-mse", 0),
])
def test_auto_takes_in_batch_negatives_for_hard_negatives_only(kind, settings, loss, in_batch,
                                                               tiny_bert, tmp_path):
    if settings.get("teacher"):
        settings = {**settings, "teacher": str(tiny_bert)}
    task = Rerank(**settings).configure(make_file(tmp_path, kind, 8))
    assert (task.objective, task.in_batch_negatives) == (loss, in_batch)


@pytest.mark.parametrize("settings,message", [
    ({"in_batch_negatives": -1}, "--in-batch-negatives must be 0 or more, got -1"),
    ({"in_batch_negatives": 2, "objective": "bce"},
     "--in-batch-negatives is read by --loss listwise, not bce"),
    ({"mini_batch_size": 0}, "--mini-batch-size must be at least 1, got 0"),
])
def test_bad_settings_are_refused_before_reading(settings, message, tmp_path):
    with pytest.raises(UserError, match=message):
        Rerank(**settings).configure(make_file(tmp_path, "triplets", 4))


# The command line, end to end ---------------------------------------------------------------------

def test_a_few_triplets_train_with_the_defaults_and_record_them(tiny_bert, tmp_path, capsys):
    train = make_file(tmp_path, "triplets", 24)
    out = tmp_path / "out"
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--epochs", "2", "--batch-size", "8", "--lr", "1e-3",
                 "--head-lr", "1e-3", "--precision", "fp32", "--quiet"]) == 0
    options = json.loads((out / "training_args.json").read_text())["options"]
    assert (options["loss"], options["in_batch_negatives"]) == ("listwise", IN_BATCH_NEGATIVES)
    assert options["mini_batch_size"] is None
    saved = json.loads((out / "bertkit_task.json").read_text())
    assert saved["in_batch_negatives"] == IN_BATCH_NEGATIVES
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text()
              .splitlines() if json.loads(line).get("split") == "train"]
    assert losses and all(math.isfinite(x) for x in losses)


def test_the_flags_are_parsed_and_recorded(tiny_bert, tmp_path):
    train = make_file(tmp_path, "triplets", 16)
    out = tmp_path / "out"
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--epochs", "1", "--batch-size", "8",
                 "--in-batch-negatives", "2", "--mini-batch-size", "6",
                 "--precision", "fp32", "--quiet"]) == 0
    options = json.loads((out / "training_args.json").read_text())["options"]
    assert (options["in_batch_negatives"], options["mini_batch_size"]) == (2, 6)
    assert "--in-batch-negatives 2" in json.loads(
        (out / "training_args.json").read_text())["command"]


def test_a_bad_count_is_one_line_and_writes_nothing(tiny_bert, tmp_path, capsys):
    train, out = make_file(tmp_path, "triplets", 8), tmp_path / "never"
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--loss", "bce", "--in-batch-negatives", "3"]) == 2
    assert capsys.readouterr().err == \
        "error: --in-batch-negatives is read by --loss listwise, not bce\n"
    assert not out.exists()


def test_finetune_warns_before_training(tiny_bert, tmp_path, monkeypatch):
    """A reranker's step of in-batch negatives on a machine said to hold 1 MiB: one warning
    naming the pairs at once and what to lower; none once --mini-batch-size bounds them."""
    monkeypatch.setattr(backbone, "device_memory", lambda device: 2 ** 20)
    train = make_file(tmp_path, "triplets", 8)
    cfg = FinetuneConfig(epochs=1, batch_size=4, max_length=32, precision="fp32",
                         show_progress=False, patience=None)
    with pytest.warns(UserWarning) as said:
        finetune(Rerank(), tiny_bert, train, None, tmp_path / "a", cfg)
    lines = [str(w.message) for w in said if "activations" in str(w.message)]
    # 4 rows, each at most its positive, 4 negatives and 4 drawn from the batch
    assert lines == [f"a step of 36 inputs of up to 32 tokens may need about 0.0 GiB for its "
                     f"activations, of 0.0 GiB here: {Rerank.memory_advice}"]
    small = step_activation_bytes(hub.load_config(tiny_bert), 1, 32)
    monkeypatch.setattr(backbone, "device_memory", lambda device: int(small * 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(UserWarning):  # 36 pairs at once: still too many
            finetune(Rerank(), tiny_bert, train, None, tmp_path / "b", cfg)
        finetune(Rerank(mini_batch_size=1), tiny_bert, train, None, tmp_path / "c", cfg)
