"""Pictures: attention weights re-derived correctly, projections, and PNGs written."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.embeddings.anisotropy import anisotropy_report
from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError
from bertkit.embeddings.plots import (SenseInstance, attention_probabilities, plot_anisotropy,
                           plot_attention, plot_senses, project_2d, read_sense_instances)
from test_embed import SENTENCES, tiny_model

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="module")
def embedder(model_dir):
    return Embedder.load(model_dir)


def sense_data(path):
    """'bank' as a river side and as money, in sentences that say so."""
    rows = []
    for text, sense in [("we sat on the river bank .", "river"),
                        ("the water of the river bank", "river"), ("a river bank", "river"),
                        ("the bank raised rates", "money"), ("the money bank", "money"),
                        ("the bank raised money", "money")]:
        start = text.index("bank")
        rows.append({"lemma": "bank", "synset": sense, "gloss": f"{sense} sense", "text": text,
                     "start": start, "end": start + 4})
    rows.append({"lemma": "river", "synset": "x", "text": "river", "start": 0, "end": 5})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_attention_weights_equal_transformers(model_dir, embedder):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(
        str(model_dir), attn_implementation="eager").eval()
    text = SENTENCES[3]
    ids = torch.from_numpy(embedder.tokenize([text])[0].ids)[None]
    with torch.no_grad():
        hf = reference(ids, output_attentions=True).attentions
    for layer in (1, 3, -1):
        probs, tokens = attention_probabilities(embedder, text, layer)
        assert probs.shape == (4, len(tokens), len(tokens)) and tokens[0] == "[CLS]"
        np.testing.assert_allclose(probs, hf[layer - 1 if layer > 0 else layer][0].numpy(),
                                   atol=1e-5)
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    with pytest.raises(UserError, match="blocks 1..3"):
        attention_probabilities(embedder, text, 0)


def test_pca_finds_the_direction_of_largest_variance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 10)) * 0.1
    x[:, 4] += np.repeat([-5.0, 5.0], 100)  # two clusters along dimension 4
    points, labels = project_2d(x)
    assert points.shape == (200, 2) and "principal component 1" in labels[0]
    assert (np.sign(points[:100, 0]) != np.sign(points[100:, 0])[0]).all()  # split on PC1
    np.testing.assert_allclose(points, project_2d(x)[0])  # deterministic


def test_umap_missing_is_a_clear_error():
    try:
        import umap  # noqa: F401
        pytest.skip("umap-learn is installed")
    except ImportError:
        pass
    with pytest.raises(UserError, match="umap-learn"):
        project_2d(np.eye(5), "umap")


def test_read_sense_instances(tmp_path):
    data = sense_data(tmp_path / "wsd.jsonl")
    found = read_sense_instances(data, "bank", max_per_sense=2)
    assert [i.sense for i in found] == ["river", "river", "money", "money"]
    assert found[0].text[found[0].start:found[0].end] == "bank"
    with pytest.raises(UserError, match="0 instances of 'cat'"):
        read_sense_instances(data, "cat")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"lemma": "bank", "text": "bank"}) + "\n")
    with pytest.raises(UserError, match="bad.jsonl:1"):
        read_sense_instances(bad, "bank")


def test_plots_write_pngs(embedder, tmp_path):
    instances = [SenseInstance("the river bank", 10, 14, "river", "side of a river"),
                 SenseInstance("a river bank", 8, 12, "river", "side of a river"),
                 SenseInstance("the bank raised rates", 4, 8, "money", "a financial institution")]
    out = plot_senses(embedder, instances, tmp_path / "senses.png", layers="last4")
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 10_000
    report, _ = anisotropy_report(embedder, SENTENCES * 2, min_count=2)
    assert plot_anisotropy(report, tmp_path / "a.png").read_bytes()[:8] == PNG
    one = plot_attention(embedder, SENTENCES[0], tmp_path / "h.png", layer=2, head=1)
    assert one.read_bytes()[:8] == PNG
    with pytest.raises(UserError, match="heads 0..3"):
        plot_attention(embedder, SENTENCES[0], tmp_path / "x.png", head=4)
    assert not (tmp_path / "x.png").exists()


def test_plot_commands(model_dir, tmp_path, capsys):
    data = sense_data(tmp_path / "wsd.jsonl")
    out = tmp_path / "bank.png"
    assert main(["plot", "senses", "--model", str(model_dir), "--input", str(data), "--lemma",
                 "bank", "--layers", "last4", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    out = tmp_path / "att.png"
    assert main(["plot", "attention", "--model", str(model_dir), "--text", "the bank raised rates",
                 "--layer", "-1", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert main(["plot", "senses", "--model", str(model_dir), "--input", str(data), "--lemma",
                 "cat", "--out", str(tmp_path / "no.png")]) == 2
    assert "0 instances" in capsys.readouterr().err
