"""`bertkit static distill`: the vectors equal a computation by hand (transformers' BERT for the
teacher, scikit-learn's PCA, the SIF weights written out); model2vec and sentence-transformers
load the directory and give bertkit's sentence vectors; embed, evaluate and serve take it;
bad input is one line, exit 2, before any work."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.distill_static import (DistillOptions, distill_static, distilled_ids,
                                               sif_weights)
from bertkit.embeddings.embedder import Embedder
from bertkit.model.kind import ModelKind, model_kind
from bertkit.text.tokenizer import Tokenizer

DIMS = 8
SIF = 1e-2  # larger than the default, so that the weights differ visibly over 19 pieces
KNOWN = ["we sat on the river bank .", "the bank raised rates", "unbelievable", "playing",
         "a river , the water , the money"]
"""Texts of known pieces only."""
UNKNOWN = ["the cat sat on the mat", "xyz", "", "the [MASK] bank"]
"""Texts with unknown words (whose pieces are [UNK]), none at all, or a special token typed."""


@pytest.fixture(scope="module")
def distilled(tiny_bert_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("static") / "vectors"
    distill_static(DistillOptions(model=tiny_bert_dir, out=out, dims=DIMS, sif_coefficient=SIF,
                                  device="cpu", quiet=True))
    return out


def _table(path: Path) -> np.ndarray:
    from safetensors.numpy import load_file
    return load_file(str(path / "model.safetensors"))["embeddings"]


def _by_hand(tiny_bert_dir: Path, dims: int, sif: float) -> tuple[np.ndarray, np.ndarray]:
    """The ids distilled and their vectors, computed without bertkit: transformers' BertModel
    on [CLS] piece [SEP], the mean of its three outputs; scikit-learn's PCA; the weights."""
    transformers = pytest.importorskip("transformers")
    decomposition = pytest.importorskip("sklearn.decomposition")
    vocab = [line.strip() for line in (tiny_bert_dir / "vocab.txt").read_text().splitlines()]
    ids = [i for i, token in enumerate(vocab) if not token.startswith("[")]
    model = transformers.AutoModel.from_pretrained(tiny_bert_dir).eval()
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    with torch.no_grad():
        states = model(torch.tensor([[cls, i, sep] for i in ids])).last_hidden_state
    teacher = states.mean(1).double().numpy()
    reduced = decomposition.PCA(dims, svd_solver="full").fit_transform(teacher)
    n = len(ids)
    total = sum(1 / (k + 1) for k in range(1, n + 1))
    weights = [sif / (sif + (1 / (r + 1)) / total) for r in range(1, n + 1)]
    return np.array(ids), reduced * np.array(weights)[:, None]


def test_the_vectors_equal_a_computation_by_hand(distilled, tiny_bert_dir):
    ids, expected = _by_hand(tiny_bert_dir, DIMS, SIF)
    table = _table(distilled)
    assert table.shape == (24, DIMS) and table.dtype == np.float32
    got = table[ids].astype(np.float64)
    signs = np.sign((got * expected).sum(0))  # each component's sign is a convention
    np.testing.assert_allclose(got, expected * signs, atol=1e-5, rtol=1e-4)
    special = np.setdiff1d(np.arange(24), ids)
    assert len(special) == 5 and not table[special].any()  # [PAD] [UNK] [CLS] [SEP] [MASK]


def test_sif_weights_follow_the_formula_and_grow_with_rank():
    w = sif_weights(5, 1e-3)
    inverse = np.array([1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6])
    np.testing.assert_allclose(w, 1e-3 / (1e-3 + inverse / inverse.sum()))
    assert (np.diff(w) > 0).all()
    assert (sif_weights(4, None) == 1).all()


def test_unused_and_special_pieces_are_left_out(tmp_path):
    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    assert distilled_ids(Tokenizer.from_vocab(tmp_path / "vocab.txt")).tolist() == [7, 8]


def test_the_directory_is_its_own_kind_and_records_its_making(distilled, tiny_bert_dir):
    assert model_kind(distilled) is ModelKind.STATIC_SENTENCE
    config = json.loads((distilled / "config.json").read_text())
    assert config["model_type"] == "model2vec" and config["hidden_dim"] == DIMS
    assert config["normalize"] is True and config["max_length"] is None
    settings = json.loads((distilled / "training_args.json").read_text())
    assert settings["options"]["dims"] == DIMS
    card = (distilled / "README.md").read_text()
    assert "library_name" in card and "19 vocabulary entries" in card


