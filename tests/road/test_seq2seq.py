"""The encoder-decoder's math on tiny hand-made inputs, decoding, files and errors; one short
run on the real KJV -> WEB pairs (skipped without ../shared)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bertkit.files import UserError
from bertkit.cli.main import main
from bertkit.road.bleu import corpus_bleu, corpus_chrf
from bertkit.road.seq2seq import (AdditiveAttention, Seq2Seq, Seq2SeqConfig, beam_decode,
                                  copy_mixture, greedy_decode, load_seq2seq, save_seq2seq,
                                  seq2seq_loss)
from bertkit.road.seq2seq_data import collate, detokenize, pad_sources, read_pairs
from bertkit.road.seq2seq_run import (Seq2SeqOptions, _vocabulary, attention_map,  # noqa
                                      plot_attention_map, run_seq2seq, translate, translate_with)
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


def test_teacher_forcing_reads_all_steps_at_once_as_the_steps_one_by_one():
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]
    for attention, copy in ((False, False), (True, False), (True, True)):
        m = model(attention, copy=copy)
        batch = collate(pairs, m.cfg)
        with torch.no_grad():
            at_once = m(batch["input_ids"], batch["src_mask"], batch["tgt_in"])
            enc = m.encode(batch["input_ids"], batch["src_mask"])
            state, steps = enc.state, []
            for t in range(batch["tgt_in"].shape[1]):
                step = m.step(batch["tgt_in"][:, t], state, enc)
                state = step.state
                steps.append(step.log_probs)
        torch.testing.assert_close(at_once, torch.stack(steps, 1), atol=1e-5, rtol=1e-5)


def test_detokenize_restores_the_spacing_the_references_use():
    assert detokenize("He said , “ Go — the stiff - necked man ’ s sons . ”") == \
        "He said, “Go—the stiff-necked man’s sons.”"


def test_the_run_vocabulary_keeps_typographic_quotes(tmp_path):
    """The references write ’ and “ ”: a vocabulary that reads them as ' and " cannot."""
    pairs = [("the man’s “house”", "the man’s “home”")] * 30
    tok = _vocabulary(pairs, Seq2SeqOptions(train=tmp_path, dev=tmp_path, out=tmp_path,
                                            vocab_size=60))
    ids = tok.encode_batch(["man’s “house”"], add_special_tokens=False, with_offsets=False).ids[0]
    assert detokenize(tok.decode(ids)) == "man’s “house”"


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
        hidden=48, batch_tokens=600, lr=5e-3, max_steps=120, max_minutes=None, beam=2))
    assert result.metrics["copy_source"]["bleu"] < 5
    assert result.metrics["attention"]["greedy"]["bleu"] > 30
    assert (tmp_path / "out" / "attention_attention.png").is_file()
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert saved["attention"]["greedy"]["bleu"] == result.metrics["attention"]["greedy"]["bleu"]


@pytest.mark.slow
def test_a_short_run_on_the_real_verses(tmp_path, shared_data):
    result = run_seq2seq(Seq2SeqOptions(
        train=str(shared_data / "seq2seq" / "kjv_web.train.jsonl"),
        dev=str(shared_data / "seq2seq" / "kjv_web.dev.jsonl"), out=str(tmp_path / "out"),
        max_pairs=200, dev_pairs=20, sample_pairs=5, vocab_size=500, embed_dim=16, hidden=16,
        max_steps=4, max_minutes=None, beam=2))
    assert 20 < result.metrics["copy_source"]["bleu"] < 80  # KJV and WEB share most words
    for variant in ("plain", "attention", "copy"):
        assert result.metrics[variant]["steps"] == 4
        assert len(translate(tmp_path / "out" / variant, ["And God saw the light."])) == 1
    assert result.attention is not None and (tmp_path / "out" / "copy_attention.png").is_file()


# The copy mechanism ----------------------------------------------------------------------------

