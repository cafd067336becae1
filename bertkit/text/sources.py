"""Where the text of a corpus comes from: files, folders and globs; plain, gzip, zstd or bzip2;
lines of text, JSON lines, CSV and TSV, Parquet and Arrow tables (Hugging Face `datasets`
directories).

    sources = expand(["books/", "web/*.jsonl.zst", "wiki.parquet", "news.csv"], field="text")
    for number, text, end in read_units(sources[0]): ...

`expand` turns the user's arguments into `Source`s, one per file, and checks each before
anything is read: a folder gives every visible file under it in name order, a glob the files it
matches, a `datasets` directory (`Dataset.save_to_disk`: state.json, dataset_info.json and
arrow files) its arrow files in the order state.json lists them. Each source has a format:
- "text": lines; a blank line ends a document (`prepare`), each line a paragraph;
- "jsonl": one JSON object per line, whose `field` is one document (its newlines separate
  paragraphs); recognised by the name (.jsonl, .json) or by a first line that is an object;
- "csv", "tsv": a header row, then one row per document, the column `field` likewise
  (Python's csv module: a field in double quotes may hold commas, tabs and line breaks, a
  quote in it written twice); recognised by the name only (.csv, .tsv, also under a
  compression suffix), since no content tells a CSV file from prose with commas. A header
  that names `field` only when cut at ';', tabs or '|' (Excel writes ';' where the comma is
  the decimal point; a .csv of tabs) has the file read with that delimiter;
- "parquet", "arrow": one row per document, the column `field` likewise.
Compression (gzip, zstd, bzip2) is recognised by the file's first bytes, under any name.

`read_units` is the one reader every command uses (`prepare`, `pretrain --data`, `tokenizer
train`, `tokenizer extend`, `static train`, and through `numbered_texts` those that take texts
one by one): units (lines of a text file, documents of the other formats) with their number
in the file (a CSV row's is the line it starts on) and how far the file has been read. It holds
one line, one CSV row or one record batch at a time, so memory is constant however large the
corpus; it resumes after a unit (`after`) by seeking in a plain text file and by reading past
the units in the others.

`numbered_texts` gives the texts of one argument (a file, folder, glob or `datasets`
directory), each with its source and its number in that source's file: FILE:LINE names a
text, and an error in it, in the file it is in, however many files the argument holds.

Parquet and Arrow need pyarrow, zstd needs zstandard (the `data` extra); without
them those files are a one-line error and everything else reads as before.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator, Sequence

from bertkit.files import (COMPRESSED_SUFFIXES, UserError, compression_of, corrupt_data_errors,
                           decode_line, first_line_of, format_suffix, need_package,
                           open_bytes, require_file)

FORMATS = ("text", "jsonl", "csv", "tsv", "parquet", "arrow")
TABLES = ("parquet", "arrow")
DELIMITERS = {"csv": ",", "tsv": "\t"}
"""The formats of delimited text with a header row, and the character between their fields."""
OTHER_DELIMITERS = (";", "\t", "|", ",")
"""What else a .csv or .tsv file may have between its fields, in the order tried
(`find_delimiter`): Excel's ';' where the comma is the decimal point, a TSV named .csv, '|'
of database dumps, a CSV named .tsv."""
CSV_FIELD_LIMIT = 1 << 25
"""Characters a CSV field may hold (csv's own limit, 128 Ki, is a long article): 32 Mi is ten
times a long novel, and bounds the memory that a quote left open takes before it is reported."""
_GLOB = frozenset("*?[")
_TABLE_ROWS = 1024
"""Rows of a Parquet file decoded at a time."""


@dataclass(frozen=True)
class Source:
    """One input file and how to read it."""
    path: Path
    format: str
    """One of FORMATS."""
    compression: str | None = None
    """"gzip", "zstd", "bzip2" or None (not for Parquet and Arrow)."""
    field: str = "text"
    """The text field of a JSONL object, a CSV row or a table row."""
    delimiter: str | None = None
    """Between the fields of a CSV or TSV file where its header shows another than its
    format's (`find_delimiter`); None: the format's own (DELIMITERS)."""

    @property
    def records(self) -> bool:
        """Each unit is a whole document (JSONL, CSV, Parquet, Arrow), not a line of text."""
        return self.format != "text"

    @property
    def seekable(self) -> bool:
        """A resume can seek to a byte offset (a plain text or JSONL file)."""
        return self.compression is None and not self.records


Unit = tuple[int, str, int]
"""(number of the line or row from 1, its text, bytes read through it). The bytes are those of
the uncompressed lines (a plain file's byte offset after the line), or for a table the UTF-8
size of the texts so far. A text line keeps its line break; a document is its field's text."""


# Arguments -> sources ------------------------------------------------------------------------

def expand(arguments: Sequence[str | os.PathLike], field: str = "text",
           what: str = "corpus file", leave_out: Sequence[str | os.PathLike] = ()
           ) -> list[Source]:
    """Every file the arguments name, each checked, in order (see the module docstring)."""
    if not arguments:
        raise UserError(f"no {what}s given")
    return [source for argument in arguments
            for source in expand_one(argument, field, what, leave_out)]


def expand_one(argument: str | os.PathLike, field: str = "text", what: str = "corpus file",
               leave_out: Sequence[str | os.PathLike] = ()) -> list[Source]:
    """The sources of one argument: a file, a folder, a `datasets` directory or a glob. The
    folders `leave_out` (the command's outputs, which a re-run would find inside a corpus
    folder) give no files."""
    path = Path(argument)
    seen = {Path(p).resolve() for p in leave_out} - {path.resolve()}
    if not path.exists() and _GLOB & set(str(argument)):
        matches = sorted(glob.glob(str(argument), recursive=True))
        if not matches:
            raise UserError(f"{argument}: no files match")
        # `**` matches folders and the files in them: each file once
        files = list(dict.fromkeys(p for m in matches for p in _files_under(Path(m), seen)))
        if not files:
            raise UserError(f"{argument}: the matching folders hold no files")
    elif path.is_dir():
        files = _files_under(path, seen)
        if not files:
            raise UserError(f"{path}: no files in the folder")
    else:
        files = [require_file(path, what)]
    return [_sniff(f, field) for f in files]


def _files_under(path: Path, seen: set[Path] | None = None) -> list[Path]:
    """A file itself; a `datasets` directory's arrow files; every visible non-empty file under
    a folder (hidden names, such as a prepare's build folder, left out), in name order. A
    folder in `seen` (reached again through a link) gives nothing, and so does a file in one
    (a glob's match that the folder gave already, or left out: a `datasets` directory's)."""
    if not path.is_dir():
        return [] if seen and path.parent.resolve() in seen else [path]
    seen = set() if seen is None else seen
    if path.resolve() in seen:
        return []
    seen.add(path.resolve())
    if is_dataset_dir(path):
        return _dataset_files(path)
    if (path / "dataset_dict.json").is_file():
        splits = _dataset_splits(path)
        raise UserError(f"{path}: a DatasetDict of the splits {', '.join(splits)}: give one "
                        f"split's directory, such as {path / (splits[0] if splits else 'train')}")
    found = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            found += _files_under(entry, seen)
        elif entry.is_file() and entry.stat().st_size > 0:
            found.append(entry)
    return found


def is_dataset_dir(path: str | os.PathLike) -> bool:
    """A `Dataset.save_to_disk` directory: state.json and dataset_info.json in it."""
    path = Path(path)
    return (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def _dataset_files(path: Path) -> list[Path]:
    """The arrow files of a `Dataset.save_to_disk` directory, in state.json's order."""
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        names = [item["filename"] for item in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path / 'state.json'}: not a datasets state file ({e!r})") from None
    files = [path / name for name in names]
    for f in files:
        require_file(f, "datasets arrow file")
    if not files:  # what `datasets` saves of a dataset with no rows
        raise UserError(f"{path}: the dataset has no rows (its state.json lists no arrow "
                        f"files)")
    return files


def _dataset_splits(path: Path) -> list[str]:
    with contextlib.suppress(ValueError, TypeError, KeyError, OSError):
        return list(json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"])
    return []


def _sniff(path: Path, field: str) -> Source:
    """The format and compression of one file, from its first bytes (and its name); a record
    format is checked to hold `field` before anything is read."""
    with open(path, "rb") as f:
        head = f.read(8)
    compression = compression_of(path)
    suffixes = [s.lower() for s in path.suffixes]
    named = COMPRESSED_SUFFIXES.get(suffixes[-1]) if suffixes else None
    if named is not None and compression != named:
        raise UserError(f"{path}: not {named} data (the name says {suffixes[-1]}, the first "
                        f"bytes do not)")
    stem = format_suffix(path)
    if compression is None and (stem == ".parquet" or head.startswith(b"PAR1")):
        source = Source(path, "parquet", None, field)
        _table_columns(source)  # the schema says now whether the field is there
        return source
    if compression is None and (stem == ".arrow" or head.startswith(b"ARROW1")):
        source = Source(path, "arrow", None, field)
        _table_columns(source)
        return source
    archive = "zip" if head.startswith(b"PK\x03\x04") else None
    source = Source(path, "text", compression, field)
    first = None if archive else _first_line(source)
    if first is not None and first[1][257:262] == "ustar":  # a tar header's magic
        archive = "tar"
    if archive:
        raise UserError(f"{path}: a {archive} archive, which is not read: unpack it "
                        f"({'tar xf' if archive == 'tar' else 'unzip'}) and give the folder")
    # CSV and TSV by their name only: prose has commas and the odd tab, so no look at the
    # content tells a CSV file from lines of text, and a wrong guess would make a corpus's
    # first line a header and cut every line at its commas.
    if stem in (".csv", ".tsv"):
        source = find_delimiter(Source(path, stem[1:], compression, field), [field])
        _csv_header(source)  # the header says now whether the column is there
        return source
    looks_json = first is not None and first[1].lstrip().startswith("{")
    if stem in (".jsonl", ".json") or looks_json:
        obj = None
        if first is not None:
            with contextlib.suppress(ValueError):
                obj = json.loads(first[1])
        if stem not in (".jsonl", ".json") and not isinstance(obj, dict):
            return source  # text that happens to begin with a brace
        source = Source(path, "jsonl", compression, field)
        if first is not None and not isinstance(obj, dict) and (
                isinstance(obj, list) or first[1].strip() in ("[", "{")):
            raise UserError(f"{path}:{first[0]}: not JSON lines (one object a line): a JSON "
                            f"array or an object across lines is not read; jq -c '.[]' writes "
                            f"an array as lines")
        if first is not None:
            _json_field(first[1], source, first[0])
    return source


def _first_line(source: Source) -> tuple[int, str] | None:
    """(number, text) of the first non-blank line, or None."""
    for number, line, _ in _lines(source, (0, 0)):
        if line.strip():
            return number, line
        if number >= 1000:  # a thousand blank lines: text, not JSON
            return None
    return None


# Reading -------------------------------------------------------------------------------------

def read_units(source: Source, after: tuple[int, int] = (0, 0)) -> Iterator[Unit]:
    """The units of `source` (see `Unit`) after unit number after[0], which ended at byte
    after[1]. Not UTF-8, invalid JSON, a missing field, corrupt compressed data or a corrupt
    table: a one-line UserError naming the file and the line or row."""
    if source.format in TABLES:
        yield from _table_units(source, after)
    elif source.format in DELIMITERS:
        yield from _csv_units(source, after)
    elif source.format == "jsonl":
        for number, line, end in _lines(source, after):
            if line.strip():
                yield number, _json_field(line, source, number), end
    else:
        yield from _lines(source, after)


def numbered_texts(path: str | os.PathLike, field: str = "text",
                   what: str = "input file") -> Iterator[tuple[Source, int, str]]:
    """(source, number, text) of each text of a file, folder, glob or `datasets` directory
    (`expand_one`; its files in order), for the commands that take texts one by one (`embed`,
    `evaluate`, `anisotropy`, `tokenize`, `fill-mask`, `serve --input`): each line of a text
    file without its line break, blank ones too, or the `field` of each JSON line, CSV row or
    table row. The number is the line or row in the source's own file, so that `source.path`
    and it name the text wherever it came from (FILE:LINE). The files are recognised (and a
    record format checked for `field`) now, before anything is read; input with no text at
    all (a table with no rows, a CSV header alone) is a one-line UserError once read."""
    sources = expand_one(path, field, what)

    def texts() -> Iterator[tuple[Source, int, str]]:
        empty = True
        for source in sources:
            for number, text, _ in read_units(source):
                empty = False
                yield source, number, text if source.records else text.rstrip("\r\n")
        if empty:
            raise UserError(f"{path}: no text ({why_empty(sources)})")

    return texts()


def why_empty(sources: Sequence[Source]) -> str:
    """Why sources that gave no text gave none, in words for an error: a text file's blank
    lines, a table with no rows, or records whose field is blank (read again to tell, on the
    way to that error only)."""
    if not any(s.records for s in sources):
        return "only blank lines"
    if any(True for s in sources if s.records for _ in read_units(s)):
        return f"the field \"{sources[0].field}\" is blank in every record"
    if all(s.format in TABLES for s in sources):
        return "the table has no rows" if len(sources) == 1 else "the tables have no rows"
    if all(s.format in DELIMITERS for s in sources):
        return "a header and no rows"
    return "only blank lines"


def paragraphs(sources: Sequence[Source]) -> Iterator[str]:
    """The non-blank paragraphs of the sources, stripped: each line of a text file, each line
    of a document's text. What a vocabulary is trained on."""
    for source in sources:
        for _, text, _ in read_units(source):
            if source.records:
                for paragraph in text.split("\n"):
                    if paragraph := paragraph.strip():
                        yield paragraph
            elif text := text.strip():
                yield text


def _lines(source: Source, after: tuple[int, int]) -> Iterator[Unit]:
    number, end = after
    skip = 0
    with open_bytes(source.path, source.compression) as f:
        if source.seekable:
            f.seek(end)
        else:
            skip, number, end = number, 0, 0
        try:
            for raw in f:
                number += 1
                end += len(raw)
                if number <= skip:
                    continue
                yield number, decode_line(raw, source.path, number), end
        except corrupt_data_errors(source.path, source.compression) as e:
            raise UserError(f"{source.path}:{number + 1}: corrupt {source.compression} data "
                            f"({first_line_of(e)})") from None


def _json_field(line: str, source: Source, number: int) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{source.path}:{number}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{source.path}:{number}: expected a JSON object, got "
                        f"{type(obj).__name__}")
    text = obj.get(source.field, _MISSING)
    if text is _MISSING:
        raise UserError(f"{source.path}:{number}: no field \"{source.field}\" in the object "
                        f"(it has {', '.join(map(repr, obj)) or 'none'}; choose one with "
                        f"--text-field)")
    if text is None:
        return ""
    if not isinstance(text, str):
        kind = {bool: "true or false", int: "a number", float: "a number", list: "a list",
                dict: "an object"}[type(text)]  # JSON's names, not Python's ("a int")
        raise UserError(f"{source.path}:{number}: field \"{source.field}\" holds {kind}, "
                        f"not text")
    return text


_MISSING = object()


# CSV and TSV ---------------------------------------------------------------------------------

_DOUBLED = 'a quote inside a quoted field is written twice: ""'


def csv_rows(source: Source) -> Iterator[tuple[int, list[str], int]]:
    """(line where it starts, fields, bytes read through it) of each row of a CSV or TSV file,
    the header first, parsed by Python's csv module from the decoded lines (a quoted field may
    span lines). A blank line is no row; a row whose fields the header does not count, a
    quote never closed, a field over `CSV_FIELD_LIMIT`: a one-line UserError."""
    # csv's limit is the whole process's: raised, never lowered (a caller may need more)
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    last, end = "", 0

    def lines() -> Iterator[str]:
        nonlocal last, end
        for _, last, end in _lines(source, (0, 0)):
            yield last

    with contextlib.closing(lines()) as feed:
        # strict: a quote open at the end of the file is an error, not one last field that
        # swallowed every row after it
        reader = csv.reader(feed, delimiter=_delimiter(source), strict=True)
        header: tuple[int, int] | None = None  # (its line, how many fields it has)
        while True:
            number = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise _csv_error(source, number, reader.line_num, e) from None
            if reader.line_num == number and not last.strip():
                continue  # a blank line (spaces only too, as in JSON lines)
            if header is None:
                header = number, len(row)
            elif len(row) != header[1]:
                raise UserError(f"{source.path}:{number}: {len(row)} fields but the header "
                                f"(line {header[0]}) has {header[1]}")
            yield number, row, end


def find_delimiter(source: Source, columns: Collection[str]) -> Source:
    """`source`, a CSV or TSV file, to be read with the delimiter that its header (its first
    non-blank line) names one of `columns` with: its format's own where that one does, else
    the first of OTHER_DELIMITERS that does. Strict, so that no file that reads now is read
    otherwise: a header with one of the columns between its own delimiters keeps them,
    whatever its names and rows hold. A header that names none of them with any is an error
    to come; where it is one name that another delimiter cuts, that one reads it, so that
    the error lists the names --text-field may choose (a semicolon file asked for a column
    it lacks), not a name with semicolons in it."""
    first = _first_line(source)
    if first is None:
        return source
    own = DELIMITERS[source.format]
    chosen = naming_delimiter(first[1], columns, (own, *OTHER_DELIMITERS))
    if chosen is None and len(_header_names(first[1], own)) == 1:
        chosen = next((d for d in OTHER_DELIMITERS if len(_header_names(first[1], d)) > 1),
                      None)
    chosen = chosen or own
    return source if chosen == _delimiter(source) else dataclasses.replace(source,
                                                                          delimiter=chosen)


def naming_delimiter(header: str, columns: Collection[str],
                     delimiters: Sequence[str] = OTHER_DELIMITERS) -> str | None:
    """The first of `delimiters` that cuts the header line `header` into names among which
    is one of `columns`; None where none does (`find_delimiter`'s strict rule)."""
    return next((d for d in delimiters if set(columns) & set(_header_names(header, d))), None)


def _delimiter(source: Source) -> str:
    return source.delimiter or DELIMITERS[source.format]


def _header_names(line: str, delimiter: str) -> list[str]:
    """The names of a header line cut at `delimiter` as csv reads them (quotes taken off),
    stripped; none where csv cannot read it so."""
    try:
        return [name.strip() for name in next(csv.reader([line], delimiter=delimiter), [])]
    except csv.Error:
        return []


def _csv_error(source: Source, number: int, at: int, e: csv.Error) -> UserError:
    """csv's complaint about the row that starts at line `number` (found at line `at`)."""
    message, path = str(e), source.path
    if "end of data" in message:
        return UserError(f"{path}:{number}: a quote opened in this row is never closed "
                         f"({_DOUBLED})")
    if "field limit" in message:
        return UserError(f"{path}:{number}: a field of more than "
                         f"{csv.field_size_limit():,} characters: a quote left open? "
                         f"({_DOUBLED})")
    if "expected after" in message:
        return UserError(f"{path}:{at}: text after the closing quote of a field ({_DOUBLED})")
    return UserError(f"{path}:{at}: not valid {source.format.upper()} ({first_line_of(e)})")


def _csv_header(source: Source) -> None:
    """Check now that the file has a header row with the column `field`."""
    with contextlib.closing(csv_rows(source)) as rows:
        _csv_column(source, next(rows, None))


def _csv_column(source: Source, header: tuple[int, list[str], int] | None) -> int:
    """The index of the column `field` in the header row (`csv_rows`' first)."""
    if header is None:
        raise UserError(f"{source.path}: no header row (only blank lines)")
    number, names = header[0], [name.strip() for name in header[1]]
    if source.field not in names:
        raise UserError(f"{source.path}:{number}: no column \"{source.field}\" in the header "
                        f"(it has {', '.join(map(repr, names))}; choose one with --text-field)")
    if names.count(source.field) > 1:
        raise UserError(f"{source.path}:{number}: the header names the column "
                        f"\"{source.field}\" {names.count(source.field)} times")
    return names.index(source.field)


def _csv_units(source: Source, after: tuple[int, int]) -> Iterator[Unit]:
    """The `field` of each row after the header; a resume reads past the rows before it
    (the lines of a row that spans several are not known from its number)."""
    with contextlib.closing(csv_rows(source)) as rows:
        column = _csv_column(source, next(rows, None))
        for number, row, end in rows:
            if number > after[0]:
                yield number, row[column], end


# Tables --------------------------------------------------------------------------------------

def _table_columns(source: Source) -> None:
    """Check now that the table opens and has a text column `field`."""
    schema = _open_table(source)[0]
    pa = need_package("pyarrow", source.path, "Parquet and Arrow files")
    if source.field not in schema.names:
        raise UserError(f"{source.path}: no field \"{source.field}\" in the table (it has "
                        f"{', '.join(map(repr, schema.names)) or 'none'}; choose one with "
                        f"--text-field)")
    kind = schema.field(source.field).type
    # null: a column with no value in it, such as pandas writes for a table with no rows
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_null(kind)):
        raise UserError(f"{source.path}: field \"{source.field}\" holds {kind}, not text")


def _open_table(source: Source):
    """(schema, iterator of record batches), or a one-line UserError."""
    pa = need_package("pyarrow", source.path, "Parquet and Arrow files")
    try:
        if source.format == "parquet":
            import pyarrow.parquet as pq
            table = pq.ParquetFile(source.path)
            columns = [source.field] if source.field in table.schema_arrow.names else None
            return table.schema_arrow, table.iter_batches(batch_size=_TABLE_ROWS,
                                                          columns=columns)
        mapped = pa.memory_map(str(source.path))
        try:  # `datasets` writes the streaming format; the file format is the other one
            reader = pa.ipc.open_stream(mapped)
            return reader.schema, iter(reader)
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(mapped)
            return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{source.path}: not a readable {source.format} file "
                        f"({first_line_of(e)})") from None


def _table_units(source: Source, after: tuple[int, int]) -> Iterator[Unit]:
    pa = need_package("pyarrow", source.path, "Parquet and Arrow files")
    import pyarrow.compute as pc
    schema, batches = _open_table(source)
    column = schema.names.index(source.field) if source.format == "arrow" else 0
    number = end = 0
    try:
        for batch in batches:
            texts = batch.column(column)
            if pa.types.is_null(texts.type):
                texts = texts.cast(pa.string())
            sizes = pc.binary_length(texts).fill_null(0).to_numpy(zero_copy_only=False)
            if number + len(texts) <= after[0]:  # before the resume point: its sizes only
                number, end = number + len(texts), end + int(sizes.sum())
                continue
            for text, size in zip(texts.to_pylist(), sizes.tolist()):
                number += 1
                end += size
                if number > after[0]:
                    yield number, text or "", end
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{source.path}:{number + 1}: corrupt {source.format} data "
                        f"({first_line_of(e)})") from None
