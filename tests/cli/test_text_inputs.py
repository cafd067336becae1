"""Every command that takes texts one by one reads them in any shape `prepare` reads: from
gzipped JSON lines, CSV, zstd TSV or a `datasets` directory of two arrow files with
--text-field, each gives what it gives for the same texts as lines of a plain file (the other
fields' names and numbers are no part of any text), and a record without the field is one line
naming the file, the line and --text-field, before anything is written. A text of several files
is named by the file it is in and its line or row there."""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.text.sources import numbered_texts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny) -> dict:
    """A tiny model on a tokenizer of its corpus; its first texts as a plain file and as
    gzipped JSON lines (a blank line between records, the text in "body")."""
    root = tmp_path_factory.mktemp("texts")
    corpus = tiny.write_corpus(root / "corpus.txt")
    tiny.model_dir(root, corpus)
    texts = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line][:40]
    for prefix, some in (("", texts), ("masked-", ["[MASK] " + t.split(" ", 1)[1]
                                                    for t in texts])):  # for fill-mask
        (root / f"{prefix}texts.txt").write_text("".join(t + "\n" for t in some),
                                                 encoding="utf-8")
        with gzip.open(root / f"{prefix}texts.jsonl.gz", "wt", encoding="utf-8") as f:
            for i, text in enumerate(some):
                f.write(json.dumps({"id": 7_000_000 + i, "body": text, "label": "positive"})
                        + "\n\n")
        with open(root / f"{prefix}texts.csv", "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows([["id", "body"],
                                     *([7_000_000 + i, t] for i, t in enumerate(some))])
        with open(root / f"{prefix}texts.tsv", "w", encoding="utf-8", newline="") as f:
            csv.writer(f, delimiter="\t").writerows([["body", "label"],
                                                     *([t, "positive"] for t in some)])
        zstandard = pytest.importorskip("zstandard")
        tsv = root / f"{prefix}texts.tsv"
        tsv.with_suffix(".tsv.zst").write_bytes(
            zstandard.ZstdCompressor().compress(tsv.read_bytes()))
        tsv.unlink()
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_dict({"body": some, "id": list(range(len(some)))}).save_to_disk(
            str(root / f"{prefix}texts-ds"), num_shards=2)
    return {"root": root, "model": root / "model", "texts": texts}


def test_numbered_texts_gives_each_text_with_its_line(setup):
    root = setup["root"]
    assert [t for _, _, t in numbered_texts(root / "texts.txt")] == setup["texts"]
    got = list(numbered_texts(root / "texts.jsonl.gz", "body"))
    assert [t for _, _, t in got] == setup["texts"]
    assert [n for _, n, _ in got] == list(range(1, 2 * len(setup["texts"]), 2))  # blanks between


COMMANDS = {  # each command's arguments around --input
    "tokenize": ["tokenize", "--model", "{model}", "--json"],
    "fill-mask": ["fill-mask", "--model", "{model}", "--json", "--allow-untrained-head"],
    "evaluate": ["evaluate", "--model", "{model}", "--json"],
    "anisotropy": ["anisotropy", "--model", "{model}", "--json", "--min-count", "1",
                   "--quiet"],
}


