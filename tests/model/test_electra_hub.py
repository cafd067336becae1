"""ELECTRA directories both ways: bertkit's pair loads in transformers as ElectraForPreTraining
and ElectraForMaskedLM (no missing, unexpected or mismatched keys, equal logits); transformers'
own pair, embeddings narrower than the discriminator included, loads into bertkit with equal
outputs; the "modern" layout (ModernBertModel + the detection head beside it)."""
from __future__ import annotations

import pytest
import torch

from bertkit.config import preset
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import ElectraModel, generator_config
from bertkit.model.hub import (DETECTOR_FILE, GENERATOR_DIR, load_electra, load_encoder,
                               load_pretraining_model, save_electra)
from bertkit.model.kind import ModelKind, model_kind

pytestmark = pytest.mark.usefixtures("one_thread")

V, T = 60, 16


def _electra(architecture: str) -> ElectraModel:
    cfg = preset("tiny", vocab_size=V, architecture=architecture, max_positions=T,
                 hidden_dropout=0.0, attention_dropout=0.0)
    model = ElectraModel(cfg, generator_config(cfg, 0.25))
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # biases and norms away from their initial values
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.02)
    return model.eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (2, T), generator=g)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, -5:] = 0
    return ids, mask


def _no_key_trouble(info: dict) -> bool:
    return not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))


def test_bertkit_electra_loads_in_transformers_with_equal_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _electra("bert")
    save_electra(model, tmp_path / "e")
    ids, mask = _inputs()
    disc, info = transformers.ElectraForPreTraining.from_pretrained(
        tmp_path / "e", output_loading_info=True)
    assert _no_key_trouble(info), info
    gen, info = transformers.ElectraForMaskedLM.from_pretrained(
        tmp_path / "e" / GENERATOR_DIR, output_loading_info=True)
    assert _no_key_trouble(info), info
    with torch.no_grad():
        theirs = disc.eval()(input_ids=ids, attention_mask=mask).logits
        ours = model(ids, None, mask)
        torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=1e-5, rtol=1e-4)
        theirs = gen.eval()(input_ids=ids, attention_mask=mask).logits
        ours = model.generator(ids, None, mask)[0]
        torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=1e-4, rtol=1e-4)
    assert model_kind(tmp_path / "e") is ModelKind.ENCODER
    from bertkit.model.info import info
    assert info(tmp_path / "e").parts["head.detector"] == 128 * 128 + 128 + 128 + 1
    assert info(tmp_path / "e" / GENERATOR_DIR).parts["embeddings.project"] == 128 * 64 + 64


def _transformers_pair(transformers, root):
    """A random ElectraForPreTraining whose embeddings (16) are narrower than its blocks
    (32), and an ElectraForMaskedLM generator of width 16 given the same embeddings, saved as
    transformers saves them."""
    common = dict(vocab_size=V, embedding_size=16, num_hidden_layers=2,
                  max_position_embeddings=T, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        hidden_size=32, num_attention_heads=2, intermediate_size=64, **common)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        hidden_size=16, num_attention_heads=1, intermediate_size=32, **common)).eval()
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    with torch.no_grad():
        for p in list(disc.parameters()) + list(gen.parameters()):
            p.add_(torch.randn_like(p) * 0.02)
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
        gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
    disc.save_pretrained(root)
    gen.save_pretrained(root / GENERATOR_DIR)
    return disc, gen


def test_transformers_electra_loads_into_bertkit_with_equal_outputs(tmp_path):
    transformers = pytest.importorskip("transformers")
    disc, gen = _transformers_pair(transformers, tmp_path / "hf")
    ids, mask = _inputs()
    model = load_electra(tmp_path / "hf")
    assert model.encoder.project is not None  # 16 -> 32
    with torch.no_grad():
        torch.testing.assert_close(model(ids, None, mask)[mask.bool()],
                                   disc(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(model.generator(ids, None, mask)[0][mask.bool()],
                                   gen(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   atol=1e-4, rtol=1e-4)
        # a generator alone is a masked LM (fill-mask --model DIR/generator)
        with pytest.warns(UserWarning, match="no weights for"):  # neither pooler nor NSP head
            alone = load_pretraining_model(tmp_path / "hf" / GENERATOR_DIR)
        torch.testing.assert_close(alone(ids, None, mask)[0][mask.bool()],
                                   gen(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   atol=1e-4, rtol=1e-4)
        # every encoder command's loader reads the discriminator alone
        encoder = load_encoder(tmp_path / "hf")
        theirs = disc.electra(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(encoder(ids, None, mask).last_hidden_state[mask.bool()],
                                   theirs[mask.bool()], atol=1e-5, rtol=1e-4)


def test_modern_layout_is_a_modernbert_model_with_the_detection_head_beside(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _electra("modern")
    save_electra(model, tmp_path / "m")
    assert (tmp_path / "m" / DETECTOR_FILE).is_file()
    body, info = transformers.ModernBertModel.from_pretrained(tmp_path / "m",
                                                              output_loading_info=True)
    assert _no_key_trouble(info), info
    ids, mask = _inputs()
    with torch.no_grad():
        theirs = body.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = model.encoder(ids, None, mask).last_hidden_state
        torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=1e-4, rtol=1e-4)
        again = load_electra(tmp_path / "m")
        torch.testing.assert_close(again(ids, None, mask), model(ids, None, mask))
        torch.testing.assert_close(again.generator(ids, None, mask)[0],
                                   model.generator(ids, None, mask)[0])


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_a_discriminator_alone_loads_and_a_plain_encoder_is_refused(tmp_path, architecture):
    import shutil

    from bertkit.model.hub import save_model
    model = _electra(architecture)
    save_electra(model, tmp_path / "e")
    shutil.rmtree(tmp_path / "e" / GENERATOR_DIR)
    alone = load_electra(tmp_path / "e")
    ids, mask = _inputs()
    assert alone.generator is None
    torch.testing.assert_close(alone(ids, None, mask), model(ids, None, mask))
    save_model(model.encoder, tmp_path / "plain")
    with pytest.raises(UserError, match="not an ELECTRA directory"):
        load_electra(tmp_path / "plain")
