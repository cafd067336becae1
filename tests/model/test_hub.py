"""Hugging Face directories both ways: names, old gamma/beta checkpoints, .bin files, missing
heads, bad directories, and the real MiniLM checkpoint against transformers and
sentence-transformers."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from bertkit.model import hub
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import Encoder, init_weights
from bertkit.model.heads import PretrainingModel

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
            max_positions=32)


def tiny(cls=PretrainingModel, seed=0):
    torch.manual_seed(seed)
    cfg = EncoderConfig(**TINY)
    model = cls(cfg)
    init_weights(model, cfg)
    return model.eval()


def same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_names_round_trip():
    model = tiny()
    hf = hub.to_hf_state_dict(model.state_dict())
    assert "bert.encoder.layer.1.attention.self.query.weight" in hf
    assert "cls.predictions.transform.LayerNorm.weight" in hf
    assert "cls.seq_relationship.bias" in hf
    encoder, rest = hub.from_hf_state_dict(hf)
    back = {**{"encoder." + k: v for k, v in encoder.items()}, **rest}
    own = model.state_dict()
    assert back.keys() == own.keys()
    assert all(torch.equal(back[k], own[k]) for k in own)


@pytest.mark.parametrize("arch", ["BertModel", "BertForMaskedLM", "BertForPreTraining"])
def test_saved_directory_loads_in_transformers_cleanly(tmp_path, arch):
    model = tiny(Encoder if arch == "BertModel" else PretrainingModel)
    hub.save_model(model, tmp_path / "m", architectures=None if arch == "BertModel" else [arch])
    _, info = getattr(transformers, arch).from_pretrained(tmp_path / "m", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]


def test_transformers_directories_load(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=32)
    ref = transformers.BertForMaskedLM(cfg).eval()
    ref.save_pretrained(tmp_path / "mlm")
    with pytest.warns(UserWarning, match="nsp.weight"):  # BertForMaskedLM has no NSP head
        ours = hub.load_pretraining_model(tmp_path / "mlm")
    ids = torch.randint(1, 97, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids)[0], ref(ids).logits, atol=1e-5, rtol=0)


def test_old_gamma_beta_names_and_bin_files(tmp_path):
    model = tiny()
    hf = hub.to_hf_state_dict(model.state_dict())
    old = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                    "LayerNorm.beta"): v
           for k, v in hf.items()}
    old["bert.embeddings.position_ids"] = torch.arange(32)[None]
    (tmp_path / "old").mkdir()
    torch.save(old, tmp_path / "old" / "pytorch_model.bin")
    (tmp_path / "old" / "config.json").write_text(json.dumps(model.config.to_hf()))
    assert same_parameters(hub.load_pretraining_model(tmp_path / "old"), model)


def test_encoder_only_checkpoint_warns_about_heads(tmp_path):
    hub.save_model(tiny(Encoder), tmp_path / "enc")
    with pytest.warns(UserWarning, match=r"mlm\.bias.*nsp\.weight|mlm\.dense"):
        model = hub.load_pretraining_model(tmp_path / "enc")
    assert isinstance(model, PretrainingModel)


def test_bad_directories(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        hub.load_encoder(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        hub.load_encoder(tmp_path / "empty")
    hub.save_model(tiny(), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    shutil.copytree(tmp_path / "m", tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**config, "num_attention_heads": 5}))
    with pytest.raises(UserError, match="not divisible by num_heads 5"):
        hub.load_encoder(tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**config, "hidden_size": 40,
                                                              "num_attention_heads": 4}))
    with pytest.raises(UserError, match="has shape"):
        hub.load_encoder(tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        hub.load_encoder(tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(UserError, match="unreadable weights"):
        hub.load_encoder(tmp_path / "bad")


def test_failed_save_leaves_nothing(tmp_path):
    class Exploding:
        def save(self, path):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        hub.save_model(tiny(), tmp_path / "m", tokenizer=Exploding())
    assert list(tmp_path.iterdir()) == []


# The real checkpoint -----------------------------------------------------------------------------

SENTENCES = ["The bank raised its interest rates.", "We sat on the river bank.",
             "Ünïcödé, CJK 漢字 and emoji 🙂 all go through the same tokenizer!",
             "short"]


def minilm_batch(minilm_dir):
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    return tok(SENTENCES, padding=True, return_tensors="pt")


def test_minilm_token_vectors_equal_transformers(minilm_dir):
    enc = minilm_batch(minilm_dir)
    ours = hub.load_encoder(minilm_dir)
    ref = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        a = ours(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        b = ref(**enc)
    keep = enc["attention_mask"].bool()
    torch.testing.assert_close(a.last_hidden_state[keep], b.last_hidden_state[keep],
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(a.pooled, b.pooler_output, atol=1e-5, rtol=0)


def test_minilm_sentence_vectors_equal_sentence_transformers(minilm_dir):
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(minilm_dir), device="cpu")
    expected = torch.from_numpy(ref.encode(SENTENCES, normalize_embeddings=True))
    enc = minilm_batch(minilm_dir)
    with torch.no_grad():
        h = hub.load_encoder(minilm_dir)(enc["input_ids"], enc["token_type_ids"],
                                         enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    mean = (h * m).sum(1) / m.sum(1)
    torch.testing.assert_close(torch.nn.functional.normalize(mean, dim=-1), expected,
                               atol=1e-5, rtol=0)


def test_minilm_round_trip_through_transformers(minilm_dir, tmp_path):
    enc = minilm_batch(minilm_dir)
    with pytest.warns(UserWarning, match="no weights for"):
        model = hub.load_pretraining_model(minilm_dir)  # MiniLM ships no MLM/NSP heads
    hub.save_model(model, tmp_path / "copy")
    ref, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "copy",
                                                                output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ref.eval()
    with torch.no_grad():
        mlm, nsp, out = model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        theirs = ref(**enc)
    keep = enc["attention_mask"].bool()
    torch.testing.assert_close(mlm[keep], theirs.prediction_logits[keep], atol=1e-5, rtol=1e-4)  # sums differ by thread count
    torch.testing.assert_close(nsp, theirs.seq_relationship_logits, atol=1e-5, rtol=0)
    assert same_parameters(hub.load_pretraining_model(tmp_path / "copy"), model)


_SIZES = {"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 16}


@pytest.mark.parametrize("body, message", [
    ("[1, 2]", "config.json: expected a JSON object, got list"),
    ('{"model_type": "bert", "hidden_size": 8}',
     "config.json: missing 'vocab_size', 'num_hidden_layers', 'num_attention_heads', "
     "'intermediate_size'"),
    ('{"model_type": "modernbert", "vocab_size": 10}', "config.json: missing 'hidden_size'"),
    (json.dumps({**_SIZES, "hidden_dropout_prob": "0.1"}), "config.json: a value of the wrong "
                                                           "type"),
    (json.dumps({**_SIZES, "model_type": "modernbert", "global_rope_theta": "abc"}),
     "config.json: a value of the wrong type"),
    (json.dumps({**_SIZES, "model_type": "modernbert", "rope_parameters": [1]}),
     "config.json: a value of the wrong type"),
    (json.dumps({**_SIZES, "hidden_size": "8"}), "hidden_size must be a positive integer"),
    (b'{"vocab_size": 10,\n "name": "caf\xe9"}', r"config.json:2: not UTF-8 text"),
    ('{"vocab_size": ', r"config.json:1: not valid JSON"),
])
def test_bad_config_json_is_one_line_naming_the_file(tmp_path, body, message):
    (tmp_path / "config.json").write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as e:
        hub.load_config(tmp_path)
    assert str(tmp_path / "config.json") in str(e.value) and "\n" not in str(e.value)
