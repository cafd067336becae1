"""`finetune embed`: a bi-encoder trained through the one loop on each kind of file, its loss
going down, its dev figure kept, its directory read alike by sentence-transformers and by
Embedder, its run resumable, and bad input refused in one line."""
from __future__ import annotations

import dataclasses
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.embeddings.losses import simcse_loss
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.tasks import Embed
from bertkit.model import hub
from bertkit.text.tokenizer import Tokenizer

from tests.finetuning.conftest import FILLER, WORDS

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = dict(lr=2e-3, warmup=0.0, show_progress=False, patience=None, batch_size=16)
CONTENT = [w for w in WORDS if w.isalpha()]


def _words(rng: random.Random, n: int = 4) -> list[str]:
    return rng.sample(CONTENT, n)


def _write(path: Path, rows) -> Path:
    if path.suffix == ".txt":
        path.write_text("\n".join(rows) + "\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_file(tmp_path: Path, kind: str, n: int = 160, seed: int = 0) -> Path:
    """Synthetic data whose similarity is in the words: a positive or entailed text is the
    anchor's words reordered, a pair's score the words it shares."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = _words(rng)
        if kind == "pairs":
            rows.append({"anchor": " ".join(a), "positive": " ".join(a[::-1])})
        elif kind == "scored":
            k = rng.randint(0, 4)
            b = a[:k] + [w for w in _words(rng, 8) if w not in a][:4 - k]
            rows.append({"sentence1": " ".join(a), "sentence2": " ".join(b), "score": k})
        elif kind == "nli":
            premise = " ".join(a)
            rows.append({"premise": premise, "hypothesis": " ".join(a[::-1]),
                         "label": "entailment", "relatedness": 4.8})
            rows.append({"premise": premise, "hypothesis": " ".join(_words(rng)),
                         "label": "contradiction", "relatedness": 1.2})
        else:
            rows.append(" ".join(a + rng.sample(FILLER, 2)))
    suffix = ".txt" if kind == "sentences" else ".jsonl"
    return _write(tmp_path / f"{kind}{seed}{suffix}", rows)


def data_loss(model_dir: Path, task: Embed, train: Path) -> float:
    """The task's mean loss over its training file, dropout off, for the encoder of
    `model_dir`."""
    model = task.make_model(hub.load_encoder(model_dir)).eval()
    tokenizer = Tokenizer.load(model_dir)
    items = task.encode(tokenizer, task.read(train), training=True)
    order = task.batch_order(items, 16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float(np.mean([float(task.loss(model, task.collate([items[i] for i in b])))
                              for b in order]))


@pytest.mark.parametrize("kind,loss,dev_kind,figure", [
    ("pairs", "mnrl", "pairs", "ndcg@10"),
    ("scored", "cosent", "scored", "spearman"),
    ("nli", "mnrl", "nli", "spearman"),
    ("sentences", "simcse", "scored", "spearman"),
])
def test_each_kind_of_file_trains_its_loss_down(kind, loss, dev_kind, figure, tiny_bert_dropout,
                                                tmp_path):
    train, dev = make_file(tmp_path, kind), make_file(tmp_path, dev_kind, 40, seed=1)
    out = tmp_path / "out"
    # fp32 whatever `auto` picks: the dev figures logged in training (under the training's
    # autocast) and the saved model's final ones (fp32, as predict runs it) then agree exactly
    result = finetune(Embed(), tiny_bert_dropout, train, dev, out,
                      FinetuneConfig(epochs=3, precision="fp32", **QUICK))
    task = result.task
    assert task.objective == loss and task.kind == kind
    assert result.steps > 0 and figure in result.dev_metrics
    before = data_loss(tiny_bert_dropout, task, train)
    after = data_loss(out, task, train)
    assert after < 0.9 * before, (before, after)
    # the best evaluation is the model: its figure is the best one logged
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    best = max(e["dev_selection"] for e in evals if e.get("split") == "eval")
    assert result.dev_metrics[figure] == pytest.approx(best, abs=1e-6)


def test_sentence_transformers_reads_the_directory_as_embedder_does(tiny_bert, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    train = make_file(tmp_path, "scored")
    for pooling, normalize in (("mean", True), ("cls", False), ("max", True)):
        out = tmp_path / f"out-{pooling}"
        finetune(Embed(pooling=pooling, normalize=normalize), tiny_bert, train, None, out,
                 FinetuneConfig(epochs=1, **QUICK))
        texts = ["the good film", "john went to paris and rome", "bad"]
        ours = Embedder.load(out).encode(texts)
        theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts)
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
        assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5) == normalize


def _batches(train: Path, model_dir: Path, size: int) -> tuple[list, list[list[int]]]:
    """The training items of `train` and the task's batches of them, each item in one."""
    task = dataclasses.replace(Embed().configure(train), max_length=32)
    items = task.encode(Tokenizer.load(model_dir), task.read(train), training=True)
    order = task.batch_order(items, size, torch.Generator().manual_seed(0))
    assert sorted(i for b in order for i in b) == list(range(len(items)))
    return items, order


def test_batches_of_in_batch_negatives_hold_no_text_twice(tiny_bert, tmp_path):
    rows = [{"premise": f"the {w} film", "hypothesis": f"a {w} movie {i}",
             "label": "entailment"} for i, w in enumerate(CONTENT * 3)]
    items, order = _batches(_write(tmp_path / "nli.jsonl", rows), tiny_bert, 8)
    for b in order:
        anchors = [tuple(items[i].ids) for i in b]
        assert len(set(anchors)) == len(anchors)


def test_scored_pairs_are_batched_by_their_longest_column(tiny_bert, tmp_path):
    # the first texts all alike long, the second of two lengths: the batches must not mix
    # them, since a batch's columns are padded to one length (`Embed.columns`)
    rng = random.Random(0)
    rows = [{"sentence1": " ".join(_words(rng)), "sentence2": " ".join(_words(rng, n)),
             "score": 1.0} for n in [1, 8] * 64]
    items, order = _batches(_write(tmp_path / "scored.jsonl", rows), tiny_bert, 16)
    for b in order:
        assert len({len(items[i].extra[0][0]) for i in b}) == 1


def test_simcse_encodes_the_batch_twice_with_dropout(tiny_bert_dropout, tiny_bert, tmp_path):
    train = make_file(tmp_path, "sentences", 16)
    task = dataclasses.replace(Embed().configure(train), max_length=32)
    for model_dir in (tiny_bert_dropout, tiny_bert):  # the second without dropout: given 0.1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = task.make_model(hub.load_encoder(model_dir)).train()
        items = task.encode(Tokenizer.load(model_dir), task.read(train), training=True)
        batch = task.collate(items)
        torch.manual_seed(0)
        loss = task.loss(model, batch)
        torch.manual_seed(0)
        one, two = task.columns(model, batch, repeat=2)
        assert not torch.equal(one, two)
        assert float(loss.detach()) == pytest.approx(float(simcse_loss(one, two).detach()), rel=1e-5)


def test_resume_equals_an_uninterrupted_run(tiny_bert_dropout, tmp_path, monkeypatch):
    from tests.finetuning.test_resume import _assert_same_model, _signal_at

    train, dev = make_file(tmp_path, "pairs", 96), make_file(tmp_path, "pairs", 32, seed=1)
    cfg = FinetuneConfig(epochs=2, evals_per_epoch=2, **QUICK)
    finetune(Embed(), tiny_bert_dropout, train, dev, tmp_path / "whole", cfg)
    _signal_at(monkeypatch, 5)
    stopped = finetune(Embed(), tiny_bert_dropout, train, dev, tmp_path / "parts", cfg)
    assert stopped.stopped_by == "interrupted"
    monkeypatch.undo()
    finetune(Embed(), tiny_bert_dropout, train, dev, tmp_path / "parts",
             dataclasses.replace(cfg, resume=True))
    _assert_same_model(tmp_path / "whole", tmp_path / "parts")


def test_the_command_trains_and_refuses_bad_input_in_one_line(tiny_bert, tmp_path, capsys):
    train = make_file(tmp_path, "scored", 48)
    out = tmp_path / "out"
    assert main(["finetune", "embed", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--epochs", "1", "--batch-size", "16",
                 "--matryoshka-dims", "8", "16", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "dev_spearman" in summary and "dev_spearman@8" in summary
    assert (out / "modules.json").is_file() and not (out / "bertkit_task.json").exists()

    lines = train.read_text().splitlines()
    lines[2] = json.dumps({"sentence1": "a", "sentence2": "b", "score": "high"})
    bad = _write(tmp_path / "bad.jsonl", [json.loads(x) for x in lines])
    for argv, where in (([], f"{bad}:3:"), (["--loss", "simcse"], f"{bad}:")):
        code = main(["finetune", "embed", "--model", str(tiny_bert), "--train", str(bad),
                     "--out", str(tmp_path / "never"), "--quiet", *argv])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: {where}") and err.count("\n") == 1, err
        assert not (tmp_path / "never").exists()


def test_the_baseline_is_the_model_before_fine_tuning(tiny_bert, tmp_path, capsys):
    # a rate too small to move the weights: the saved model scores as its start did, so it
    # does not beat its baseline, and the warning names what the baseline is
    train, dev = make_file(tmp_path, "scored"), make_file(tmp_path, "scored", 40, seed=1)
    out = tmp_path / "out"
    assert main(["finetune", "embed", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--out", str(out), "--epochs", "1", "--batch-size", "16",
                 "--lr", "1e-12"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    metrics = json.loads((out / "dev_metrics.json").read_text())
    start = metrics["baseline"]
    assert start["predictor"] == "the model before fine-tuning"
    assert start["spearman"] == pytest.approx(metrics["spearman"], abs=1e-6)
    assert summary["baseline_spearman"] == start["spearman"]
    assert (", the model before fine-tuning): train longer (--epochs) or at another --lr"
            in captured.err)
    # a run that trains scores the same start, not its own weights
    trained = finetune(Embed(), tiny_bert, train, dev, tmp_path / "trained",
                       FinetuneConfig(epochs=2, **QUICK))
    assert trained.baseline["spearman"] == pytest.approx(start["spearman"], abs=1e-6)
    assert trained.dev_metrics["spearman"] != pytest.approx(start["spearman"], abs=1e-4)


def test_evaluate_gives_the_sts_figures_of_a_sentence_model(tiny_bert, tmp_path, capsys):
    st = pytest.importorskip("sentence_transformers")
    from scipy.stats import pearsonr, spearmanr

    train, test = make_file(tmp_path, "scored"), make_file(tmp_path, "scored", 50, seed=2)
    out = tmp_path / "out"
    finetune(Embed(), tiny_bert, train, None, out, FinetuneConfig(epochs=1, **QUICK))
    assert main(["evaluate", "--model", str(out), "--input", str(test), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in test.read_text().splitlines()]
    def cosines(encode):
        a, b = (encode([r[k] for r in rows]) for k in ("sentence1", "sentence2"))
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    ours = cosines(Embedder.load(out).encode)
    theirs = cosines(st.SentenceTransformer(str(out), device="cpu").encode)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)  # the vectors are sentence-transformers'
    gold = [r["score"] for r in rows]
    # a briefly trained tiny model puts many pairs' cosines within 1e-6 of each other, whose
    # ranks then follow the batch's rounding (its padding, its fp32 kernel): the Spearman agrees
    # to a few swaps, the Pearson to 1e-4
    assert figures["spearman"] == pytest.approx(spearmanr(theirs, gold)[0], abs=5e-3)
    assert figures["spearman"] == pytest.approx(spearmanr(ours, gold)[0], abs=5e-3)
    assert figures["pearson"] == pytest.approx(pearsonr(theirs, gold)[0], abs=1e-4)
    assert figures["pairs"] == 50
    card = (out / "README.md").read_text()  # a sentence-transformers model, with no head
    assert 'library_name: "sentence-transformers"\npipeline_tag: "sentence-similarity"' in card
    assert "- learning rate: 0.002, 0% warm-up" in card and "the head" not in card

    pairs = make_file(tmp_path, "pairs", 30, seed=3)
    assert main(["evaluate", "--model", str(out), "--input", str(pairs)]) == 0
    shown = capsys.readouterr()
    assert "ndcg@10" in shown.out and "mrr@10" in shown.out and "queries  30" in shown.out
    assert "\nsentences: 360/360 tokens (100%)" in shown.err  # the encoding; none when --quiet
    assert main(["evaluate", "--model", str(out), "--input", str(pairs), "--quiet"]) == 0
    assert capsys.readouterr().err == ""

    nli = [json.loads(line) for line in make_file(tmp_path, "nli", 20, seed=4).read_text()
           .splitlines()]
    nli = [{k: v for k, v in r.items() if k != "relatedness"} for r in nli]
    nli += [{"premise": "a lone premise", "hypothesis": "lone premise a",
             "label": "entailment"}]  # a pair among triplets
    mixed = _write(tmp_path / "mixed.jsonl", nli)
    assert main(["evaluate", "--model", str(out), "--input", str(mixed), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 21


def test_evaluate_on_queries_with_relevant_passages_equals_a_hand_count(tiny_bert, tmp_path,
                                                                          capsys):
    """Each query searches every passage of the file; its relevant ones set MRR@10, recall and
    nDCG@10, counted here by hand from sentence vectors."""
    rng = random.Random(5)
    rows = []
    for _ in range(12):
        a = _words(rng)
        rows.append({"query": " ".join(a), "relevant": [" ".join(a[::-1]), " ".join(a[1:])],
                     "negatives": [" ".join(_words(rng))]})
    path = _write(tmp_path / "queries.jsonl", rows)
    model = Embedder.load(tiny_bert).save(tmp_path / "sentence-model")
    assert main(["evaluate", "--model", str(model), "--input", str(path), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    embedder = Embedder.load(model)
    passages = list(dict.fromkeys(p for r in rows for p in r["relevant"] + r["negatives"]))
    q, p = embedder.encode([r["query"] for r in rows]), embedder.encode(passages)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ \
        (p / np.linalg.norm(p, axis=1, keepdims=True)).T
    mrr = recall1 = recall10 = ndcg = 0.0
    for r, row in zip(rows, cos):
        ranked = [passages[i] for i in np.argsort(-row, kind="stable")[:10]]
        hits = [text in r["relevant"] for text in ranked]
        mrr += 1 / (hits.index(True) + 1) if any(hits) else 0
        recall1 += hits[0] / 2
        recall10 += sum(hits) / 2
        ndcg += sum(h / np.log2(k + 2) for k, h in enumerate(hits)) / (1 + 1 / np.log2(3))
    n = len(rows)
    assert figures["queries"] == n
    assert figures["mrr@10"] == pytest.approx(mrr / n, abs=1e-6)
    assert figures["recall@1"] == pytest.approx(recall1 / n, abs=1e-6)
    assert figures["recall@10"] == pytest.approx(recall10 / n, abs=1e-6)
    assert figures["ndcg@10"] == pytest.approx(ndcg / n, abs=1e-6)


def test_a_queries_file_trains_with_its_relevant_passages_as_positives(tiny_bert, tmp_path):
    rng = random.Random(6)
    rows = [{"query": " ".join(a), "relevant": [" ".join(a[::-1])],
             "negatives": [" ".join(_words(rng))]} for a in (_words(rng) for _ in range(64))]
    train = _write(tmp_path / "queries.jsonl", rows)
    task = Embed().configure(train)
    assert (task.objective, task.kind) == ("mnrl", "queries")
    examples = task.read(train)
    assert [ex.texts for ex in examples if ex.train][0] == (
        rows[0]["query"], rows[0]["relevant"][0], rows[0]["negatives"][0])
    result = finetune(Embed(), tiny_bert, train, train, tmp_path / "out",
                      FinetuneConfig(epochs=1, **QUICK))
    assert "ndcg@10" in result.dev_metrics and result.dev_metrics["queries"] == 64


def test_simcse_brings_dropout_to_a_model_without_any(tmp_path):
    """SimCSE's positives differ only by dropout: a model made without it (the modern recipe)
    trains with 0.1, said once; --dropout sets the rate; the saved config keeps its own."""
    from bertkit.config import EncoderConfig
    from bertkit.model.encoder import Encoder

    cfg = EncoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2,
                        intermediate_size=32, max_positions=32, hidden_dropout=0.0,
                        attention_dropout=0.0)
    train = _write(tmp_path / "s.txt", ["a b c", "d e f"])
    task = Embed().configure(train)
    with pytest.warns(UserWarning, match="no dropout.*0.1"):
        model = task.make_model(Encoder(cfg)).train()
    ids = torch.randint(5, 40, (2, 8))
    assert not torch.equal(model(ids, None, torch.ones_like(ids)),
                           model(ids, None, torch.ones_like(ids)))
    assert model.encoder.config.hidden_dropout == 0.0
    rates = {m.p for m in model.modules() if hasattr(m, "p")}
    assert rates == {0.1}
    chosen = dataclasses.replace(task, dropout=0.3).make_model(Encoder(cfg))
    assert {m.p for m in chosen.modules() if hasattr(m, "p")} == {0.3}
    assert {m.dropout_p for m in chosen.modules() if hasattr(m, "dropout_p")} == {0.3}
    with pytest.raises(Exception, match="--dropout must be in"):
        dataclasses.replace(Embed(), dropout=1.5).configure(train)


def test_a_matryoshka_dimension_wider_than_the_vectors_is_refused_before_training(
        tiny_bert, tmp_path, capsys):
    train, out = make_file(tmp_path, "pairs"), tmp_path / "out"
    width = hub.load_config(tiny_bert).hidden_size
    assert main(["finetune", "embed", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--matryoshka-dims", "8", str(width + 1)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: --matryoshka-dims {width + 1}: above the width of the model's "
                   f"vectors ({width})"]
    assert not out.exists()
    assert main(["finetune", "embed", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(out), "--matryoshka-dims", str(width), "--epochs", "1",
                 "--quiet"]) == 0  # the width itself is a dimension like any other
