"""Asking an ELECTRA discriminator which tokens look replaced: per piece, the probability equals
transformers' ElectraForPreTraining's on the same directory, special pieces left out, each
piece with its characters in the text; the command prints them."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.detect import ReplacedTokens, detect_replaced
from bertkit.model.encoder import init_weights
from bertkit.model.heads import ElectraModel, generator_config
from bertkit.model.hub import save_electra
from bertkit.text.tokenizer import Tokenizer

WORDS = ["the", "chef", "cooked", "ate", "meal", "."]
TEXT = "the chef ate the meal ."


def _electra_dir(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + WORDS) + "\n")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    cfg = EncoderConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_layers=2, num_heads=2,
                        intermediate_size=32, max_positions=32, hidden_dropout=0.0,
                        attention_dropout=0.0)
    with torch.random.fork_rng():
        model = ElectraModel(cfg, generator_config(cfg, 0.5))
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():  # a head with an opinion, as if trained
        model.detector.prediction.weight.normal_(0, 1, generator=torch.Generator().manual_seed(1))
    save_electra(model, root / "electra", tokenizer=tokenizer)
    return root / "electra"


def test_each_piece_gets_transformers_replaced_probability(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = _electra_dir(tmp_path)
    tokens = ReplacedTokens.load(path)(TEXT)
    assert [t["token"] for t in tokens] == TEXT.split()
    assert [TEXT[t["start"]:t["end"]] for t in tokens] == TEXT.split()
    theirs = transformers.ElectraForPreTraining.from_pretrained(path).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    with torch.no_grad():
        logits = theirs(**tokenizer(TEXT, return_tensors="pt")).logits[0, 1:-1]
    assert [t["replaced"] for t in tokens] == pytest.approx(logits.sigmoid().tolist(), abs=1e-5)
    assert len({round(t["replaced"], 4) for t in tokens}) > 1
    assert detect_replaced(path, TEXT) == tokens


def test_a_model_that_is_no_electra_directory_is_refused(tmp_path):
    path = _electra_dir(tmp_path)
    (path / "generator" / "config.json").rename(path / "generator" / "moved.json")
    with pytest.raises(UserError):
        ReplacedTokens.load(path / "generator")


def test_the_command_prints_each_tokens_probability(tmp_path, capsys):
    path = _electra_dir(tmp_path)
    want = detect_replaced(path, TEXT)
    assert main(["detect", "--model", str(path), TEXT, "--json", "--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"text": TEXT, "tokens": want}  # the same run, the same floats
    assert main(["detect", "--model", str(path), TEXT, "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == TEXT and lines[1].split()[::2] == TEXT.split()
