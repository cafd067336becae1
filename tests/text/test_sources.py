"""The one reader of corpora: compressed files, JSONL and Parquet fields, `datasets`
directories, folders and globs give the same text as the plain file; resuming after any unit
gives the rest exactly; bad input is one line naming the file and line."""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from bertkit.files import UserError
from bertkit.text.sources import (CSV_FIELD_LIMIT, expand, expand_one, numbered_texts, paragraphs,
                                  read_units)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")

DOCS = [["The first document.", "It has two paragraphs: café, naïve."],
        ["Second one, “quoted”."],
        ["Third.", "With", "three paragraphs."]]


def _plain(docs=DOCS) -> str:
    return "\n".join("\n".join(d) + "\n" for d in docs)


def write_text(path: Path, text: str) -> Path:
    data = text.encode("utf-8")
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".bz2"):
        data = bz2.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_jsonl(path: Path, docs=DOCS, field: str = "body") -> Path:
    return write_text(path, "".join(json.dumps({"id": i, field: "\n".join(d)}) + "\n"
                                    for i, d in enumerate(docs)))


def write_csv(path: Path, docs=DOCS, field: str = "body", delimiter: str | None = None
              ) -> Path:
    """A header, then a row per document as Python's csv writes it (the text quoted: it holds
    line breaks, commas and quotes); tab-separated for a .tsv name, `delimiter` if given."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter or ("\t" if ".tsv" in path.name else ","),
                        lineterminator="\n")
    writer.writerow(["id", field])
    writer.writerows((i, "\n".join(d)) for i, d in enumerate(docs))
    return write_text(path, out.getvalue())


def write_parquet(path: Path, docs=DOCS, field: str = "body", row_group_size: int = 2) -> Path:
    table = pa.table({"id": list(range(len(docs))), field: ["\n".join(d) for d in docs]})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_dataset_dir(path: Path, docs=DOCS, field: str = "text", files: int = 2) -> Path:
    """What `datasets.Dataset.save_to_disk` writes: arrow files in the IPC streaming format,
    state.json listing them, dataset_info.json with the features."""
    path.mkdir()
    texts = ["\n".join(d) for d in docs]
    names = []
    for k in range(files):
        part = texts[k::files]
        name = f"data-{k:05d}-of-{files:05d}.arrow"
        table = pa.table({field: pa.array(part, pa.string()),
                          "label": pa.array(range(len(part)), pa.int64())})
        with pa.OSFile(str(path / name), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=1):
                    writer.write_batch(batch)
        names.append(name)
    (path / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": n} for n in names], "_fingerprint": "0" * 16,
        "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
        "_output_all_columns": False, "_split": "train"}))
    (path / "dataset_info.json").write_text(json.dumps({
        "features": {field: {"dtype": "string", "_type": "Value"},
                     "label": {"dtype": "int64", "_type": "Value"}}}))
    return path


def _paragraphs(docs) -> list[str]:
    return [p for d in docs for p in d]


@pytest.mark.parametrize("name", ["c.txt", "c.txt.gz", "c.txt.bz2", "c.txt.zst"])
def test_compressed_text_reads_as_the_plain_file(tmp_path, name):
    path = write_text(tmp_path / name, _plain())
    [source] = expand([path])
    assert source.format == "text"
    assert source.compression == {"gz": "gzip", "bz2": "bzip2", "zst": "zstd"}.get(
        name.rsplit(".", 1)[-1])
    units = list(read_units(source))
    assert [t for _, t, _ in units] == _plain().splitlines(keepends=True)
    assert [n for n, _, _ in units] == list(range(1, len(units) + 1))
    assert units[-1][2] == len(_plain().encode())  # bytes of text, not of the file
    assert list(paragraphs([source])) == _paragraphs(DOCS)


def test_compression_is_read_from_the_bytes_under_any_name(tmp_path):
    path = tmp_path / "c.data"
    path.write_bytes(gzip.compress(_plain().encode()))
    [source] = expand([path])
    assert source.compression == "gzip"
    assert list(paragraphs([source])) == _paragraphs(DOCS)


@pytest.mark.parametrize("make", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "dataset", "csv",
                                  "csv.gz", "tsv", "tsv.zst", "tsv.bz2"])
def test_records_read_their_text_field(tmp_path, make):
    if make == "parquet":
        path = write_parquet(tmp_path / "c.parquet")
    elif make == "dataset":
        path = write_dataset_dir(tmp_path / "ds", field="body")
    elif "sv" in make:
        path = write_csv(tmp_path / f"c.{make}")
    else:
        path = write_jsonl(tmp_path / f"c.{make}")
    sources = expand([path], field="body")
    assert all(s.records for s in sources)
    texts = [t for s in sources for _, t, _ in read_units(s)]
    expected = ["\n".join(d) for d in DOCS]
    if make == "dataset":  # two arrow files, rows dealt out in turn
        expected = expected[0::2] + expected[1::2]
    assert texts == expected
    assert list(paragraphs(sources)) == [p for t in expected for p in t.split("\n")]


def test_a_dataset_directory_lists_its_files_in_state_order(tmp_path):
    path = write_dataset_dir(tmp_path / "ds", files=3)
    assert [s.path.name for s in expand([path])] == [
        "data-00000-of-00003.arrow", "data-00001-of-00003.arrow", "data-00002-of-00003.arrow"]
    assert {s.format for s in expand([path])} == {"arrow"}


def test_folders_and_globs_expand_in_name_order(tmp_path):
    root = tmp_path / "corpus"
    (root / "b").mkdir(parents=True)
    write_text(root / "b" / "2.txt.gz", "two\n")
    write_text(root / "a.txt", "one\n")
    write_text(root / "c.txt.bz2", "three\n")
    write_text(root / ".hidden.txt", "never\n")  # a prepare's build folder, an editor's file
    (root / "empty.txt").write_bytes(b"")
    write_dataset_dir(root / "d", docs=[["four"], ["five"]], files=1)
    assert list(paragraphs(expand([root]))) == ["one", "two", "three", "four", "five"]
    assert list(paragraphs(expand([str(root / "**" / "*.txt*")]))) == ["one", "two", "three"]
    assert list(paragraphs(expand([str(root / "*.txt"), root / "c.txt.bz2"]))) == ["one",
                                                                                   "three"]
    # one argument is one part of a tokenizer's mixture, however many files it holds
    assert len(expand_one(root)) == 4


def test_a_file_is_read_once_however_often_a_glob_or_a_link_reaches_it(tmp_path):
    root = tmp_path / "corpus"
    (root / "b").mkdir(parents=True)
    write_text(root / "a.txt", "one\n")
    write_text(root / "b" / "2.txt", "two\n")
    # `**` matches the folders too, and each file again under them
    assert list(paragraphs(expand([str(root / "**")]))) == ["one", "two"]
    assert list(paragraphs(expand([str(root / "**" / "*")]))) == ["one", "two"]
    # nor the files of a `datasets` directory it reaches, besides its arrow files
    write_dataset_dir(root / "ds", docs=[["three"]], files=1)
    assert list(paragraphs(expand([str(root / "**")]))) == ["one", "two", "three"]
    # links back up the tree: each folder is read once, not once per way into it
    (root / "b" / "up").symlink_to("..")
    (root / "b" / "again").symlink_to("..")
    assert list(paragraphs(expand([root]))) == ["one", "two", "three"]


def test_an_output_folder_inside_a_corpus_folder_is_not_read(tmp_path):
    root = tmp_path / "corpus"
    (root / "out").mkdir(parents=True)
    write_text(root / "out" / "vocab.txt", "[PAD]\n")  # what a first run wrote there
    write_text(root / "a.txt", "one\n")
    assert list(paragraphs(expand([root], leave_out=[root / "out"]))) == ["one"]
    assert list(paragraphs(expand([str(root / "*")], leave_out=[root / "out"]))) == ["one"]
    assert list(paragraphs(expand([root / "out"], leave_out=[root / "out"]))) == ["[PAD]"]


@pytest.mark.parametrize("name", ["c.txt", "c.txt.gz", "c.jsonl", "c.data"])
def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path, name):
    """What Notepad and PowerShell put before line 1: JSON still parses, text does not start
    with it, and a file named for neither is still recognised as JSON lines."""
    text = _plain() if name.startswith("c.txt") else "".join(
        json.dumps({"text": "\n".join(d)}) + "\n" for d in DOCS)
    path = write_text(tmp_path / name, "\ufeff" + text)
    [source] = expand([path])
    assert source.format == ("text" if name.startswith("c.txt") else "jsonl")
    assert list(paragraphs([source])) == _paragraphs(DOCS)
    assert next(numbered_texts(path))[2] == ("The first document." if source.format == "text"
                                             else "\n".join(DOCS[0]))
    utf16 = tmp_path / "utf16.txt"  # Notepad's "Unicode"
    utf16.write_bytes(_plain().encode("utf-16"))
    assert _error(lambda: expand([utf16])).endswith(
        "utf16.txt:1: UTF-16 text, not UTF-8: convert it (iconv -f UTF-16 -t UTF-8)")
    bad = write_text(tmp_path / "bad.txt", "\ufeffab\n")
    bad.write_bytes(bad.read_bytes()[:-1] + b"\xff\n")
    assert "bad.txt:1: not UTF-8 text (byte 0xff at column 3)" in _error(
        lambda: list(read_units(expand([bad])[0])))


@pytest.mark.parametrize("name", ["c.txt", "c.txt.gz", "c.jsonl", "c.jsonl.zst", "c.parquet",
                                  "ds", "c.csv", "c.tsv.gz", "excel.csv.gz"])
def test_resuming_after_any_unit_reads_exactly_the_rest(tmp_path, name):
    docs = [[f"document {i} line {j}" for j in range(i % 3 + 1)] for i in range(40)]
    if "sv" in name:  # rows of one to three lines: a row's number is not its last line's
        path = write_csv(tmp_path / name, docs, field="text",
                         delimiter=";" if name.startswith("excel") else None)
    elif name == "c.parquet":
        path = write_parquet(tmp_path / name, docs, field="text", row_group_size=7)
    elif name == "ds":
        path = write_dataset_dir(tmp_path / name, docs)
    elif "jsonl" in name:
        path = write_jsonl(tmp_path / name, docs, field="text")
    else:
        path = write_text(tmp_path / name, _plain(docs))
    for source in expand([path]):
        units = list(read_units(source))
        for k in range(len(units)):
            number, _, end = units[k]
            assert list(read_units(source, (number, end))) == units[k + 1:], (source, k)


def _error(call) -> str:
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_input_names_the_file_and_line(tmp_path):
    assert _error(lambda: expand([tmp_path / "missing.txt"])).endswith(
        "missing.txt: corpus file does not exist")
    assert _error(lambda: expand([str(tmp_path / "*.jsonl")])).endswith("*.jsonl: no files match")
    (tmp_path / "empty").mkdir()
    assert "empty: no files in the folder" in _error(lambda: expand([tmp_path / "empty"]))
    # a gzip file cut short: the line where the data ends
    data = gzip.compress(("line of text\n" * 20000).encode())
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(data[:len(data) // 2])
    [source] = expand([cut])
    message = _error(lambda: list(read_units(source)))
    assert message.startswith(f"{cut}:") and "corrupt gzip data" in message
    assert int(message.split(":")[1]) > 1
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"plain text, not gzip\n")
    assert "not gzip data" in _error(lambda: expand([bad]))
    noise = tmp_path / "noise.txt.zst"
    noise.write_bytes(zstandard.ZstdCompressor().compress(b"a\n" * 100)[:-9] + b"\0" * 9)
    assert "corrupt zstd data" in _error(lambda: list(read_units(expand([noise])[0])))
    # fields: a JSONL object, a table, a dataset directory without the asked one
    jsonl = write_jsonl(tmp_path / "c.jsonl", field="body")
    message = _error(lambda: expand([jsonl], field="text"))
    assert message.startswith(f"{jsonl}:1: no field \"text\"") and "'body'" in message
    parquet = write_parquet(tmp_path / "c.parquet", field="body")
    assert _error(lambda: expand([parquet], field="text")).startswith(
        f"{parquet}: no field \"text\" in the table (it has 'id', 'body'")
    assert "holds int64, not text" in _error(lambda: expand([parquet], field="id"))
    mixed = write_text(tmp_path / "mixed.jsonl", '{"text": "ok"}\n{"text": 3}\n[1]\n')
    assert _error(lambda: list(read_units(expand([mixed])[0]))).endswith(
        "mixed.jsonl:2: field \"text\" holds a number, not text")
    listed = write_text(tmp_path / "listed.jsonl", '{"text": ["a", "b"]}\n')
    assert _error(lambda: expand([listed])).endswith(
        "listed.jsonl:1: field \"text\" holds a list, not text")
    # a whole JSON document (an array, or an object across lines) is not JSON lines
    rows = [{"text": "one"}, {"text": "two"}]
    for name, text in [("array.json", json.dumps(rows)),
                       ("pretty.json", json.dumps(rows, indent=2)),
                       ("object.json", json.dumps({"data": rows}, indent=2))]:
        assert _error(lambda: expand([write_text(tmp_path / name, text)])).endswith(
            f"{name}:1: not JSON lines (one object a line): a JSON array or an object across "
            f"lines is not read; jq -c '.[]' writes an array as lines")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(parquet.read_bytes()[:100])
    assert _error(lambda: expand([broken])).startswith(f"{broken}: not a readable parquet file")
    # an archive is not text: its headers would be read as words
    import tarfile
    import zipfile
    write_text(tmp_path / "a.txt", _plain())
    with tarfile.open(tmp_path / "docs.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "a.txt", "a.txt")
    with zipfile.ZipFile(tmp_path / "docs.zip", "w") as z:
        z.write(tmp_path / "a.txt", "a.txt")
    assert _error(lambda: expand([tmp_path / "docs.tar.gz"])).endswith(
        "docs.tar.gz: a tar archive, which is not read: unpack it (tar xf) and give the folder")
    assert _error(lambda: expand([tmp_path / "docs.zip"])).endswith(
        "docs.zip: a zip archive, which is not read: unpack it (unzip) and give the folder")
    # a DatasetDict asks for one split
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    assert "give one split's directory, such as" in _error(lambda: expand([tmp_path / "dd"]))


def test_a_missing_extra_is_one_line(tmp_path, monkeypatch):
    import builtins

    parquet = write_parquet(tmp_path / "c.parquet")
    real = builtins.__import__

    def without_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_pyarrow)
    assert _error(lambda: expand([parquet], field="body")) == (
        f"{parquet}: reading Parquet and Arrow files needs the pyarrow package: pip install "
        f"'bertkit[data]', or pip install -e '.[data]' in a checkout")


def test_what_datasets_itself_saves_is_read_in_its_order(tmp_path):
    """The writer itself, where installed (not a dependency: checked with datasets 5.2)."""
    datasets = pytest.importorskip("datasets")
    texts = [f"Document {i}.\nIts second paragraph." for i in range(300)]
    ds = datasets.Dataset.from_dict({"content": texts, "label": list(range(300))})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    picked = ds.shuffle(seed=0).select(range(50))  # an indices mapping, flattened on saving
    picked.save_to_disk(str(tmp_path / "picked"))
    datasets.DatasetDict({"train": ds, "test": picked}).save_to_disk(str(tmp_path / "dd"))
    sources = expand([tmp_path / "ds"], field="content")
    assert len(sources) == 3
    assert [t for s in sources for _, t, _ in read_units(s)] == texts
    assert [t for s in expand([tmp_path / "picked"], field="content")
            for _, t, _ in read_units(s)] == list(picked["content"])
    assert "give one split's directory, such as" in _error(lambda: expand([tmp_path / "dd"]))
    assert len(list(paragraphs(expand([tmp_path / "dd" / "train"], field="content")))) == 600
    # a dataset with no rows is saved with no arrow file at all
    datasets.Dataset.from_dict({"content": []}).save_to_disk(str(tmp_path / "empty"))
    assert _error(lambda: expand([tmp_path / "empty"])) == (
        f"{tmp_path / 'empty'}: the dataset has no rows (its state.json lists no arrow files)")


def test_a_csv_row_is_numbered_by_the_line_it_starts_on(tmp_path):
    """Quoted fields hold commas, quotes, tabs and line breaks; a blank line is no row; the
    byte order mark is dropped; the bytes read are the file's, through the row's last line."""
    text = ('\ufeffid,text,note\r\n1,"one, with ""quotes""",x\r\n\r\n'
            '2,"two\r\nlines\tand a tab",y\r\n3,three,\r\n')
    path = write_text(tmp_path / "c.csv", text)
    [source] = expand([path])
    assert source.format == "csv" and source.records
    units = list(read_units(source))
    assert [(n, t) for n, t, _ in units] == [(2, 'one, with "quotes"'),
                                              (4, "two\r\nlines\tand a tab"), (6, "three")]
    assert units[-1][2] == len(text.encode())
    assert list(paragraphs([source])) == ['one, with "quotes"', "two", "lines\tand a tab",
                                          "three"]
    assert [(n, t) for _, n, t in numbered_texts(path)] == [(n, t) for n, t, _ in units]
    # a TSV's fields are cut at tabs, quoted the same way; the other columns are no text
    tsv = write_text(tmp_path / "c.tsv", 'text\tid\n"a\tb"\t1\nc, d\t2\n')
    assert [t for _, t, _ in read_units(expand([tsv])[0])] == ["a\tb", "c, d"]


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_a_csv_of_other_delimiters_is_read_by_what_its_header_shows(tmp_path, delimiter):
    """Excel writes ';' between the fields where the comma is the decimal point: a .csv whose
    header names the text field only with ';' (or tabs, or '|') is read with it, everywhere
    (`expand`, `numbered_texts`, `paragraphs`, resumes), and says nothing about it."""
    text = ('\ufeffid;"text";score\r\n1;"one; with ""quotes"", and commas";0,5\r\n'
            '2;two;1,25\r\n\r\n3;"three\r\nlines";2\r\n').replace(";", delimiter)
    path = write_text(tmp_path / "excel.csv.gz", text)
    [source] = expand([path])
    assert source.format == "csv" and source.delimiter == delimiter
    units = list(read_units(source))
    assert [(n, t) for n, t, _ in units] == [
        (2, f'one{delimiter} with "quotes", and commas'), (3, "two"), (5, "three\r\nlines")]
    assert units[-1][2] == len(text.encode())
    assert list(read_units(source, units[0][::2])) == units[1:]
    assert [(n, t) for _, n, t in numbered_texts(path)] == [(n, t) for n, t, _ in units]
    assert list(paragraphs([source]))[-2:] == ["three", "lines"]
    # a row with a field more than the header is still one line, at that row
    write_text(path, text + "4;four;x;y\n".replace(";", delimiter))
    assert _error(lambda: list(read_units(expand([path])[0]))) == (
        f"{path}:7: 4 fields but the header (line 1) has 3")


