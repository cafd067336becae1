"""Model names resolved offline in the local Hugging Face cache (HF_HUB_OFFLINE, set for every
test by tests/conftest.py), by every loader."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError
from bertkit.model import hub
from bertkit.model.create import init_model
from bertkit.model.fill_mask import FillMask
from bertkit.model.info import info

NAME = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def fake_cache(root: Path, model_dir: Path, name: str = NAME, refs: bool = True) -> Path:
    """huggingface_hub's layout: models--{org}--{name}/refs/main -> snapshots/{commit}/."""
    repo = root / ("models--" + name.replace("/", "--"))
    (repo / "snapshots").mkdir(parents=True)
    (repo / "snapshots" / COMMIT).symlink_to(model_dir, target_is_directory=True)
    if refs:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(COMMIT)
    return repo / "snapshots" / COMMIT


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)  # no directory of the model's name where the test runs
    return root


def test_a_name_resolves_to_its_snapshot(cache, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    snapshot = fake_cache(cache, model)
    assert hub.resolve_model(NAME) == snapshot
    assert hub.resolve_model(Path(NAME)) == snapshot


def test_other_cache_variables(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    snapshot = fake_cache(tmp_path / "home" / "hub", tmp_path / "model", "bert-tiny")
    assert hub.hf_cache_dir() == tmp_path / "home" / "hub"
    assert hub.resolve_model("bert-tiny") == snapshot
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert hub.hf_cache_dir() == tmp_path / "user" / ".cache" / "huggingface" / "hub"


def test_an_existing_path_wins_over_a_name(cache, tmp_path):
    fake_cache(cache, tmp_path)
    local = tmp_path / NAME
    local.mkdir(parents=True)
    assert hub.resolve_model(NAME) == Path(NAME)  # relative to the working directory


def test_a_name_not_in_the_cache_offline_says_where_it_looked_and_how_to_fetch_it(cache):
    with pytest.raises(UserError) as error:
        hub.resolve_model("someone/missing-model")
    message = str(error.value)
    assert "\n" not in message and str(cache) in message
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE is set" in message
    assert "`hf download someone/missing-model`" in message  # huggingface_hub's CLI today


def test_what_cannot_be_a_name_is_left_to_the_caller(cache, tmp_path):
    for path in (tmp_path / "nowhere", "./nowhere", "a/b/c", "~/nowhere", "/nowhere"):
        assert hub.resolve_model(path) == Path(path)
    with pytest.raises(UserError, match="model directory does not exist"):
        hub.load_config(tmp_path / "nowhere")


def test_every_loader_takes_a_cached_name(cache, minilm_dir, tmp_path, capsys):
    snapshot = fake_cache(cache, minilm_dir)
    assert hub.load_config(NAME).hidden_size == 384
    assert info(NAME).path == snapshot
    by_name, by_path = Embedder.load(NAME), Embedder.load(minilm_dir)
    assert by_name.normalize  # the snapshot's modules.json is read too
    texts = ["A man is eating food.", "The bank raised its rates."]
    np.testing.assert_allclose(by_name.encode(texts), by_path.encode(texts), atol=1e-6)
    with pytest.warns(UserWarning, match="no weights for mlm"):  # MiniLM has no MLM head
        assert FillMask.load(NAME).tokenizer.vocab_size == 30522
    assert main(["info", "--model", NAME]) == 0
    assert "384" in capsys.readouterr().out
    assert init_model("tiny", NAME, tmp_path / "new").config.vocab_size == 30522  # its tokenizer


def test_cli_embed_with_a_name(cache, minilm_dir, tmp_path, capsys):
    fake_cache(cache, minilm_dir)
    source = tmp_path / "in.txt"
    source.write_text("A man is eating food.\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", NAME, "--input", str(source), "--out", str(out),
                 "--quiet"]) == 0
    np.testing.assert_allclose(np.linalg.norm(np.load(out), axis=1), 1.0, atol=1e-5)
    assert main(["embed", "--model", "someone/missing-model", "--input", str(source), "--out",
                 str(tmp_path / "w.npy"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "`hf download someone/missing-model`" in err
    assert len(err.strip().splitlines()) == 1
