"""EncoderConfig: presets, validation messages, and the config.json round trip."""
from __future__ import annotations

import pytest

from bertkit.config import PRESETS, ConfigError, EncoderConfig, preset

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("name,shape", [("tiny", (2, 128, 2, 512)), ("mini", (4, 256, 4, 1024)),
                                        ("small", (4, 512, 8, 2048)), ("medium", (8, 512, 8, 2048)),
                                        ("base", (12, 768, 12, 3072)),
                                        ("large", (24, 1024, 16, 4096))])
def test_presets(name, shape):
    cfg = preset(name, vocab_size=1000)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == shape
    assert cfg.vocab_size == 1000 and name in PRESETS


@pytest.mark.parametrize("change,message", [
    (dict(hidden_size=100, num_heads=3), "not divisible by num_heads"),
    (dict(num_layers=0), "num_layers must be a positive integer"),
    (dict(hidden_dropout=1.5), "hidden_dropout must be in"),
    (dict(activation="tanh"), "activation 'tanh' is not one of"),
    (dict(pad_token_id=40000), "outside the vocabulary"),
])
def test_validation(change, message):
    with pytest.raises(ConfigError, match=message):
        EncoderConfig(**change)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        preset("huge")


def test_hf_round_trip_keeps_unmodelled_keys():
    cfg = EncoderConfig(vocab_size=500, num_layers=3, extra={"id2label": {"0": "neg"}})
    hf = cfg.to_hf()
    ref = transformers.BertConfig(**hf)
    assert (ref.num_hidden_layers, ref.hidden_size, ref.vocab_size) == (3, 768, 500)
    back = EncoderConfig.from_hf(hf)
    assert back == cfg and back.extra["id2label"] == {"0": "neg"}


def test_non_bert_configs_are_refused():
    with pytest.raises(ConfigError, match="neither bert nor modernbert"):
        EncoderConfig.from_hf({"model_type": "gpt2"})
    modern = {"model_type": "modernbert", "vocab_size": 10, "hidden_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    with pytest.raises(ConfigError, match="norm_bias: true is not supported"):
        EncoderConfig.from_hf({**modern, "norm_bias": True})
    with pytest.raises(ConfigError, match="rope_type 'yarn' is not supported"):
        EncoderConfig.from_hf({**modern, "rope_parameters": {"full_attention": {
            "rope_type": "yarn"}}})
    with pytest.raises(ConfigError, match="absolute position"):
        EncoderConfig.from_hf({"position_embedding_type": "relative_key"})


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_block_weights_count_the_block_matrices_of_a_built_encoder(architecture):
    from bertkit.model.encoder import Encoder

    cfg = preset("mini", architecture=architecture, vocab_size=1000)
    matrices = sum(p.numel() for n, p in Encoder(cfg).named_parameters()
                   if n.startswith("blocks.") and p.dim() == 2)
    assert cfg.block_weights == matrices
    # the vocabulary does not count
    assert preset("mini", architecture=architecture, vocab_size=30000).block_weights == matrices


def test_modern_feed_forward_width_follows_an_overridden_shape():
    assert preset("mini", architecture="modern").intermediate_size == 704  # 8/3 of 256
    wide = preset("mini", architecture="modern", hidden_size=384, num_heads=6, num_layers=6)
    assert (wide.num_layers, wide.hidden_size, wide.intermediate_size) == (6, 384, 1024)
    assert preset("mini", architecture="modern", hidden_size=384, num_heads=6,
                  intermediate_size=900).intermediate_size == 900
    assert preset("mini", hidden_size=384, num_heads=6).intermediate_size == 1024  # bert: the preset's
