"""The foundation commands end to end (tokenizer train, init, info, tokenize, fill-mask), and
each bad input: one line on stderr, exit 2, no traceback, nothing half-written."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main

BIN = Path(sys.executable).parent / "bertkit"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(capsys, pattern: str, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    rng = random.Random(2)
    words = ["the", "river", "ran", "past", "old", "mill", "where", "children", "played",
             "quietly", "every", "summer", "évening", "Straße"]
    path.write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(4, 14)))
                              for _ in range(300)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_dir(corpus, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    assert main(["tokenizer", "train", "--input", str(corpus), "--vocab-size", "120",
                 "--out", str(root / "tok"), "--quiet"]) == 0
    assert main(["init", "--preset", "tiny", "--tokenizer", str(root / "tok"), "--architecture",
                 "bert", "--out", str(root / "model"), "--max-positions", "32"]) == 0
    return root / "model"


def test_end_to_end_in_process(model_dir, capsys, tmp_path):
    code, out, _ = run(capsys, "info", "--model", model_dir)
    assert code == 0 and "blocks 0-1" in out and "total" in out
    code, out, _ = run(capsys, "info", "--model", model_dir, "--json")
    assert json.loads(out)["config"]["max_position_embeddings"] == 32

    code, out, _ = run(capsys, "tokenize", "--model", model_dir, "--json",
                       "the river ran", "old mill\twhere children played")
    single, pair = (json.loads(line) for line in out.splitlines())
    assert single["tokens"][0] == "[CLS]" and single["tokens"][-1] == "[SEP]"
    assert single["word_ids"][1:4] == [0, 1, 2] and single["word_ids"][0] is None
    assert pair["type_ids"][-1] == 1 and pair["tokens"].count("[SEP]") == 2
    assert set(pair) == {"ids", "tokens", "type_ids", "attention_mask", "offsets", "word_ids"}
    assert pair["offsets"][1] == [0, 3]

    code, out, _ = run(capsys, "tokenize", "--model", model_dir, "the river")
    assert out == "4\t[CLS] the river [SEP]\t" + " ".join(map(str, single["ids"][:3])) + " " \
        + str(single["ids"][-1]) + "\n"

    lines = tmp_path / "lines.txt"
    lines.write_text("the river\n\nold mill\tplayed\n", encoding="utf-8")
    code, out, _ = run(capsys, "tokenize", "--model", model_dir, "--input", lines, "--json")
    assert [len(json.loads(x)["ids"]) for x in out.splitlines()] == [4, 2, 6]

    code, out, _ = run(capsys, "fill-mask", "--model", model_dir, "--top-k", "3", "--json",
                       "the [MASK] ran past", "[MASK] mill [MASK]")
    results = [json.loads(line) for line in out.splitlines()]
    assert [len(r["masks"]) for r in results] == [1, 2]
    assert all(len(m) == 3 and m[0]["score"] >= m[2]["score"] for r in results
               for m in r["masks"])
    assert list(results[0]["masks"][0][0]) == ["score", "token", "token_str", "sequence"]
    code, out, _ = run(capsys, "fill-mask", "--model", model_dir, "the [MASK] ran")
    assert out.startswith("the [MASK] ran\n  [MASK] 1:") and code == 0


def test_init_takes_the_architecture_and_a_shape(model_dir, capsys, tmp_path):
    tok = model_dir.parent / "tok"
    code, out, _ = run(capsys, "init", "--preset", "tiny", "--tokenizer", tok, "--out",
                       tmp_path / "deep", "--num-layers", "3", "--hidden-size", "192",
                       "--num-heads", "3")
    config = json.loads((tmp_path / "deep" / "config.json").read_text())
    assert code == 0 and "modern (L3/H192/A3/I512)" in out  # the default, as pretrain's
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) \
        == (3, 192, 512)
    code, out, _ = run(capsys, "init", "--preset", "tiny", "--tokenizer", tok, "--out",
                       tmp_path / "bert", "--architecture", "bert", "--intermediate-size", "300")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["intermediate_size"] == 300
    assert_user_error(capsys, r"preset tiny: hidden_size 100 is not divisible by num_heads 3",
                      "init", "--preset", "tiny", "--tokenizer", tok, "--out", tmp_path / "x",
                      "--hidden-size", "100", "--num-heads", "3")
    assert not (tmp_path / "x").exists()


def test_typographic_quotes_read_as_plain_ones_unless_asked_not_to(corpus, capsys, tmp_path):
    quoted = tmp_path / "quoted.txt"
    quoted.write_text(corpus.read_text(encoding="utf-8") + "the river’s “mill” and the river's "
                      "\"mill\"\n" * 3, encoding="utf-8")
    ids = {}
    for flag in ("--plain-quotes", "--no-plain-quotes"):
        out = tmp_path / flag
        assert main(["tokenizer", "train", "--input", str(quoted), "--vocab-size", "120",
                     "--out", str(out), "--quiet", flag]) == 0
        capsys.readouterr()
        code, text, _ = run(capsys, "tokenize", "--model", out, "--json", "river’s “mill”",
                            "river's \"mill\"")
        ids[flag] = [json.loads(line)["ids"] for line in text.splitlines()]
    assert ids["--plain-quotes"][0] == ids["--plain-quotes"][1]
    assert ids["--no-plain-quotes"][0] != ids["--no-plain-quotes"][1]


def test_bad_inputs_exit_2_with_one_line(model_dir, corpus, capsys, tmp_path):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine\nalso fine\nna\xefve\n")
    train = ["tokenizer", "train", "--vocab-size", "100", "--out", out, "--quiet", "--input"]
    assert_user_error(capsys, r"missing.txt: input file does not exist",
                      *train, corpus, tmp_path / "missing.txt")
    assert_user_error(capsys, r"empty.txt: input file is empty", *train, empty)
    assert_user_error(capsys, r"latin.txt:3: not UTF-8", *train, corpus, latin)
    assert not out.exists()

    assert_user_error(capsys, r"not a model directory", "info", "--model", corpus.parent)
    assert_user_error(capsys, r"does not exist", "fill-mask", "--model", tmp_path / "none",
                      "a [MASK]")
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("model.safetensors", "vocab.txt", "tokenizer.json"):
        (bad / name).write_bytes((model_dir / name).read_bytes())
    config = json.loads((model_dir / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "hidden_size": 100,
                                                 "num_attention_heads": 3}))
    for argv in (["info", "--model", bad], ["fill-mask", "--model", bad, "a [MASK]"],
                 ["tokenize", "--model", bad, "text"]):
        assert_user_error(capsys, r"config.json: hidden_size 100 is not divisible by "
                                  r"num_heads 3", *argv)

    nospecial = tmp_path / "nospecial"
    nospecial.mkdir()
    (nospecial / "vocab.txt").write_text("[UNK]\nthe\nriver\n", encoding="utf-8")
    assert_user_error(capsys, r"nospecial/vocab.txt: vocabulary lacks the special token\(s\) "
                              r"\[PAD\], \[CLS\], \[SEP\], \[MASK\]",
                      "tokenize", "--model", nospecial, "the river")
    assert_user_error(capsys, r"nospecial/vocab.txt: vocabulary lacks",
                      "init", "--preset", "tiny", "--tokenizer", nospecial, "--out", out)
    assert not out.exists()

    long_text = "the river ran past the old mill " * 10
    assert_user_error(capsys, r"text 2: \d+ tokens, longer than max_length 32 \(truncation "
                              r"is off\)", "tokenize", "--model", model_dir,
                      "--truncation", "off", "the river", long_text)
    lines = tmp_path / "lines.txt"
    lines.write_text(f"the river\n{long_text}\n", encoding="utf-8")
    assert_user_error(capsys, r"lines.txt:2: \d+ tokens, longer than max_length 32",
                      "tokenize", "--model", model_dir, "--truncation", "off", "--input", lines)
    assert_user_error(capsys, r"text 1: \d+ tokens, longer than max_length 32",
                      "fill-mask", "--model", model_dir, long_text + " [MASK]")
    code, out_text, err = run(capsys, "tokenize", "--model", model_dir, long_text, "the river")
    assert code == 0 and out_text.split("\t")[0] == "32"  # truncated by default
    assert err == "warning: 1 of 2 texts were longer than 32 tokens and were cut\n"
    assert_user_error(capsys, r"text 2: no \[MASK\]", "fill-mask", "--model", model_dir,
                      "a [MASK]", "none here")
    assert_user_error(capsys, r"no text", "tokenize", "--model", model_dir)


@pytest.mark.slow
def test_real_subprocess(model_dir):
    done = subprocess.run([str(BIN), "fill-mask", "--model", str(model_dir), "--json",
                           "the [MASK] ran"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["masks"][0]) == 5
    done = subprocess.run([str(BIN), "info", "--model", str(model_dir.parent)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_a_reader_that_stops_early_ends_the_command_quietly(model_dir):
    # `bertkit evaluate --json | head -c 100`: stdout closed before the command writes
    proc = subprocess.Popen([str(BIN), "fill-mask", "--model", str(model_dir), "--json",
                             "the [MASK] ran"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # as the shell reports `cat` killed by SIGPIPE
    assert err == ""


def test_fill_mask_refuses_a_model_without_a_trained_mlm_head(model_dir, tmp_path, capsys):
    """An encoder-only directory (BertModel, a sentence-transformers checkpoint): the MLM head
    would be initialised at random and its guesses noise."""
    from bertkit.model.hub import load_encoder, save_model
    from bertkit.text.tokenizer import Tokenizer

    encoder_only = save_model(load_encoder(model_dir), tmp_path / "encoder",
                              tokenizer=Tokenizer.load(model_dir))
    line = assert_user_error(capsys, r"has no trained masked-LM head", "fill-mask", "--model",
                             encoder_only, "the [MASK] ran")
    assert line == (f"error: {encoder_only} has no trained masked-LM head (no mlm.bias, "
                    "mlm.dense.weight, mlm.dense.bias, mlm.norm.weight, mlm.norm.bias in its "
                    "weights); "
                    "fill-mask needs one (--allow-untrained-head guesses with a random one)")
    code, out, err = run(capsys, "fill-mask", "--model", encoder_only, "--allow-untrained-head",
                         "the [MASK] ran")
    assert code == 0 and out.startswith("the [MASK] ran\n  [MASK] 1:")
    assert "initialised randomly" in err
