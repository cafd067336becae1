"""EncoderConfig: presets, validation messages, and the config.json round trip."""
from __future__ import annotations

import pytest

from bertkit.config import PRESETS, ConfigError, EncoderConfig, parse_minutes, preset

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


@pytest.mark.parametrize("text,minutes", [
    ("30s", 0.5), ("90s", 1.5), ("10m", 10.0), ("1.5h", 90.0), ("1h30m", 90.0),
    ("1m30s", 1.5), ("2h0m30s", 120.5), (".5h", 30.0), ("0.25m", 0.25),
    ("60", 60.0), ("0.1", 0.1), ("1e-3", 1e-3), (" 10m ", 10.0), (2, 2.0), (0.5, 0.5),
])
def test_durations_in_minutes(text, minutes):
    assert parse_minutes(text) == minutes


def test_a_duration_is_the_nearest_float_to_its_minutes_however_spelled():
    """From the exact decimal, not through seconds in floating point: 6s and 0.1 (minutes)
    are the same float, so a run resumed with either is given the same budget."""
    assert parse_minutes("6s") == parse_minutes("0.1") == parse_minutes("0.1m") == 0.1
    assert parse_minutes("0.1h") == 6.0 and parse_minutes("0.7s") == 7 / 600
    assert parse_minutes("1h0.1m") == 60.1 and parse_minutes("10s") == 1 / 6


@pytest.mark.parametrize("text", ["30 sec", "30sec", "-5m", "-5", "0", "0s", "0h0m", "", "m",
                                  "1h 30m", "30m1h", "1m1m", "10M", "nan", "inf", "1d", "5ms",
                                  "1..5m", "+5m", "h1", "1/3", True, 0, -1.0, float("nan"),
                                  float("inf")])
def test_what_is_not_a_duration(text):
    with pytest.raises(ConfigError) as e:
        parse_minutes(text, "--max-time")
    assert str(e.value) == (f"--max-time {text}: not a duration (e.g. 90s, 10m, 1.5h, or "
                            f"minutes as a number)")


def test_train_config_takes_its_time_budget_as_a_duration_too():
    from bertkit.config import TrainConfig

    assert TrainConfig(max_time="90s").max_time == 1.5
    assert TrainConfig(max_time=2).max_time == 2
    with pytest.raises(ConfigError, match="^max_time 30 sec: not a duration"):
        TrainConfig(max_time="30 sec")
