"""ELMo: each direction sees only its own side, the layers as ELMo hands them on, the losses by
hand, a tiny run through the shared loop (files, perplexity, resume), and its vectors where
BERT's go: the Embedder, `bertkit embed` and `bertkit wsd`."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertkit.cli.main as cli
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError
from bertkit.model.heads import IGNORE_INDEX
from bertkit.model.kind import ModelKind, model_kind
from bertkit.pretraining.corpus import prepare
from bertkit.road.elmo import (ElmoConfig, ElmoLM, ElmoOptions, direction_losses, elmo_loss,
                               flip, load_elmo, next_piece_labels,
                               prepared_streams, reverse_index, save_elmo, train_elmo)
from bertkit.text.vocab import train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

V = 30


def tiny(seed: int = 0, dropout: float = 0.0) -> ElmoLM:
    cfg = ElmoConfig(vocab_size=V, embed_dim=6, lstm_dim=10, num_layers=2, dropout=dropout)
    return ElmoLM(cfg, torch.Generator().manual_seed(seed)).eval()


def test_reverse_index_reads_each_rows_real_tokens_backwards():
    index = reverse_index(torch.tensor([3, 5]), 5)
    assert index.tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0]]
    x = torch.tensor([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]])
    assert flip(x, index).tolist() == [[3, 2, 1, 0, 0], [5, 4, 3, 2, 1]]
    assert torch.equal(flip(flip(x, index), index), x)  # its own inverse


def test_labels_are_the_next_real_piece():
    ids = torch.tensor([[2, 7, 8, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert next_piece_labels(ids, mask).tolist() == [[7, 8, 3, IGNORE_INDEX, IGNORE_INDEX]]


def test_each_direction_sees_only_its_own_side():
    model = tiny()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (1, 9), generator=g)
    changed = ids.clone()
    k = 4
    changed[0, k] = (ids[0, k] + 1 - 5) % (V - 5) + 5
    a = model(ids, output_hidden_states=True).hidden_states
    b = model(changed, output_hidden_states=True).hidden_states
    E = model.config.embed_dim
    for layer in (1, 2):
        # forward half: positions before k unchanged, k itself changed
        torch.testing.assert_close(a[layer][0, :k, :E], b[layer][0, :k, :E])
        assert not torch.allclose(a[layer][0, k, :E], b[layer][0, k, :E])
        # backward half: positions after k unchanged
        torch.testing.assert_close(a[layer][0, k + 1:, E:], b[layer][0, k + 1:, E:])
        assert not torch.allclose(a[layer][0, k, E:], b[layer][0, k, E:])


def test_layers_as_elmo_hands_them_on():
    model = tiny()
    ids = torch.tensor([[2, 9, 11, 3]])
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == 3 and model.config.hidden_size == 12
    assert all(h.shape == (1, 4, 12) for h in out.hidden_states)
    x = model.embed(ids)
    torch.testing.assert_close(out.hidden_states[0], torch.cat([x, x], -1))  # [x; x]
    torch.testing.assert_close(out.last_hidden_state, out.hidden_states[-1])
    assert model(ids).hidden_states is None


def test_padding_changes_nothing():
    model = tiny()
    short = torch.tensor([[2, 9, 11, 3]])
    batch = torch.tensor([[2, 9, 11, 3, 0, 0], [2, 5, 6, 7, 8, 3]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
    alone = model(short, output_hidden_states=True).hidden_states
    padded = model(batch, attention_mask=mask, output_hidden_states=True).hidden_states
    for h, p in zip(alone, padded):
        torch.testing.assert_close(p[0, :4], h[0])


def test_losses_by_hand():
    model = tiny()
    ids = torch.tensor([[2, 9, 11, 12, 3], [2, 7, 3, 0, 0]])
    mask = (ids != 0).long()
    forward, backward = direction_losses(model, {"input_ids": ids, "attention_mask": mask})
    out = model(ids, attention_mask=mask, output_hidden_states=True)
    E, W = model.config.embed_dim, model.embed.weight
    fwd_terms, bwd_terms = [], []
    for b, n in enumerate(mask.sum(1).tolist()):
        top = out.hidden_states[-1][b, :n]  # [n, 2E]
        fwd_logits, bwd_logits = top[:, :E] @ W.T, top[:, E:] @ W.T
        fwd_terms += [F.cross_entropy(fwd_logits[t], ids[b, t + 1]) for t in range(n - 1)]
        bwd_terms += [F.cross_entropy(bwd_logits[t], ids[b, t - 1]) for t in range(1, n)]
    torch.testing.assert_close(forward, torch.stack(fwd_terms).mean())
    torch.testing.assert_close(backward, torch.stack(bwd_terms).mean())
    loss, metrics = elmo_loss(model, {"input_ids": ids, "attention_mask": mask})
    torch.testing.assert_close(loss, (forward + backward) / 2)
    assert set(metrics) == {"forward_loss", "backward_loss"}


def test_the_softmax_is_the_embedding_shared_by_both_directions():
    model = tiny()
    names = [n for n, _ in model.named_parameters()]
    assert sum(n.startswith("embed.") for n in names) == 1
    assert not any("softmax" in n or "decoder" in n for n in names)


# A tiny run ------------------------------------------------------------------------------------

SENTENCES = ["the river bank was muddy and steep", "she put money in the bank on monday",
             "the fish swam near the bank of the river", "the bank gave him a loan of cash",
             "water ran down the steep bank", "the bank rates for a deposit went up"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elmo")
    g = np.random.default_rng(0)
    lines = [SENTENCES[i] for i in g.integers(0, len(SENTENCES), 120)]
    (tmp / "text.txt").write_text("\n".join(lines) + "\n")
    return tmp


def options(corpus, out, **kw) -> ElmoOptions:
    return ElmoOptions(**{**dict(data=corpus / "text.txt", out=out, vocab_size=60, embed_dim=8,
                                 lstm_dim=12, seq_len=12, batch_size=8, max_steps=6,
                                 max_minutes=None, lr=1e-2, heldout_every=10, eval_rows=16),
                          **kw})


@pytest.fixture(scope="module")
def trained(corpus):
    result = train_elmo(options(corpus, corpus / "model"))
    return corpus / "model", result


@pytest.mark.slow
def test_a_tiny_run_saves_a_model_and_its_perplexities(trained):
    path, result = trained
    assert result.stopped_by == "max_steps" and model_kind(path) is ModelKind.ELMO
    saved = json.loads((path / "metrics.json").read_text())
    for direction in ("forward", "backward"):
        ppl = saved[f"heldout_{direction}_ppl"]
        assert ppl == pytest.approx(math.exp(saved[f"heldout_{direction}_loss"]))
        assert 1 < ppl < saved["data"]["vocab_size"] * 2
    assert saved["tokens_per_s"] > 0 and saved["steps"] == 6
    assert (path / "metrics.jsonl").is_file() and (path / "tokenizer.json").is_file()
    model = load_elmo(path)
    assert model.config.embed_dim == 8 and not model.training
    ids = torch.tensor([[2, 7, 9, 3]])
    again = load_elmo(path)
    torch.testing.assert_close(model(ids).last_hidden_state, again(ids).last_hidden_state)


@pytest.mark.slow
def test_resume_goes_on_from_the_checkpoint(corpus):
    out = corpus / "resumed"
    first = train_elmo(options(corpus, out, max_steps=3, save_every=3))
    assert first.metrics["steps"] == 3
    second = train_elmo(options(corpus, out, max_steps=5, resume=True))
    assert second.metrics["steps"] == 5


@pytest.mark.slow
def test_a_prepared_directory_gives_its_documents_and_tokenizer(corpus, tmp_path):
    docs = tmp_path / "docs.txt"  # a blank line between documents
    docs.write_text("\n\n".join("\n".join(SENTENCES[i:] + SENTENCES[:i]) for i in range(6))
                    + "\n")
    tokenizer = train_tokenizer([docs], 60, progress=False)
    tokenizer.save(tmp_path / "tok")
    prepare([docs], tmp_path / "tok", tmp_path / "data", heldout_fraction=0.2, workers=1,
            progress=False)
    train_docs = prepared_streams(tmp_path / "data", "train")
    held = prepared_streams(tmp_path / "data", "heldout")
    assert len(train_docs.bounds) - 1 + len(held.bounds) - 1 == 6
    first = train_docs.tokens[train_docs.bounds[0]:train_docs.bounds[1]].tolist()
    whole = [tokenizer.encode(" ".join(s), add_special_tokens=False).ids
             for s in [SENTENCES[i:] + SENTENCES[:i] for i in range(6)]]
    assert first in whole  # a document is its sentences' pieces back to back
    windows = train_docs.windows(7)
    assert windows[:, 1].max() == 7 and windows[:, 1].sum() == len(train_docs.tokens)
    result = train_elmo(ElmoOptions(data=tmp_path / "data", out=tmp_path / "m", embed_dim=8,
                                    lstm_dim=12, seq_len=12, batch_size=4, max_steps=2,
                                    max_minutes=None))
    assert result.metrics["data"]["vocab_size"] == tokenizer.vocab_size
    assert result.metrics["heldout_pieces"] > 0
    with pytest.raises(UserError, match="--tokenizer is for a text file"):
        train_elmo(ElmoOptions(data=tmp_path / "data", out=tmp_path / "n",
                               tokenizer=tmp_path / "tok", max_steps=1))


def test_save_and_load_round_trip(tmp_path, corpus):
    tokenizer = train_tokenizer([corpus / "text.txt"], 60, progress=False)
    model = tiny()
    save_elmo(model, tokenizer, tmp_path / "m")
    ids = torch.tensor([[2, 5, 6, 3]])
    torch.testing.assert_close(load_elmo(tmp_path / "m")(ids).last_hidden_state,
                               model(ids).last_hidden_state)
    (tmp_path / "m" / "elmo.json").write_text('{"format": "bertkit-elmo", "vocab_size": 30, '
                                              '"colour": 1}')
    with pytest.raises(UserError, match="elmo.json: not an ELMo config"):
        load_elmo(tmp_path / "m")


def test_bad_data_is_one_line(tmp_path, corpus):
    one = tmp_path / "one.txt"
    one.write_text("a single line\n")
    with pytest.raises(UserError, match="at least two non-empty lines"):
        train_elmo(options(corpus, tmp_path / "o", data=one))
    with pytest.raises(UserError, match="does not exist"):
        train_elmo(options(corpus, tmp_path / "o", data=tmp_path / "missing"))
    assert not (tmp_path / "o").exists()


# Where BERT's vectors go -----------------------------------------------------------------------

def test_the_embedder_takes_an_elmo_directory(trained):
    path, _ = trained
    embedder = Embedder.load(path)
    assert embedder.config.num_layers == 2 and embedder.config.hidden_size == 16
    text = "the river bank was steep"
    start = text.index("bank")
    per_layer = [embedder.word_vector(text, (start, start + 4), layers=k) for k in (0, 1, 2)]
    assert all(v.shape == (16,) for v in per_layer)
    np.testing.assert_allclose(per_layer[0][:8], per_layer[0][8:])  # layer 0 is [x; x]
    # the same word in another context: layer 0 the same vector, layers 1 and 2 not
    other = "she put money in the bank"
    o = other.index("bank")
    again = [embedder.word_vector(other, (o, o + 4), layers=k) for k in (0, 1, 2)]
    np.testing.assert_allclose(again[0], per_layer[0], rtol=1e-5)
    assert not np.allclose(again[2], per_layer[2])
    # "last4" of a 3-layer model is all three; concat stacks them
    np.testing.assert_allclose(embedder.word_vector(text, (start, start + 4)),
                               np.mean(per_layer, 0), rtol=1e-5, atol=1e-6)
    both = embedder.word_vector(text, (start, start + 4), layers="all", combine="concat")
    np.testing.assert_allclose(both, np.concatenate(per_layer), rtol=1e-5, atol=1e-6)
    # the Embedder's vectors are the model's hidden states, [CLS] text [SEP]
    ids = torch.tensor([embedder.tokenizer.encode(text).ids])
    states = load_elmo(path)(ids, output_hidden_states=True).hidden_states
    vectors = embedder.token_vectors([text], layers=1)[0]
    np.testing.assert_allclose(vectors, states[1][0].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_embed_and_wsd_commands_on_an_elmo_model(trained, tmp_path, capsys):
    path, _ = trained
    texts = tmp_path / "texts.txt"
    texts.write_text("the river bank\nmoney in the bank\n")
    assert cli.main(["embed", "--model", str(path), "--input", str(texts),
                     "--out", str(tmp_path / "v.npy"), "--layers", "all", "--combine", "concat",
                     "--quiet"]) == 0
    assert np.load(tmp_path / "v.npy").shape == (2, 3 * 16)
    rows = []
    for i in range(16):
        river = i % 2 == 1
        text = ("the fish bank of the river" if river else "the money bank gave a loan")
        start = text.index("bank")
        rows.append({"lemma": "bank", "pos": "noun",
                     "synset": "bank.river" if river else "bank.money",
                     "sense_rank": 1 if river else 2, "gloss": "g", "text": text,
                     "start": start, "end": start + 4})
    data = tmp_path / "senses.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli.main(["wsd", "train", "--model", str(path), "--input", str(data),
                     "--out", str(tmp_path / "senses"), "--method", "1nn", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["wsd", "evaluate", "--wsd", str(tmp_path / "senses"), "--input", str(data),
                     "--method", "1nn", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    # two contexts, one per sense: contextual vectors tell them apart, 1-NN gets all right
    assert report["instances"] == 16 and report["accuracy"] == 1.0
