"""Readers of fine-tuning data: every bad-input case on small files, and the real data when it
is there."""
from __future__ import annotations

import json
import re
import warnings

import pytest

from bertkit.cli.main import main
from bertkit.finetuning import readers
from bertkit.files import UserError


def _write(tmp_path, name, text: str | bytes):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return p


# --------------------------------------------------------------------------------------------
# classification / pair / regression
# --------------------------------------------------------------------------------------------

def test_formats_are_recognised(tmp_path):
    cases = {
        "a.jsonl": '{"text": "x", "label": "y"}\n',
        "a.csv": "text,label\nx,y\n",
        "a.tsv": "text\tlabel\nx\ty\n",
        "a.conll": "x\tO\n",
        "a.conllu": "1\tx\tx\tNOUN\tNN\t_\t0\troot\t_\t_\n",
        "b.json": '{"text": "x", "label": "y"}\n{"text": "z", "label": "y"}\n',
        "squad.json": '{"version": "v2.0", "data": []}',
        "pretty.json": '{\n  "data": []\n}\n',
        "c.txt": "text\tlabel\ngood film\tpositive\n",
        "d.txt": "text,label\ngood film,positive\n",
        "e.txt": "Paris\tB-LOC\nis\tO\n\nHi\tO\n",
        "f.txt": "# sent_id = 1\n1\tx\tx\tNOUN\tNN\t_\t0\troot\t_\t_\n",
    }
    expected = ["jsonl", "csv", "tsv", "conll", "conllu", "jsonl", "squad", "squad", "tsv",
                "csv", "conll", "conllu"]
    for (name, text), want in zip(cases.items(), expected):
        assert readers.detect_format(_write(tmp_path, name, text)) == want, name


def test_a_header_that_names_the_text_with_semicolons_or_pipes_is_csv(tmp_path):
    """A .txt (or nameless) file whose header names the text column only when cut at ';' or
    '|' is CSV, read with that delimiter (`sources.find_delimiter`'s strict rule); a file that
    read before reads as it did, and one whose header names no text column is no CSV."""
    from bertkit.finetuning.task import columns_of

    rows = [("A fine film, really", "positive"), ("Say no", "negative")]
    for name, d in (("semi.txt", ";"), ("pipe.txt", "|"), ("semi", ";")):
        path = _write(tmp_path, name, f"text{d}label\n" + "".join(f"{t}{d}{y}\n"
                                                                  for t, y in rows))
        assert readers.detect_format(path) == "csv", name
        assert columns_of(path) == ["text", "label"], name
        assert [(e.text, e.label) for e in readers.read_text_examples(path)] == rows, name
    # short rows that look like CoNLL: its reader refuses the header, the CSV reader reads them
    short = _write(tmp_path, "short.txt", "sentence;label\n" + "great film;pos\n" * 30)
    assert readers.detect_format(short) == "csv"
    assert readers.read_text_examples(short, text_column="sentence")[0].text == "great film"
    # a column named on the command line counts as the defaults do
    named = _write(tmp_path, "named.txt", "review;stars\nfine film;5\nbad one;1\n")
    with pytest.raises(UserError, match="cannot tell the format"):
        readers.detect_format(named)
    assert [e.label for e in readers.read_text_examples(named, text_column="review",
                                                        label_column="stars")] == ["5", "1"]
    # no text column named: as before, whatever the semicolons
    for name, text in (("prose.txt", "I came; I saw; I left the text and the label there.\n"),
                       ("other.txt", "id;score\n1;2\n")):
        with pytest.raises(UserError, match="cannot tell the format"):
            readers.detect_format(_write(tmp_path, name, text))
    # CoNLL whose tokens hold semicolons, and a comma CSV with ';' in its header, as before
    conll = _write(tmp_path, "c.txt", "text;label\tO\nis\tO\n")
    assert readers.detect_format(conll) == "conll"
    mixed = _write(tmp_path, "m.txt", "text,label;x\nfine,y\n")
    assert readers.detect_format(mixed) == "csv"
    assert readers.read_text_examples(mixed, label_column="label;x")[0].text == "fine"


