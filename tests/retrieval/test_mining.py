"""Hard-negative mining against plain loops over the full ranking: the model's candidates, BM25's
(bm25s' own retrieve), both merged, range and margin filtering; the output read by finetune
embed's reader; `bertkit mine` end to end on a tiny model; bad input one line, no file left."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.files import UserError
from bertkit.finetuning import sentence_pairs as sp
from bertkit.finetuning.tasks.embed import Embed
from bertkit.retrieval.mining import (Candidates, MiningSettings, choose, collection, merge, mine,
                                      read_training_pairs, write_triplets)
from tests.retrieval.conftest import sentences

REPO = Path(__file__).resolve().parents[2]


def _pairs(n: int, seed: int, shared: int = 3) -> list[sp.Pair]:
    """n pairs over distinct texts; the first `shared` anchors have a second positive."""
    texts = sentences(2 * n + shared, seed)
    pairs = [sp.Pair(texts[i], texts[n + i]) for i in range(n)]
    return pairs + [sp.Pair(texts[i], texts[2 * n + i]) for i in range(shared)]


def _unit(embedder, texts) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.from_numpy(embedder.encode(texts)), dim=1)


def _reference(pairs, passages, settings, ranking, score, positive_score):
    """A plain loop: per pair, the full `ranking(query)` of passage positions best first, the
    query and its positives left out, the first range_max, the margin and max-score filters,
    range_min skipped, num_negatives kept."""
    positives = {}
    for p in pairs:
        positives.setdefault(p.anchor, set()).add(p.positive)
    out = []
    for p in pairs:
        left = [d for d in ranking(p.anchor) if passages[d] not in positives[p.anchor]
                and passages[d] != p.anchor][:settings.range_max]
        if settings.margin is not None:
            left = [d for d in left
                    if score(p.anchor, d) + settings.margin <= positive_score(p)]
        if settings.max_score is not None:
            left = [d for d in left if score(p.anchor, d) <= settings.max_score]
        out.append(left[settings.range_min:settings.range_min + settings.num_negatives])
    return out


def _dense(embedder, passages):
    vectors = _unit(embedder, passages).double()

    def scores(query):
        return (_unit(embedder, [query]).double() @ vectors.T)[0]
    return scores


@pytest.mark.parametrize("settings", [
    MiningSettings(num_negatives=3, range_max=20, query_block=7, passage_block=11),
    MiningSettings(num_negatives=4, range_min=2, range_max=15, margin=0.05, query_block=5,
                   passage_block=23),
    MiningSettings(num_negatives=2, range_min=1, range_max=30, max_score=0.3, margin=0.0,
                   query_block=64, passage_block=9),
])
def test_dense_mining_equals_a_plain_loop_over_the_full_matrix(hash_embedder, settings):
    pairs = _pairs(40, 0)
    passages = collection(pairs) + sentences(30, 1)
    scores = _dense(hash_embedder, passages)
    unit = {t: v for t, v in zip(passages, _unit(hash_embedder, passages).double())}

    def positive(p):
        return float(_unit(hash_embedder, [p.anchor]).double()[0] @ unit[p.positive])

    want = _reference(pairs, passages, settings,
                      lambda q: scores(q).argsort(descending=True).tolist(),
                      lambda q, d: float(scores(q)[d]), positive)
    assert mine(pairs, passages, settings, hash_embedder, progress=False) == want
    assert sum(map(len, want)) >= 20  # the filters left something to compare


def test_bm25_mining_equals_bm25s_own_retrieve_and_both_merge_alternately(hash_embedder):
    import bm25s
    pairs = _pairs(30, 2)
    passages = collection(pairs) + sentences(25, 3)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False),
                    show_progress=False)

    def bm25_ranking(query):
        found, _ = retriever.retrieve(bm25s.tokenize([query], stopwords="en",
                                                     show_progress=False),
                                      k=len(passages), show_progress=False)
        return found[0].tolist()

    settings = MiningSettings(num_negatives=3, range_min=1, range_max=12, bm25=True)
    bm25 = _reference(pairs, passages, settings, bm25_ranking, None, None)
    assert mine(pairs, passages, settings, progress=False) == bm25
    scores = _dense(hash_embedder, passages)
    dense = _reference(pairs, passages, settings,
                       lambda q: scores(q).argsort(descending=True).tolist(), None, None)
    both = mine(pairs, passages, settings, hash_embedder, progress=False)
    assert both == [merge([d, b], 3) for d, b in zip(dense, bm25)]
    assert any(set(b) - set(d) for d, b in zip(both, dense))  # BM25 brought its own


def test_a_query_with_many_positives_is_searched_past_them_all(hash_embedder):
    """Queries are searched in groups as deep as each needs: one anchor with nine positives
    (left out: each query must be searched nine deeper) beside anchors with one or two, and
    an anchor that is itself a passage."""
    pairs = _pairs(30, 4)
    crowded, words = sentences(1, 5)[0], sentences(9, 6)
    # its positives: the anchor and one more sentence, which both retrievers rank first
    pairs += [sp.Pair(crowded, f"{crowded} {more}") for more in words]
    pairs.append(sp.Pair(pairs[0].positive, pairs[1].positive))  # an anchor among the passages
    passages = collection(pairs) + sentences(20, 7)
    settings = MiningSettings(num_negatives=3, range_max=4, bm25=True)
    scores = _dense(hash_embedder, passages)
    dense = _reference(pairs, passages, settings,
                       lambda q: scores(q).argsort(descending=True).tolist(), None, None)
    import bm25s
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False),
                    show_progress=False)
    bm25 = _reference(pairs, passages, settings, lambda q: retriever.retrieve(
        bm25s.tokenize([q], stopwords="en", show_progress=False), k=len(passages),
        show_progress=False)[0][0].tolist(), None, None)
    assert mine(pairs, passages, settings, hash_embedder, progress=False) == \
        [merge([d, b], 3) for d, b in zip(dense, bm25)]
    assert all(len(n) == 3 for n in dense)  # the crowded query's too, past its nine


def test_choose_filters_as_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    indices = torch.randint(0, 50, (200, 12), generator=g)
    indices[torch.rand(200, 12, generator=g) < 0.1] = -1
    scores = torch.rand(200, 12, generator=g)
    positive = torch.rand(200, generator=g)
    settings = MiningSettings(num_negatives=3, range_min=2, range_max=12, margin=0.1,
                              max_score=0.8)
    take = choose(Candidates(indices, scores), positive, settings)
    for row in range(200):
        kept = [c for c in range(12) if indices[row, c] >= 0
                and scores[row, c] + 0.1 <= positive[row] and scores[row, c] <= 0.8][2:5]
        assert torch.nonzero(take[row]).flatten().tolist() == kept


def test_merge_alternates_and_counts_a_passage_once():
    assert merge([[1, 2, 3], [2, 4, 5]], 4) == [1, 2, 4, 3]
    assert merge([[], [7, 8]], 3) == [7, 8]
    assert merge([[1, 2], [2, 1]], 5) == [1, 2]


def test_the_output_is_the_triplets_finetune_embed_reads(tmp_path, hash_embedder):
    pairs = _pairs(20, 4)
    passages = collection(pairs)
    negatives = mine(pairs, passages, MiningSettings(num_negatives=2), hash_embedder,
                     progress=False)
    rows = write_triplets(tmp_path / "mined.jsonl", pairs, negatives, passages)
    assert rows == 2 * len(pairs)
    assert sp.detect_kind(tmp_path / "mined.jsonl") == "triplets"
    triplets = sp.read_triplets(tmp_path / "mined.jsonl")
    assert [(t.anchor, t.positive) for t in triplets] == [
        (p.anchor, p.positive) for p in pairs for _ in range(2)]
    positives = {p.anchor: {q.positive for q in pairs if q.anchor == p.anchor} for p in pairs}
    assert all(t.negative not in positives[t.anchor] for t in triplets)
    examples = Embed().read(tmp_path / "mined.jsonl")
    assert all(len(ex.texts) == 3 and ex.train for ex in examples)


def test_a_failed_write_leaves_no_file(tmp_path):
    pairs = _pairs(4, 5, shared=0)
    with pytest.raises(IndexError):
        write_triplets(tmp_path / "out.jsonl", pairs, [[0], [1], [99], [2]], ["a", "b", "c"])
    assert list(tmp_path.iterdir()) == []


def test_read_training_pairs_takes_pairs_triplets_and_queries(tmp_path):
    """Pairs as anchor or query with positive, triplets, queries with relevant passages."""
    (tmp_path / "q.jsonl").write_text(json.dumps({"query": "a", "relevant": ["b", "c"]}) + "\n")
    assert [(p.anchor, p.positive) for p in read_training_pairs(tmp_path / "q.jsonl")] == [
        ("a", "b"), ("a", "c")]
    (tmp_path / "t.csv").write_text("anchor,positive,negative\nx,y,z\n")
    assert [(p.anchor, p.positive) for p in read_training_pairs(tmp_path / "t.csv")] == [
        ("x", "y")]
    (tmp_path / "p.jsonl").write_text(json.dumps({"query": "a", "positive": "b"}) + "\n")
    assert [(p.anchor, p.positive) for p in read_training_pairs(tmp_path / "p.jsonl")] == [
        ("a", "b")]
    (tmp_path / "s.csv").write_text("sentence1,sentence2,score\nx,y,1\n")
    with pytest.raises(UserError, match="this file holds scored"):
        read_training_pairs(tmp_path / "s.csv")


def _write_pairs(path, pairs):
    path.write_text("".join(json.dumps({"anchor": p.anchor, "positive": p.positive}) + "\n"
                            for p in pairs))
    return path


def test_cli_mines_with_a_tiny_model_and_bm25(tmp_path, capsys, tiny_sentence_model):
    pairs = _pairs(25, 6)
    source = _write_pairs(tmp_path / "pairs.jsonl", pairs)
    extra = sentences(40, 7)
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(extra)))
    out = tmp_path / "mined.jsonl"
    assert cli.main(["mine", "--input", str(source), "--passages", str(tmp_path / "corpus.jsonl"),
                     "--model", str(tiny_sentence_model), "--bm25", "--num-negatives", "2",
                     "--range-max", "10", "--device", "cpu", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"{out}: {2 * len(pairs)} triplets for {len(pairs)} pairs from 40 passages" \
        in captured.out
    assert "search:" in captured.err and "bm25:" in captured.err  # progress
    triplets = sp.read_triplets(out)
    assert len(triplets) == 2 * len(pairs) and {t.negative for t in triplets} <= set(extra)
    assert cli.main(["mine", "--input", str(source), "--model", str(tiny_sentence_model),
                     "--device", "cpu", "--quiet", "--out", str(out)]) == 0
    assert {t.negative for t in sp.read_triplets(out)} <= {p.positive for p in pairs}
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("case,message", [
    ("duplicate", r"corpus.jsonl:2: duplicate id 'd0', first at .*corpus.jsonl:1"),
    ("empty", r"pairs.jsonl: .*empty"),
    ("neither", r"give --model \(a sentence model\), --bm25, or both"),
    ("margin", "--margin and --max-score compare the model's cosines"),
    ("range", "--range-min 5 must be at least 0 and below --range-max 5"),
    ("filtered", "no pair has a negative left"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case, message):
    source = _write_pairs(tmp_path / "pairs.jsonl", _pairs(5, 8))
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d0", "text": "a"}\n'
                                           '{"_id": "d0", "text": "b"}\n')
    args = ["mine", "--input", str(source), "--out", str(tmp_path / "out.jsonl"), "--bm25",
            "--quiet"]
    if case == "duplicate":
        args += ["--passages", str(tmp_path / "corpus.jsonl")]
    elif case == "empty":
        source.write_text("")
    elif case == "neither":
        args.remove("--bm25")
    elif case == "margin":
        args += ["--margin", "0.1"]
    elif case == "range":
        args += ["--range-min", "5", "--range-max", "5"]
    elif case == "filtered":
        args += ["--range-min", "49"]  # 11 passages: no candidate that far down
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "out.jsonl").exists()


def test_the_device_reaches_the_model_after_the_inputs_are_read(tmp_path, capsys, monkeypatch):
    import bertkit.embeddings.embedder

    def load(path, device="cpu", **kwargs):
        raise UserError(f"reached device={device}")

    monkeypatch.setattr(bertkit.embeddings.embedder.Embedder, "load", load)
    source = _write_pairs(tmp_path / "pairs.jsonl", _pairs(3, 9))
    args = ["mine", "--input", str(source), "--model", "m", "--out", str(tmp_path / "o.jsonl")]
    assert cli.main([*args, "--device", "cpu:0"]) == 2
    assert capsys.readouterr().err.strip() == "error: reached device=cpu:0"
    assert cli.main([*args[:2], str(tmp_path / "none.jsonl"), *args[3:]]) == 2
    assert "none.jsonl: input file does not exist" in capsys.readouterr().err


_KILLED_WRITING = """
import json, os, signal, sys
import bertkit.retrieval.mining as mining
rows = []
def dumps(obj, **kwargs):
    rows.append(obj)
    if len(rows) == 3:  # two rows written, the third on its way
        os.kill(os.getpid(), signal.SIGKILL)
    return json.dumps(obj, **kwargs)
mining.json = type("json", (), {"dumps": staticmethod(dumps)})
from bertkit.cli.main import main
main(sys.argv[1:])
"""


def test_a_run_killed_while_writing_leaves_the_previous_output_whole(tmp_path):
    source = _write_pairs(tmp_path / "pairs.jsonl", _pairs(10, 10))
    out = tmp_path / "mined.jsonl"
    out.write_text("the previous output\n")
    args = ["mine", "--input", str(source), "--bm25", "--quiet", "--out", str(out)]
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITING, *args], cwd=REPO)
    assert killed.returncode == -9
    assert out.read_text() == "the previous output\n"
    assert len(list(tmp_path.iterdir())) == 3  # and a hidden temporary, swept by the next run
    assert subprocess.run([sys.executable, "-m", "bertkit.cli", *args], cwd=REPO,
                          capture_output=True).returncode == 0
    assert len(sp.read_triplets(out)) == 3 * 13  # 10 pairs and 3 second positives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mined.jsonl", "pairs.jsonl"]
