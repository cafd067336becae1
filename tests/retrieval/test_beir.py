"""BEIR directories: the figures equal trec_eval's (pytrec_eval) on the same top 1,000 of
each query, graded judgements included; dense and BM25 rankings equal a plain full ranking;
bad directories are one line naming the file and line."""
from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import torch

from bertkit.cli import main as cli
from bertkit.files import UserError
from bertkit.retrieval.beir import is_beir_dir, qrels_file, read_beir, read_passages, write_beir
from bertkit.retrieval.evaluation import evaluate_beir, rank, ranking_figures

from tests.retrieval.conftest import sentences

pytrec_eval = pytest.importorskip("pytrec_eval")

MEASURES = {"ndcg_cut_10": "ndcg", "recip_rank": "mrr", "recall_100": "recall", "map": "map"}


def trec_figures(ranked: list[list[int]], qrels: list[dict[int, int]]) -> dict[str, float]:
    """pytrec_eval's means of the rankings, each ranking's order given by its scores (rank
    r scores -r: trec_eval sorts by score). recip_rank is on the top 10 only: MRR@10."""
    judged = {f"q{q}": {f"d{d}": g for d, g in grades.items()} for q, grades in enumerate(qrels)}
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut_10", "recall_100", "map"})
    run = {f"q{q}": {f"d{d}": -float(r) for r, d in enumerate(row) if d >= 0}
           for q, row in enumerate(ranked)}
    top10 = {q: {d: s for d, s in docs.items() if s > -10} for q, docs in run.items()}
    out = {name: np.mean([v[m] for v in evaluator.evaluate(run).values()])
           for m, name in MEASURES.items() if m != "recip_rank"}
    rr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)
    out["mrr"] = np.mean([v["recip_rank"] for v in rr.values()])
    return out


def test_figures_equal_trec_eval_with_graded_judgements():
    rng = random.Random(0)
    passages, ranked, qrels = 1500, [], []
    for q in range(40):
        row = rng.sample(range(passages), 1000)
        grades = {d: rng.choice([1, 2, 3]) for d in rng.sample(row[:30], rng.randint(0, 4))}
        grades.update({d: rng.choice([1, 2]) for d in rng.sample(row[30:], 3)})
        grades.update({d: 0 for d in rng.sample(row, 5) if d not in grades})  # judged, not relevant
        outside = next(d for d in range(passages) if d not in row)
        grades[outside] = 2  # relevant, never retrieved: it counts in recall, MAP and ideal DCG
        ranked.append(row)
        qrels.append(grades)
    ranked[3] = ranked[3][:700] + [-1] * 300  # a ranking shorter than 1,000
    ours = ranking_figures(torch.tensor(ranked), qrels, passages)
    theirs = trec_figures(ranked, qrels)
    for name in ("ndcg", "mrr", "recall", "map"):
        assert getattr(ours, name) == pytest.approx(theirs[name], abs=1e-6), name
    assert ours.queries == 40 and 0 < ours.ndcg < 1


def _beir(tmp_path, n_passages=60, n_queries=12, seed=0, same_ids=True):
    """A BEIR directory of synthetic texts; with `same_ids` some queries are also passages
    under the same id (BEIR's evaluation never retrieves those for themselves)."""
    rng = random.Random(seed)
    texts = sentences(n_passages + n_queries, seed)
    corpus = [{"_id": f"p{i}", "title": "", "text": t} for i, t in enumerate(texts[:n_passages])]
    queries = [{"_id": f"q{i}", "text": t} for i, t in enumerate(texts[n_passages:])]
    if same_ids:
        queries += [{"_id": "p0", "text": corpus[0]["text"]},
                    {"_id": "p1", "text": corpus[1]["text"]}]
    queries.append({"_id": "unjudged", "text": "river bank"})
    qrels = [(q["_id"], f"p{d}", rng.choice([0, 1, 2])) for q in queries[:-1]
             for d in rng.sample(range(2, n_passages), 3)]
    qrels += [(q["_id"], "p5", 1) for q in queries[:-1]]  # every judged query has one
    return write_beir(tmp_path / "beir", corpus, queries, qrels)


def test_dense_ranking_is_the_full_cosine_ranking_without_the_query_itself(tmp_path,
                                                                         hash_embedder):
    path = _beir(tmp_path)
    data = read_beir(path)
    assert "unjudged" not in data.queries.ids and data.queries.ids[-2:] == ["p0", "p1"]
    ranked = rank(data, hash_embedder, depth=20, progress=False)
    q = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.queries.texts)), dim=1)
    p = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.corpus.texts)), dim=1)
    scores = q @ p.T
    scores[len(q) - 2, 0] = scores[len(q) - 1, 1] = -float("inf")  # their own passages
    assert torch.equal(ranked, scores.argsort(dim=1, descending=True)[:, :20])
    assert 0 not in ranked[-2].tolist() and 1 not in ranked[-1].tolist()


def test_evaluate_beir_of_a_model_equals_trec_eval_on_its_full_ranking(tmp_path, hash_embedder):
    path = _beir(tmp_path, n_passages=1200, n_queries=15)
    data = read_beir(path)
    ours = evaluate_beir(path, hash_embedder, progress=False)
    q = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.queries.texts)), dim=1).double()
    p = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.corpus.texts)), dim=1).double()
    full = (q @ p.T).argsort(dim=1, descending=True)
    own = {i: data.corpus.ids.index(qid) for i, qid in enumerate(data.queries.ids)
           if qid in data.corpus.ids}
    ranked = [[d for d in row if d != own.get(i)][:1000] for i, row in enumerate(full.tolist())]
    theirs = trec_figures(ranked, data.qrels)
    for name in ("ndcg", "mrr", "recall", "map"):
        assert getattr(ours, name) == pytest.approx(theirs[name], abs=1e-6), name
    assert ours.passages == 1200 and ours.queries == len(data.qrels)