def test_jsonl_csv_tsv_give_the_same_examples(tmp_path):
    rows = [("A fine film, really", "It is", "positive"), ('Say "no"', "x", "negative")]
    jl = "".join(json.dumps({"t": t, "p": p, "y": y}) + "\n" for t, p, y in rows)
    csv_text = 't,p,y\n"A fine film, really",It is,positive\n"Say ""no""",x,negative\n'
    tsv_text = "t\tp\ty\n" + "".join(f"{t}\t{p}\t{y}\n" for t, p, y in rows)
    excel = 't;p;y\nA fine film, really;It is;positive\n"Say ""no""";x;negative\n'  # Excel's ';'
    for name, text in (("d.jsonl", jl), ("d.csv", csv_text), ("d.tsv", tsv_text),
                       ("e.csv", excel)):
        ex = readers.read_text_examples(_write(tmp_path, name, text), text_column="t",
                                      pair_column="p", label_column="y")
        assert [(e.text, e.pair, e.label) for e in ex] == rows, name
        assert ex[1].source.endswith(f"{name}:3" if name != "d.jsonl" else f"{name}:2")


@pytest.mark.parametrize("compress", ["gzip", "bz2"])
def test_compressed_files_read_as_what_they_hold(tmp_path, compress):
    """Every reader opens a compressed file as the text inside (by its first bytes); the
    extension before .gz/.bz2 still names the format, and the lines keep their numbers."""
    import bz2
    import gzip

    pack = gzip.compress if compress == "gzip" else bz2.compress
    suffix = ".gz" if compress == "gzip" else ".bz2"
    rows = '{"text": "a fine film", "label": "positive"}\n\n{"text": "dull", "label": "negative"}\n'
    plain = readers.read_text_examples(_write(tmp_path, "d.jsonl", rows))
    packed = _write(tmp_path, "d.jsonl" + suffix, pack(rows.encode()))
    assert readers.detect_format(packed) == "jsonl"
    got = readers.read_text_examples(packed)
    assert [(e.text, e.label) for e in got] == [(e.text, e.label) for e in plain]
    assert got[1].source.endswith(f"d.jsonl{suffix}:3")
    conll = _write(tmp_path, "t.conll" + suffix, pack(b"Paris\tB-LOC\nis\tO\n\n"))
    assert readers.detect_format(conll) == "conll"
    squad = _write(tmp_path, "s.json" + suffix, pack(_squad(
        [{"id": "q1", "question": "Where?", "answers": [{"text": "France",
                                                          "answer_start": 24}]}]).encode()))
    assert [e.id for e in readers.read_squad(squad)] == ["q1"]
    from bertkit.finetuning.task import text_lines
    assert text_lines(_write(tmp_path, "t.txt" + suffix, pack(b"one\n\ntwo\n"))) == (
        ["one", "two"], [f"{tmp_path}/t.txt{suffix}:1", f"{tmp_path}/t.txt{suffix}:3"])
    cut = _write(tmp_path, "cut.jsonl" + suffix, pack(rows.encode() * 50)[:-20])
    with pytest.raises(UserError, match=rf"cut.jsonl{suffix}:\d+: corrupt (gzip|bzip2) data"):
        readers.read_text_examples(cut)


