"""`info` (parameter counts per part, consistency with config.json) and `init_model`."""
from __future__ import annotations

import json
import random

import pytest
import torch

from bertkit.model.create import init_model
from bertkit.files import UserError
from bertkit.model.hub import load_pretraining_model
from bertkit.model.info import info
from bertkit.model.encoder import num_parameters
from bertkit.text.vocab import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    (root / "corpus.txt").write_text("\n".join(" ".join(rng.choices(words, k=10))
                                               for _ in range(200)) + "\n", encoding="utf-8")
    train_tokenizer([root / "corpus.txt"], vocab_size=150, out=root / "tok", progress=False)
    return root / "tok"


def _expected_parts(model) -> dict[str, int]:
    """Counts per part from our own module tree, independently of info's name patterns."""
    parts: dict[str, int] = {}
    for name, p in model.named_parameters():
        if name.startswith("encoder.embeddings."):
            key = "embeddings." + {"word": "word", "position": "position", "segment": "segment",
                                   "norm": "norm"}[name.split(".")[2]]
        elif name.startswith("encoder.blocks."):
            i, sub = name.split(".")[2:4]
            key = f"block.{i}." + ("attention" if sub in ("attn", "attn_norm") else "feed_forward")
        elif name.startswith("encoder.pooler."):
            key = "pooler"
        else:
            key = "head." + name.split(".")[0]
        parts[key] = parts.get(key, 0) + p.numel()
    return parts


def test_init_model_loads_in_transformers_without_missing_keys(tokenizer_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    before = torch.random.get_rng_state()
    model = init_model("tiny", tokenizer_dir, tmp_path / "m", seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is untouched
    vocab = len((tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert model.config.vocab_size == vocab and model.config.pad_token_id == 0
    assert (model.config.num_layers, model.config.hidden_size) == (2, 128)
    hf, loading = transformers.BertForPreTraining.from_pretrained(tmp_path / "m",
                                                                  output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    assert hf.config.vocab_size == vocab
    assert torch.equal(hf.bert.embeddings.word_embeddings.weight,
                       model.encoder.embeddings.word.weight)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    assert tok("alpha beta")["input_ids"][0] == tok.cls_token_id == 2
    # The same seed gives the same weights; another seed other weights.
    again = init_model("tiny", tokenizer_dir, tmp_path / "m2", seed=5)
    other = init_model("tiny", tokenizer_dir, tmp_path / "m3", seed=6)
    w = model.encoder.blocks[0].up.weight
    assert torch.equal(w, again.encoder.blocks[0].up.weight)
    assert not torch.equal(w, other.encoder.blocks[0].up.weight)
    assert w.std().item() == pytest.approx(0.02, rel=0.1)


def test_init_model_rejects_bad_settings(tokenizer_dir, tmp_path):
    with pytest.raises(UserError, match="not divisible"):
        init_model("tiny", tokenizer_dir, tmp_path / "x", hidden_size=100, num_heads=3)
    with pytest.raises(UserError, match="unknown preset"):
        init_model("huge", tokenizer_dir, tmp_path / "x")
    with pytest.raises(UserError, match="contradicts the tokenizer"):
        init_model("tiny", tokenizer_dir, tmp_path / "x", vocab_size=999)
    with pytest.raises(UserError, match="does not exist"):
        init_model("tiny", tmp_path / "nothing", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_info_counts_every_part(tokenizer_dir, tmp_path):
    model = init_model("tiny", tokenizer_dir, tmp_path / "m", max_positions=64)
    result = info(tmp_path / "m")
    assert result.parts == _expected_parts(model)
    assert result.total == num_parameters(model)
    assert list(result.parts)[:4] == ["embeddings.word", "embeddings.position",
                                      "embeddings.segment", "embeddings.norm"]
    assert list(result.parts)[-3:] == ["pooler", "head.mlm", "head.nsp"]
    H, V = 128, model.config.vocab_size
    assert result.parts["embeddings.word"] == V * H
    assert result.parts["block.1.attention"] == 4 * H * H + 4 * H + 2 * H
    assert result.config.max_positions == 64 and result.dtype == "float32"
    assert result.tokenizer is not None and result.tokenizer.vocab_size == V
    text = result.format()
    assert "blocks 0-1 (2 x" in text and f"{result.total:,}" in text
    as_json = json.loads(json.dumps(result.to_dict()))
    assert as_json["parameters"]["total"] == result.total
    assert as_json["config"]["num_hidden_layers"] == 2


def test_info_on_minilm_matches_transformers(minilm_dir):
    transformers = pytest.importorskip("transformers")
    result = info(minilm_dir)
    hf = transformers.BertModel.from_pretrained(minilm_dir)
    assert result.total == hf.num_parameters() == 22_713_216
    assert "head.mlm" not in result.parts and result.tokenizer.vocab_size == 30522


def test_info_rejects_inconsistent_directories(tokenizer_dir, tmp_path):
    init_model("tiny", tokenizer_dir, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    with pytest.raises(UserError, match="not a model directory"):
        info(tokenizer_dir)
    with pytest.raises(UserError, match="does not exist"):
        info(tmp_path / "absent")

    def with_config(**changes):
        (tmp_path / "m" / "config.json").write_text(json.dumps({**config, **changes}))

    with_config(hidden_size=100, num_attention_heads=3)
    with pytest.raises(UserError, match=r"config.json: hidden_size 100 is not divisible"):
        info(tmp_path / "m")
    with_config(num_hidden_layers=3)
    with pytest.raises(UserError, match="encoder weights missing"):
        info(tmp_path / "m")
    with_config(num_hidden_layers=1)
    with pytest.raises(UserError, match="does not fit config.json's 1 layers"):
        info(tmp_path / "m")
    with_config(intermediate_size=256)
    with pytest.raises(UserError, match=r"intermediate.dense.(weight|bias) has shape \(512,"):
        info(tmp_path / "m")
    with_config()
    assert info(tmp_path / "m").total == num_parameters(load_pretraining_model(tmp_path / "m"))
