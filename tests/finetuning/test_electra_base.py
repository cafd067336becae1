"""An ELECTRA directory is an encoder to every downstream command: finetune classify and embed
read its discriminator (equal to the encoder's outputs), fill-mask guesses with its generator
and says so, and export onnx writes the discriminator's graph."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.embeddings.embedder import Embedder
from bertkit.model.encoder import init_weights
from bertkit.model.heads import ElectraModel, generator_config
from bertkit.model.hub import load_electra, save_electra
from bertkit.text.tokenizer import Tokenizer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_electra(tiny_bert, tmp_path_factory):
    """A random ELECTRA pair (discriminator 32 wide, generator 16) on the synthetic words."""
    tokenizer = Tokenizer.load(tiny_bert)
    cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2,
                        num_heads=2, intermediate_size=64, max_positions=64,
                        hidden_dropout=0.0, attention_dropout=0.0)
    with torch.random.fork_rng():
        model = ElectraModel(cfg, generator_config(cfg, 0.5))
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    return save_electra(model, tmp_path_factory.mktemp("electra") / "e", tokenizer=tokenizer)


def test_finetune_classify_on_an_electra_discriminator(tiny_electra, task_files, tmp_path):
    out = tmp_path / "clf"
    assert main(["finetune", "classify", "--model", str(tiny_electra), "--train",
                 str(task_files["train"]), "--dev", str(task_files["dev"]), "--out", str(out),
                 "--epochs", "2", "--lr", "1e-2", "--head-lr", "1e-2", "--quiet"]) == 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    texts = tmp_path / "in.txt"
    texts.write_text("the movie was great\nthe plot was awful\n")
    assert main(["predict", "--model", str(out), "--input", str(texts),
                 "--out", str(tmp_path / "p.jsonl")]) == 0
    rows = (tmp_path / "p.jsonl").read_text().splitlines()
    assert len(rows) == 2 and all(json.loads(r)["label"] in ("positive", "negative")
                                  for r in rows), rows


def test_embed_reads_the_discriminator(tiny_electra, tmp_path):
    texts = tmp_path / "in.txt"
    texts.write_text("the movie was great\njohn went to paris .\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", str(tiny_electra), "--input", str(texts), "--out", str(out),
                 "--pool", "mean", "--quiet"]) == 0
    vectors = np.load(out)
    assert vectors.shape == (2, 32)
    embedder = Embedder.load(tiny_electra)
    ids = embedder.tokenizer.encode("the movie was great").ids
    with torch.no_grad():
        h = load_electra(tiny_electra).encoder(torch.tensor([ids])).last_hidden_state[0]
    np.testing.assert_allclose(vectors[0], h.mean(0).numpy(), atol=1e-5)


def test_fill_mask_uses_the_generator_and_says_so(tiny_electra, capsys):
    assert main(["fill-mask", "--model", str(tiny_electra), "--json", "the movie was [MASK]"]) == 0
    captured = capsys.readouterr()
    assert "ELECTRA discriminator; fill-mask guesses with its generator" in captured.err
    guesses = json.loads(captured.out)["masks"][0]
    ids = Tokenizer.load(tiny_electra).encode("the movie was [MASK]").ids
    position = ids.index(Tokenizer.load(tiny_electra).mask_id)
    with torch.no_grad():
        logits = load_electra(tiny_electra).generator(torch.tensor([ids]))[0][0, position]
    assert guesses[0]["token"] == int(logits.argmax())
    assert guesses[0]["score"] == pytest.approx(float(logits.softmax(-1).max()), rel=1e-5)


def test_export_onnx_writes_the_discriminator(tiny_electra, tmp_path):
    pytest.importorskip("onnxruntime")
    assert main(["export", "onnx", "--model", str(tiny_electra), "--out",
                 str(tmp_path / "e.onnx"), "--task", "encoder"]) == 0
    assert (tmp_path / "e.onnx").is_file()


def test_anisotropy_reads_the_discriminator(tiny_electra, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the movie was great .\njohn went to paris .\nthe plot was awful .\n" * 4)
    assert main(["anisotropy", "--model", str(tiny_electra), "--input", str(corpus), "--json",
                 "--min-count", "2", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["layers"]) == 3  # the embeddings and the discriminator's two blocks


def test_serve_takes_the_discriminators_views_and_the_generators_guesses(tiny_electra):
    from bertkit.serve.workbench import load_served_model

    served = load_served_model(tiny_electra, "electra")
    assert served.kind.startswith("ELECTRA") and served.describe()["fill_mask"]
    assert served.embedder.config.hidden_size == 32  # the discriminator, not the generator
    assert served.filler.model.config.hidden_size == 16
