"""Property test of `--config FILE.toml`: a mutated file (keys and values dropped, doubled,
retyped; quotes, brackets and `=` removed; bytes flipped) gives the command's options or a
one-line UserError naming the file; nothing else escapes."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.cli.main import build_parser

VALID = b'''model = "m"
train = "t.jsonl"
out = "o"
epochs = 2
lr = 3e-5
max_length = 64
multi_label = false
warmup = 0.1
scheme = "BIO"
'''


@functools.cache
def _parser():
    return build_parser()


def _read(path):
    args = _parser().parse_args(["finetune", "classify", "--config", str(path)])
    return args.command.read(args)


def test_the_valid_file_reads(fuzz):
    path = fuzz.dir / "valid.toml"
    path.write_bytes(VALID)
    with pytest.warns(UserWarning, match="scheme is not a setting of this command; ignored"):
        files, task, config, *_ = _read(path)  # scheme: tag's, once one file held all
    assert (config.epochs, config.max_length, task.multi_label) == (2, 64, False)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data(), value=st.sampled_from([
    b'"2"', b"-1", b"0", b"true", b"[1, 2]", b"{a = 1}", b"1e999", b"nan", b'"\\u00e9"', b"",
    b"2024-01-01", b'"""x\ny"""']))
def test_mutated_config_files_read_or_fail_naming_the_file(fuzz, data, value):
    text = fuzz.mutated(data, VALID)
    if data.draw(st.booleans()):  # a value of another TOML type for one key
        lines = text.split(b"\n")
        i = data.draw(st.integers(0, len(lines) - 1))
        key = lines[i].split(b"=")[0]
        lines[i] = key + b"= " + value
        text = b"\n".join(lines)
    path = fuzz.dir / "run.toml"
    path.write_bytes(text)
    fuzz.reads_or_names(_read, path)