def test_a_comma_csv_is_never_read_with_another_delimiter(tmp_path):
    """Only a header that names the field with none of its own delimiters is read otherwise: a
    comma CSV whose names or texts hold ';', '|' or tabs is read by its commas, and a header
    that names the field with no delimiter at all keeps the error that lists its columns."""
    path = write_text(tmp_path / "c.csv", 'id,text;x,text\n1,a;b,"c|d"\n2,e\tf,g;h\n')
    [source] = expand([path])
    assert source.delimiter is None
    assert [t for _, t, _ in read_units(source)] == ["c|d", "g;h"]
    path = write_text(tmp_path / "c.csv", "text;id\nfirst;1\n")
    assert [t for _, t, _ in read_units(expand([path], field="text;id")[0])] == ["first;1"]
    for header in ("id;body", '"id";"body"'):  # the names to choose from, not 'id;body'
        write_text(path, f"{header}\n1;x\n")
        assert _error(lambda: expand([path])) == (
            f"{path}:1: no column \"text\" in the header (it has 'id', 'body'; choose one "
            f"with --text-field)")
    tsv = write_text(tmp_path / "c.tsv", "id\ttext,x\n1\ty\n")
    assert [t for _, t, _ in read_units(expand([tsv], field="text,x")[0])] == ["y"]


