"""Property tests of the sentence-embedding readers: mutated valid files (and random bytes)
either read as valid records or raise a one-line UserError that names the file."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.finetuning import sentence_pairs as sp

FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

VALID = {
    "p.csv": b'anchor,positive\n"a ""quoted"" one",b\n"two\nlines",c\n',
    "t.tsv": b"anchor\tpositive\tnegative\nq\tyes\tno\nr\tsure\tnever\n",
    "s.csv": b"sentence1,sentence2,score\na,b,4.5\nc,d,0\n",
    "n.jsonl": b'{"premise": "P", "hypothesis": "E", "label": "entailment", "relatedness": 4.5}\n'
               b'{"premise": "P", "hypothesis": "C", "label": "contradiction", "relatedness": 1}\n',
    "x.txt": b"One sentence.\n\nAnother, with a comma.\n",
}


def _texts(records, fields):
    for r in records:
        for name in fields:
            value = getattr(r, name)
            assert isinstance(value, str) and value.strip() == value and value
        assert r.source.count(":") >= 1


def _nli(examples):
    _texts(examples.triplets, ("anchor", "positive", "negative"))
    _texts(examples.pairs, ("anchor", "positive"))
    assert all(0 <= s.score <= 1 for s in examples.scored)


READERS = {
    "p.csv": (sp.read_pairs, lambda r: _texts(r, ("anchor", "positive"))),
    "t.tsv": (sp.read_triplets, lambda r: _texts(r, ("anchor", "positive", "negative"))),
    "s.csv": (lambda p: sp.read_scored_pairs(p, score_range=(0, 5)),
              lambda r: _texts(r, ("text_a", "text_b"))),
    "n.jsonl": (sp.read_nli, _nli),
    "x.txt": (sp.read_sentences, lambda r: all(isinstance(s, str) and s for s in r)),
}


@FUZZ
@given(name=st.sampled_from(sorted(VALID)), data=st.data())
def test_mutated_files_read_or_fail_naming_the_file(fuzz, name, data):
    path = fuzz.dir / f"embed-{name}"
    path.write_bytes(fuzz.mutated(data, VALID[name]))
    read, check = READERS[name]
    result = fuzz.reads_or_names(read, path)
    if result is not None:
        check(result)
    fuzz.reads_or_names(sp.detect_kind, path)


def test_the_valid_files_read(fuzz):
    for name, (read, check) in READERS.items():
        path = fuzz.dir / f"embed-valid-{name}"
        path.write_bytes(VALID[name])
        check(read(path))
        assert sp.detect_kind(path) == {"p": "pairs", "t": "triplets", "s": "scored",
                                        "n": "nli", "x": "sentences"}[name[0]]
