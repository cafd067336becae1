"""Extraction of token, word and sentence vectors; files; the embed command; parity with
transformers and sentence-transformers on the real MiniLM checkpoint."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder, embed, resolve_layers, word_vector
from bertkit.embeddings.inputs import plan_batches
from bertkit.embeddings.files import embed_file, index_path_for
from bertkit.embeddings.standardize import Standardizer
from bertkit.files import UserError
from bertkit.model.encoder import Encoder

def reference_states(embedder: Embedder, text) -> tuple[torch.Tensor, ...]:
    """All hidden states [T, H] of one text run alone (no batching, no padding)."""
    e = embedder.tokenize([text])[0]
    with torch.no_grad():
        out = embedder.encoder(torch.tensor(e.ids)[None], torch.tensor(e.type_ids)[None],
                               output_hidden_states=True)
    return tuple(h[0] for h in out.hidden_states)


def test_resolve_layers():
    assert resolve_layers(-1, 6) == [6]
    assert resolve_layers("last4", 6) == [3, 4, 5, 6]
    assert resolve_layers("all", 2) == [0, 1, 2]
    assert resolve_layers("0,-1", 6) == [0, 6]
    with pytest.raises(ValueError, match="does not exist"):
        resolve_layers(7, 6)
    with pytest.raises(ValueError, match="last4"):
        resolve_layers("top", 6)


def test_sentence_vectors_match_a_single_unpadded_run(embedder, sentences):
    # Mixed lengths in one batch: padding must not change any vector.
    batched = embedder.embed(sentences, pool="mean", batch_size=4)
    cls = embedder.embed(sentences, pool="cls", batch_size=3, layers=2)
    for i, text in enumerate(sentences):
        states = reference_states(embedder, text)
        np.testing.assert_allclose(batched[i], states[-1].mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(cls[i], states[2][0].numpy(), atol=1e-5)


def test_every_pooling_mode_matches_a_single_unpadded_run(embedder, sentences):
    """Each of sentence-transformers' pooling modes, all side by side in one call over batches
    of mixed lengths, against the formula applied to the text run alone."""
    modes = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
    both = embedder.embed(sentences, pool=modes, batch_size=3)
    alone = embedder.embed(sentences, pool="lasttoken", batch_size=4)
    for i, text in enumerate(sentences):
        h = reference_states(embedder, text)[-1]  # [T, H]
        w = torch.arange(1, len(h) + 1, dtype=h.dtype)[:, None]
        want = [h[0], h.max(0).values, h.mean(0), h.sum(0) / len(h) ** 0.5,
                (h * w).sum(0) / w.sum(), h[-1]]
        np.testing.assert_allclose(both[i], torch.cat(want).numpy(), atol=1e-5)
        np.testing.assert_allclose(alone[i], h[-1].numpy(), atol=1e-5)


def test_plan_batches_bounds_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 60, size=500)
    for max_padding in (0.0, 0.02, 0.3):
        batches = plan_batches(lengths, 16, max_padding)
        assert sorted(np.concatenate(batches).tolist()) == list(range(500))
        for b in batches:
            width = lengths[b].max()
            assert len(b) <= 16 and lengths[b[0]] == width
            assert width * len(b) - lengths[b].sum() <= max_padding * width * len(b)
    assert all(len(set(lengths[b])) == 1 for b in plan_batches(lengths, 16, 0.0))
    widths = [lengths[b].max() for b in plan_batches(lengths, 16, 1.0)]
    assert widths == sorted(widths, reverse=True) and len(widths) == 500 // 16 + 1


def test_parallel_batches_equal_one_batch_at_a_time(tiny_bert_dir, sentences):
    threads = torch.get_num_threads()
    parallel = Embedder.load(tiny_bert_dir, workers=3)
    plain = Embedder.load(tiny_bert_dir, workers=1)
    texts = sentences * 5
    np.testing.assert_allclose(parallel.embed(texts, batch_size=2, layers="last4"),
                               plain.embed(texts, batch_size=2, layers="last4"), atol=1e-5)
    assert torch.get_num_threads() == threads  # the caller's thread setting is left alone


def test_progress_counts_tokens_and_texts(embedder, sentences, capsys):
    embedder.embed(sentences, progress=True)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    tokens = sum(len(e.ids) for e in embedder.tokenize(sentences))
    assert last.startswith(f"sentences: {tokens}/{tokens} tokens (100%)")
    assert f"{len(sentences)}/{len(sentences)} texts" in last and "ETA" not in last
    embedder.embed(sentences)
    assert capsys.readouterr().err == ""


def test_layer_combinations(embedder, sentences):
    text = sentences[0]
    states = reference_states(embedder, text)
    last4 = torch.stack(states[-4:])  # [4, T, H] (layers 0..3 of a 3-layer model)
    for combine, expected in (("mean", last4.mean(0)), ("sum", last4.sum(0)),
                              ("concat", torch.cat(list(last4), dim=-1))):
        got = embedder.token_vectors([text], layers="last4", combine=combine)[0]
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-5, err_msg=combine)
    assert embedder.embed([text], layers="last4", combine="concat").shape == (1, 4 * 32)


def test_normalize_gives_unit_rows(embedder, sentences):
    v = embedder.embed(sentences, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    assert embedder.encode(sentences[0]).shape == (32,)
    np.testing.assert_allclose(embedder.encode(sentences, normalize_embeddings=True), v)


def test_word_vector_pools_the_pieces_of_the_word(embedder):
    text = "we sat unbelievable ."
    pieces = embedder.tokenizer.encode(text).tokens
    assert pieces[3:6] == ["un", "##believ", "##able"]
    states = reference_states(embedder, text)
    start = text.index("unbelievable")
    span = (start, start + len("unbelievable"))
    mean = word_vector(embedder, text, span, layers=-1)
    np.testing.assert_allclose(mean, states[-1][3:6].mean(0).numpy(), atol=1e-5)
    first = embedder.word_vector(text, span, layers=-1, subword_pool="first")
    np.testing.assert_allclose(first, states[-1][3].numpy(), atol=1e-5)
    # A span inside the word still picks the pieces it overlaps.
    inner = embedder.word_vector(text, (start + 3, start + 5), layers=-1)
    np.testing.assert_allclose(inner, states[-1][4].numpy(), atol=1e-5)


def test_word_vectors_batch_equals_one_at_a_time(embedder, sentences):
    texts = [s for s in sentences if "bank" in s]
    spans = [(t.index("bank"), t.index("bank") + 4) for t in texts]
    batch = embedder.word_vectors(texts, spans, batch_size=2)
    for i, (t, s) in enumerate(zip(texts, spans)):
        np.testing.assert_allclose(batch[i], embedder.word_vector(t, s), atol=1e-5)
    assert batch.shape == (len(texts), 32)
    with pytest.raises(ValueError, match="covers no token"):
        embedder.word_vectors(["we sat"], [(2, 3)])
    with pytest.raises(ValueError, match="outside"):
        embedder.word_vectors(["we"], [(0, 9)])


def test_words_lists_every_word_once(embedder):
    vectors, refs = embedder.words(["we sat unbelievable .", ("the bank", "river")])
    assert [r.text for r in refs] == ["we", "sat", "unbelievable", ".", "the", "bank", "river"]
    assert [r.segment for r in refs] == [0, 0, 0, 0, 0, 0, 1]
    assert vectors.shape == (7, 32)


def test_standardize_applies_the_fitted_statistics(tiny_bert_dir, sentences):
    embedder = Embedder.load(tiny_bert_dir)
    rng = np.random.default_rng(0)
    mean, std = rng.normal(size=(4, 32)).astype(np.float32), rng.uniform(1, 2, (4, 32)).astype(np.float32)
    embedder.standardizer = Standardizer(mean, std, [0, 1, 2, 3])
    raw = embedder.token_vectors([sentences[1]], layers=2)[0]
    z = embedder.token_vectors([sentences[1]], layers=2, standardize=True)[0]
    np.testing.assert_allclose(z, (raw - mean[2]) / std[2], atol=1e-5)
    embedder.standardizer = None
    with pytest.raises(UserError, match="no standardizer"):
        embedder.embed(["the bank"], standardize=True)


def test_truncation_warns_and_cuts(tmp_path, make_tiny_bert):
    small = Embedder.load(make_tiny_bert(tmp_path, max_positions=8))
    with pytest.warns(UserWarning, match="1 of 2 texts"):
        v = small.embed(["the bank raised rates on the river bank water", "we sat"])
    assert v.shape == (2, 32)
    with pytest.raises(UserError, match="longer than"):
        small.tokenize(["the bank raised rates on the river bank water"], truncation=False)
    source = tmp_path / "long.txt"
    source.write_text("the bank raised rates on the river bank water\nwe sat\n")
    with pytest.warns(UserWarning, match="1 of 2 lines"):
        result = embed_file(small, source, tmp_path / "v.npy", progress=False)
    assert result.truncated == 1 and np.load(tmp_path / "v.npy").shape == (2, 32)
    index = [json.loads(line) for line in index_path_for(tmp_path / "v.npy").open()]
    assert [r["truncated"] for r in index] == [True, False]


def test_embed_file_sentences_and_words(embedder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("we sat on the river bank .\nthe bank\tplaying\n\nunbelievable\n")
    out = tmp_path / "vectors.npy"
    result = embed_file(embedder, source, out, chunk_lines=2, batch_size=2, progress=False)
    assert (result.rows, result.lines, result.truncated) == (4, 4, 0)
    matrix = np.load(out)
    assert matrix.dtype == np.float32 and matrix.shape == (4, 32)
    expected = embedder.embed(["we sat on the river bank .", ("the bank", "playing"), "",
                               "unbelievable"])
    np.testing.assert_allclose(matrix, expected, atol=1e-5)
    index = [json.loads(line) for line in index_path_for(out).read_text().splitlines()]
    assert [r["line"] for r in index] == [1, 2, 3, 4]

    words_out = tmp_path / "words.npy"
    result = embed_file(embedder, source, words_out, words=True, layers="last4", chunk_lines=3,
                        progress=False)
    index = [json.loads(line) for line in index_path_for(words_out).read_text().splitlines()]
    assert [r["text"] for r in index] == ["we", "sat", "on", "the", "river", "bank", ".", "the",
                                          "bank", "playing", "unbelievable"]
    assert [r["line"] for r in index][-4:] == [2, 2, 2, 4]
    words = np.load(words_out)
    assert words.shape == (11, 32) == (result.rows, 32)
    np.testing.assert_allclose(words[10], embedder.word_vector("unbelievable", (0, 12)),
                               atol=1e-5)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_matrix_disk_space_is_reserved_before_the_memory_map_is_written(
        embedder, tmp_path, monkeypatch):
    """A store into a memory map the disk cannot back is SIGBUS: the space is claimed first,
    so a full disk is a one-line error naming the output, and nothing is left behind."""
    source = tmp_path / "in.txt"
    source.write_text("we sat on the river bank .\nthe bank\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    reserved = []

    def full(fd, offset, length):
        reserved.append(length)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(UserError, match=f"^{out}: no space left on the device"):
        embed_file(embedder, source, out, progress=False)
    assert reserved and reserved[0] >= 2 * 32 * 4  # every row, before any was written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]

    def unsupported(fd, offset, length):  # a file system without fallocate: zeros written
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    embed_file(embedder, source, out, progress=False)
    np.testing.assert_allclose(np.load(out), embedder.embed(["we sat on the river bank .",
                                                             "the bank"]), atol=1e-5)


def test_embed_module_function_takes_a_directory(tiny_bert_dir, embedder, sentences):
    np.testing.assert_allclose(embed(tiny_bert_dir, sentences[:2], pool="cls"),
                               embedder.embed(sentences[:2], pool="cls"), atol=1e-6)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"), (b"", "is empty"), (b"ok\n\xff bad\n", ":2: not UTF-8")])
def test_cli_bad_input_exits_2_and_writes_nothing(tiny_bert_dir, tmp_path, capsys, content,
                                                  message):
    source = tmp_path / "in.txt"
    if content is not None:
        source.write_bytes(content)
    out = tmp_path / "out.npy"
    assert main(["embed", "--model", str(tiny_bert_dir), "--input", str(source), "--out", str(out),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == (["in.txt"] if content is not None else [])


@pytest.mark.parametrize("flag, message", [("--max-length", "--max-length must be at least 1"),
                                           ("--workers", "--workers must be at least 1")])
def test_cli_a_count_of_0_is_refused_not_read_as_the_default(tmp_path, capsys, flag, message):
    # no model there: the options are checked first
    assert main(["embed", "--model", str(tmp_path / "none"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "v.npy"), flag, "0"]) == 2
    assert capsys.readouterr().err == f"error: {message}, got 0\n"


@pytest.mark.parametrize("name, fix", [("v.csv", "v.npy"), ("vectors", "vectors.npy")])
def test_cli_an_out_not_named_npy_is_refused_before_the_model_loads(tmp_path, capsys, name,
                                                                    fix):
    # the matrix is .npy whatever the name: under v.csv it would mislead every reader
    assert main(["embed", "--model", str(tmp_path / "none"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {tmp_path / name}: ") and err.endswith(f"name it {fix}\n")
    assert list(tmp_path.iterdir()) == []


def test_cli_embed_options(tiny_bert_dir, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("we sat on the river bank .\nunbelievable\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", str(tiny_bert_dir), "--input", str(source), "--out", str(out),
                 "--layers", "last4", "--combine", "concat", "--pool", "cls", "--normalize", "--quiet"]) == 0
    v = np.load(out)
    assert v.shape == (2, 4 * 32)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert "2 rows from 2 lines" in capsys.readouterr().out
    assert main(["embed", "--model", str(tiny_bert_dir), "--input", str(source), "--out", str(out),
                 "--layers", "9", "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_subprocess_words(tiny_bert_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the bank raised rates\n")
    out = tmp_path / "w.npy"
    bertkit = Path(sys.executable).parent / "bertkit"
    done = subprocess.run([str(bertkit), "embed", "--model", str(tiny_bert_dir), "--input",
                           str(source), "--out", str(out), "--words", "--subword-pool", "first",
                           "--layers", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert np.load(out).shape == (4, 32)


# The real checkpoint ------------------------------------------------------------------------

MIXED = ["A man is eating food.", "The bank raised its interest rates by half a point.",
         "Short.", "Über-café naïveté, 東京 and emoji 🎉 in one line of text that runs a bit long "
         "so that the batch has very different lengths in it.", ""]


@pytest.fixture(scope="module")
def minilm_embedder(minilm_dir) -> Embedder:
    return Embedder.load(minilm_dir)


def test_sentence_vectors_equal_sentence_transformers(minilm_dir, minilm_embedder):
    st = pytest.importorskip("sentence_transformers")
    ours = minilm_embedder.encode(MIXED, batch_size=2, normalize=True)
    theirs = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(
        MIXED, batch_size=2, normalize_embeddings=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_token_vectors_equal_transformers(minilm_dir, minilm_embedder):
    transformers = pytest.importorskip("transformers")
    embedder = minilm_embedder
    reference = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    batch = tok(MIXED[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        hf = reference(**batch, output_hidden_states=True).hidden_states
    for layers in (-1, 3, 0):
        ours = embedder.token_vectors(MIXED[:4], layers=layers)
        for i, vectors in enumerate(ours):
            np.testing.assert_allclose(vectors, hf[layers][i, :len(vectors)].numpy(), atol=1e-5)


def test_bf16_stays_close_to_fp32(minilm_embedder):
    exact = minilm_embedder.encode(MIXED, normalize=True)
    fast = Embedder(minilm_embedder.encoder, minilm_embedder.tokenizer,
                    max_length=minilm_embedder.max_length,
                    precision="bf16").encode(MIXED, normalize=True)
    assert np.abs(fast - exact).max() < 2e-2
    assert (fast * exact).sum(1).min() > 0.99


def test_inputs_that_do_not_fit_the_model_name_it(embedder):
    tok, cfg = embedder.tokenizer, embedder.config
    with pytest.raises(UserError, match=rf"^m: the tokenizer's {tok.vocab_size} pieces do not "
                                        rf"fit the model's vocabulary of {tok.vocab_size - 1}"):
        Embedder(Encoder(cfg.replace(vocab_size=tok.vocab_size - 1)), tok, source="m")
    one = Embedder(Encoder(cfg.replace(type_vocab_size=1)), tok, source="m")
    assert one.embed(["we sat"]).shape == (1, 32)
    with pytest.raises(UserError, match=r"^m: the model has 1 segment type, so it takes no "
                                        r"sentence pairs"):
        one.embed([("we sat", "the bank")])
    modern = Embedder(Encoder(cfg.replace(architecture="modern")), tok, source="m")
    assert modern.embed([("we sat", "the bank")]).shape == (1, 32)  # no segments at all


def _watch_batches(monkeypatch, around) -> list:
    """Every batch's device work (`Embedder._vectors`) run inside `around()`; the list of
    calls made."""
    calls, vectors = [], Embedder._vectors

    def watched(self, *args):
        calls.append(args[0])
        with around():
            return vectors(self, *args)
    monkeypatch.setattr(Embedder, "_vectors", watched)
    return calls


def _every_pooling(embedder: Embedder, sentences) -> None:
    embedder.embed(sentences, pool=("cls", "max", "mean", "mean_sqrt_len_tokens",
                                    "weightedmean", "lasttoken"), batch_size=3)
    embedder.embed(sentences, pool="lasttoken", layers="last4", combine="concat")
    embedder.words(sentences, subword_pool="first")
    embedder.words(sentences, subword_pool="mean", batch_size=2)


def test_a_batch_never_makes_the_host_wait(tiny_bert_dir, sentences, host_syncs, monkeypatch):
    """What a GPU would wait on (HostSyncs), in every pooling mode: nothing, so the only wait of
    a batch is the copy of its vectors back to the host."""
    calls = _watch_batches(monkeypatch, lambda: host_syncs)
    _every_pooling(Embedder.load(tiny_bert_dir, workers=1), sentences)
    assert len(calls) >= 4 and host_syncs.found == []


@pytest.mark.gpu
def test_on_a_gpu_a_batch_never_syncs(tiny_bert_dir, sentences, sync_debug_errors,
                                      monkeypatch):
    calls = _watch_batches(monkeypatch, sync_debug_errors)
    embedder = Embedder.load(tiny_bert_dir, device="cuda", precision="bf16")
    _every_pooling(embedder, sentences)
    assert len(calls) >= 4


@pytest.mark.parametrize("native,precision", [(True, "bf16"), (False, "fp32")])
def test_auto_precision_on_a_gpu_is_bf16_only_where_it_is_native(monkeypatch, tmp_path, native,
                                                                 precision):
    """As training's: torch's is_bf16_supported() says yes by default where a GPU emulates
    bf16 (a V100, a T4), whose bf16 matmuls run far slower than fp32's."""
    from bertkit.embeddings import embedder as module

    monkeypatch.delenv("BERTKIT_AUTO_PRECISION", raising=False)  # the suite may set it
    monkeypatch.setattr(module, "resolve_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: native or including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "a GPU")
    monkeypatch.setattr(Embedder, "load", classmethod(lambda cls, model, **kw: kw["precision"]))
    assert module.EncoderOptions(model=tmp_path).load() == precision
