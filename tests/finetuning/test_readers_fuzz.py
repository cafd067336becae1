"""Property tests of the fine-tuning readers: random bytes and mutated valid files (truncated,
bytes flipped, delimiters and quotes dropped or doubled, JSON values of another type) either
read as valid data or raise a one-line UserError that names the file; nothing else escapes."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.finetuning import readers

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

VALID = {
    "a.csv": b'text,pair,label\nthe film,"was ""good""",pos\n"two\nlines",ok,neg\nbad,x,neg\n',
    "a.tsv": b"text\tlabel\nthe film\tpos\nso bad\tneg\n\"quoted\"\tpos\n",
    "a.jsonl": b'{"text": "the film", "label": "pos"}\n{"text": "bad", "label": ["neg", "x"]}\n'
               b'{"text": "ok", "label": "2|x"}\n',
    "a.conll": b"-DOCSTART- O\n\nEU\tB-ORG\nrejects\tO\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n",
    "a.conllu": b"# text = The cat\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
                b"2-3\tcat's\t_\t_\t_\t_\t_\t_\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_\n\n",
    "a.json": json.dumps({"version": "v2.0", "data": [{"title": "T", "paragraphs": [
        {"context": "Rollo led the Normans.", "qas": [
            {"id": "q1", "question": "Who led?", "answers": [{"text": "Rollo", "answer_start": 0}]},
            {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": "Normans", "answer_start": 14}]}]}]}]},
        indent=1).encode(),
}


def _check_text_examples(examples):
    for ex in examples:
        assert isinstance(ex.text, str) and ex.text.strip()
        assert ex.label is None or isinstance(ex.label, (str, list, float))
        assert ex.source.count(":") >= 1


def _check_tagged(sentences):
    for s in sentences:
        assert s.tokens and len(s.tokens) == len(s.tags) == len(s.lines)
        assert all(isinstance(t, str) and t for t in s.tags)


def _check_squad(examples):
    for ex in examples:
        assert isinstance(ex.question, str) and isinstance(ex.context, str)
        for a in ex.answers:
            assert ex.context[a.start:a.start + len(a.text)] == a.text


READERS = {
    "a.csv": (lambda p: readers.read_text_examples(p, pair_column="pair"), _check_text_examples),
    "a.tsv": (lambda p: readers.read_text_examples(p), _check_text_examples),
    "a.jsonl": (lambda p: readers.read_text_examples(p, label_kind="multi"),
                _check_text_examples),
    "a.conll": (readers.read_conll, _check_tagged),
    "a.conllu": (readers.read_conllu, _check_tagged),
    "a.json": (readers.read_squad, _check_squad),
}


@FUZZ
@given(name=st.sampled_from(sorted(VALID)), data=st.data())
def test_mutated_files_read_or_fail_naming_the_file(fuzz, name, data):
    path = fuzz.dir / name
    path.write_bytes(fuzz.mutated(data, VALID[name]))
    read, check = READERS[name]
    result = fuzz.reads_or_names(read, path)
    if result is not None:
        check(result)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(VALID)), data=st.data())
def test_sniffed_files_read_or_fail_naming_the_file(fuzz, name, data):
    """Without the extension: the format is told from the content, then read."""
    path = fuzz.dir / "sniffed.txt"
    path.write_bytes(fuzz.mutated(data, VALID[name]))

    def read(p):
        fmt = readers.detect_format(p)
        if fmt in ("conll", "conllu"):
            return readers.read_tagged(p)
        if fmt == "squad":
            return readers.read_squad(p)
        return readers.read_text_examples(p, label_column=None, fmt=fmt)

    fuzz.reads_or_names(read, path)


def test_the_valid_files_read(fuzz):
    for name, (read, check) in READERS.items():
        path = fuzz.dir / f"valid-{name}"
        path.write_bytes(VALID[name])
        check(read(path))
