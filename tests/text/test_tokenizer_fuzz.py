"""Property test of the tokenizer files: a mutated vocab.txt, tokenizer_config.json or
tokenizer.json loads as a working tokenizer or raises a one-line UserError naming the file;
nothing else escapes."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.text.tokenizer import SPECIAL_TOKENS, Tokenizer

WORDS = ["the", "river", "bank", "##s", "run", "##ning", "ran", ".", "é"]
VOCAB = ("\n".join(list(SPECIAL_TOKENS) + WORDS) + "\n").encode()
CONFIG = json.dumps({"do_lower_case": True, "strip_accents": None, "model_max_length": 64,
                     "tokenizer_class": "BertTokenizer"}).encode()


def _tokenizer_json(tmp) -> bytes:
    (tmp / "vocab.txt").write_bytes(VOCAB)
    return Tokenizer.from_vocab(tmp / "vocab.txt").save(tmp / "saved").joinpath(
        "tokenizer.json").read_bytes()


def _load_and_use(path):
    tokenizer = Tokenizer.load(path)
    enc = tokenizer.encode("the river banks ran", "running")
    assert enc.tokens[0] == "[CLS]" and len(enc.ids) == len(enc.type_ids)
    return tokenizer


@settings(max_examples=120, deadline=None, derandomize=True)
@given(which=st.sampled_from(["vocab.txt", "tokenizer_config.json", "tokenizer.json"]),
       data=st.data())
def test_mutated_tokenizer_files_load_or_fail_naming_the_file(fuzz, which, data):
    d = fuzz.dir / "tok"
    d.mkdir(exist_ok=True)
    if not (fuzz.dir / "tokenizer.json").exists():
        (fuzz.dir / "tokenizer.json").write_bytes(_tokenizer_json(fuzz.dir))
    valid = {"vocab.txt": VOCAB, "tokenizer_config.json": CONFIG,
             "tokenizer.json": (fuzz.dir / "tokenizer.json").read_bytes()}
    for name in ("vocab.txt", "tokenizer_config.json", "tokenizer.json"):
        (d / name).unlink(missing_ok=True)
    files = {"vocab.txt": ["vocab.txt"], "tokenizer_config.json": ["vocab.txt",
             "tokenizer_config.json"], "tokenizer.json": ["tokenizer.json"]}[which]
    for name in files:
        (d / name).write_bytes(fuzz.mutated(data, valid[name]) if name == which
                               else valid[name])
    fuzz.reads_or_names(_load_and_use, d, str(d))