def test_the_copy_distribution_sums_to_one_and_equals_a_plain_loop():
    """P(w) = p_gen softmax(logits)_w + (1 - p_gen) sum_{j: x_j = w} a_j, summed by hand."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, V, generator=g)
    src = torch.tensor([[7, 9, 7, 3], [4, 4, 4, 3], [11, 3, 0, 0]])  # repeats and padding
    mask = src != 0
    weights = torch.randn(3, 4, generator=g).masked_fill(~mask, float("-inf")).softmax(-1)
    p_gen = torch.tensor([0.3, 0.9, 0.05])
    probs = copy_mixture(logits, weights, p_gen, src).exp()
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, atol=1e-6)
    soft = logits.softmax(-1)
    for b in range(3):
        for w in range(V):
            copied = sum(float(weights[b, j]) for j in range(4) if int(src[b, j]) == w)
            expected = float(p_gen[b]) * float(soft[b, w]) + (1 - float(p_gen[b])) * copied
            assert float(probs[b, w]) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert float(probs[2, 0]) == pytest.approx(0.05 * float(soft[2, 0]), rel=1e-5)  # padding


def test_a_copy_model_step_mixes_its_own_attention_and_gate():
    m = model(copy=True)
    src, mask = pad_sources(sources(), m.cfg)
    with torch.no_grad():
        enc = m.encode(src, mask)
        step = m.step(torch.full((src.shape[0],), m.cfg.bos_id), enc.state, enc)
    assert step.p_gen.shape == (src.shape[0],) and bool(((0 < step.p_gen) & (step.p_gen < 1)).all())
    np.testing.assert_allclose(step.log_probs.exp().sum(-1).numpy(), 1.0, atol=1e-5)
    # the same mixture by hand, from the logits the generator part would give alone
    plain = model(copy=False)
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("gate")})
    with torch.no_grad():
        generated = plain.step(torch.full((src.shape[0],), m.cfg.bos_id), enc.state, enc)
    expected = copy_mixture(generated.log_probs, step.weights, step.p_gen, src)
    np.testing.assert_allclose(step.log_probs.numpy(), expected.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="needs attention"):
        model(attention=False, copy=True)


def _planted_copy(copy: bool, steps: int = 80, vocab: int = 300) -> tuple[float, float | None]:
    """Train on target = source over random ids for `steps` Adam steps; exact-match rate on
    new sequences and the mean p_gen while decoding them."""
    cfg = Seq2SeqConfig(vocab_size=vocab, embed_dim=16, hidden=24, attention_dim=16,
                        copy=copy, dropout=0.0)
    m = Seq2Seq(cfg, torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)

    def pairs(n):
        seqs = [torch.randint(4, vocab, (k,), generator=g).tolist()
                for k in torch.randint(3, 9, (n,), generator=g).tolist()]
        return [(s, s) for s in seqs]
    for _ in range(steps):
        loss, _ = seq2seq_loss(m, collate(pairs(32), cfg))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test = pairs(100)
    decoded = greedy_decode(m.eval(), *pad_sources([s for s, _ in test], cfg), max_length=12)
    exact = sum(d.ids == t for d, (_, t) in zip(decoded, test)) / len(test)
    return exact, (None if not copy else float(np.concatenate([d.p_gen for d in decoded]).mean()))


def test_a_planted_copy_task_is_learned_by_copying():
    """300 ids, each rarely seen: the generator alone cannot learn them all in 80 steps, the
    pointer copies whatever it attends to."""
    exact, p_gen = _planted_copy(copy=True)
    assert exact >= 0.8
    assert p_gen < 0.2  # it copies rather than generates


@pytest.mark.slow
def test_without_copying_the_same_planted_task_is_learned_far_less():
    exact, _ = _planted_copy(copy=False)
    assert exact < 0.6


def test_a_copy_model_saves_loads_translates_and_draws_its_gate(tmp_path, tokenizer):
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, embed_dim=8, hidden=12,
                        attention_dim=6, copy=True)
    m = Seq2Seq(cfg, torch.Generator().manual_seed(3)).eval()
    texts = ["and the lord said unto moses", "thou hath said"]
    save_seq2seq(m, tokenizer, tmp_path / "model")
    loaded, tok = load_seq2seq(tmp_path / "model")
    assert loaded.cfg == cfg and loaded.gate is not None
    for beam in (1, 3):
        assert translate(tmp_path / "model", texts, beam=beam, max_length=6) == \
            translate_with(m, tokenizer, texts, beam=beam, max_length=6)
    amap = attention_map(loaded, tok, texts[0], max_length=6)
    assert amap.p_gen is not None and amap.p_gen.shape == (len(amap.output_tokens),)
    png = plot_attention_map(amap, tmp_path / "att.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Translating a file, resuming a run ------------------------------------------------------------

def _synthetic_pairs(path, n, seed):
    modern = {"thee": "you", "thou": "you", "hath": "has", "unto": "to", "saith": "says"}
    g = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            words = list(g.choice(sorted(modern), int(g.integers(2, 5))))
            f.write(json.dumps({"source": " ".join(words),
                                "target": " ".join(modern[w] for w in words)}) + "\n")


def _tiny_run(tmp_path, **changes) -> Seq2SeqOptions:
    for split, n in (("train", 60), ("dev", 8)):
        if not (tmp_path / f"{split}.jsonl").exists():
            _synthetic_pairs(tmp_path / f"{split}.jsonl", n, seed=len(split))
    settings = dict(train=tmp_path / "train.jsonl", dev=tmp_path / "dev.jsonl",
                    out=tmp_path / "out", variants=("copy",), vocab_size=30, embed_dim=8,
                    hidden=8, batch_tokens=200, max_steps=3, max_minutes=None, eval_every=2,
                    sample_pairs=4, beam=2)
    return Seq2SeqOptions(**{**settings, **changes})


def test_translate_a_file_and_score_it(tmp_path, capsys):
    run_seq2seq(_tiny_run(tmp_path))
    capsys.readouterr()
    plain = tmp_path / "sources.txt"
    plain.write_text("thee hath\nunto thou saith\n", encoding="utf-8")
    assert main(["road", "translate", "--model", str(tmp_path / "out" / "copy"), "--input",
                 str(plain), "--out", str(tmp_path / "out.txt"), "--beam", "2"]) == 0
    written = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert written == translate(tmp_path / "out" / "copy", ["thee hath", "unto thou saith"],
                                beam=2)
    assert capsys.readouterr().out == ""  # no targets: nothing to score
    assert main(["road", "translate", "--model", str(tmp_path / "out" / "copy"), "--input",
                 str(tmp_path / "dev.jsonl")]) == 0
    captured = capsys.readouterr()
    dev = read_pairs(tmp_path / "dev.jsonl")
    outputs = captured.out.splitlines()
    assert outputs == translate(tmp_path / "out" / "copy", [s for s, _ in dev])
    scores = json.loads(captured.err[captured.err.index("{"):])
    assert scores["sentences"] == 8
    assert scores["bleu"] == pytest.approx(corpus_bleu(outputs, [t for _, t in dev]))
    assert scores["copy_source"]["chrf"] == pytest.approx(
        corpus_chrf([s for s, _ in dev], [t for _, t in dev]))


def test_translate_refuses_bad_input_before_decoding(tmp_path, capsys):
    run_seq2seq(_tiny_run(tmp_path))
    capsys.readouterr()
    model_dir = str(tmp_path / "out" / "copy")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"source": "thee"}\n{"target": "you"}\n', encoding="utf-8")
    blank = tmp_path / "blank.txt"
    blank.write_text("thee\n\nthou\n", encoding="utf-8")
    for argv, message in (
            (["--input", str(bad), "--out", str(tmp_path / "o.txt")],
             f"error: {bad}:2: needs a non-empty string \"source\""),
            (["--input", str(blank), "--out", str(tmp_path / "o.txt")],
             f"error: {blank}:2: an empty line"),
            (["--input", str(blank), "thee"], "error: give texts or --input"),
            (["--input", str(blank), "--out", str(blank)], "error:")):
        assert main(["road", "translate", "--model", model_dir, *argv]) == 2
        assert capsys.readouterr().err.startswith(message)
    assert not (tmp_path / "o.txt").exists()
    assert blank.read_text(encoding="utf-8") == "thee\n\nthou\n"


def test_a_run_resumes_and_variants_run_apart_share_metrics(tmp_path):
    first = run_seq2seq(_tiny_run(tmp_path, max_steps=2))
    assert first.metrics["copy"]["steps"] == 2
    resumed = run_seq2seq(_tiny_run(tmp_path, max_steps=4, resume=True))
    assert resumed.metrics["copy"]["steps"] == 4
    evals = [json.loads(line) for line in
             (tmp_path / "out" / "copy" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if r.get("split") == "eval"][-2:] == [2, 4]
    both = run_seq2seq(_tiny_run(tmp_path, variants=("plain",), max_steps=2))
    assert both.metrics["copy"] == resumed.metrics["copy"]  # kept from the run before
    assert both.metrics["plain"]["steps"] == 2 and both.attention is None
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert set(saved) >= {"plain", "copy", "copy_source", "examples"}
    assert (tmp_path / "out" / "curves.png").is_file()
    assert (tmp_path / "out" / "copy_attention.png").is_file()
    assert len((tmp_path / "out" / "plain" / "dev.beam2.txt").read_text().splitlines()) == 8
