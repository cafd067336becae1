"""`finetune sparse`: SPLADE trained through the one loop from a masked-LM directory (or a
sentence model, given a head tied to its word embeddings), its loss going down, its directory
read alike by sentence-transformers' SparseEncoder and by bertkit, its dev figures with the
vectors' density, and bad input refused in one line."""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.embeddings import sparse
from bertkit.embeddings.sparse_encoder import SparseEncoder
from bertkit.finetuning.backbone import Encoder
from bertkit.finetuning.recipe import FinetuneConfig, finetune
from bertkit.finetuning.tasks import Sparse
from bertkit.model import hub
from bertkit.model.encoder import init_weights
from bertkit.model.heads import MaskedLMHead, PretrainingModel
from bertkit.text.tokenizer import Tokenizer

from tests.finetuning.conftest import WORDS

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = dict(lr=2e-3, head_lr=2e-3, warmup=0.0, show_progress=False, patience=None,
             batch_size=16, precision="fp32")
CONTENT = [w for w in WORDS if w.isalpha()]


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> Path:
    """A random 2-layer BERT with its masked-LM head (BertForPreTraining), over WORDS."""
    root = tmp_path_factory.mktemp("mlm")
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_layers=2, num_heads=2,
                        intermediate_size=64, max_positions=64, hidden_dropout=0.0,
                        attention_dropout=0.0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = PretrainingModel(cfg)
        init_weights(model, cfg)
    return hub.save_model(model, root / "bert", tokenizer=Tokenizer.from_vocab(root / "vocab.txt"))


