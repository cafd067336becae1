"""Readers of sentence-embedding training files: each kind from JSONL, CSV and TSV, the NLI
grouping, errors that name FILE:LINE, and the real SICK files."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from bertkit.files import UserError
from bertkit.finetuning.sentence_pairs import (NliExamples, Pair, QueryPassages, ScoredPair,
                                               Triplet, detect_kind, read_nli, read_pairs,
                                               read_queries, read_scored_pairs,
                                               read_sentences, read_triplets)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def test_pairs_from_csv_tsv_and_jsonl(tmp_path):
    csv = write(tmp_path / "p.csv", 'anchor,positive,id\n"a, b",c,1\nd,e,2\n')
    tsv = write(tmp_path / "p.tsv", "id\tanchor\tpositive\n1\ta, b\tc\n2\td\te\n")
    jl = jsonl(tmp_path / "p.jsonl", [{"anchor": "a, b", "positive": "c"},
                                      {"anchor": "d", "positive": "e", "extra": 3}])
    excel = write(tmp_path / "e.csv", "anchor;positive;id\na, b;c;1\nd;e;2\n")  # Excel's ';'
    for path in (csv, tsv, jl, excel):
        assert detect_kind(path) == "pairs"
        pairs = read_pairs(path)
        assert [(p.anchor, p.positive) for p in pairs] == [("a, b", "c"), ("d", "e")]
        assert pairs[1].source == f"{path}:{3 if path != jl else 2}", path


def test_triplets(tmp_path):
    path = write(tmp_path / "t.tsv", "anchor\tpositive\tnegative\nq\tyes\tno\n")
    assert detect_kind(path) == "triplets"
    assert read_triplets(path) == [Triplet("q", "yes", "no", f"{path}:2")]
    assert read_pairs(path) == [Pair("q", "yes", f"{path}:2")]  # the negative left aside


def test_query_stands_for_anchor_in_pairs_and_triplets(tmp_path):
    pairs = jsonl(tmp_path / "p.jsonl", [{"query": "q", "positive": "yes"}])
    assert detect_kind(pairs) == "pairs"
    assert read_pairs(pairs) == [Pair("q", "yes", f"{pairs}:1")]
    triplets = write(tmp_path / "t.csv", "query,positive,negative\nq,yes,no\n")
    assert detect_kind(triplets) == "triplets"
    assert read_triplets(triplets) == [Triplet("q", "yes", "no", f"{triplets}:2")]
    queries = jsonl(tmp_path / "q.jsonl", [{"query": "q", "relevant": "yes", "positive": "x"}])
    assert detect_kind(queries) == "queries"  # relevant: a queries file, as before


def test_queries_merge_their_rows_and_keep_negatives_apart(tmp_path):
    jl = jsonl(tmp_path / "q.jsonl", [
        {"query": "q1", "relevant": ["p1", "p2"], "negatives": ["n1", "p1"]},
        {"query": "q2", "relevant": "p3"},
        {"query": "q1", "relevant": ["p2", "p4", " "]},
        {"query": "q3", "relevant": []}])
    assert detect_kind(jl) == "queries"
    with pytest.warns(UserWarning, match=r"skipped 1 queries .*q.jsonl:4"):
        queries = read_queries(jl)
    assert queries == [QueryPassages("q1", ("p1", "p2", "p4"), ("n1",), f"{jl}:1"),
                       QueryPassages("q2", ("p3",), (), f"{jl}:2")]
    csv = write(tmp_path / "q.csv", "query,relevant,negatives\nq1,p1,\nq1,p2,n1\nq2,p3,n2\n")
    assert detect_kind(csv) == "queries"
    assert [(q.query, q.relevant, q.negatives) for q in read_queries(csv)] == [
        ("q1", ("p1", "p2"), ("n1",)), ("q2", ("p3",), ("n2",))]


@pytest.mark.parametrize("row,message", [
    ({"query": 3, "relevant": "p"}, r"q.jsonl:2: column 'query' must be a text"),
    ({"query": "q", "relevant": {"a": 1}}, r"q.jsonl:2: column 'relevant' must be a text or a"),
    ({"query": "q", "relevant": "p", "negatives": [1]}, r"q.jsonl:2: column 'negatives'")])
def test_queries_errors_name_the_line(tmp_path, row, message):
    path = jsonl(tmp_path / "q.jsonl", [{"query": "ok", "relevant": "p"}, row])
    with pytest.raises(UserError, match=message):
        read_queries(path)


def test_scored_pairs_as_written_or_brought_to_zero_one(tmp_path):
    path = write(tmp_path / "s.csv", "sentence1,sentence2,score\na,b,5\nc,d,0\ne,f,2.5\n")
    assert detect_kind(path) == "scored"
    assert [p.score for p in read_scored_pairs(path)] == [5.0, 0.0, 2.5]
    assert [p.score for p in read_scored_pairs(path, score_range=(0, 5))] == [1.0, 0.0, 0.5]
    other = jsonl(tmp_path / "s.jsonl", [{"text_a": "x", "text_b": "y", "score": 0.25}])
    assert detect_kind(other) == "scored"
    assert read_scored_pairs(other) == [ScoredPair("x", "y", 0.25, f"{other}:1")]


def test_sentences(tmp_path):
    path = write(tmp_path / "s.txt", "One, two.\n\n  Three  \n")
    assert detect_kind(path) == "sentences"
    assert read_sentences(path) == ["One, two.", "Three"]
    with pytest.raises(UserError, match="no sentences"):
        read_sentences(write(tmp_path / "blank.txt", "\n \n"))


def sick_like(tmp_path) -> Path:
    rows = [("P1", "e1", "entailment", 5.0), ("P1", "n1", "neutral", 3.0),
            ("P1", "c1", "contradiction", 1.0), ("P1", "e2", "entailment", 4.0),
            ("P1", "c2", "contradiction", 2.0), ("P1", "e3", "entailment", 4.6),
            ("P2", "e4", "entailment", 4.2), ("P3", "c3", "contradiction", 1.4),
            ("P2", "n2", "neutral", 3.0)]
    return jsonl(tmp_path / "nli.jsonl", [
        {"id": i, "premise": p, "hypothesis": h, "label": label, "relatedness": r}
        for i, (p, h, label, r) in enumerate(rows)])


def test_nli_entailments_are_positives_and_contradictions_hard_negatives(tmp_path):
    path = sick_like(tmp_path)
    assert detect_kind(path) == "nli"
    nli = read_nli(path)
    assert isinstance(nli, NliExamples)
    # P1's contradictions are handed round its entailments in turn
    assert [(t.anchor, t.positive, t.negative) for t in nli.triplets] == [
        ("P1", "e1", "c1"), ("P1", "e2", "c2"), ("P1", "e3", "c1")]
    assert nli.triplets[1].source == f"{path}:4"
    assert [(p.anchor, p.positive) for p in nli.pairs] == [("P2", "e4")]  # no contradiction
    assert len(nli.scored) == 9
    assert [s.score for s in nli.scored[:3]] == [1.0, 0.5, 0.0]  # 5, 3, 1 on 1..5


def test_nli_without_relatedness_has_no_scored_pairs(tmp_path):
    path = write(tmp_path / "nli.tsv", "premise\thypothesis\tlabel\nA\tB\tEntailment\n")
    nli = read_nli(path)
    assert nli.pairs == [Pair("A", "B", f"{path}:2")] and nli.scored == []


@pytest.mark.parametrize("name, text, message", [
    ("bad.tsv", "premise\thypothesis\tlabel\nA\tB\tmaybe\n", r"bad.tsv:2: label 'maybe'"),
    ("bad.jsonl", '{"premise": "A", "hypothesis": "B", "label": "neutral", "relatedness": 7}\n',
     r"bad.jsonl:1: relatedness 7 is outside the range 1..5"),
    ("bad.csv", "premise,hypothesis\nA,B\n", r"bad.csv:2: no column 'label'"),
])
def test_nli_errors_name_the_line(tmp_path, name, text, message):
    with pytest.raises(UserError, match=message):
        read_nli(write(tmp_path / name, text))


def test_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(UserError, match=r"p.jsonl:2: column 'positive' is int"):
        read_pairs(jsonl(tmp_path / "p.jsonl", [{"anchor": "a", "positive": "b"},
                                                {"anchor": "a", "positive": 3}]))
    with pytest.raises(UserError, match=r"q.csv:2: no column 'positive' \(columns: anchor, x\)"):
        read_pairs(write(tmp_path / "q.csv", "anchor,x\na,b\n"))
    with pytest.raises(UserError, match=r"s.csv:3: label 'high' is not a number"):
        read_scored_pairs(write(tmp_path / "s.csv", "sentence1,sentence2,score\na,b,1\nc,d,high\n"))
    with pytest.raises(UserError, match=r"r.csv:2: score 6 is outside the range 0..5"):
        read_scored_pairs(write(tmp_path / "r.csv", "sentence1,sentence2,score\na,b,6\n"),
                          score_range=(0, 5))
    with pytest.raises(UserError, match=r"u.csv:1: cannot tell what the file holds"):
        detect_kind(write(tmp_path / "u.csv", "question,answer\nq,a\n"))
    with pytest.raises(UserError, match="expected JSON lines, CSV or TSV"):
        detect_kind(write(tmp_path / "c.conll", "word\tO\n"))


def test_rows_with_an_empty_text_are_skipped_with_a_warning(tmp_path):
    path = write(tmp_path / "p.csv", "anchor,positive\na,b\n,c\nd, \ne,f\n")
    with pytest.warns(UserWarning, match=r"skipped 2 rows with an empty text \(first: .*p.csv:3"):
        pairs = read_pairs(path)
    assert [p.anchor for p in pairs] == ["a", "e"]
    with warnings.catch_warnings():  # nothing left: one error naming a line, no warning
        warnings.simplefilter("error")
        with pytest.raises(UserError, match=r"empty.csv:2: no examples: every row has an "
                                            r"empty text \(1 rows, this the first\)"):
            read_pairs(write(tmp_path / "empty.csv", "anchor,positive\n,c\n"))


def test_the_real_sick_files(shared_data):
    for split, rows in (("train", 6941), ("dev", 995)):
        path = shared_data / "nli" / f"sick.{split}.jsonl"
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert len(records) == rows
        nli = read_nli(path)
        entailed = sum(r["label"] == "entailment" for r in records)
        assert len(nli.triplets) + len(nli.pairs) == entailed
        contradicted = {r["premise"].strip() for r in records if r["label"] == "contradiction"}
        assert all(t.anchor in contradicted for t in nli.triplets)
        assert not any(p.anchor in contradicted for p in nli.pairs)
        assert len(nli.scored) == rows
        assert all(0.0 <= s.score <= 1.0 for s in nli.scored)
        assert nli.scored[0].score == pytest.approx((records[0]["relatedness"] - 1) / 4)
    train = read_nli(shared_data / "nli" / "sick.train.jsonl")
    assert (len(train.triplets), len(train.pairs)) == (349, 1628)


@pytest.mark.parametrize("task", ["rerank", "sparse", "embed"])
def test_a_triplet_file_of_empty_texts_is_one_line_before_any_training(task, tiny_bert,
                                                                       tmp_path, capsys):
    from bertkit.cli.main import main

    empty = tmp_path / "empty.jsonl"
    empty.write_text("".join(json.dumps(row) + "\n" for row in (
        {"anchor": "the film", "positive": "", "negative": "bad"},
        {"anchor": "  ", "positive": "good", "negative": "bad"},
        {"anchor": "a plot", "positive": "great", "negative": ""})))
    out = tmp_path / "never"
    assert main(["finetune", task, "--model", str(tiny_bert), "--train", str(empty),
                 "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"error: {empty}:1: no examples: every row has an empty text "
                            f"(3 rows, this the first)\n")
    assert captured.out == "" and not out.exists()