def test_csv_is_known_by_its_name_only(tmp_path):
    """Prose has commas: a file not named .csv is lines of text, its first line no header."""
    path = write_text(tmp_path / "c.data", "Well, then.\nYes, indeed.\n")
    [source] = expand([path])
    assert source.format == "text"
    assert list(paragraphs([source])) == ["Well, then.", "Yes, indeed."]


def test_a_csv_field_may_be_longer_than_csv_allows_by_default(tmp_path, monkeypatch):
    long = "word " * 60_000  # 300,000 characters: past csv's own 131,072
    path = write_text(tmp_path / "long.csv", f'text\n"{long}"\nshort\n')
    assert [t for _, t, _ in read_units(expand([path])[0])] == [long, "short"]
    # past bertkit's limit: most likely a quote left open, said at the row's first line
    monkeypatch.setattr("bertkit.text.sources.CSV_FIELD_LIMIT", 1000)
    previous = csv.field_size_limit(1000)
    try:
        assert _error(lambda: list(read_units(expand([path])[0]))) == (
            f"{path}:2: a field of more than 1,000 characters: a quote left open? (a quote "
            f'inside a quoted field is written twice: "")')
    finally:
        csv.field_size_limit(previous)
    assert csv.field_size_limit() >= CSV_FIELD_LIMIT