def _run(capsys, setup, command: str, inp: str, *more: str) -> tuple[int, str, str]:
    args = [a.format(model=setup["model"]) for a in COMMANDS[command]]
    code = main([*args, "--input", str(setup["root"] / inp), *more])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("shape", ["texts.jsonl.gz", "texts.csv", "texts.tsv.zst", "texts-ds"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_reads_the_text_field_of_json_lines(setup, capsys, command, shape):
    prefix = "masked-" if command == "fill-mask" else ""
    code, plain, _ = _run(capsys, setup, command, prefix + "texts.txt")
    assert code == 0
    code, records, _ = _run(capsys, setup, command, prefix + shape, "--text-field", "body")
    assert code == 0
    if command == "tokenize":  # the names say where each text was: its line
        plain = [{k: v for k, v in json.loads(r).items() if k != "name"}
                 for r in plain.splitlines()]
        records = [{k: v for k, v in json.loads(r).items() if k != "name"}
                   for r in records.splitlines()]
    else:  # the input's name, where the report gives it
        records = records.replace(f"{prefix}{shape}", f"{prefix}texts.txt")
    assert records == plain and "7000000" not in str(records)
    code, _, err = _run(capsys, setup, command, prefix + shape)
    assert code == 2 and err.count("\n") == 1
    assert (f'texts.{shape.split(".")[1]}' if "." in shape else "texts-ds") in err
    assert 'no field "text"' in err or 'no column "text"' in err
    assert "--text-field" in err


def test_a_text_of_several_files_is_named_by_its_file_and_row(setup, capsys):
    """fill-mask on texts without a mask: the error names the arrow file and its row."""
    root = setup["root"]
    first = sorted((root / "texts-ds").glob("*.arrow"))[0]
    code, _, err = _run(capsys, setup, "fill-mask", "texts-ds", "--text-field", "body")
    assert code == 2 and err.startswith(f"error: {first}:1: no [MASK] in ")
    (root / "one").mkdir(exist_ok=True)
    (root / "one" / "a.txt").write_text("a [MASK] text\nno mask here\n", encoding="utf-8")
    code, _, err = _run(capsys, setup, "fill-mask", "one")
    assert code == 2 and err.startswith(f"error: {root / 'one' / 'a.txt'}:2: no [MASK] in ")


def test_embed_indexes_each_row_by_its_record_line(setup, capsys, tmp_path):
    root = setup["root"]
    assert main(["embed", "--model", str(setup["model"]), "--input", str(root / "texts.txt"),
                 "--out", str(tmp_path / "plain.npy"), "--quiet"]) == 0
    assert main(["embed", "--model", str(setup["model"]), "--input",
                 str(root / "texts.jsonl.gz"), "--text-field", "body",
                 "--out", str(tmp_path / "records.npy"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "plain.npy"),
                                  np.load(tmp_path / "records.npy"))
    index = [json.loads(r) for r in (tmp_path / "records.index.jsonl").read_text().splitlines()]
    assert [r["line"] for r in index] == list(range(1, 2 * len(setup["texts"]), 2))
    assert "file" not in index[0]  # one file: the line says where
    # a `datasets` directory: a row per text in order, each indexed by its file and row
    assert main(["embed", "--model", str(setup["model"]), "--input", str(root / "texts-ds"),
                 "--text-field", "body", "--out", str(tmp_path / "ds.npy"), "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "plain.npy"), np.load(tmp_path / "ds.npy"))
    index = [json.loads(r) for r in (tmp_path / "ds.index.jsonl").read_text().splitlines()]
    files = sorted((root / "texts-ds").glob("*.arrow"))
    half = len(setup["texts"]) // 2
    assert [(r["row"], Path(r["file"]), r["line"]) for r in index] == [
        (k, files[k >= half], k + 1 - half * (k >= half)) for k in range(len(setup["texts"]))]
    capsys.readouterr()
    assert main(["embed", "--model", str(setup["model"]), "--input",
                 str(root / "texts.jsonl.gz"), "--out", str(tmp_path / "x.npy")]) == 2
    assert 'no field "text"' in capsys.readouterr().err
    assert not list(tmp_path.glob("x*"))


def test_serve_searches_and_samples_the_text_field(setup):
    pytest.importorskip("fastapi")
    from bertkit.serve.workbench import Workbench

    root = setup["root"]
    plain = Workbench.load([setup["model"]], corpus=root / "texts.txt", corpus_lines=10)
    records = Workbench.load([setup["model"]], corpus=root / "texts.jsonl.gz", corpus_lines=10,
                             text_field="body")
    assert records.corpus == plain.corpus and records.line_index.lines == plain.line_index.lines
    assert records.line_index.numbers == list(range(1, 2 * len(setup["texts"]), 2))
    assert records.line_index.files is None
    # a `datasets` directory: each line is known by its arrow file and row there
    ds = Workbench.load([setup["model"]], corpus=root / "texts-ds", corpus_lines=10,
                        text_field="body")
    assert ds.corpus == plain.corpus and ds.line_index.lines == plain.line_index.lines
    half = len(setup["texts"]) // 2
    files = sorted(p.name for p in (root / "texts-ds").glob("*.arrow"))
    assert ds.line_index.files == [files[k >= half] for k in range(len(setup["texts"]))]
    assert ds.line_index.numbers == [k + 1 - half * (k >= half)
                                     for k in range(len(setup["texts"]))]


def test_a_tab_makes_a_pair_in_a_line_of_text_not_in_a_record(setup, tmp_path):
    """A TSV's tabs part its columns; one inside a quoted field is part of the one text."""
    (tmp_path / "pair.txt").write_text("a first text\tand a second\n", encoding="utf-8")
    (tmp_path / "one.txt").write_text("a first text and a second\n", encoding="utf-8")
    (tmp_path / "row.tsv").write_text('text\tid\n"a first text\tand a second"\t1\n',
                                      encoding="utf-8")
    vectors = {}
    for name in ("pair.txt", "one.txt", "row.tsv"):
        assert main(["embed", "--model", str(setup["model"]), "--input", str(tmp_path / name),
                     "--out", str(tmp_path / f"{name}.npy"), "--quiet"]) == 0
        vectors[name] = np.load(tmp_path / f"{name}.npy")
    np.testing.assert_array_equal(vectors["row.tsv"], vectors["one.txt"])
    assert not np.array_equal(vectors["pair.txt"], vectors["one.txt"])


def test_embed_refuses_to_write_into_the_folder_it_reads(setup, capsys, tmp_path):
    """Every file of a folder is input: vectors written there would be read as text next."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("one text\n", encoding="utf-8")
    assert main(["embed", "--model", str(setup["model"]), "--input", str(folder),
                 "--out", str(folder / "v.npy"), "--quiet"]) == 2
    assert "inside the input folder" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]