def test_bm25_ranking_is_bm25s_own(tmp_path):
    import bm25s
    path = _beir(tmp_path, same_ids=False)
    data = read_beir(path)
    ranked = rank(data, None, depth=25, progress=False)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(data.corpus.texts, stopwords="en", show_progress=False),
                    show_progress=False)
    found, _ = retriever.retrieve(bm25s.tokenize(data.queries.texts, stopwords="en",
                                                 show_progress=False), k=25, show_progress=False)
    assert torch.equal(ranked, torch.from_numpy(found).long())


def test_beir_directory_is_recognised_and_qrels_fall_back_to_dev(tmp_path):
    path = _beir(tmp_path)
    assert is_beir_dir(path) and not is_beir_dir(path / "qrels")
    (path / "qrels" / "test.tsv").rename(path / "qrels" / "dev.tsv")
    assert qrels_file(path).name == "dev.tsv"
    (path / "qrels" / "dev.tsv").unlink()
    with pytest.raises(UserError, match="no test.tsv or dev.tsv"):
        qrels_file(path)


def _corrupt(path, name: str, line: int, text: str) -> None:
    lines = (path / name).read_text().splitlines()
    lines[line - 1] = text
    (path / name).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name,line,text,message", [
    ("corpus.jsonl", 4, '{"_id": "p0", "text": "again"}', "corpus.jsonl:4: duplicate id 'p0', "
                                                          "first at .*corpus.jsonl:1"),
    ("qrels/test.tsv", 3, "q1\tnowhere\t1", r"test.tsv:3: document 'nowhere' is not in "),
    ("qrels/test.tsv", 2, "nobody\tp3\t1", r"test.tsv:2: query 'nobody' is not in "),
    ("qrels/test.tsv", 2, "q1\tp3\thigh", r"test.tsv:2: score 'high' is not a whole number"),
    ("qrels/test.tsv", 1, "qid\tdid\tscore", r"test.tsv:1: expected the header"),
    ("queries.jsonl", 2, '{"_id": "q9"}', r"queries.jsonl:2: no 'text' field"),
    ("corpus.jsonl", 2, "not json", r"corpus.jsonl:2: not valid JSON"),
])
def test_bad_beir_input_is_one_line_with_file_and_line(tmp_path, capsys, name, line, text,
                                                       message):
    path = _beir(tmp_path)
    _corrupt(path, name, line, text)
    with pytest.raises(UserError, match=message):
        read_beir(path)
    assert cli.main(["evaluate", "--input", str(path), "--bm25"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name,line,text,message", [
    ("qrels/test.tsv", 3, "q1\tnowhere\t1", r"test.tsv:3: document 'nowhere' is not in "),
    ("corpus.jsonl", 4, '{"_id": "p0", "text": "again"}', r"corpus.jsonl:4: duplicate id 'p0'"),
])
def test_bad_beir_input_with_a_model_is_one_line_before_any_encoding(
        tmp_path, capsys, monkeypatch, tiny_sentence_model, name, line, text, message):
    from bertkit.retrieval import retrievers

    def never(*args, **kwargs):
        raise AssertionError("encoded a bad directory")

    monkeypatch.setattr(retrievers, "encode", never)  # the dense retriever's encoding
    path = _beir(tmp_path)
    _corrupt(path, name, line, text)
    assert cli.main(["evaluate", "--input", str(path), "--model", str(tiny_sentence_model),
                     "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert re.match(f"error: .*{message}", captured.err), captured.err


def test_passages_from_text_lines_or_json_lines(tmp_path):
    (tmp_path / "a.txt").write_text("first passage\n\nsecond passage\n")
    assert read_passages(tmp_path / "a.txt").texts == ["first passage", "second passage"]
    assert read_passages(tmp_path / "a.txt").ids == ["1", "3"]
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "body", "title": "Head"}) + "\n"
                                      + json.dumps({"_id": 7, "text": "more"}) + "\n")
    found = read_passages(tmp_path / "b.jsonl")
    assert found.texts == ["Head body", "more"] and found.ids == ["1", "7"]


def test_cli_evaluates_a_beir_directory_with_bm25_and_with_a_model(tmp_path, capsys,
                                                                  tiny_sentence_model):
    path = _beir(tmp_path)
    assert cli.main(["evaluate", "--input", str(path), "--bm25", "--json", "--quiet"]) == 0
    bm25 = json.loads(capsys.readouterr().out)
    assert set(bm25) == {"ndcg@10", "mrr@10", "recall@100", "map@1000", "queries", "passages"}
    assert bm25["queries"] == 14 and bm25["passages"] == 60
    assert bm25 == pytest.approx(evaluate_beir(path, None, progress=False).as_dict())
    assert cli.main(["evaluate", "--input", str(path), "--model", str(tiny_sentence_model),
                     "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "ndcg@10" in out and "recall@100" in out and "passages  60" in out
    assert cli.main(["evaluate", "--input", str(path)]) == 2
    assert "give --model (a sentence model or a sparse encoder), --bm25" in capsys.readouterr().err


def test_bm25_on_another_input_and_no_model_are_one_line(tmp_path, capsys):
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"anchor": "a", "positive": "b"}) + "\n")
    assert cli.main(["evaluate", "--input", str(tmp_path / "pairs.jsonl"), "--bm25"]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: --bm25 ranks the passages of a BEIR directory; {tmp_path / 'pairs.jsonl'} is "
        f"none")
    assert cli.main(["evaluate", "--input", str(tmp_path / "pairs.jsonl")]) == 2
    assert capsys.readouterr().err == "error: --model is needed (the model to evaluate)\n"