@pytest.mark.parametrize("name", ["c.csv", "c.tsv.gz"])
def test_bad_csv_is_one_line_naming_the_file_and_line(tmp_path, name):
    sep = "\t" if ".tsv" in name else ","

    def error(text: str, field: str = "text") -> str:
        path = write_text(tmp_path / name, text.replace(",", sep))
        return _error(lambda: list(read_units(expand([path], field=field)[0])))

    path = tmp_path / name
    assert error("id,body\n1,x\n") == (f"{path}:1: no column \"text\" in the header (it has "
                                       f"'id', 'body'; choose one with --text-field)")
    # a TSV named .csv, a CSV named .tsv, semicolons: read with what the header shows
    for wrong in ("\t" if sep == "," else ",", ";"):
        write_text(path, f"id{wrong}text\n1{wrong}x\n")
        assert [t for _, t, _ in read_units(expand([path])[0])] == ["x"]
    assert error("\n\nid,text,text\n1,x,y\n") == (
        f'{path}:3: the header names the column "text" 2 times')
    assert error("id,text\n1,x\n2,y,z\n") == f"{path}:3: 3 fields but the header (line 1) has 2"
    assert error("id,text\n1,x\n2\n") == f"{path}:3: 1 fields but the header (line 1) has 2"
    assert error('id,text\n1,"x\n2,y\n3,z\n') == (
        f'{path}:2: a quote opened in this row is never closed (a quote inside a quoted field '
        f'is written twice: "")')
    assert error('id,text\n1,x\n2,"y"z\n') == (
        f'{path}:3: text after the closing quote of a field (a quote inside a quoted field is '
        f'written twice: "")')
    assert error("\n \n") == f"{path}: no header row (only blank lines)"
    kind = "TSV" if ".tsv" in name else "CSV"
    assert error("id,text\n1,a\rb\n").startswith(  # an old Mac's line break
        f"{path}:2: not valid {kind} (new-line character seen in unquoted field")
    bad = write_text(tmp_path / name, f"id{sep}text\n1{sep}x\n")
    bad.write_bytes((gzip.compress if name.endswith(".gz") else bytes)(
        f"id{sep}text\n1{sep}caf".encode() + b"\xe9\n"))
    assert _error(lambda: list(read_units(expand([bad])[0]))) == (
        f"{bad}:2: not UTF-8 text (byte 0xe9 at column 6): 'é' in Windows-1252, as Excel "
        f"saves a CSV? iconv -f cp1252 -t utf-8 converts it")