def test_label_kinds(tmp_path):
    p = _write(tmp_path, "r.jsonl", '{"text": "a", "score": "3.5"}\n{"text": "b", "score": 2}\n')
    assert [e.label for e in readers.read_text_examples(p, label_column="score",
                                                      label_kind="float")] == [3.5, 2.0]
    p = _write(tmp_path, "m.jsonl", '{"text": "a", "label": ["x", "y"]}\n'
                                    '{"text": "b", "label": "y|z"}\n{"text": "c", "label": []}\n')
    ex = readers.read_text_examples(p, label_kind="multi")
    assert [e.label for e in ex] == [["x", "y"], ["y", "z"], []]
    assert readers.collect_labels(ex) == ["x", "y", "z"]
    p = _write(tmp_path, "i.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    assert readers.collect_labels(readers.read_text_examples(p)) == ["0", "1"]
    # texts only, for prediction
    p = _write(tmp_path, "t.jsonl", '{"text": "a"}\n')
    assert readers.read_text_examples(p, label_column=None)[0].label is None


def test_a_csv_cell_may_be_longer_than_csv_allows_by_default(tmp_path):
    """A long document to classify (csv's own limit is 131,072 characters): read as the corpus
    reader reads it (`bertkit.text.sources.csv_rows`), not 'field larger than field limit'."""
    long = "word " * 40_000
    p = _write(tmp_path, "long.csv", f'text,label\n"{long}",pos\nshort,neg\n')
    assert [(e.text, e.label) for e in readers.read_text_examples(p)] == [(long, "pos"),
                                                                         ("short", "neg")]


@pytest.mark.parametrize("name, text, message", [
    ("a.jsonl", '{"text": "x", "label": "y"}\n{"text": "z"}\n', "a.jsonl:2: no column 'label'"),
    ("b.csv", "text,score\nx,1\n", "b.csv:2: no column 'label' (columns: text, score)"),
    ("c.jsonl", '{"text": "x", "label": null}\n', "c.jsonl:1: no label"),
    ("d.jsonl", '{"text": 3, "label": "y"}\n', "d.jsonl:1: column 'text' is int"),
    ("e.csv", "text,label\nx,y\nx,y,z\n", "e.csv:3: 3 fields but the header"),
    ("f.jsonl", '{"text": "x", "label": "y"}\n{"text": \n', "f.jsonl:2: not valid JSON"),
    ("g.jsonl", b'{"text": "caf\xe9", "label": "y"}\n', "g.jsonl:1: not UTF-8"),
    ("h.csv", "text,label\nx,\n", "h.csv:2: empty label"),
    ("k.jsonl", '{"text": "x", "label": 0.5}\n', "k.jsonl:1: label 0.5 is not a class name "
                                                "(for numeric targets use the regress task)"),
    ("i.jsonl", '{"text": "  ", "label": "y"}\n', "i.jsonl: no examples"),
    ("j.jsonl", "", "j.jsonl: input file is empty"),
    # a quote left open swallows the rows after it: caught at the line that opened it
    ("l.csv", 'text,label\nhi,"pos\nbye,neg\n', 'l.csv:2: a quote opened in this row is '
                                                  'never closed'),
    ("m.tsv", 'text\tlabel\n"hi\tpos\nbye\tneg\n', "m.tsv:2: a quote opened in this row"),
    ("n.csv", 'text,label\n"hi"x,pos\n', "n.csv:2: text after the closing quote of a field"),
    # ... or closed again by a later stray quote: the label then spans lines
    ("o.csv", 'text,label\nhi,"pos\nbye,neg\nok,x"\n', "o.csv:2: column 'label' spans "
                                                       "several lines"),
    ("p.jsonl", '["x", "y"]\n', "p.jsonl:1: expected a JSON object, got list"),
    ("q.jsonl", '{"text": "x", "label": true}\n', "q.jsonl:1: label True is not a class name"),
    ("r.jsonl", '{"text": "x", "label": {"a": 1}}\n', "r.jsonl:1: label {'a': 1} is not a "),
    ("s.csv", b"text,label\nfine,a\nK\xf6ln,b\n", "s.csv:3: not UTF-8 text"),
])
def test_bad_classification_input(tmp_path, name, text, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            readers.read_text_examples(_write(tmp_path, name, text))


def test_bad_regression_value_and_missing_pair(tmp_path):
    p = _write(tmp_path, "r.tsv", "text\tscore\nok\t2\nbad\thigh\n")
    with pytest.raises(UserError, match=r"r.tsv:3: label 'high' is not a number"):
        readers.read_text_examples(p, label_column="score", label_kind="float")
    p = _write(tmp_path, "p.jsonl", '{"premise": "a", "label": "x"}\n')
    with pytest.raises(UserError, match=r"p.jsonl:1: no column 'hypothesis'"):
        readers.read_text_examples(p, text_column="premise", pair_column="hypothesis")


def test_empty_texts_are_skipped_with_a_count(tmp_path):
    p = _write(tmp_path, "s.csv", "text,label\nfine,a\n,b\n   ,a\nok,b\n")
    with pytest.warns(UserWarning,
                      match=r"skipped 2 examples with empty text \(first: .*s.csv:3\)"):
        ex = readers.read_text_examples(p)
    assert [e.text for e in ex] == ["fine", "ok"]


def test_unknown_dev_label_names_the_line(tmp_path):
    train = readers.read_text_examples(_write(tmp_path, "t.jsonl", '{"text": "a", "label": "x"}\n'
                                                                  '{"text": "b", "label": "y"}\n'))
    dev = readers.read_text_examples(_write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n'
                                                                '{"text": "b", "label": "z"}\n'))
    labels = readers.collect_labels(train)
    readers.check_labels(train, labels)
    with pytest.raises(UserError, match=r"d.jsonl:2: unknown label 'z' \(the training labels "
                                        r"are: x, y\)"):
        readers.check_labels(dev, labels)


# --------------------------------------------------------------------------------------------
# CoNLL and CoNLL-U
# --------------------------------------------------------------------------------------------

CONLL = """-DOCSTART- -X- O O

EU\tB-ORG
rejects\tO
German\tB-MISC
#call\tO


Peter NNP B-PER
Blackburn NNP I-PER
"""


def test_conll_reader(tmp_path):
    s = readers.read_conll(_write(tmp_path, "a.conll", CONLL))
    assert [x.tokens for x in s] == [["EU", "rejects", "German", "#call"], ["Peter", "Blackburn"]]
    assert [x.tags for x in s] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    assert s[0].text == "EU rejects German #call" and s[1].lines == [9, 10]
    assert s[1].source.endswith("a.conll:9")
    labels = readers.tagging_labels(s)
    assert labels[0] == "O" and "I-ORG" in labels
    readers.check_tags(s, labels)


@pytest.mark.parametrize("text, message", [
    ("EU\tB-ORG\nrejects\nGerman\tO\n", "a.conll:2: token 'rejects' has no tag"),
    ("EU\tB-ORG\nrejects\t\n", "a.conll:2: token 'rejects' has no tag"),
    ("\n\n-DOCSTART-\tO\n\n", "a.conll: no sentences"),
    (b"EU\tB-ORG\nK\xf6ln\tB-LOC\n", "a.conll:2: not UTF-8"),
    # an extra column would be learned as the tag
    ("EU\tB-ORG\nrejects\tO\textra\n", "a.conll:2: 3 columns but line 1 has 2"),
    ("EU NNP B-ORG\nrejects O\n\nx NN O\n", "a.conll:2: 2 columns but line 1 has 3"),
])
def test_bad_conll(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        readers.read_conll(_write(tmp_path, "a.conll", text))


def test_untagged_line_in_a_sniffed_conll_file(tmp_path):
    lines = "".join(f"w{i}\tO\n" for i in range(30)) + "lonely\n" + "x\tB-PER\n"
    with pytest.raises(UserError, match=r"a.txt:31: token 'lonely' has no tag"):
        readers.read_tagged(_write(tmp_path, "a.txt", lines))


def test_unknown_dev_tag_names_its_line(tmp_path):
    train = readers.read_conll(_write(tmp_path, "t.conll", "EU\tB-ORG\nsays\tO\n"))
    dev = readers.read_conll(_write(tmp_path, "d.conll", "EU\tI-ORG\n\nBob\tO\nsays\tB-PER\n"))
    labels = readers.tagging_labels(train)
    with pytest.raises(UserError, match=r"d.conll:4: unknown label 'B-PER'"):
        readers.check_tags(dev, labels)


def test_json_lines_of_tokens_and_tags_read_as_conll_does(tmp_path):
    rows = [{"id": "0", "tokens": ["EU", "rejects", "German", "#call"],
             "ner_tags": ["B-ORG", "O", "B-MISC", "O"]},
            {"tokens": [], "ner_tags": []},  # an empty sentence, as datasets may hold
            {"tokens": ["Peter", "Blackburn"], "ner_tags": ["B-PER", "I-PER"]}]
    path = _write(tmp_path, "a.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    from_json = readers.read_tagged(path)
    from_conll = readers.read_conll(_write(tmp_path, "a.conll", CONLL))
    assert [(x.tokens, x.tags, x.text) for x in from_json] == \
        [(x.tokens, x.tags, x.text) for x in from_conll]
    assert from_json[1].source == f"{path}:3" and from_json[1].lines == [3, 3]
    labels = readers.tagging_labels(from_json)
    dev = readers.read_tagged(_write(tmp_path, "d.jsonl", '{"tokens": ["Bob"], "tags": ["B-XX"]}\n'))
    with pytest.raises(UserError, match=r"d.jsonl:1: unknown label 'B-XX'"):
        readers.check_tags(dev, labels)


@pytest.mark.parametrize("row, message", [
    ({"tokens": ["a", "b"], "ner_tags": [3, 0]},
     r"a.jsonl:1: \"ner_tags\" holds numbers: write each tag's name"),
    ({"tokens": ["a", "b"], "tags": ["O"]}, r"a.jsonl:1: \"tags\" must be a list of one tag"),
    ({"tokens": ["a", ""], "tags": ["O", "O"]}, r"a.jsonl:1: every token must be a non-empty"),
    ({"text": "a b", "label": "pos"}, r"a.jsonl:1: a tagged JSON line has \"tokens\""),
])
def test_bad_json_lines_of_tags(tmp_path, row, message):
    with pytest.raises(UserError, match=message):
        readers.read_tagged(_write(tmp_path, "a.jsonl", json.dumps(row) + "\n"))


CONLLU = """# sent_id = 1
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
3.1\tknow\tknow\tVERB\t_\t_\t_\t_\t_\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def test_conllu_reader(tmp_path):
    p = _write(tmp_path, "a.conllu", CONLLU)
    s = readers.read_conllu(p)
    assert s[0].tokens == ["I", "do", "n't", "know", "."]
    assert s[0].tags == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert s[0].text == "I don't know." and s[1].text == "Hi"
    assert readers.read_conllu(p, "xpos")[0].tags == ["PRP", "VBP", "RB", "VB", "."]
    assert readers.read_tagged(p, "XPOS")[1].tags == ["UH"]
    assert s[0].lines == [3, 5, 6, 8, 9]


def test_bad_conllu(tmp_path):
    with pytest.raises(UserError, match=r"a.conllu:2: 3 tab-separated columns"):
        readers.read_conllu(_write(tmp_path, "a.conllu", "# x\n1\tI\tI\n"))
    no_xpos = CONLLU.replace("\tPRP\t", "\t_\t")
    with pytest.raises(UserError, match=r"b.conllu:3: word 'I' has no XPOS tag"):
        readers.read_conllu(_write(tmp_path, "b.conllu", no_xpos), "xpos")
    with pytest.raises(UserError, match="unknown CoNLL-U column"):
        readers.read_conllu(_write(tmp_path, "c.conllu", CONLLU), "deprel")
    # an empty sentence: comments, no words -> skipped with a count
    p = _write(tmp_path, "d.conllu", "# sent_id = 0\n# text = \n\n" + CONLLU)
    with pytest.warns(UserWarning, match=r"skipped 1 empty sentences .*d.conllu:1"):
        assert len(readers.read_conllu(p)) == 2
    with pytest.raises(UserError, match=r"e.jsonl:1: a tagged JSON line .* \(or give CoNLL"):
        readers.read_tagged(_write(tmp_path, "e.jsonl", '{"text": "x"}\n'))


# --------------------------------------------------------------------------------------------
# SQuAD
# --------------------------------------------------------------------------------------------

def _squad(qas, context="Normandy is a region in France. Rollo led the Normans."):
    return json.dumps({"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [
        {"context": context, "qas": qas}]}]}, indent=1)


def test_squad_reader(tmp_path):
    qas = [
        {"id": "q1", "question": "Where is Normandy?",
         "answers": [{"text": "France", "answer_start": 24},
                     {"text": "in France", "answer_start": 21}]},
        {"id": "q2", "question": "Who led the Danes?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Rollo", "answer_start": 32}]},
        {"id": "q3", "question": "Who led?", "answers": [{"text": "Rollo", "answer_start": 32}]},
    ]
    ex = readers.read_squad(_write(tmp_path, "s.json", _squad(qas)))
    assert [e.id for e in ex] == ["q1", "q2", "q3"]
    assert ex[0].answers == [readers.Answer("France", 24), readers.Answer("in France", 21)]
    assert ex[1].is_impossible and ex[1].answers == [] and not ex[2].is_impossible
    assert ex[0].context[ex[2].answers[0].start:].startswith("Rollo")
    assert ex[0].title == "Normans"


def test_squad_answer_not_at_offset(tmp_path):
    qas = [{"id": "good", "question": "Where?",
            "answers": [{"text": "France", "answer_start": 24}]},
           {"id": "bad", "question": "Who?", "answers": [{"text": "Rollo", "answer_start": 30}]},
           {"id": "half", "question": "Where?",
            "answers": [{"text": "France", "answer_start": 24}, {"text": "x", "answer_start": 0}]}]
    p = _write(tmp_path, "s.json", _squad(qas))
    with pytest.warns(UserWarning, match=r"skipped 2 answers not at their offset and 1 "
                                         r"questions left without an answer \(first: .*s.json:"
                                         r"\d+: question bad: answer 'Rollo' is not at "
                                         r"answer_start 30"):
        ex = readers.read_squad(p)
    assert [e.id for e in ex] == ["good", "half"] and len(ex[1].answers) == 1
    line = next(n for n, text in enumerate(p.read_text().splitlines(), 1) if '"bad"' in text)
    with pytest.raises(UserError, match=rf"s.json:{line}: question bad: answer 'Rollo'"):
        readers.read_squad(p, strict=True)


@pytest.mark.parametrize("text, message", [
    ('[1, 2]', "not SQuAD JSON"),
    # JSON lines (what `predict` takes for QA) would fail as "line 2: not valid JSON"
    ('{"question": "?", "context": "c"}\n{"question": "?", "context": "c"}\n',
     r"s.json: JSON lines, not SQuAD JSON \(one object with a 'data' list"),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}', "article 0 paragraph 0: missing 'context'"),
    (_squad([{"id": "q", "answers": []}]), r"s.json:\d+: question q: missing 'question'"),
    (_squad([{"id": "q", "question": "?", "answers": [{"text": "x", "answer_start": "0"}]}]),
     "'answer_start' should be int"),
    ('{"data": [', "s.json:1: not valid JSON"),
    (_squad([{"id": "q", "question": "?", "answers": "x"}]), "'answers' should be list"),
    (_squad([{"id": [1], "question": "?", "answers": []}]), "'id' should be str or int"),
    (b'{"data": "\xff"}', "not UTF-8"),
    ('{"data": []}', "no questions"),
    # a string "false" would be truthy: every field's type is checked
    (_squad([{"id": "q", "question": "?", "is_impossible": "false",
              "answers": [{"text": "Rollo", "answer_start": 32}]}]),
     r"s.json:\d+: question q: 'is_impossible' should be true or false, not 'false'"),
    (_squad([{"id": "q", "question": "?", "answers": [],
              "plausible_answers": [{"text": 3, "answer_start": 0}]}]),
     "question q: plausible answer: 'text' should be str"),
    (_squad([{"id": "q", "question": "?", "answers": ["Rollo"]}]),
     "question q: answer: should be a JSON object, not str"),
    (_squad([{"id": "q", "question": "?", "answers": [{"text": "x", "answer_start": True}]}]),
     "'answer_start' should be int, not bool"),
    ('{"data": [{"title": 1, "paragraphs": []}]}', "article 0: 'title' should be str"),
    ('{"data": [[]]}', "article 0: should be a JSON object, not list"),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [7]}]}]}',
     "paragraph 0: should be a JSON object, not int"),
])
def test_bad_squad(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        readers.read_squad(_write(tmp_path, "s.json", text))


# --------------------------------------------------------------------------------------------
# the real files
# --------------------------------------------------------------------------------------------

def test_real_files(shared_data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the real files need nothing skipped
        wnut = readers.read_conll(shared_data / "ner" / "wnut16.train.conll")
        wnut_dev = readers.read_tagged(shared_data / "ner" / "wnut16.dev.conll")
        ewt = readers.read_tagged(shared_data / "pos" / "en_ewt-ud-dev.conllu")
        squad = readers.read_squad(shared_data / "qa" / "squad2_subset.dev.json")
        sick = readers.read_text_examples(shared_data / "nli" / "sick.dev.jsonl",
                                        text_column="premise", pair_column="hypothesis")
        movie = readers.read_text_examples(shared_data / "sentiment" / "movie.dev.jsonl",
                                         label_column="score", label_kind="float")
    assert len(wnut) == 1929 and len(wnut_dev) == 217  # the tweets of the shipped files
    labels = readers.tagging_labels(wnut)
    assert len(labels) == 21 and labels[0] == "O"  # 10 types, B and I
    readers.check_tags(wnut_dev, labels)
    assert 1900 <= len(ewt) <= 2100 and len(set(readers.tagging_labels(ewt))) == 17
    assert sum(len(s.tokens) for s in ewt) > 20000
    assert len(squad) == 950 and 300 < sum(e.is_impossible for e in squad) < 650
    assert readers.collect_labels(sick) == ["contradiction", "entailment", "neutral"]
    assert all(-4 <= e.label <= 4 for e in movie)


@pytest.mark.parametrize("name, body, task, line", [
    ("q.csv", 'text,label\nhi,"pos\nbye,neg\nok,neg\n', "classify",
     "q.csv:2: a quote opened in this row is never closed"),
    ("c.conll", "EU\tB-ORG\nrejects\tO\textra\n", "tag", "c.conll:2: 3 columns but line 1 has 2"),
    ("s.json", _squad([{"id": "q", "question": "Who?", "is_impossible": "false",
                        "answers": [{"text": "Rollo", "answer_start": 32}]}]), "qa",
     "question q: 'is_impossible' should be true or false"),
])
def test_bad_files_stop_finetune_with_one_line(tmp_path, capsys, tiny_bert, name, body, task,
                                               line):
    train = _write(tmp_path, name, body)
    code = main(["finetune", task, "--model", str(tiny_bert), "--train", str(train),
                 "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and line in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_squad_message_points_at_the_line_of_the_id(tmp_path):
    doc = {"data": [{"paragraphs": [{"context": 'He said "q7" twice.', "qas": [
        {"id": 7, "question": "?", "answers": [{"text": "x", "answer_start": "0"}]},
        {"id": "q7", "question": "?", "answers": [{"text": "x", "answer_start": "0"}]}]}]}]}
    p = _write(tmp_path, "s.json", json.dumps(doc, indent=1))
    lines = p.read_text().splitlines()
    int_line = next(n for n, t in enumerate(lines, 1) if '"id": 7' in t)
    with pytest.raises(UserError, match=rf"s.json:{int_line}: question 7: answer: "):
        readers.read_squad(p)
    doc["data"][0]["paragraphs"][0]["qas"].pop(0)
    p = _write(tmp_path, "s.json", json.dumps(doc, indent=1))
    lines = p.read_text().splitlines()
    str_line = next(n for n, t in enumerate(lines, 1) if '"id": "q7"' in t)
    assert str_line > 3  # the context, which holds "q7" too, comes first
    with pytest.raises(UserError, match=rf"s.json:{str_line}: question q7: answer: "):
        readers.read_squad(p)


# Inputs from anywhere -------------------------------------------------------------------------

def test_input_file_stages_stdin_and_rows_for_the_readers(tmp_path):
    import io

    from bertkit.finetuning.input_sources import input_file, is_source
    from bertkit.finetuning.readers import TextExample, read_tagged, read_text_examples

    given = tmp_path / "a.jsonl"
    with input_file(given) as path:
        assert path == given
    with input_file(None) as path:
        assert path is None
    with input_file(["good film", "bad plot"]) as path:
        assert path.suffix == ".txt" and path.read_text() == "good film\nbad plot\n"
    rows = [{"text": "good film", "label": "pos"}, {"text": "bad plot", "label": "neg"}]
    with input_file(rows) as path:
        assert path.suffix == ".jsonl"
        assert [(e.text, e.label) for e in read_text_examples(path)] == \
            [("good film", "pos"), ("bad plot", "neg")]

    class Dataset:  # what datasets.Dataset offers
        def to_list(self):
            return rows

    with input_file(Dataset()) as path:
        assert [e.label for e in read_text_examples(path)] == ["pos", "neg"]
    assert not path.exists()  # the staged file goes with the block
    for text, suffix in (('{"text": "a", "label": "x"}\n', ".jsonl"),
                         ("mary\tB-PER\nwent\tO\n\nrome\tB-LOC\n", ".conll"),
                         ("just a text\nand another, with a comma\n", ".txt")):
        with input_file("-", stdin=io.StringIO(text)) as path:
            assert path.suffix == suffix and path.read_text() == text
    with input_file("-", stdin=io.StringIO("mary\tB-PER\n\nrome\tB-LOC\n")) as path:
        assert [s.tokens for s in read_tagged(path)] == [["mary"], ["rome"]]
    # errors name the input as given, not the staged file (gone when the message is read)
    with pytest.raises(UserError, match=r"^<stdin>:2: no column 'label' \(columns: text\)"):
        with input_file("-", stdin=io.StringIO('{"text": "a", "label": "x"}\n{"text": "b"}\n')) \
                as path:
            read_text_examples(path)
    with pytest.raises(UserError, match=r"^<stdin>: input file is empty"):
        with input_file("-", stdin=io.StringIO("")) as path:
            read_text_examples(path)
    with pytest.raises(UserError, match=r"^<rows>:2: no label \(null in column 'label'\)"):
        with input_file([rows[0], {"text": "c", "label": None}]) as path:
            read_text_examples(path)
    with pytest.raises(UserError, match="all strings or all dicts, got dict, str"):
        with input_file(["a", {"text": "b"}]):
            pass
    with pytest.raises(UserError, match="no rows"):
        with input_file([]):
            pass
    assert is_source("-") and is_source(rows) and is_source(Dataset())
    assert not is_source([TextExample("a")]) and not is_source(["a text a task reads as is"])


def test_input_identity_knows_stdin_and_rows_again_by_their_bytes(tmp_path):
    # what a checkpoint records of its data: the file `input_file` stages standard input or
    # rows in is named anew each run, so that a resumed run knows them by their bytes
    import io

    from bertkit.finetuning.input_sources import input_file, input_identity

    def known_as(source, text=None):
        with input_file(source, stdin=None if text is None else io.StringIO(text)) as path:
            return input_identity(source, path)

    assert known_as(None) is None
    text = '{"text": "a", "label": "x"}\n'
    first = known_as("-", text)
    assert re.fullmatch(r"<stdin> \(sha256 [0-9a-f]{16}\)", first)
    assert known_as("-", text) == first != known_as("-", text + text)
    rows = [{"text": "good film", "label": "pos"}]
    assert re.fullmatch(r"<rows> \(sha256 [0-9a-f]{16}\)", known_as(rows))
    assert known_as(rows) == known_as(list(rows)) != known_as(rows * 2)


def test_input_identity_knows_a_file_by_its_bytes_and_names_it_by_its_path(tmp_path):
    # a file edited or replaced under the same path is other data; the same bytes under
    # another path (or piped in) are the same data: the digest is what a resume compares
    import io

    from bertkit.finetuning.input_sources import input_file, input_identity

    def known_as(source, text=None):
        with input_file(source, stdin=None if text is None else io.StringIO(text)) as path:
            return input_identity(source, path)

    text = '{"text": "a", "label": "x"}\n'
    given = _write(tmp_path, "a.jsonl", text)
    found = known_as(given)
    assert re.fullmatch(rf"{re.escape(str(given))} \(sha256 [0-9a-f]{{16}}\)", found)
    digest = found.rsplit(" (", 1)[1]
    assert known_as(str(given)) == found  # as a string or a Path, the same
    assert known_as(_write(tmp_path, "b.jsonl", text)).endswith(digest)
    assert known_as("-", text) == f"<stdin> ({digest}"
    given.write_text(text + text, encoding="utf-8")
    assert known_as(given).startswith(f"{given} (") and not known_as(given).endswith(digest)
    # a path that is no file is named as given: the readers say what is wrong with it
    assert known_as(tmp_path / "none.jsonl") == str(tmp_path / "none.jsonl")
