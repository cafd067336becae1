"""bench/retrieval_sets.py on the real data (skipped without it): two BEIR directories that
evaluate reads, SICK's premises never their own passage's query, SQuAD's questions each with
their paragraph; and training triplets that `finetune` reads, none of whose anchors is a
development query, SQuAD's paragraphs never on both sides; and the pairs and passages that
`mine` reads, none of them a development query or its paragraph."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from bertkit.files import read_jsonl
from bertkit.finetuning.sentence_pairs import read_triplets
from bertkit.retrieval.beir import read_beir

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("retrieval_sets",
                                                  REPO / "bench" / "retrieval_sets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sets_are_read_as_beir_directories(shared_data, tmp_path, capsys):
    assert _script().main(["--data", str(shared_data), "--out", str(tmp_path)]) == 0
    sick, squad = read_beir(tmp_path / "sick"), read_beir(tmp_path / "squad")
    assert len(sick.queries.ids) == 277 and len(sick.corpus.ids) == 5904
    assert set(sick.queries.ids) <= set(sick.corpus.ids)  # a premise is a passage, same id
    at = sick.corpus.index()
    assert all(at[qid] not in judged for qid, judged in zip(sick.queries.ids, sick.qrels))
    assert len(squad.queries.ids) == 237 and len(squad.corpus.ids) == 3126
    assert all(len(judged) == 1 for judged in squad.qrels)
    paragraphs = [i for i, pid in enumerate(squad.corpus.ids) if pid.startswith("squad-")]
    assert len(paragraphs) == 126 and all(set(j) <= set(paragraphs) for j in squad.qrels)
    out = capsys.readouterr().out
    assert "5904 passages, 277 queries" in out and "312 SICK and 236 SQuAD triplets" in out

    triplets = read_triplets(tmp_path / "train-triplets.jsonl")
    assert len(triplets) == 312 + 236 and all(t.negative != t.positive for t in triplets)
    dev_queries = set(sick.queries.texts) | set(squad.queries.texts)
    assert not {t.anchor for t in triplets} & dev_queries
    judged = {squad.corpus.texts[i] for j in squad.qrels for i in j}
    from_squad = [t for t in triplets if t.positive in set(squad.corpus.texts)]
    assert len(from_squad) == 236 and not {t.positive for t in from_squad} & judged
    assert {t.negative for t in from_squad} <= set(squad.corpus.texts)
    squad_texts = set(squad.corpus.texts)
    first = [t.positive in squad_texts for t in triplets[:20]]  # shuffled: both in the first
    assert any(first) and not all(first)

    # what `mine` reads: every entailment of the training premises, the same questions
    pairs = [(r["anchor"], r["positive"]) for _, r in read_jsonl(tmp_path / "train-pairs.jsonl")]
    pool = {r["text"] for _, r in read_jsonl(tmp_path / "train-passages.jsonl")}
    assert len(pairs) == 2100 and "2100 pairs to mine negatives for among 8755 passages" in out
    assert not {a for a, _ in pairs} & dev_queries
    assert {p for _, p in pairs} <= pool and not pool & judged
    assert {(t.anchor, t.positive) for t in triplets} <= set(pairs)