def _empty_tables(tmp_path: Path) -> dict[str, Path]:
    """A Parquet file, an Arrow file, a `datasets` directory and a CSV file with no rows."""
    table = pa.table({"text": pa.array([], pa.string())})
    pq.write_table(table, tmp_path / "e.parquet")
    with pa.OSFile(str(tmp_path / "e.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    write_dataset_dir(tmp_path / "ds", docs=[], files=1)
    return {"e.parquet": tmp_path / "e.parquet", "e.arrow": tmp_path / "e.arrow",
            "ds": tmp_path / "ds", "e.csv": write_text(tmp_path / "e.csv", "id,text\n\n")}


def test_a_table_with_no_rows_says_so(tmp_path):
    from bertkit.text.vocab import count_lines

    for name, path in _empty_tables(tmp_path).items():
        reason = "a header and no rows" if name == "e.csv" else "the table has no rows"
        assert _error(lambda: list(numbered_texts(path))) == f"{path}: no text ({reason})"
        assert _error(lambda: count_lines(path)).endswith(f": no text ({reason})")
    blank = write_text(tmp_path / "blank.csv", 'text\n""\n" "\n')  # rows, but no text
    assert _error(lambda: count_lines(blank)) == (
        f'{blank}: no text (the field "text" is blank in every record)')
    assert len(list(numbered_texts(blank))) == 2  # each row is a text, blank or not


def test_a_column_of_nulls_is_text_of_none(tmp_path):
    """pandas writes the text column of a table with no rows (or of None only) as type null."""
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": pa.array([None, None])}), path)
    assert [t for _, t, _ in read_units(expand([path])[0])] == ["", ""]


def test_numbered_texts_reads_a_dataset_directory_or_a_folder_file_by_file(tmp_path):
    """Each text with its source: its number is its row or line in that source's file."""
    ds = write_dataset_dir(tmp_path / "ds", docs=[["a"], ["b"], ["c"]], files=2)
    got = [(s.path.name, n, t) for s, n, t in numbered_texts(ds)]
    assert got == [("data-00000-of-00002.arrow", 1, "a"), ("data-00000-of-00002.arrow", 2, "c"),
                   ("data-00001-of-00002.arrow", 1, "b")]
    folder = tmp_path / "texts"
    folder.mkdir()
    write_text(folder / "a.txt", "one\n\ntwo\tpair\n")
    write_csv(folder / "b.csv", [["three"]], field="text")
    got = [(s.path.name, n, t) for s, n, t in numbered_texts(folder)]
    assert got == [("a.txt", 1, "one"), ("a.txt", 2, ""), ("a.txt", 3, "two\tpair"),
                   ("b.csv", 2, "three")]
    assert got == [(s.path.name, n, t) for s, n, t in numbered_texts(str(folder / "*"))]
    bad = write_text(folder / "c.jsonl", '{"text": "four"}\n{"text": 5}\n')
    assert _error(lambda: list(numbered_texts(folder))) == (
        f'{bad}:2: field "text" holds a number, not text')
