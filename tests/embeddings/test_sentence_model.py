"""sentence-transformers directories: read as sentence-transformers reads them (modules.json,
Pooling, Normalize, max_seq_length, do_lower_case), and written so that it loads them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.embeddings.embedder import POOLS, Embedder
from bertkit.embeddings.sentence_model import read_sentence_model, sentence_model_files
from bertkit.files import UserError
from bertkit.model import hub
from bertkit.text.tokenizer import Tokenizer

# over 256 tokens, MiniLM's max_seq_length, so that the cut is compared too
LONG = " ".join(["the river bank is where we sat and talked about interest rates"] * 30)
TEXTS = ["A man is eating food.", "The bank raised its interest rates by half a point.",
         "Short.", LONG, "", "Über-café naïveté, 東京 and emoji 🎉 in one line."]


@pytest.fixture(scope="module")
def sentence_transformer(minilm_dir):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(str(minilm_dir), device="cpu")


def write_sentence_dir(model_dir: Path, out: Path, pooling: dict, *, normalize: bool = False,
                       transformer_path: str = "", settings: dict | None = None) -> Path:
    """A sentence-transformers directory around a copy of `model_dir`."""
    shutil.copytree(model_dir, out / transformer_path if transformer_path else out,
                    dirs_exist_ok=True)
    modules = [{"idx": 0, "name": "0", "path": transformer_path,
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if settings is not None:
        (out / transformer_path / "sentence_bert_config.json").write_text(json.dumps(settings))
    return out


# Reading ----------------------------------------------------------------------------------------

def test_minilm_by_default_equals_sentence_transformers(minilm_dir, sentence_transformer):
    embedder = Embedder.load(minilm_dir)
    assert (embedder.pool, embedder.normalize, embedder.max_length) == (("mean",), True, 256)
    with pytest.warns(UserWarning, match="1 of 6 texts"):
        ours = embedder.encode(TEXTS, batch_size=4)
    theirs = sentence_transformer.encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # explicit settings still win: no normalisation, [CLS]
    raw = embedder.encode(TEXTS[:3], normalize=False, pool="cls")
    assert np.linalg.norm(raw, axis=1).min() > 2


@pytest.mark.parametrize("mode", [*POOLS, ("cls", "max", "mean")])
def test_every_pooling_mode_equals_sentence_transformers(minilm_dir, sentence_transformer, mode):
    from sentence_transformers.sentence_transformer.modules import Pooling

    embedder = Embedder.load(minilm_dir)
    kept = sentence_transformer[1]
    sentence_transformer[1] = Pooling(384, pooling_mode=mode)
    try:
        theirs = sentence_transformer.encode(TEXTS[:3] + TEXTS[4:], batch_size=3)
    finally:
        sentence_transformer[1] = kept
    ours = embedder.encode(TEXTS[:3] + TEXTS[4:], batch_size=3, pool=mode)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_cli_embed_follows_modules_json(minilm_dir, sentence_transformer, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(t for t in TEXTS if t) + "\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", str(minilm_dir), "--input", str(source), "--out", str(out),
                 "--quiet"]) == 0
    theirs = sentence_transformer.encode([t for t in TEXTS if t])
    np.testing.assert_allclose(np.load(out), theirs, atol=1e-5)
    assert main(["embed", "--model", str(minilm_dir), "--input", str(source), "--out", str(out),
                 "--quiet", "--no-normalize", "--pool", "max"]) == 0
    assert np.linalg.norm(np.load(out), axis=1).min() > 1.5
    capsys.readouterr()


def test_pooling_configs_old_and_new(tiny_bert_dir, embedder, sentences, tmp_path):
    old = write_sentence_dir(tiny_bert_dir, tmp_path / "old",
                             {"word_embedding_dimension": 32, "pooling_mode_max_tokens": True,
                              "pooling_mode_mean_tokens": False})
    loaded = Embedder.load(old)
    assert (loaded.pool, loaded.normalize) == (("max",), False)
    np.testing.assert_allclose(loaded.encode(sentences), embedder.encode(sentences, pool="max"),
                               atol=1e-6)
    new = write_sentence_dir(tiny_bert_dir, tmp_path / "new",
                             {"embedding_dimension": 32, "pooling_mode": ["lasttoken", "cls"]},
                             normalize=True, settings={"max_seq_length": 5})
    loaded = Embedder.load(new)
    assert (loaded.pool, loaded.normalize, loaded.max_length) == (("lasttoken", "cls"), True, 5)
    with pytest.warns(UserWarning, match="2 of 2 texts"):
        vectors = loaded.encode(sentences[:2])
    assert vectors.shape == (2, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_transformer_in_a_subdirectory(tiny_bert_dir, embedder, sentences, tmp_path):
    path = write_sentence_dir(tiny_bert_dir, tmp_path / "st", {"pooling_mode": "cls"},
                              transformer_path="0_Transformer",
                              settings={"max_seq_length": 7, "do_lower_case": False})
    loaded = Embedder.load(path)
    assert loaded.max_length == 7 and loaded.pool == ("cls",)
    cut = Embedder(embedder.encoder, embedder.tokenizer, max_length=7)
    with pytest.warns(UserWarning, match="were cut"):
        np.testing.assert_allclose(loaded.encode(sentences[:3]),
                                   cut.encode(sentences[:3], pool="cls"), atol=1e-6)


def test_do_lower_case_lowercases_before_a_cased_tokenizer(tiny_bert_dir, tmp_path):
    cased = hub.save_model(hub.load_encoder(tiny_bert_dir), tmp_path / "cased",
                           tokenizer=Tokenizer.from_vocab(tiny_bert_dir / "vocab.txt",
                                                          lowercase=False))
    plain = Embedder.load(cased)
    assert not np.allclose(plain.encode(["THE BANK"]), plain.encode(["the bank"]))
    path = write_sentence_dir(cased, tmp_path / "st", {"pooling_mode": "mean"},
                              settings={"max_seq_length": 64, "do_lower_case": True})
    lowered = Embedder.load(path)
    np.testing.assert_allclose(lowered.encode(["THE BANK"]), plain.encode(["the bank"]),
                               atol=1e-6)


def test_no_modules_json_is_a_plain_model(embedder):
    assert (embedder.pool, embedder.normalize, embedder.lowercase) == (("mean",), False, False)


@pytest.mark.parametrize("pooling, modules, message", [
    ({"pooling_mode": "median"}, None, "pooling mode 'median' is not one of"),
    ({"pooling_mode": "mean"}, ["Transformer", "Pooling", "Dense", "Normalize"],
     "Transformer -> Pooling -> Dense -> Normalize; bertkit follows"),
])
def test_unsupported_pipelines_are_one_line_errors(tiny_bert_dir, tmp_path, pooling, modules,
                                                   message, capsys):
    path = write_sentence_dir(tiny_bert_dir, tmp_path / "st", pooling)
    if modules:
        (path / "modules.json").write_text(json.dumps([
            {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_{kind}",
             "type": f"sentence_transformers.models.{kind}"} for i, kind in enumerate(modules)]))
    with pytest.raises(UserError, match=message):
        Embedder.load(path)
    source = tmp_path / "in.txt"
    source.write_text("the bank\n")
    assert main(["embed", "--model", str(path), "--input", str(source), "--out",
                 str(tmp_path / "v.npy"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message.split(";")[0] in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "v.npy").exists()


# Writing ----------------------------------------------------------------------------------------

def test_saved_model_loads_in_sentence_transformers(tiny_bert_dir, sentences, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    embedder = Embedder.load(tiny_bert_dir, max_length=6)
    embedder.pool, embedder.normalize = ("cls", "max"), True
    path = embedder.save(tmp_path / "sentence")
    assert read_sentence_model(path).pool == ("cls", "max")
    with pytest.warns(UserWarning, match="2 of 5 texts"):  # cut to 6 tokens, as theirs
        ours = embedder.encode(sentences)
    theirs = st.SentenceTransformer(str(path), device="cpu").encode(sentences)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    with pytest.warns(UserWarning, match="2 of 5 texts"):
        np.testing.assert_allclose(Embedder.load(path).encode(sentences), ours, atol=1e-6)


def test_saved_minilm_round_trips_through_sentence_transformers(minilm_dir, sentence_transformer,
                                                                tmp_path):
    st = pytest.importorskip("sentence_transformers")
    path = Embedder.load(minilm_dir).save(tmp_path / "minilm")
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling", "2_Normalize"} <= \
        {p.name for p in path.iterdir()}
    with pytest.warns(UserWarning, match="were cut"):
        ours = Embedder.load(path).encode(TEXTS)
    theirs = st.SentenceTransformer(str(path), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, sentence_transformer.encode(TEXTS), atol=1e-5)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_written_files_spell_what_is_asked():
    files = {k: json.loads(v) for k, v in sentence_model_files(("mean",), False, 128, 32).items()}
    assert [m["type"].rsplit(".", 1)[-1] for m in files["modules.json"]] == ["Transformer",
                                                                            "Pooling"]
    assert files["1_Pooling/config.json"]["pooling_mode_mean_tokens"] is True
    assert files["sentence_bert_config.json"] == {"max_seq_length": 128, "do_lower_case": False}
    files = {k: json.loads(v) for k, v in sentence_model_files(("max", "cls"), True, 8, 4).items()}
    assert files["1_Pooling/config.json"]["pooling_mode"] == ["max", "cls"]
    assert "2_Normalize/config.json" in files


def test_cli_sentence_model(tiny_bert_dir, embedder, sentences, tmp_path, capsys):
    out = tmp_path / "sentence"
    assert main(["sentence-model", "--model", str(tiny_bert_dir), "--out", str(out),
                 "--pool", "max", "--normalize", "--max-length", "20"]) == 0
    assert "max pooling, normalized, max 20 tokens" in capsys.readouterr().out
    loaded = Embedder.load(out)
    assert (loaded.pool, loaded.normalize, loaded.max_length) == (("max",), True, 20)
    np.testing.assert_allclose(loaded.encode(sentences),
                               embedder.encode(sentences, pool="max", normalize=True), atol=1e-6)
    # a sentence model written again keeps its own settings unless told otherwise
    again = tmp_path / "again"
    assert main(["sentence-model", "--model", str(out), "--out", str(again)]) == 0
    assert read_sentence_model(again).pool == ("max",) and read_sentence_model(again).normalize
