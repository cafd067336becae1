"""Packing with document boundaries (`pretrain --document-boundaries`): each batch says which
document each position of a packed row is from, the rows and masks are those of the default
packing, and the objectives' losses (mlm, clm) of a packed batch equal the sum over its
documents run alone, forward and gradients within 1e-5, for both architectures and both
attention paths."""
from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import document_positions, init_weights
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel
from bertkit.pretraining.corpus import prepare
from bertkit.pretraining.evaluation import LMEvalOptions, evaluate_pretrained
from bertkit.pretraining.examples import ROW_ENDS, PretrainingBatches
from bertkit.pretraining.objectives import objective_named
from bertkit.training.checkpoint import saved_fingerprint
from synthetic_corpus import make_tokenizer, write_corpus

SEP = 3


def _prepared(root, docs: int):
    tok = make_tokenizer(root / "tok")
    write_corpus(root / "c.txt", docs=docs, seed=3, paragraphs=(1, 3), sentences=(1, 4))
    prepare([root / "c.txt"], tok, root / "data", workers=1, progress=False,
            heldout_fraction=0.05 if docs > 1 else 0.0)
    return root / "data"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _prepared(tmp_path_factory.mktemp("documents"), 60)


def batches(data, objective, boundaries, n=4, **kwargs):
    made = PretrainingBatches(data, objective=objective, seq_len=32, batch_size=6, seed=1,
                              prefetch=0, document_boundaries=boundaries, **kwargs)
    return list(itertools.islice(iter(made), n))


def unmasked(batch) -> torch.Tensor:
    ids = batch["input_ids"].clone().reshape(-1)
    if "mlm_labels" in batch:
        real = batch["mlm_labels"] != IGNORE_INDEX
        ids[batch["mlm_positions"][real]] = batch["mlm_labels"][real]
    return ids.reshape(batch["input_ids"].shape)


