"""Property test of the sense-labelled JSON-lines reader: random bytes and mutated files read
as checked examples or raise a one-line UserError naming the file; nothing else escapes."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.senses.data import read_examples

ROWS = [{"lemma": "bank", "pos": "n", "synset": "bank.n.01", "sense_rank": 1, "gloss": "edge",
         "text": "We sat on the river bank.", "start": 20, "end": 24},
        {"lemma": "go", "synset": "go.v.01", "text": "She went home", "start": 4, "end": 8},
        {"lemma": "bank", "sense": "bank.n.02", "text": "The bank raised rates", "start": 4,
         "end": 8}]
VALID = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS).encode()


def test_the_valid_file_reads(fuzz):
    path = fuzz.dir / "valid-senses.jsonl"
    path.write_bytes(VALID)
    assert [e.target for e in read_examples(path)] == ["bank", "went", "bank"]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(labelled=st.booleans(), data=st.data())
def test_mutated_sense_files_read_or_fail_naming_the_file(fuzz, labelled, data):
    path = fuzz.dir / "senses.jsonl"
    path.write_bytes(fuzz.mutated(data, VALID))
    examples = fuzz.reads_or_names(lambda p: read_examples(p, labelled=labelled), path)
    for e in examples or []:
        assert e.target.strip() and (e.synset is not None or not labelled)
