"""Asking a model's next-sentence head whether B follows A (Jurafsky & Martin's "I went to the
store." pair): the probability equals transformers' BertForPreTraining's on the same
directory; a model without a trained head is one error line; the command prints it."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import PretrainingModel
from bertkit.model.hub import save_model
from bertkit.model.next_sentence import NextSentence, next_sentence
from bertkit.text.tokenizer import Tokenizer

WORDS = ["i", "went", "to", "the", "store", ".", "bought", "some", "milk", "penguins", "live",
         "in", "antarctica"]
FIRST, NEXT, RANDOM = ("I went to the store.", "I bought some milk.",
                       "Penguins live in Antarctica.")


def _model_dir(root, architecture="bert", nsp=True):
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_layers=2, num_heads=2,
                        intermediate_size=32, max_positions=32, hidden_dropout=0.0,
                        attention_dropout=0.0, architecture=architecture)
    with torch.random.fork_rng():  # the modules' default init draws globally
        model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    if model.nsp is not None:
        with torch.no_grad():  # a head with an opinion, as if trained
            model.nsp.weight.normal_(0, 1, generator=torch.Generator().manual_seed(1))
    save_model(model, root / "model", tokenizer=tokenizer,
               architectures=None if nsp else ["BertForMaskedLM"])
    return root / "model"


def test_the_probability_is_transformers_next_sentence_head(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = _model_dir(tmp_path)
    ours = NextSentence.load(path).batch([(FIRST, NEXT), (FIRST, RANDOM)])
    theirs = transformers.BertForPreTraining.from_pretrained(path).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    with torch.no_grad():
        logits = theirs(**tokenizer([FIRST, FIRST], [NEXT, RANDOM], padding=True,
                                    return_tensors="pt")).seq_relationship_logits
    want = logits.softmax(-1)[:, 0].tolist()
    assert ours == pytest.approx(want, abs=1e-5)
    assert ours[0] != ours[1]  # the second sentence matters
    assert next_sentence(path, FIRST, NEXT) == pytest.approx(ours[0], abs=1e-6)


@pytest.mark.parametrize("architecture,nsp,said", [
    ("modern", True, "has no next-sentence head"),
    ("bert", False, "next-sentence head was not trained")])
def test_a_model_without_a_trained_head_is_refused(tmp_path, architecture, nsp, said):
    path = _model_dir(tmp_path, architecture, nsp)
    with pytest.raises(UserError, match=said):
        NextSentence.load(path)


def test_the_command_prints_the_probability(tmp_path, capsys):
    path = _model_dir(tmp_path)
    want = next_sentence(path, FIRST, NEXT)
    assert main(["next-sentence", "--model", str(path), "--first", FIRST, "--second", NEXT,
                 "--json", "--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first"] == FIRST and out["is_next"] == pytest.approx(want, abs=1e-6)
    assert main(["next-sentence", "--model", str(path), "--first", FIRST, "--second", NEXT,
                 "--device", "cpu"]) == 0
    assert capsys.readouterr().out == f"P(B follows A) = {want:.4f}\n"