def documents_by_hand(ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Each position's document, counted from the [SEP]s that end documents inside the row:
    [CLS] the first's, the closing [SEP] and padding the last's."""
    out = torch.zeros_like(ids)
    for r in range(ids.shape[0]):
        last = int(attention[r].sum()) - 2  # the last text token
        for t in range(ids.shape[1]):
            out[r, t] = int((ids[r, 1:min(max(t, 1), last + 1)] == SEP).sum())
    return out


@pytest.mark.parametrize("row_ends", ROW_ENDS)
@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_the_rows_are_the_default_ones_with_their_documents(data, objective, row_ends):
    seen_several = False
    for plain, kept in zip(batches(data, objective, False, row_ends=row_ends),
                           batches(data, objective, True, row_ends=row_ends)):
        attention = kept.get("attention_mask", torch.ones_like(kept["input_ids"]))
        expected = documents_by_hand(unmasked(kept), attention)
        if "document_ids" not in kept:  # only a batch of one document a row goes without
            assert not expected.any()
        else:
            seen_several = True
            assert torch.equal(kept["document_ids"], expected)
            positions = document_positions(kept["document_ids"])
            ids = unmasked(kept)
            after_sep = torch.zeros_like(ids, dtype=torch.bool)
            after_sep[:, 1:] = (ids[:, :-1] == SEP) & (kept["document_ids"][:, 1:]
                                                       != kept["document_ids"][:, :-1])
            assert (positions[after_sep] == 0).all() and (positions[:, 0] == 0).all()
        for key, value in plain.items():  # the same rows, masks and draws as the default
            if key != "clm_labels":
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(kept[key])), key
        if objective == "clm":
            ends = torch.zeros_like(kept["input_ids"], dtype=torch.bool)
            if "document_ids" in kept:
                ends[:, :-1] = kept["document_ids"][:, 1:] != kept["document_ids"][:, :-1]
            assert (kept["clm_labels"][ends] == IGNORE_INDEX).all()  # nothing of the next
            assert torch.equal(kept["clm_labels"][~ends], plain["clm_labels"][~ends])
    assert seen_several


def test_a_corpus_of_one_document_gives_no_document_ids(tmp_path):
    data = _prepared(tmp_path, 1)
    for plain, kept in zip(batches(data, "mlm", False), batches(data, "mlm", True)):
        assert kept.keys() == plain.keys() and "document_ids" not in kept


@pytest.mark.parametrize("objective", ["span", "mlm+nsp"])
def test_rows_that_are_not_packed_are_refused(data, objective):
    with pytest.raises(UserError, match="not packed"):
        PretrainingBatches(data, objective=objective, seq_len=32, batch_size=2,
                           document_boundaries=True)


TINY = dict(vocab_size=200, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
            max_positions=64, layer_norm_eps=1e-5, hidden_dropout=0.0, attention_dropout=0.0)


def alone(batch: dict) -> list[dict]:
    """Each document of each row of a packed batch as a batch of its own."""
    B, T = batch["input_ids"].shape
    attention = batch.get("attention_mask", torch.ones(B, T, dtype=torch.long))
    documents = batch.get("document_ids", torch.zeros(B, T, dtype=torch.long))
    made = []
    for r in range(B):
        real = int(attention[r].sum())
        for d in documents[r, :real].unique().tolist():
            at = torch.nonzero(documents[r, :real] == d).squeeze(1)
            s, e = int(at[0]), int(at[-1]) + 1
            one = {"input_ids": batch["input_ids"][r:r + 1, s:e],
                   "token_type_ids": batch["token_type_ids"][r:r + 1, s:e]}
            if "clm_labels" in batch:
                one["clm_labels"] = batch["clm_labels"][r:r + 1, s:e]
            else:
                flat = batch["mlm_positions"]
                mine = (flat // T == r) & (flat % T >= s) & (flat % T < e) \
                    & (batch["mlm_labels"] != IGNORE_INDEX)
                one["mlm_positions"] = flat[mine] % T - s
                one["mlm_labels"] = batch["mlm_labels"][mine]
            made.append(one)
    return made


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("architecture", ["bert", "modern"])
@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_the_loss_of_packed_rows_is_that_of_their_documents_alone(data, objective,
                                                                  architecture, fast):
    batch = next(b for b in batches(data, objective, True) if "document_ids" in b)
    cfg = EncoderConfig(**TINY, architecture=architecture)
    model = PretrainingModel(cfg, fast=fast)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    chosen = objective_named(objective)
    weights = [p for p in model.parameters()]

    def terms(b):
        return chosen.held_out(model, b, lambda *a: None, [])

    loss_sum, _, count = terms(batch)
    sums = [terms(b) for b in alone(batch)]
    alone_sum = sum(s for s, _, _ in sums)
    assert int(sum(c for _, _, c in sums)) == int(count) > 0
    torch.testing.assert_close(loss_sum / count, alone_sum / count, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(chosen.loss(model, batch)[0], loss_sum / count,
                               atol=1e-6, rtol=1e-6)
    packed = torch.autograd.grad(loss_sum / count, weights, allow_unused=True)
    each = torch.autograd.grad(alone_sum / count, weights, allow_unused=True)
    for a, b in zip(packed, each):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# The command line -------------------------------------------------------------------------------

RUN = ["--preset", "tiny", "--seq-len", "32", "--batch-size", "8", "--early-fraction", "0",
       "--log-every", "2", "--eval-batches", "2", "--save-every", "2", "--precision", "fp32",
       "--device", "cpu"]


def _error(capsys, args) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: "), err
    return err.strip().splitlines()[-1]


def test_the_help_shows_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--document-boundaries, --no-document-boundaries" in shown
    assert "DataCollatorWithFlattening" in shown


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_the_setting_is_recorded_and_a_resume_with_another_is_refused(prepared, tmp_path,
                                                                       capsys):
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(prepared), "--out", str(out), *RUN]
    assert main(args + ["--document-boundaries", "--max-steps", "2"]) == 0
    recorded = json.loads((out / "training_args.json").read_text())
    assert recorded["options"]["document_boundaries"] is True
    assert "--document-boundaries" in recorded["command"]
    assert saved_fingerprint(out / "checkpoints" / "step-00000002")["document_boundaries"]
    capsys.readouterr()
    line = _error(capsys, args + ["--max-steps", "4", "--resume"])
    assert "checkpoint was made with document_boundaries = True" in line
    assert main(args + ["--document-boundaries", "--max-steps", "4", "--resume"]) == 0
    # `evaluate` scores the held-out rows as the run recorded it packed them: its last figures
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in logged if "eval_loss" in r][-1]
    judged = LMEvalOptions(seq_len=32, pretrain_batch_size=8, eval_batches=2, mask_rate=0.4)
    got = evaluate_pretrained(out, prepared, judged)
    assert (got["loss"], got["accuracy"]) == pytest.approx(
        (last["eval_loss"], last["eval_accuracy"]), abs=1e-6)
    across = evaluate_pretrained(out, prepared, dataclasses.replace(
        judged, document_boundaries=False))
    assert across["loss"] != pytest.approx(got["loss"], abs=1e-6)
    plain = tmp_path / "plain"  # the default records it off, and its checkpoints not at all
    assert main(["pretrain", "--data", str(prepared), "--out", str(plain), *RUN,
                 "--max-steps", "2"]) == 0
    assert json.loads((plain / "training_args.json").read_text())["options"][
        "document_boundaries"] is False
    assert "document_boundaries" not in saved_fingerprint(plain / "checkpoints" /
                                                          "step-00000002")
    line = _error(capsys, ["pretrain", "--data", str(prepared), "--out", str(plain), *RUN,
                           "--document-boundaries", "--max-steps", "4", "--resume"])
    assert "checkpoint was made with document_boundaries = None, this run has True" in line


def test_the_flag_is_refused_where_rows_are_not_packed(prepared, tmp_path, capsys):
    out = tmp_path / "run"
    line = _error(capsys, ["pretrain", "--data", str(prepared), "--out", str(out), *RUN,
                           "--objective", "span", "--document-boundaries", "--max-steps", "2"])
    assert line == ("error: --document-boundaries keeps the documents of a packed row apart "
                    "(--objective mlm, clm, electra, distill); --objective span's rows are not packed")
    assert not out.exists()


def test_electra_runs_each_document_alone_in_both_networks(data):
    batch = next(b for b in batches(data, "electra", True) if "document_ids" in b)
    cfg = EncoderConfig(**TINY, architecture="modern")
    chosen = objective_named("electra")
    model = chosen.fresh_model(cfg, 0)
    with torch.no_grad():
        detected = model(batch["input_ids"], None, batch.get("attention_mask"),
                         batch["document_ids"])  # [B, T]
        for r in range(batch["input_ids"].shape[0]):
            docs = batch["document_ids"][r]
            real = int(batch.get("attention_mask", torch.ones_like(batch["input_ids"]))[r].sum())
            for d in docs[:real].unique().tolist():
                at = torch.nonzero(docs[:real] == d).squeeze(1)
                s, e = int(at[0]), int(at[-1]) + 1
                torch.testing.assert_close(detected[r, s:e],
                                           model(batch["input_ids"][r:r + 1, s:e])[0],
                                           atol=1e-5, rtol=1e-5)
        plain = {k: v for k, v in batch.items() if k != "document_ids"}
        kept, across = chosen.loss(model, batch)[0], chosen.loss(model, plain)[0]
    assert torch.isfinite(kept) and kept != across  # the training loss reads them
