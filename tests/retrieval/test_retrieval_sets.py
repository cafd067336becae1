"""bench/retrieval_sets.py on the real data (skipped without it): two BEIR directories that
evaluate reads, SICK's premises never their own passage's query, SQuAD's questions each with
their paragraph."""
from __future__ import annotations

import importlib.util
from pathlib import Path

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
    assert len(sick.queries.ids) == 1854 and len(sick.corpus.ids) == 5904
    assert set(sick.queries.ids) <= set(sick.corpus.ids)  # a premise is a passage, same id
    at = sick.corpus.index()
    assert all(at[qid] not in judged for qid, judged in zip(sick.queries.ids, sick.qrels))
    assert len(squad.queries.ids) == 473 and len(squad.corpus.ids) == 3126
    assert all(len(judged) == 1 for judged in squad.qrels)
    paragraphs = [i for i, pid in enumerate(squad.corpus.ids) if pid.startswith("squad-")]
    assert len(paragraphs) == 126 and all(set(j) <= set(paragraphs) for j in squad.qrels)
    assert "5904 passages, 1854 queries" in capsys.readouterr().out
