"""`prepare` (and the vocabulary behind `pretrain --data CORPUS`) on every input shape: the same
documents compressed, as JSONL, CSV or Parquet fields, as a `datasets` directory, split over a
folder or a glob give exactly the shards of the plain file; an interrupted run on compressed
input or CSV resumes to the same shards; bad input is one line and writes nothing."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.pretraining.corpus import prepare, prepare_text
from bertkit.pretraining.shards import load_manifest
from synthetic_corpus import make_tokenizer, write_corpus

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")

import importlib.util  # noqa: E402  the writers of tests/text/test_sources.py

_spec = importlib.util.spec_from_file_location(
    "source_writers", Path(__file__).resolve().parents[1] / "text" / "test_sources.py")
writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writers)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    return write_corpus(root / "c.txt", docs=80, seed=5)


def _tokens(data: Path) -> np.ndarray:
    m = load_manifest(data)
    return np.concatenate([np.fromfile(data / "shards" / f"{s['name']}.tokens.bin",
                                       dtype=m["dtype"]) for s in m["shards"]])


def _shapes(tmp_path: Path, documents) -> dict[str, tuple[list, str]]:
    """The same documents in every shape: {name: (arguments, text field)}."""
    plain = "\n\n".join("\n".join(d) for d in documents) + "\n"
    half = len(documents) // 2
    folder = tmp_path / "folder"
    (folder / "z").mkdir(parents=True)
    writers.write_text(folder / "a.txt.gz", "\n\n".join("\n".join(d) for d in documents[:half]))
    writers.write_text(folder / "z" / "b.txt.zst",
                       "\n\n".join("\n".join(d) for d in documents[half:]) + "\n")
    return {
        "plain": ([writers.write_text(tmp_path / "c.txt", plain)], "text"),
        "gzip": ([writers.write_text(tmp_path / "c.txt.gz", plain)], "text"),
        "zstd": ([writers.write_text(tmp_path / "c.txt.zst", plain)], "text"),
        "bzip2": ([writers.write_text(tmp_path / "c.txt.bz2", plain)], "text"),
        "jsonl field": ([writers.write_jsonl(tmp_path / "c.jsonl.gz", documents)], "body"),
        "parquet": ([writers.write_parquet(tmp_path / "c.parquet", documents,
                                           row_group_size=16)], "body"),
        "datasets": ([writers.write_dataset_dir(tmp_path / "ds", documents, files=1)], "text"),
        "csv": ([writers.write_csv(tmp_path / "c.csv", documents)], "body"),
        "tsv zstd": ([writers.write_csv(tmp_path / "c.tsv.zst", documents)], "body"),
        "csv of semicolons": ([writers.write_csv(tmp_path / "excel.csv", documents,
                                                 delimiter=";")], "body"),
        "folder": ([folder], "text"),
        "glob": ([str(tmp_path / "folder" / "**" / "*.txt.*")], "text"),
    }


def test_every_input_shape_gives_the_shards_of_the_plain_file(tmp_path, tok_dir, documents):
    shapes = _shapes(tmp_path, documents)
    results = {}
    for name, (arguments, field) in shapes.items():
        manifest = prepare(arguments, tok_dir, tmp_path / f"out-{name}", workers=1,
                           text_field=field, progress=False)
        results[name] = (_tokens(tmp_path / f"out-{name}"), manifest)
    reference, plain = results["plain"]
    for name, (tokens, manifest) in results.items():
        assert np.array_equal(tokens, reference), name
        for split in ("train", "heldout"):
            total = manifest[split]["documents"] + manifest["heldout" if split == "train"
                                                            else "train"]["documents"]
            assert total == len(documents), name
        assert manifest["train"]["sentences"] + manifest["heldout"]["sentences"] == \
            plain["train"]["sentences"] + plain["heldout"]["sentences"], name
    # the same bytes of text make the same held-out choice, compressed or not
    for name in ("gzip", "zstd", "bzip2"):
        assert results[name][1]["heldout"] == plain["heldout"], name


@pytest.mark.parametrize("name", ["c.txt.gz", "c.csv", "excel.csv"])
def test_an_interrupted_run_on_compressed_input_resumes_to_the_same_shards(tmp_path, tok_dir,
                                                                           name):
    """A CSV row spans lines: the resume is after the row, whose number is its first line (a
    CSV of semicolons, read with them again)."""
    docs = write_corpus(tmp_path / "c.txt", docs=200, seed=3)
    gz = tmp_path / name
    if name.endswith(".csv"):
        writers.write_csv(gz, docs, field="text", delimiter=";" if name == "excel.csv" else None)
    else:
        gz.write_bytes(gzip.compress((tmp_path / "c.txt").read_bytes()))
    kwargs = dict(shard_tokens=2000, chunk_bytes=4000, workers=1, progress=False)
    full = prepare([gz], tok_dir, tmp_path / "full", **kwargs)
    assert len(full["shards"]) >= 4
    part = tmp_path / "part"
    prepare([gz], tok_dir, part, **kwargs)
    (part / "manifest.json").unlink()
    for shard in full["shards"][-2:]:
        for f in (part / "shards").glob(shard["name"] + ".*"):
            f.unlink()
    resumed = prepare([gz], tok_dir, part, **kwargs)
    assert resumed["shards"] == full["shards"]
    plain = prepare([tmp_path / "c.txt"], tok_dir, tmp_path / "plain", **kwargs)
    assert np.array_equal(_tokens(part), _tokens(tmp_path / "plain"))
    if not name.endswith(".csv"):  # the same bytes of text: the same chunks, the same shards
        assert [s["tokens"] for s in plain["shards"]] == [s["tokens"] for s in full["shards"]]


def test_cli_prepare_reads_a_glob_with_a_text_field(tmp_path, tok_dir, documents, capsys):
    for k in range(3):
        writers.write_jsonl(tmp_path / f"part-{k}.jsonl.zst", documents[k::3], field="body")
    out = tmp_path / "data"
    assert main(["prepare", "--input", str(tmp_path / "part-*.jsonl.zst"), "--text-field",
                 "body", "--tokenizer", str(tok_dir), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: train ")
    manifest = load_manifest(out)
    assert manifest["train"]["documents"] + manifest["heldout"]["documents"] == 80
    assert [Path(s["path"]).name for s in manifest["sources"]] == [
        "part-0.jsonl.zst", "part-1.jsonl.zst", "part-2.jsonl.zst"]


@pytest.mark.parametrize("case", ["missing", "empty glob", "unknown field", "corrupt gzip",
                                  "parquet field", "parquet of no rows", "csv header only"])
def test_bad_input_is_one_line_exit_2_before_anything_is_written(tmp_path, tok_dir, capsys,
                                                                 case, documents):
    if case == "missing":
        args, expected = [str(tmp_path / "nope.txt.gz")], "nope.txt.gz: corpus file does not exist"
    elif case == "empty glob":
        args, expected = [str(tmp_path / "*.parquet")], "*.parquet: no files match"
    elif case == "unknown field":
        path = writers.write_jsonl(tmp_path / "c.jsonl", documents, field="body")
        args, expected = [str(path)], "c.jsonl:1: no field \"text\""
    elif case == "corrupt gzip":
        path = tmp_path / "c.txt.gz"
        data = gzip.compress(("Kalo mine su. Tari po!\n" * 5000).encode())
        path.write_bytes(data[:len(data) // 2])
        args, expected = [str(path)], "corrupt gzip data"
    elif case == "parquet of no rows":
        path = writers.write_parquet(tmp_path / "c.parquet", [], field="text")
        args = [str(path)]
        expected = "c.parquet: no text (the table has no rows)"
    elif case == "csv header only":
        path = writers.write_text(tmp_path / "c.csv", "id,text\n")
        args, expected = [str(path)], "c.csv: no text (a header and no rows)"
    else:
        path = writers.write_parquet(tmp_path / "c.parquet", documents)
        args, expected = [str(path)], "c.parquet: no field \"text\" in the table"
    out = tmp_path / "data"
    assert main(["prepare", "--input", *args, "--tokenizer", str(tok_dir), "--out",
                 str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    if case == "corrupt gzip":  # FILE:LINE, the line where the data stops
        assert lines[0].startswith(f"error: {path}:") and lines[0].split(":")[2].isdigit()
    assert not out.exists() and not list(tmp_path.glob(".data*"))


def test_a_corpus_of_parquet_is_prepared_with_a_vocabulary_trained_on_it(tmp_path, documents):
    path = writers.write_parquet(tmp_path / "c.parquet", documents)
    manifest = prepare_text([path], tmp_path / "data", vocab_size=200, text_field="body",
                            progress=False)
    assert manifest["train"]["documents"] + manifest["heldout"]["documents"] == len(documents)
    source = json.loads((tmp_path / "data" / "source.json").read_text())
    assert source["text_field"] == "body" and source["file"]["path"].endswith("c.parquet")
    # asked again: found done
    again = prepare_text([path], tmp_path / "data", vocab_size=200, text_field="body",
                         progress=False)
    assert again == manifest
    with pytest.raises(UserError, match="no field \"text\""):
        prepare_text([path], tmp_path / "other", vocab_size=200, progress=False)
