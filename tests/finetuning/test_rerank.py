"""`finetune rerank`: each loss equals a plain loop over fixed scores, the batch's pairs are the
ones a row's candidates name, each loss trains down on a tiny model, the dev figures are the
ranked candidates', the directory reads alike in sentence-transformers' CrossEncoder, in
transformers and in bertkit, and bad input (or a teacher of another kind) is one line."""
from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from huggingface_hub import ModelCard

from bertkit.cli.main import main
from bertkit.finetuning import heads
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.ranking import bce_loss, listwise_loss, margin_mse_loss
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.reranker import Reranker
from bertkit.finetuning.tasks import Classify, Regress, Rerank, load_task
from bertkit.finetuning.tasks.rerank import RerankExample
from bertkit.model import hub
from bertkit.text.tokenizer import Tokenizer

from tests.finetuning.conftest import FILLER, WORDS

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = dict(lr=1e-2, head_lr=1e-2, warmup=0.0, show_progress=False, patience=None,
             batch_size=16, precision="fp32")
TOPICS = [w for w in WORDS if w.isalpha() and w not in FILLER]


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_file(tmp_path: Path, kind: str, n: int = 96, seed: int = 0) -> Path:
    """Relevance in the words: a relevant passage is the query's words reordered, a negative
    filler words (an NLI file: entailment and contradiction), which a tiny model learns to
    tell apart in a few steps."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = rng.sample(TOPICS, 4)
        query, positive, negative = " ".join(a), " ".join(a[::-1]), " ".join(rng.sample(FILLER, 4))
        if kind == "pairs":
            rows.append({"anchor": query, "positive": positive})
        elif kind == "triplets":
            rows.append({"anchor": query, "positive": positive, "negative": negative})
        elif kind == "queries":
            rows.append({"query": query, "relevant": [positive, " ".join(a[1:])],
                         "negatives": [negative, " ".join(rng.sample(FILLER, 3))]})
        elif kind == "nli":
            rows += [{"premise": query, "hypothesis": positive, "label": "entailment"},
                     {"premise": query, "hypothesis": negative, "label": "contradiction"}]
        else:  # scored: the share of the query's words, in 0..1
            k = rng.randint(0, 4)
            other = a[:k] + rng.sample(FILLER, 4 - k)
            rows.append({"sentence1": query, "sentence2": " ".join(other), "score": k / 4})
    return _write(tmp_path / f"{kind}{seed}.jsonl", rows)


# The losses against plain loops -----------------------------------------------------------------

def test_bce_is_the_mean_of_each_pairs_cross_entropy():
    logits = torch.tensor([2.0, -1.0, 0.5, -3.0])
    labels = torch.tensor([1.0, 0.0, 0.25, 1.0])  # a soft label too
    sigmoid = [1 / (1 + math.exp(-x)) for x in logits.tolist()]
    by_hand = [-(y * math.log(p) + (1 - y) * math.log(1 - p))
               for p, y in zip(sigmoid, labels.tolist())]
    assert float(bce_loss(logits, labels)) == pytest.approx(sum(by_hand) / 4, rel=1e-6)


def test_listwise_is_a_softmax_over_the_positive_its_negatives_and_the_batchs_positives():
    g = torch.Generator().manual_seed(0)
    B, K = 4, 3
    positive = torch.randn(B, generator=g)
    negatives = torch.randn(B, K, generator=g)
    negative_mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    cross = torch.randn(B, B, generator=g)  # cross[i, j]: query i with row j's positive
    cross_mask = torch.ones(B, B, dtype=torch.bool)
    cross_mask[0, 1] = cross_mask[3, 2] = False  # the same query, or a passage relevant to it
    for with_cross in (False, True):
        total = 0.0
        for i in range(B):
            candidates = [float(positive[i])]
            candidates += [float(negatives[i, k]) for k in range(K) if negative_mask[i, k]]
            if with_cross:
                candidates += [float(cross[i, j]) for j in range(B) if j != i and cross_mask[i, j]]
            total += -candidates[0] + math.log(sum(math.exp(c) for c in candidates))
        got = listwise_loss(positive, negatives, negative_mask,
                            cross if with_cross else None, cross_mask if with_cross else None)
        assert float(got) == pytest.approx(total / B, rel=1e-6)


def test_margin_mse_matches_the_teachers_margins():
    positive, negative = torch.tensor([3.0, 0.5, -1.0]), torch.tensor([1.0, 1.5, -4.0])
    teacher = torch.tensor([1.5, -0.5, 2.0])
    by_hand = sum(((p - n) - t) ** 2 for p, n, t in
                  zip(positive.tolist(), negative.tolist(), teacher.tolist())) / 3
    assert float(margin_mse_loss(positive, negative, teacher)) == pytest.approx(by_hand)


def test_a_batchs_loss_scores_the_pairs_its_rows_name(tiny_bert, tmp_path):
    """The collated batch and the loss's gathers against each row's candidates scored one pair
    at a time: (query, positive), (query, its negatives), (query, every other row's positive)."""
    train = make_file(tmp_path, "triplets", 6)
    task = dataclasses.replace(Rerank(in_batch_negatives=16).configure(train),
                               max_length=32, pooling="cls")
    tokenizer = Tokenizer.load(tiny_bert)
    examples = task.read(train)
    items = task.encode(tokenizer, examples, training=True)
    model = task.make_model(hub.load_encoder(tiny_bert)).eval()
    heads.init_head(model, torch.Generator().manual_seed(1))
    with torch.no_grad():
        loss = float(task.loss(model, task.collate(items)))

        def logit(query, passage):
            e = tokenizer.encode(query, passage)
            return float(model(torch.tensor([e.ids]), torch.tensor([e.type_ids]),
                               torch.ones(1, len(e.ids), dtype=torch.long))[0, 0])

        total = 0.0
        for i, it in enumerate(items):
            row = it.extra
            candidates = [logit(row.query, row.positive)]
            ex = examples[it.example]
            candidates += [logit(ex.query, ex.passages[n]) for n in ex.negatives()[:4]]
            candidates += [logit(row.query, other.extra.positive)
                           for j, other in enumerate(items) if j != i]
            total += -candidates[0] + math.log(sum(math.exp(c) for c in candidates))
    assert loss == pytest.approx(total / len(items), rel=1e-5)


# Training ---------------------------------------------------------------------------------------

def data_loss(model_dir: Path, task: Rerank, train: Path) -> float:
    """The task's mean loss over its training file for the model of `model_dir` (a fresh head
    from seed 0 on a pretrained encoder, or the trained reranker)."""
    tokenizer = Tokenizer.load(model_dir)
    if (model_dir / "bertkit_task.json").is_file():
        model = TaskModel.load(model_dir).model
    else:
        model = task.make_model(hub.load_encoder(model_dir))
        heads.init_head(model, torch.Generator().manual_seed(0))
    model.eval()
    items = task.encode(tokenizer, task.read(train), training=True)
    order = task.batch_order(items, 16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float(np.mean([float(task.loss(model, task.collate([items[i] for i in b])))
                              for b in order]))


def _entropy(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -(p * math.log(p) + (1 - p) * math.log(1 - p))


@pytest.mark.parametrize("kind,settings,loss", [
    ("triplets", {"in_batch_negatives": 0}, "listwise"),
    ("nli", {"in_batch_negatives": 0}, "listwise"),
    ("nli", {"objective": "bce"}, "bce"),
    ("scored", {}, "bce"),
    ("queries", {"teacher": "TEACHER"}, "margin-mse"),
])
def test_each_loss_trains_down(kind, settings, loss, tiny_bert, tmp_path):
    """Relevant against filler passages, which a tiny model learns in a few steps (negatives
    from the batch, other queries' relevant passages, ask it to match a query's words, which
    it does not learn in a short run: the batch's pairs are checked above instead)."""
    # scored pairs to keep the best by: -BCE goes on improving where nDCG@10 soon tops out
    train, dev = make_file(tmp_path, kind), make_file(tmp_path, "scored", 24, seed=1)
    if settings.get("teacher"):  # a sentence encoder's cosines: the encoder itself, mean-pooled
        settings = {**settings, "teacher": str(tiny_bert)}
    out = tmp_path / "out"
    result = finetune(Rerank(**settings), tiny_bert, train, dev, out,
                      FinetuneConfig(epochs=4, **QUICK))
    task = result.task
    assert task.objective == loss and task.kind == kind
    assert {"bce", "accuracy", "pairs"} <= set(result.dev_metrics)
    # soft labels: the least BCE is their entropy, not 0
    floor = float(np.mean([_entropy(label) for ex in task.read(train)
                           for label in ex.labels])) if kind == "scored" else 0.0
    before, after = data_loss(tiny_bert, task, train), data_loss(out, task, train)
    assert after - floor < 0.8 * (before - floor), (before, after, floor)
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    best = max(e["dev_selection"] for e in evals if e.get("split") == "eval")
    assert -result.dev_metrics["bce"] == pytest.approx(best, abs=1e-6)  # the best one kept


@pytest.mark.parametrize("settings", [{}, {"in_batch_negatives": 2}, {"objective": "bce"},
                                      {"mini_batch_size": 5}])
def test_the_step_never_makes_the_host_wait(settings, step_syncs, tiny_bert, tmp_path):
    train = make_file(tmp_path, "triplets", 48)
    result = finetune(Rerank(**settings), tiny_bert, train, None, tmp_path / "out",
                      FinetuneConfig(epochs=1, **QUICK))
    assert result.steps > 1 and step_syncs.found == []


def test_resume_equals_an_uninterrupted_run(tiny_bert_dropout, tmp_path, monkeypatch):
    from tests.finetuning.test_resume import _assert_same_model, _signal_at

    train, dev = make_file(tmp_path, "triplets", 64), make_file(tmp_path, "queries", 16, seed=1)
    cfg = FinetuneConfig(epochs=2, evals_per_epoch=2, **QUICK)
    task = Rerank(in_batch_negatives=2)
    finetune(task, tiny_bert_dropout, train, dev, tmp_path / "whole", cfg)
    _signal_at(monkeypatch, 3)
    stopped = finetune(task, tiny_bert_dropout, train, dev, tmp_path / "parts", cfg)
    assert stopped.stopped_by == "interrupted"
    monkeypatch.undo()
    finetune(task, tiny_bert_dropout, train, dev, tmp_path / "parts",
             dataclasses.replace(cfg, resume=True))
    _assert_same_model(tmp_path / "whole", tmp_path / "parts")


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run(tiny_bert_dropout, tmp_path, capsys):
    from tests.finetuning.test_resume import kill_9_then_resume

    train, dev = make_file(tmp_path, "triplets", 160), make_file(tmp_path, "queries", 16, seed=1)
    # 20 steps an epoch, 60 in all: time enough to stop the process well before its end
    args = ["finetune", "rerank", "--model", str(tiny_bert_dropout), "--train", str(train),
            "--dev", str(dev), "--in-batch-negatives", "2", "--epochs", "3", "--batch-size", "8",
            "--lr", "1e-3", "--head-lr", "1e-3", "--warmup", "0", "--patience", "none",
            "--precision", "fp32", "--save-every", "5", "--quiet"]
    kill_9_then_resume(args, tmp_path / "whole", tmp_path / "cut", tmp_path / "err")
    assert "resumed from" in capsys.readouterr().err


def test_dev_figures_are_the_ranked_candidates(tiny_bert):
    """nDCG@10 and MRR@10 of each query's own candidates, counted by hand; BCE and accuracy
    over every pair."""
    examples = [RerankExample("q1", ("a", "b", "c"), (1.0, 0.0, 0.0)),
                RerankExample("q2", ("d", "e", "f", "g"), (0.0, 1.0, 0.0, 1.0)),
                RerankExample("q3", ("h",), (0.7,))]  # a scored pair: pointwise only
    predictions = [(0.5, 2.0, -1.0), (3.0, 1.0, 0.0, 2.0), (0.3,)]
    scores = Rerank().score(examples, predictions)
    # q1: the relevant passage second; q2: relevant at ranks 2 and 3 of 4
    ndcg1 = (1 / math.log2(3)) / 1
    ndcg2 = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert scores["ndcg@10"] == pytest.approx((ndcg1 + ndcg2) / 2)
    assert scores["mrr@10"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert scores["queries"] == 2 and scores["pairs"] == 8
    logits = torch.tensor([s for p in predictions for s in p])
    labels = torch.tensor([x for ex in examples for x in ex.labels])
    assert scores["bce"] == pytest.approx(float(F.binary_cross_entropy_with_logits(logits, labels)))
    assert scores["accuracy"] == pytest.approx(6 / 8)  # wrong: (q1, b) and (q2, d)
    assert Rerank().selection(scores) == scores["ndcg@10"]
    assert Rerank().selection({"bce": 0.3}) == -0.3


def test_a_pairs_file_borrows_negatives_from_the_queries_after_each(tmp_path):
    rows = [{"anchor": f"q{i}", "positive": f"p{i}"} for i in range(12)]
    examples = Rerank().read(_write(tmp_path / "pairs.jsonl", rows))
    assert examples[0].passages == ("p0", *(f"p{i}" for i in range(1, 10)))
    assert examples[11].passages[:3] == ("p11", "p0", "p1")  # cyclically
    assert examples[0].labels == (1.0,) + (0.0,) * 9
    assert Rerank().read_inputs(tmp_path / "pairs.jsonl")[0].passages == ("p0",)  # no borrowing


def test_the_teachers_margins_are_its_scores(tiny_bert, tmp_path):
    """margin-mse's targets: a reranker teacher's logit margins, as Reranker scores them; a
    sentence encoder teacher's cosine margins, as Embedder's vectors give them."""
    from bertkit.embeddings.embedder import Embedder
    from bertkit.finetuning.tasks.rerank import teacher_scorer

    train = make_file(tmp_path, "triplets", 24)
    teacher = tmp_path / "teacher"
    finetune(Rerank(), tiny_bert, train, None, teacher, FinetuneConfig(epochs=1, **QUICK))
    task = dataclasses.replace(Rerank(teacher=str(teacher)).configure(train), max_length=32)
    assert task.objective == "margin-mse"
    examples = task.read(train)
    items = task.encode(Tokenizer.load(tiny_bert), examples, training=True)
    score = Reranker.load(teacher).predict
    for it in items:
        ex = examples[it.example]
        negative = ex.passages[ex.negatives()[0]]
        positive, against = score([(ex.query, it.extra.positive), (ex.query, negative)])
        assert it.target == pytest.approx(float(positive - against), abs=1e-5)
    queries, passages = [ex.query for ex in examples], [ex.passages[0] for ex in examples]
    vectors = Embedder.load(tiny_bert).encode(queries + passages)
    q, p = vectors[:len(queries)], vectors[len(queries):]
    cosines = (q * p).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(p, axis=1)
    np.testing.assert_allclose(teacher_scorer(tiny_bert)(queries, passages), cosines, atol=1e-5)


# The saved directory ----------------------------------------------------------------------------

PAIRS = [("what colour is the sky", "the sky is blue"),
         ("what colour is the sky", "john went to paris"),
         ("who went to rome", "alice went to rome and london"),
         ("a really long query " * 30, "a passage " * 40)]


def test_cross_encoder_and_transformers_read_the_directory_as_bertkit_does(minilm_dir,
                                                                            tmp_path, capsys):
    st = pytest.importorskip("sentence_transformers")
    transformers = pytest.importorskip("transformers")
    train = make_file(tmp_path, "triplets", 16)
    out = tmp_path / "reranker"
    finetune(Rerank(), minilm_dir, train, train, out,
             FinetuneConfig(epochs=1, batch_size=8, max_length=64, lr=1e-4, warmup=0.0,
                            show_progress=False))
    with pytest.warns(UserWarning, match="1 of 4 texts were longer than 64 tokens and were cut"):
        ours = Reranker.load(out).predict(PAIRS)
    theirs = st.CrossEncoder(str(out), device="cpu").predict(PAIRS)  # cut at 64 tokens too
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert model.config.num_labels == 1
    enc = tokenizer([q for q, _ in PAIRS], [p for _, p in PAIRS], padding=True,
                    truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[:, 0].numpy()
    np.testing.assert_allclose(ours, logits, atol=1e-5)

    assert isinstance(load_task(out), Rerank)  # a reranker, not a one-output regression
    card = ModelCard((out / "README.md").read_text()).data.to_dict()  # as the hub reads it
    assert card["pipeline_tag"] == "text-ranking" and card["library_name"] == \
        "sentence-transformers"
    # CrossEncoder's cards' tags, in place of the sentence encoder's (sentence-similarity...)
    assert card["tags"] == ["sentence-transformers", "cross-encoder", "reranker"]
    assert card["license"] == "apache-2.0" and "snli" in card["datasets"]  # the rest kept
    query, documents = PAIRS[0][0], [p for _, p in PAIRS]
    reranker = Reranker.load(out)
    with pytest.warns(UserWarning, match="longer than 64 tokens"):
        each = reranker.predict([(query, d) for d in documents])
    with pytest.warns(UserWarning, match="longer than 64 tokens"):
        ranked = reranker.rank(query, documents, top_k=2, return_documents=True)
    best = np.argsort(-each, kind="stable")[:2]
    assert [r["corpus_id"] for r in ranked] == best.tolist()
    np.testing.assert_allclose([r["score"] for r in ranked], each[best], atol=1e-6)
    assert ranked[0]["text"] == documents[best[0]]
    theirs = st.CrossEncoder(str(out), device="cpu").rank(query, documents, top_k=2)
    assert [r["corpus_id"] for r in theirs] == best.tolist()


def test_predict_gives_the_scores_of_pairs(tiny_bert, tmp_path, capsys):
    train = make_file(tmp_path, "triplets", 32)
    out = tmp_path / "out"
    finetune(Rerank(), tiny_bert, train, None, out, FinetuneConfig(epochs=1, **QUICK))
    pairs = [("john went to rome", "rome went john to"), ("the sky", "awful plot")]
    text = tmp_path / "pairs.txt"
    text.write_text("".join(f"{q}\t{p}\n" for q, p in pairs))
    assert main(["predict", "--model", str(out), "--input", str(text), "--quiet"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = Reranker.load(out).predict(pairs)
    assert [(r["query"], r["passage"]) for r in rows] == pairs
    np.testing.assert_allclose([r["score"] for r in rows], expected, atol=1e-6)
    assert TaskModel.load(out)(pairs[0])["score"] == pytest.approx(float(expected[0]), abs=1e-6)
    file = _write(tmp_path / "p.jsonl", [{"anchor": q, "positive": p} for q, p in pairs])
    assert main(["predict", "--model", str(out), "--input", str(file), "--quiet"]) == 0
    again = [json.loads(line)["score"] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(again, expected, atol=1e-6)
    queries = make_file(tmp_path, "queries", 12, seed=2)
    assert main(["evaluate", "--model", str(out), "--input", str(queries), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == pytest.approx(
        TaskModel.load(out).evaluate(queries), abs=1e-6)
    text.write_text("no tab here\n")
    assert main(["predict", "--model", str(out), "--input", str(text)]) == 2
    assert capsys.readouterr().err == (f"error: {text}:1: a rerank model reads a pair a line, "
                                       f"QUERY<TAB>PASSAGE: this line has no tab\n")


def test_a_cross_encoders_config_is_a_reranker_and_a_regression_models_is_not():
    config = {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"},
              "sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}
    assert Rerank.from_transformers(config) == Rerank(pooling="cls")
    regression = {"architectures": ["BertForSequenceClassification"],
                  "id2label": {"0": "LABEL_0"}, "problem_type": "regression"}
    assert Rerank.from_transformers(regression) is None
    assert Regress.from_transformers(regression) == Regress()


def test_a_classifier_is_no_reranker(tiny_bert, tmp_path):
    task = Classify(labels=("a", "b"))
    heads.save_task_model(task.make_model(hub.load_encoder(tiny_bert)), tmp_path / "c",
                          task=task.to_json(), tokenizer=Tokenizer.load(tiny_bert),
                          labels=["a", "b"])
    with pytest.raises(Exception, match="a classify model, not a reranker"):
        Reranker.load(tmp_path / "c")


# The command line -------------------------------------------------------------------------------

def _help(capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["finetune", "rerank", "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_help_lists_the_tasks_flags(capsys):
    text = _help(capsys)
    for flag in ("--loss {auto,bce,listwise,margin-mse}", "--negatives NEGATIVES",
                 "--in-batch-negatives N", "--mini-batch-size N", "--teacher TEACHER",
                 "--score-range",
                 "--epochs", "--max-length"):
        assert flag in text, flag
    assert "(default: 4)" in text


def test_bad_input_is_one_line_and_writes_nothing(tiny_bert, tmp_path, capsys):
    empty = _write(tmp_path / "empty.jsonl", [
        {"anchor": "a b", "positive": "", "negative": "c"},
        {"anchor": " ", "positive": "x", "negative": "c"}])
    never = tmp_path / "never"
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(empty),
                 "--out", str(never)]) == 2
    assert capsys.readouterr().err == (f"error: {empty}:1: no examples: every row has an empty "
                                       f"text (2 rows, this the first)\n")
    assert not never.exists()


def test_a_teacher_of_another_kind_is_refused_before_training(tiny_bert, tmp_path, capsys):
    task = Classify(labels=("a", "b"))
    classifier = tmp_path / "classifier"
    heads.save_task_model(task.make_model(hub.load_encoder(tiny_bert)), classifier,
                          task=task.to_json(), tokenizer=Tokenizer.load(tiny_bert),
                          labels=["a", "b"])
    train, never = make_file(tmp_path, "triplets", 16), tmp_path / "never"
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(never), "--teacher", str(classifier)]) == 2
    assert capsys.readouterr().err == (f"error: {classifier}: a fine-tuned classify model, not "
                                       f"a reranker or a sentence encoder (--teacher)\n")
    assert not never.exists()
    assert main(["finetune", "rerank", "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(never), "--loss", "margin-mse"]) == 2
    assert capsys.readouterr().err == ("error: --loss margin-mse learns a teacher's margins: "
                                       "name it, --teacher DIR\n")


def test_serve_scores_a_passage_for_a_query(tiny_bert, tmp_path):
    from bertkit.serve.workbench import RequestError, Workbench

    out = tmp_path / "out"
    finetune(Rerank(), tiny_bert, make_file(tmp_path, "triplets", 32), None, out,
             FinetuneConfig(epochs=1, **QUICK))
    bench = Workbench.load([out])
    name, = bench.models
    answer = bench.predict(name, text="john went to rome", pair="rome went john to")
    assert answer["task"] == "rerank" and answer["score"] == pytest.approx(
        Reranker.load(out).predict(("john went to rome", "rome went john to")), abs=1e-6)
    with pytest.raises(RequestError, match="a reranker scores a passage"):
        bench.predict(name, text="john went to rome")
