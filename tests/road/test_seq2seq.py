"""The encoder-decoder's math on tiny hand-made inputs, decoding, files and errors; one short
run on the real KJV -> WEB pairs (skipped without ../shared)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bertkit.files import UserError
from bertkit.road.seq2seq import (AdditiveAttention, Seq2Seq, Seq2SeqConfig, Seq2SeqOptions,
                                  attention_map, beam_decode, collate, greedy_decode,
                                  load_seq2seq, pad_sources, plot_attention_map, read_pairs,
                                  run_seq2seq, save_seq2seq, seq2seq_loss, translate,
                                  translate_with)
from bertkit.text.vocab import train_tokenizer

V = 23


def model(attention: bool = True, seed: int = 0, copy: bool = False) -> Seq2Seq:
    cfg = Seq2SeqConfig(vocab_size=V, embed_dim=8, hidden=12, attention_dim=6,
                        attention=attention, copy=copy, dropout=0.0)
    return Seq2Seq(cfg, torch.Generator().manual_seed(seed)).eval()


def sources(seed: int = 1, n: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, V, (int(k),), generator=g).tolist()
            for k in torch.randint(1, 9, (n,), generator=g)]


def test_one_additive_attention_step_by_hand():
    att = AdditiveAttention(query_dim=2, key_dim=2, dim=2)
    with torch.no_grad():
        att.query.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))  # W
        att.key.weight.copy_(torch.tensor([[0.5, 0.0], [0.0, -1.0]]))  # U
        att.key.bias.copy_(torch.tensor([0.0, 0.1]))  # b
        att.v.weight.copy_(torch.tensor([[1.0, 2.0]]))
    s = torch.tensor([[0.2, -0.4]])
    memory = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]])  # the third is padding
    mask = torch.tensor([[True, True, False]])
    context, weights = att(s, att.key(memory), memory, mask)
    # score_j = v . tanh(W s + U h_j + b), by hand:
    e1 = 1.0 * math.tanh(0.2 + 0.5 * 1.0) + 2.0 * math.tanh(-0.4 + 0.1)
    e2 = 1.0 * math.tanh(0.2 + 0.0) + 2.0 * math.tanh(-0.4 - 1.0 + 0.1)
    a1 = math.exp(e1) / (math.exp(e1) + math.exp(e2))
    assert a1 == pytest.approx(0.82459, abs=1e-5)
    assert weights[0].tolist() == pytest.approx([a1, 1 - a1, 0.0], abs=1e-6)
    assert context[0].tolist() == pytest.approx([a1 * 1.0, (1 - a1) * 1.0], abs=1e-6)


def test_attention_weights_sum_to_one_and_padding_changes_nothing():
    for copy in (False, True):
        m, srcs = model(copy=copy), sources()
        src, mask = pad_sources(srcs, m.cfg)
        decoded = greedy_decode(m, src, mask, max_length=7)
        for b, s in enumerate(srcs):
            alone = greedy_decode(m, *pad_sources([s], m.cfg), max_length=7)[0]
            assert alone.ids == decoded[b].ids  # padding beside a shorter source changes nothing
            np.testing.assert_allclose(alone.weights, decoded[b].weights, atol=1e-5)
            assert decoded[b].weights.shape[1] == len(s) + 1  # source and </s>, no padding
            np.testing.assert_allclose(decoded[b].weights.sum(1), 1.0, atol=1e-5)
            assert (decoded[b].p_gen is None) is not copy
            if copy:
                np.testing.assert_allclose(alone.p_gen, decoded[b].p_gen, atol=1e-5)
                assert decoded[b].p_gen.shape == (len(decoded[b].weights),)
        with torch.no_grad():
            enc = m.encode(src, mask)
            step = m.step(torch.full((len(srcs),), m.cfg.bos_id), enc.state, enc)
        assert float(step.weights[~mask].abs().sum()) == 0.0


def test_without_attention_the_decoder_reads_only_the_final_state():
    srcs = sources()
    src, mask = pad_sources(srcs, model().cfg)
    prev = torch.full((len(srcs),), 2)
    for attention in (False, True):
        m = model(attention)
        enc = m.encode(src, mask)
        scrambled = m.encode(src, mask)
        scrambled.memory = torch.randn_like(enc.memory)
        if attention:
            scrambled.keys = m.attention.key(scrambled.memory)
        step = m.step(prev, enc.state, enc)
        other = m.step(prev, enc.state, scrambled)
        assert torch.allclose(step.log_probs, other.log_probs) is (not attention)
        assert (step.weights is None) is (not attention)


def test_beam_search_of_width_one_is_greedy_decoding():
    for seed in range(4):
        m = model(attention=seed != 1, seed=seed, copy=seed == 3)
        for s in sources(seed + 10, 6):
            src, mask = pad_sources([s], m.cfg)
            greedy = greedy_decode(m, src, mask, max_length=9)[0]
            beam = beam_decode(m, src, mask, max_length=9, width=1)
            assert beam.ids == greedy.ids
            if m.attention is not None:
                np.testing.assert_allclose(beam.weights, greedy.weights, atol=1e-6)
            if m.gate is not None:
                np.testing.assert_allclose(beam.p_gen, greedy.p_gen, atol=1e-6)


def test_wider_beams_never_score_worse_than_greedy_on_a_one_step_choice():
    """With max_length 1, beam search of width k ranks all first tokens exactly."""
    m = model()
    src, mask = pad_sources([[5, 6, 7]], m.cfg)
    enc = m.encode(src, mask)
    step = m.step(torch.tensor([m.cfg.bos_id]), enc.state, enc)
    ids = beam_decode(m, src, mask, max_length=1, width=V).ids
    assert ids in ([], [int(step.log_probs[0].argmax())])


def test_teacher_forcing_loss_counts_real_target_tokens_only():
    m = model()
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]
    batch = collate(pairs, m.cfg)
    assert batch["labels"][0].tolist()[:3] == [8, 9, m.cfg.eos_id]
    with torch.no_grad():
        loss, _ = seq2seq_loss(m, batch)
        each = [seq2seq_loss(m, collate([p], m.cfg))[0] for p in pairs]
    expected = (each[0] * 3 + each[1] * 5) / 8  # per token: 2 + </s>, 4 + </s>
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


def test_bad_jsonl_rows_give_one_line_errors(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"source": "a", "target": "b"}\n{"source": "a"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=rf"^{path}:2: needs a non-empty string \"target\"$"):
        read_pairs(path)
    path.write_text('{"source": "a", "target": "b"}\n\n{"source": "a", "target": \n',
                    encoding="utf-8")
    with pytest.raises(UserError, match=rf"^{path}:3: not valid JSON"):
        read_pairs(path)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    text = tmp_path_factory.mktemp("text") / "text.txt"
    words = "and the lord said unto moses thee thou hath you has said to".split()
    g = np.random.default_rng(0)
    text.write_text("".join(" ".join(g.choice(words, 8)) + "\n" for _ in range(200)),
                    encoding="utf-8")
    return train_tokenizer([text], 60, cased=True, progress=False)


def test_a_save_that_fails_leaves_the_previous_model_whole(tmp_path, tokenizer, monkeypatch):
    """Weights, config and tokenizer in one folder swap: all new or all old."""
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, embed_dim=8, hidden=12, attention_dim=6)
    save_seq2seq(Seq2Seq(cfg, torch.Generator().manual_seed(3)), tokenizer, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()}

    def full_disk(self, path):  # the weights and config are written, the tokenizer fails
        raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(type(tokenizer), "save", full_disk)
    with pytest.raises(UserError, match=f"^{tmp_path / 'model'}: no space left"):
        save_seq2seq(Seq2Seq(cfg, torch.Generator().manual_seed(4)), tokenizer,
                     tmp_path / "model")
    assert {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_save_and_load_give_the_same_translations_and_attention(tmp_path, tokenizer):
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, embed_dim=8, hidden=12, attention_dim=6)
    m = Seq2Seq(cfg, torch.Generator().manual_seed(3)).eval()
    texts = ["and the lord said unto moses", "thou hath said"]
    save_seq2seq(m, tokenizer, tmp_path / "model")
    loaded, tok = load_seq2seq(tmp_path / "model")
    assert loaded.cfg == cfg
    for beam in (1, 3):
        assert translate(tmp_path / "model", texts, beam=beam, max_length=6) == \
            translate_with(m, tokenizer, texts, beam=beam, max_length=6)
    amap = attention_map(loaded, tok, texts[0], max_length=6)
    assert amap.weights.shape == (len(amap.output_tokens), len(amap.source_tokens))
    assert amap.source_tokens[-1] == "</s>"
    png = plot_attention_map(amap, tmp_path / "att.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    no_attention = Seq2Seq(Seq2SeqConfig(vocab_size=tokenizer.vocab_size, attention=False))
    with pytest.raises(UserError, match="no attention"):
        attention_map(no_attention, tok, texts[0])


@pytest.mark.slow
def test_attention_learns_a_word_mapping_the_copy_baseline_misses(tmp_path):
    """Synthetic 'archaic -> modern' pairs: each word has a fixed modern form."""
    modern = {"thee": "you", "thou": "you", "hath": "has", "unto": "to", "saith": "says",
              "ye": "you", "doth": "does", "art": "are", "shalt": "shall", "spake": "spoke"}
    g = np.random.default_rng(0)
    for split, n in (("train", 1500), ("dev", 60)):
        with open(tmp_path / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                words = list(g.choice(sorted(modern), int(g.integers(2, 6))))
                f.write(json.dumps({"source": " ".join(words),
                                    "target": " ".join(modern[w] for w in words)}) + "\n")
    result = run_seq2seq(Seq2SeqOptions(
        train=str(tmp_path / "train.jsonl"), dev=str(tmp_path / "dev.jsonl"),
        out=str(tmp_path / "out"), variants=("attention",), vocab_size=40, embed_dim=32,
        hidden=48, batch_size=32, lr=5e-3, max_steps=120, max_minutes=None, beam=2))
    assert result.metrics["copy_source"]["bleu"] < 5
    assert result.metrics["attention"]["greedy"]["bleu"] > 30
    assert (tmp_path / "out" / "attention.png").is_file()
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert saved["attention"]["greedy"]["bleu"] == result.metrics["attention"]["greedy"]["bleu"]


@pytest.mark.slow
def test_a_short_run_on_the_real_verses(tmp_path, shared_data):
    result = run_seq2seq(Seq2SeqOptions(
        train=str(shared_data / "seq2seq" / "kjv_web.train.jsonl"),
        dev=str(shared_data / "seq2seq" / "kjv_web.dev.jsonl"), out=str(tmp_path / "out"),
        max_pairs=200, dev_pairs=20, vocab_size=500, embed_dim=16, hidden=16, max_steps=4,
        max_minutes=None, beam=2))
    assert 20 < result.metrics["copy_source"]["bleu"] < 80  # KJV and WEB share most words
    for variant in ("attention", "plain"):
        assert result.metrics[variant]["steps"] == 4
        assert len(translate(tmp_path / "out" / variant, ["And God saw the light."])) == 1
    assert result.attention is not None and (tmp_path / "out" / "attention.png").is_file()
