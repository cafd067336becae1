"""Property test of a model directory's config.json: random bytes and mutated configs (keys
dropped, values of another JSON type, the text cut or garbled) load as a valid EncoderConfig
or raise a one-line UserError naming the file; nothing else escapes."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.config import EncoderConfig
from bertkit.model import hub

_SIZES = dict(vocab_size=40, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16,
              max_positions=32)
VALID = {
    "bert": json.dumps(EncoderConfig(**_SIZES).to_hf(), indent=1).encode(),
    "modern": json.dumps(EncoderConfig(architecture="modern", local_window=8, global_every=2,
                                       **_SIZES).to_hf(), indent=1).encode(),
}


def test_the_valid_configs_load(fuzz):
    for name, body in VALID.items():
        d = fuzz.dir / f"valid-{name}"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_bytes(body)
        assert hub.load_config(d).architecture == name


@settings(max_examples=250, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(VALID)), data=st.data())
def test_mutated_config_json_loads_or_fails_naming_the_file(fuzz, name, data):
    d = fuzz.dir / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_bytes(fuzz.mutated(data, VALID[name]))
    config = fuzz.reads_or_names(hub.load_config, d, str(d / "config.json"))
    if config is not None:
        config.validate()