def test_model2vec_gives_bertkit_s_sentence_vectors(distilled):
    model2vec = pytest.importorskip("model2vec")
    texts = KNOWN + UNKNOWN
    ours = Embedder.load(distilled).encode(texts)
    theirs = model2vec.StaticModel.from_pretrained(distilled).encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    norms = np.linalg.norm(ours, axis=1)
    np.testing.assert_allclose(norms[:len(KNOWN)], 1, atol=1e-5)
    assert not ours[texts.index("xyz")].any() and not ours[texts.index("")].any()


def test_model2vec_without_normalising_leaves_unknown_pieces_out(distilled, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    raw = tmp_path / "raw"
    shutil.copytree(distilled, raw)
    config = json.loads((raw / "config.json").read_text())
    (raw / "config.json").write_text(json.dumps({**config, "normalize": False}))
    texts = KNOWN + UNKNOWN
    ours = Embedder.load(raw).encode(texts)
    np.testing.assert_allclose(ours, model2vec.StaticModel.from_pretrained(raw).encode(texts),
                               atol=1e-5)
    table, tokenizer = _table(raw), Tokenizer.load(raw)
    pieces = tokenizer.encode("the cat sat on the mat", add_special_tokens=False).ids
    known = [i for i in pieces if i != tokenizer.unk_id]
    assert len(known) == len(pieces) - 2  # "cat" and "mat" are unknown
    np.testing.assert_allclose(ours[len(KNOWN)], table[known].mean(0), atol=1e-6)


def test_sentence_transformers_gives_bertkit_s_sentence_vectors(distilled):
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("model2vec")
    texts = KNOWN + UNKNOWN
    ours = Embedder.load(distilled).encode(texts)
    # the directory as it is (its modules.json), and StaticEmbedding through model2vec's loader
    np.testing.assert_allclose(st.SentenceTransformer(str(distilled), device="cpu")
                               .encode(texts), ours, atol=1e-5)
    static = st.models.StaticEmbedding.from_model2vec(str(distilled))
    model = st.SentenceTransformer(modules=[static, st.models.Normalize()], device="cpu")
    np.testing.assert_allclose(model.encode(texts), ours, atol=1e-5)
    # unnormalized, sentence-transformers counts an unknown piece's zero vector in the mean
    bare = st.SentenceTransformer(modules=[static], device="cpu").encode(texts)
    plain = Embedder.load(distilled)
    plain.normalize = False
    ours = plain.encode(texts)
    np.testing.assert_allclose(bare[:len(KNOWN)], ours[:len(KNOWN)], atol=1e-5)
    cat = len(KNOWN)  # "the cat sat on the mat": 4 known pieces of 6
    np.testing.assert_allclose(bare[cat], ours[cat] * 4 / 6, atol=1e-5)


def test_embed_writes_the_sentence_vectors(distilled, tmp_path, capsys):
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(KNOWN + UNKNOWN[:2]) + "\n")
    out = tmp_path / "vectors.npy"
    assert main(["embed", "--model", str(distilled), "--input", str(source), "--out", str(out),
                 "--quiet"]) == 0
    assert f"{len(KNOWN) + 2} rows" in capsys.readouterr().out
    expected = Embedder.load(distilled).encode(KNOWN + UNKNOWN[:2])
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)
    words = tmp_path / "words.npy"  # a word's vector: its pieces', the same in every text
    assert main(["embed", "--model", str(distilled), "--input", str(source), "--out",
                 str(words), "--words", "--quiet"]) == 0
    rows = [json.loads(line) for line in words.with_suffix(".index.jsonl").read_text()
            .splitlines()]
    banks = np.load(words)[[r["row"] for r in rows if r["text"] == "bank"]]
    assert len(banks) == 2 and np.allclose(banks[0], banks[1])


def test_evaluate_gives_the_spearman_of_the_cosines(distilled, tmp_path, capsys):
    scipy_stats = pytest.importorskip("scipy.stats")
    pairs = [("we sat on the river bank .", "a river , the water", 4.5),
             ("the bank raised rates", "the money rates", 3.9),
             ("playing", "the bank raised rates", 1.2),
             ("unbelievable", "the water", 2.0),
             ("we sat on the river bank .", "the money", 2.5)]
    path = tmp_path / "sts.dev.jsonl"
    path.write_text("".join(json.dumps({"premise": a, "hypothesis": b, "label": "neutral",
                                        "relatedness": s}) + "\n" for a, b, s in pairs))
    assert main(["evaluate", "--model", str(distilled), "--input", str(path), "--json",
                 "--quiet"]) == 0
    scores = json.loads(capsys.readouterr().out)
    vectors = Embedder.load(distilled)
    a, b = vectors.encode([p[0] for p in pairs]), vectors.encode([p[1] for p in pairs])
    cosines = (a * b).sum(1)
    expected = scipy_stats.spearmanr(cosines, [p[2] for p in pairs]).statistic
    assert scores["spearman"] == pytest.approx(expected, abs=1e-6)


