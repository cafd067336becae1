"""Property test of `prepare`'s text reading: a mutated plain-text, JSON-lines, CSV or TSV
corpus gives shards or a one-line UserError naming the file, and then leaves no output behind."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.pretraining.corpus import prepare
from synthetic_corpus import make_tokenizer

VALID = {
    "c.txt": "Kalo mine su. Tari po!\nDean elor.\n\nAnel kaka. Ritasu ne.\n".encode(),
    "c.jsonl": "".join(json.dumps(r) + "\n" for r in [
        {"text": "Kalo mine su. Tari po!\nDean elor."}, {"text": "Anel kaka.", "id": 2},
        {"text": "Ritasu ne. Mimi lolo."}]).encode(),
    "c.csv": ('id,text\n1,"Kalo mine su. Tari po!\nDean elor."\n2,"Anel ""kaka"", ne."\n'
              '3,Ritasu ne. Mimi lolo.\n').encode(),
    "c.tsv": 'text\tid\n"Kalo mine su.\tTari po!"\t1\nAnel kaka.\t2\n'.encode(),
}


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(VALID)), data=st.data())
def test_mutated_corpora_prepare_or_fail_naming_the_file(fuzz, tok_dir, name, data):
    corpus, out = fuzz.dir / name, fuzz.dir / "data"
    shutil.rmtree(out, ignore_errors=True)
    corpus.write_bytes(fuzz.mutated(data, VALID[name]))
    manifest = fuzz.reads_or_names(
        lambda p: prepare([p], tok_dir, out, workers=1, heldout_fraction=0.0, progress=False),
        corpus)
    if manifest is None:
        assert not out.exists()  # nothing half-written
    else:
        assert manifest["train"]["tokens"] > 0