def pairs_file(path: Path, n: int, seed: int = 0, kind: str = "pairs") -> Path:
    """Pairs (or queries with a negative) whose positive is the anchor's words reordered."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = rng.sample(CONTENT, 4)
        if kind == "pairs":
            rows.append({"anchor": " ".join(a), "positive": " ".join(a[::-1])})
        else:
            rows.append({"query": " ".join(a), "relevant": [" ".join(a[::-1])],
                         "negatives": [" ".join(rng.sample(CONTENT, 4))]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def data_loss(model_dir: Path, task: Sparse, train: Path, from_start: bool) -> float:
    """The ranking loss (no regulariser) over the training file, for the model trained into
    `model_dir` or (`from_start`) the one fine-tuning starts from there."""
    model = sparse.new_model(hub.load_encoder(model_dir)) if from_start else None
    if from_start:
        sparse.load_head(model, model_dir)
    else:
        from bertkit.embeddings.sparse_encoder import load_model
        model = load_model(model_dir)
    task = dataclasses.replace(task, query_reg=0.0, doc_reg=0.0)
    items = task.encode(Tokenizer.load(model_dir), task.read(train), training=True)
    order = task.batch_order(items, 16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float(np.mean([float(task.loss(model.eval(), task.collate([items[i] for i in b])))
                              for b in order]))


def test_training_lowers_the_loss_and_keeps_the_best_dev_figure(tiny_mlm, tmp_path):
    train = pairs_file(tmp_path / "train.jsonl", 160)
    dev = pairs_file(tmp_path / "dev.jsonl", 40, seed=1, kind="queries")
    out = tmp_path / "out"
    result = finetune(Sparse(), tiny_mlm, train, dev, out, FinetuneConfig(epochs=3, **QUICK))
    task = result.task
    assert task.kind == "pairs" and task.total_steps == result.steps == 30
    before = data_loss(tiny_mlm, task, train, from_start=True)
    after = data_loss(out, task, train, from_start=False)
    assert after < 0.8 * before, (before, after)
    metrics = json.loads((out / "dev_metrics.json").read_text())
    for key in ("ndcg@10", "mrr@10", "query_active_dims", "corpus_active_dims"):
        assert key in metrics and key in metrics["baseline"]
    assert metrics["queries"] == 40
    assert 0 < metrics["query_active_dims"] <= 5 + len(WORDS)
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    best = max(e["dev_selection"] for e in evals if e.get("split") == "eval")
    assert metrics["ndcg@10"] == pytest.approx(best, abs=1e-6)
    assert metrics["ndcg@10"] > metrics["baseline"]["ndcg@10"]


def test_the_density_figures_count_the_non_zero_entries(tiny_mlm, tmp_path, capsys):
    dev = pairs_file(tmp_path / "dev.jsonl", 12, seed=2, kind="queries")
    out = tmp_path / "out"
    finetune(Sparse(), tiny_mlm, pairs_file(tmp_path / "t.jsonl", 32), dev, out,
             FinetuneConfig(epochs=1, **QUICK))
    metrics = json.loads((out / "dev_metrics.json").read_text())
    rows = [json.loads(line) for line in dev.read_text().splitlines()]
    encoder = SparseEncoder.load(out)
    queries = encoder.encode([r["query"] for r in rows], convert_to_sparse_tensor=False)
    passages = list(dict.fromkeys(p for r in rows for p in r["relevant"] + r["negatives"]))
    documents = encoder.encode(passages, convert_to_sparse_tensor=False)
    assert metrics["query_active_dims"] == pytest.approx(float((queries > 0).sum(1).float().mean()))
    assert metrics["corpus_active_dims"] == pytest.approx(
        float((documents > 0).sum(1).float().mean()))
    scores = queries @ documents.T  # nDCG@10 by hand: one relevant passage per query
    ndcg = 0.0
    for r, row in zip(rows, scores):
        ranked = [passages[i] for i in np.argsort(-row.numpy(), kind="stable")[:10]]
        hits = [text in r["relevant"] for text in ranked]
        ndcg += sum(h / np.log2(k + 2) for k, h in enumerate(hits))
    assert metrics["ndcg@10"] == pytest.approx(ndcg / len(rows), abs=1e-4)
    # `evaluate` on the saved model gives the figures the run saved
    assert main(["evaluate", "--model", str(out), "--input", str(dev), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures == pytest.approx({k: v for k, v in metrics.items() if k != "baseline"},
                                    abs=1e-6)


def test_the_regulariser_weights_follow_the_warm_up_step_by_step(tiny_mlm, tmp_path):
    train = pairs_file(tmp_path / "train.jsonl", 32)
    task = dataclasses.replace(Sparse(query_reg=0.3, doc_reg=0.1).configure(train),
                               max_length=32).with_steps(9)
    model = sparse.new_model(hub.load_encoder(tiny_mlm))
    sparse.load_head(model, tiny_mlm)
    items = task.encode(Tokenizer.load(tiny_mlm), task.read(train), training=True)
    batch = task.collate(items[:8])
    for step in range(5):
        with torch.no_grad():
            columns = task._embed.columns(model, batch)
            weight = min(1.0, step / 3) ** 2  # 9 steps, a third of them: 3
            want = sparse.splade_loss(columns, 0.3 * weight, 0.1 * weight)
            assert float(task.loss(model, batch)) == pytest.approx(float(want), rel=1e-5)
    assert int(model.steps) == 5


def test_sentence_transformers_reads_the_trained_directory_as_bertkit_does(tiny_mlm,
                                                                           tmp_path):
    st = pytest.importorskip("sentence_transformers")
    train = pairs_file(tmp_path / "train.jsonl", 48, kind="queries")
    out = tmp_path / "out"
    finetune(Sparse(), tiny_mlm, train, None, out, FinetuneConfig(epochs=1, **QUICK))
    texts = ["the good film", "john went to paris and rome", "bad", "where did mary go ?"]
    ours = SparseEncoder.load(out).encode(texts)
    theirs = st.SparseEncoder(str(out), device="cpu").encode(texts)
    torch.testing.assert_close(ours.to_dense(), theirs.to_dense(), atol=1e-5, rtol=0)
    card = (out / "README.md").read_text()
    front = ModelCard(card).data.to_dict()  # as the hub reads it
    assert (front["library_name"], front["pipeline_tag"]) == ("sentence-transformers",
                                                              "feature-extraction")
    assert front["tags"] == ["sentence-transformers", "sparse-encoder", "sparse", "splade"]
    assert "bertkit embed --model" in card and "SparseEncoder.load" in card
    assert not (out / "bertkit_task.json").exists()
    assert json.loads((out / "config_sentence_transformers.json").read_text())["model_type"] \
        == "SparseEncoder"


def test_a_sentence_model_gets_a_head_tied_to_its_word_embeddings(minilm_dir, tmp_path,
                                                                  capsys):
    st = pytest.importorskip("sentence_transformers")
    rows = [{"anchor": f"the {w} is here", "positive": f"here is the {w}"}
            for w in ["river", "bank", "money", "house", "tree", "road", "city", "music"]]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["finetune", "sparse", "--model", str(minilm_dir), "--train", str(train),
                 "--dev", str(train), "--out", str(out), "--epochs", "1", "--batch-size", "4",
                 "--max-length", "16", "--quiet"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "masked-LM head" in line]
    assert said == [f"warning: {minilm_dir} has no masked-LM head: the vocabulary projection "
                    f"is its word embeddings, with a new transform and bias that start by "
                    f"reading each token back as its own word and its neighbours"], err
    saved = hub.load_weights(out)
    assert "cls.predictions.transform.dense.weight" in saved
    assert "cls.predictions.decoder.weight" not in saved  # tied: the word embeddings
    texts = ["a river bank", "money in the bank"]
    ours = SparseEncoder.load(out).encode(texts)
    theirs = st.SparseEncoder(str(out), device="cpu").encode(texts)
    torch.testing.assert_close(ours.to_dense(), theirs.to_dense(), atol=1e-5, rtol=0)
    assert ours.shape[1] == 30522


def test_a_new_head_starts_by_reading_a_sentence_model_s_tokens_back(minilm_dir):
    """Untrained, the head tied to all-MiniLM-L6-v2's word embeddings already holds a text's
    own words among a few hundred entries (a random transform holds nearly all 30,522)."""
    with pytest.warns(UserWarning, match="no masked-LM head"):
        model = Encoder(minilm_dir).build(Sparse(), 0)
    tokenizer = Tokenizer.load(minilm_dir)
    ids = torch.tensor([tokenizer.encode("a man is playing a guitar on the stage").ids])
    with torch.no_grad():
        vector = model(ids)[0]
    top = {tokenizer.id_to_token(int(i)) for i in vector.topk(12).indices}
    assert {"man", "guitar", "stage"} <= top, top
    assert 20 < int((vector > 0).sum()) < 2000


def test_the_lexical_start_keeps_entries_whose_cosine_passes_the_threshold():
    cfg = EncoderConfig(vocab_size=50, hidden_size=8, num_layers=1, num_heads=2,
                        intermediate_size=16, max_positions=16)
    words = torch.nn.Embedding(50, 8)
    head = MaskedLMHead(cfg, words)
    sparse.lexical_start(head, cosine=0.3)
    h = torch.randn(5, 8)
    state = torch.nn.functional.layer_norm(head.act(h), (8,))  # the identity transform
    cosine = torch.nn.functional.cosine_similarity(state[:, None], words.weight[None], dim=-1)
    torch.testing.assert_close(head(h) > 0, cosine > 0.3)


def test_bad_input_is_one_error_line_and_nothing_written(tiny_mlm, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    scored = tmp_path / "scored.jsonl"
    scored.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "score": 1}) + "\n")
    for train, what in ((empty, f"error: {empty}"), (scored, f"error: {scored}: sparse trains")):
        code = main(["finetune", "sparse", "--model", str(tiny_mlm), "--train", str(train),
                     "--out", str(tmp_path / "never"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(what) and err.count("\n") == 1, err
        assert not (tmp_path / "never").exists()
    code = main(["finetune", "sparse", "--model", str(tiny_mlm), "--train",
                 str(pairs_file(tmp_path / "t.jsonl", 8)), "--out", str(tmp_path / "never"),
                 "--reg-warmup", "2", "--quiet"])
    assert code == 2 and capsys.readouterr().err == \
        "error: --reg-warmup must be in [0, 1], got 2.0\n"


def test_the_command_records_the_regulariser_settings(tiny_mlm, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["finetune", "sparse", "--model", str(tiny_mlm), "--train",
                 str(pairs_file(tmp_path / "t.jsonl", 32)), "--out", str(out), "--epochs", "1",
                 "--batch-size", "8", "--query-reg", "1e-3", "--doc-reg", "2e-3",
                 "--reg-warmup", "0.5"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert "dev_query_active_dims" in summary and "dev_corpus_active_dims" in summary
    assert "dev_query_active_dims" in captured.err  # the evaluations' lines say the density
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["query_reg"] == 1e-3 and record["options"]["doc_reg"] == 2e-3
    assert "--reg-warmup 0.5" in record["command"]


def test_resume_equals_an_uninterrupted_run(tiny_mlm, tmp_path, monkeypatch):
    """The regulariser's warm-up reads the steps taken: a resumed run goes on where it was."""
    from tests.finetuning.test_resume import _assert_same_model, _signal_at

    train = pairs_file(tmp_path / "train.jsonl", 96)
    dev = pairs_file(tmp_path / "dev.jsonl", 24, seed=1)
    cfg = FinetuneConfig(epochs=2, evals_per_epoch=2, **{**QUICK, "batch_size": 8})
    task = Sparse(query_reg=0.05, doc_reg=0.05, reg_warmup=0.5)  # large enough to matter
    finetune(task, tiny_mlm, train, dev, tmp_path / "whole", cfg)
    _signal_at(monkeypatch, 7)
    stopped = finetune(task, tiny_mlm, train, dev, tmp_path / "parts", cfg)
    assert stopped.stopped_by == "interrupted"
    monkeypatch.undo()
    finetune(task, tiny_mlm, train, dev, tmp_path / "parts",
             dataclasses.replace(cfg, resume=True))
    _assert_same_model(tmp_path / "whole", tmp_path / "parts")


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run(tiny_mlm, tmp_path, capsys):
    from tests.finetuning.test_resume import kill_9_then_resume

    train = pairs_file(tmp_path / "train.jsonl", 240)
    dev = pairs_file(tmp_path / "dev.jsonl", 24, seed=1)
    # 30 steps an epoch, 60 in all, the regulariser warming up over the first half
    args = ["finetune", "sparse", "--model", str(tiny_mlm), "--train", str(train), "--dev",
            str(dev), "--query-reg", "0.05", "--doc-reg", "0.05", "--reg-warmup", "0.5",
            "--epochs", "2", "--batch-size", "8", "--lr", "2e-3", "--head-lr", "2e-3",
            "--warmup", "0", "--patience", "none", "--precision", "fp32", "--save-every", "5",
            "--quiet"]
    kill_9_then_resume(args, tmp_path / "whole", tmp_path / "cut", tmp_path / "err")
    assert "resumed from" in capsys.readouterr().err


def test_the_step_never_makes_the_host_wait(tiny_mlm, step_syncs, tmp_path):
    """The warm-up reads the step count on the device: no value comes back to the host."""
    train = pairs_file(tmp_path / "train.jsonl", 48, kind="queries")
    result = finetune(Sparse(), tiny_mlm, train, None, tmp_path / "out",
                      FinetuneConfig(epochs=1, **QUICK))
    assert result.steps > 1 and step_syncs.found == []


def test_a_modern_encoder_saves_a_sparse_encoder_read_alike(tiny_modern, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="no masked-LM head"):
        finetune(Sparse(), tiny_modern, pairs_file(tmp_path / "t.jsonl", 32), None, out,
                 FinetuneConfig(epochs=1, **QUICK))
    assert json.loads((out / "config.json").read_text())["architectures"] == \
        ["ModernBertForMaskedLM"]
    texts = ["the good film", "john went to paris and rome"]
    theirs = st.SparseEncoder(str(out), device="cpu",
                              model_kwargs={"attn_implementation": "eager"}).encode(texts)
    torch.testing.assert_close(SparseEncoder.load(out).encode(texts).to_dense(),
                               theirs.to_dense(), atol=1e-5, rtol=0)
