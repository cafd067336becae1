"""A prepared data directory checked before training reads it: checksums, token ids, .npy files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.files import UserError, sha256_file, write_json
from bertkit.pretraining.corpus import prepare
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.shards import load_split, verify_shards
from synthetic_corpus import make_tokenizer, write_corpus


@pytest.fixture
def data(tmp_path_factory, tmp_path) -> Path:
    tok = make_tokenizer(tmp_path_factory.mktemp("tok"))
    write_corpus(tmp_path / "c.txt", docs=30, seed=2)
    prepare([tmp_path / "c.txt"], tok, tmp_path / "data", workers=1, progress=False)
    return tmp_path / "data"


def _batches(data: Path) -> PretrainingBatches:
    return PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4, seed=0,
                              prefetch=0)


def _shard(data: Path, suffix: str) -> Path:
    return data / "shards" / f"shard_00000.{suffix}"


def test_a_clean_directory_passes(data):
    verify_shards(data)
    assert _batches(data).num_sequences > 0


def test_a_flipped_byte_is_found_before_training_reads_the_shards(data):
    tokens = _shard(data, "tokens.bin")
    raw = bytearray(tokens.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    tokens.write_bytes(bytes(raw))
    load_split(data, "train")  # reading alone does not hash
    with pytest.raises(UserError, match=r"shard_00000.tokens.bin: shard file is corrupt"):
        _batches(data)


def test_token_ids_outside_the_vocabulary_are_refused(data):
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    tokens = _shard(data, "tokens.bin")
    ids = np.fromfile(tokens, dtype=manifest["dtype"])
    ids[3] = manifest["tokenizer"]["vocab_size"]  # one past the last piece
    ids.tofile(tokens)
    manifest["shards"][0]["files"]["tokens.bin"] = sha256_file(tokens)  # checksums agree
    write_json(data / "manifest.json", manifest)
    with pytest.raises(UserError, match=rf"token id {ids[3]} is outside the vocabulary"):
        verify_shards(data)


@pytest.mark.parametrize("name", ["shards/shard_00000.sentences.npy", "word_starts.npy",
                                  "token_counts.npy"])
def test_a_bad_npy_file_is_one_line(data, name):
    (data / name).write_bytes(b"\x93NUMPY not really")
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    for record in manifest["shards"]:  # a file whose checksum agrees but is not an array
        for suffix in record["files"]:
            record["files"][suffix] = sha256_file(data / "shards" / f"{record['name']}.{suffix}")
    write_json(data / "manifest.json", manifest)
    with pytest.raises(UserError, match=rf"{Path(name).name}: not a readable .npy file") as e:
        _batches(data)
    assert "\n" not in str(e.value)