def test_serve_searches_with_it_as_a_sentence_model(distilled, tmp_path):
    from bertkit.serve.workbench import Workbench

    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(KNOWN * 2) + "\n")
    bench = Workbench.load([distilled], corpus=lines)
    (served,) = bench.models.values()
    info = served.describe()
    assert info["kind"] == "static vectors" and info["sentence_model"] and info["search"]
    assert not info["fill_mask"] and not info["attention"]
    answer = bench.search("the river bank", k=3)
    (model,) = answer["models"]
    vectors = Embedder.load(distilled)
    cosines = vectors.encode(KNOWN) @ vectors.encode(["the river bank"])[0]
    assert [hit["text"] for hit in model["results"]][0] == KNOWN[int(np.argmax(cosines))]
    np.testing.assert_allclose(model["results"][0]["cosine"], cosines.max(), atol=1e-5)
    view = bench.senses(served.name, "bank", "all")
    assert view["layers"] == [0] and len(view["contexts"]) >= 3


def test_a_teacher_that_lowercases_gives_a_tokenizer_that_does(tiny_bert_dir, tmp_path):
    """A sentence-transformers teacher with do_lower_case over a cased vocabulary: the
    directory's tokenizer lowercases, for bertkit and model2vec alike."""
    model2vec = pytest.importorskip("model2vec")
    base = Embedder.load(tiny_bert_dir)
    cased = Tokenizer.from_vocab(tiny_bert_dir / "vocab.txt", lowercase=False)
    Embedder(base.encoder, cased, lowercase=True).save(tmp_path / "teacher")
    assert Embedder.load(tmp_path / "teacher").lowercase
    distill_static(DistillOptions(model=tmp_path / "teacher", out=tmp_path / "static",
                                  dims=4, device="cpu", quiet=True))
    static = Embedder.load(tmp_path / "static")
    shouted, plain = static.encode(["The River BANK"]), static.encode(["the river bank"])
    assert np.abs(plain).sum() > 0
    np.testing.assert_allclose(shouted, plain, atol=1e-6)
    theirs = model2vec.StaticModel.from_pretrained(tmp_path / "static")
    np.testing.assert_allclose(theirs.encode(["The River BANK"]), plain, atol=1e-5)


def _no_tokenizer(tiny_bert_dir: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "bare"
    shutil.copytree(tiny_bert_dir, bare)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json"):
        (bare / name).unlink(missing_ok=True)
    return bare


@pytest.mark.parametrize("case, words", [
    ("no tokenizer", "not a tokenizer directory"),
    ("wider than the model", "more than the 32 dimensions"),
    ("more than the vocabulary", "more than the 19 vocabulary entries"),
    ("dims 0", "--dims must be at least 1"),
    ("sif 1", "--sif-coefficient must lie between 0 and 1")])
def test_bad_input_is_one_line_and_exit_2_before_any_work(tiny_bert_dir, tmp_path, capsys,
                                                          monkeypatch, case, words):
    from bertkit.embeddings import distill_static as module

    def no_work(*args, **kwargs):
        raise AssertionError("the teacher ran")

    monkeypatch.setattr(module, "teacher_vectors", no_work)
    model, flags = tiny_bert_dir, []
    if case == "no tokenizer":
        model = _no_tokenizer(tiny_bert_dir, tmp_path)
    flags = {"wider than the model": ["--dims", "33"],
             "more than the vocabulary": ["--dims", "20"], "dims 0": ["--dims", "0"],
             "sif 1": ["--sif-coefficient", "1"]}.get(case, [])
    out = tmp_path / "out"
    assert main(["static", "distill", "--model", str(model), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not out.exists()


def test_the_command_prints_what_it_made(tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "vectors"
    assert main(["static", "distill", "--model", str(tiny_bert_dir), "--out", str(out),
                 "--dims", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{out}: 19 of 24 pieces x 4 dimensions")
    assert "distilling 19 of 24 vocabulary entries" in captured.err
    assert "19/19 texts" in captured.err  # the teacher's progress
    assert _table(out).shape == (24, 4)
