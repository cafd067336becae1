"""`bertkit evaluate` on an ELECTRA directory: held-out replaced-token detection (accuracy, AUC)
beside the generator's masked-token figures, minimal pairs scored by the discriminator (the
sum of log P(original), named in the output, equal to a plain loop), a text file by the
generator."""
from __future__ import annotations

import json
import math

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.model.encoder import init_weights
from bertkit.model.heads import ElectraModel, generator_config
from bertkit.model.hub import load_electra, save_electra
from bertkit.pretraining.evaluation import (DETECTION_SCORING, detection_log_likelihood,
                                            heldout_batches)
from bertkit.pretraining.objectives import evaluate_lm
from bertkit.text.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("the dog runs .", "the dog run .", "sv"), ("the dogs run .", "the dogs runs .", "sv"),
         ("a big cat sleeps .", "a cat big sleeps .", "order")]


@pytest.fixture(scope="module")
def electra_setup(prepared, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("electra_eval")
    tokenizer = Tokenizer.load(prepared / "tokenizer")
    cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2,
                        num_heads=2, intermediate_size=64, max_positions=64)
    with torch.random.fork_rng():
        model = ElectraModel(cfg, generator_config(cfg, 0.5))
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    save_electra(model, root / "e", tokenizer=tokenizer)
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"sentence_good": g, "sentence_bad": b, "UID": u}) + "\n"
                             for g, b, u in PAIRS), encoding="utf-8")
    return {"model": root / "e", "pairs": pairs, "data": prepared}


def _json(capsys, args: list) -> dict:
    assert main(["evaluate", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_minimal_pairs_are_scored_by_the_discriminator_as_a_plain_loop(electra_setup, capsys):
    got = _json(capsys, ["--model", electra_setup["model"], "--input", electra_setup["pairs"]])
    assert got["kind"] == "minimal_pairs" and got["scored_by"] == DETECTION_SCORING
    model = load_electra(electra_setup["model"])
    tokenizer = Tokenizer.load(electra_setup["model"])
    expected = []
    for good, bad, _ in PAIRS:
        scores = []
        for sentence in (good, bad):
            ids = tokenizer.encode(sentence).ids
            with torch.no_grad():
                logits = model(torch.tensor([ids]))[0].tolist()
            scores.append(sum(math.log(1 / (1 + math.exp(x)))
                              for x, i in zip(logits, ids) if i not in tokenizer.special_ids))
        expected.append(scores)
    library = detection_log_likelihood(model, tokenizer, [g for g, _, _ in PAIRS]
                                       + [b for _, b, _ in PAIRS], batch_size=2)
    for k, (good, bad) in enumerate(expected):
        assert library[k] == pytest.approx(good, rel=1e-5)
        assert library[len(PAIRS) + k] == pytest.approx(bad, rel=1e-5)
    wins = sum(1.0 if g > b else 0.5 if g == b else 0.0 for g, b in expected)
    assert got["accuracy"] == pytest.approx(wins / len(PAIRS))
    main(["evaluate", "--model", str(electra_setup["model"]), "--input",
          str(electra_setup["pairs"])])
    assert f"by {DETECTION_SCORING}" in capsys.readouterr().out


def test_held_out_figures_give_detection_accuracy_and_auc_beside_the_generator(
        electra_setup, capsys):
    got = _json(capsys, ["--model", electra_setup["model"], "--input", electra_setup["data"],
                         "--seq-len", "32", "--pretrain-batch-size", "8", "--eval-batches", "3",
                         "--mask-rate", "0.4"])
    assert got["kind"] == "heldout"
    batches = heldout_batches(electra_setup["data"], objective="electra", seq_len=32,
                              batch_size=8, eval_batches=3, mask_rate=0.4)
    expected = evaluate_lm(load_electra(electra_setup["model"]), batches, "electra")
    for key in ("accuracy", "loss", "detection_accuracy", "detection_auc"):
        assert got[key] == pytest.approx(expected["eval_" + key], rel=1e-6), key
    assert 0.0 <= got["detection_auc"] <= 1.0 and got["replaced_share"] > 0


def test_a_text_file_is_scored_by_the_generator(electra_setup, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the dog runs .\nthe cat sleeps .\n", encoding="utf-8")
    got = _json(capsys, ["--model", electra_setup["model"], "--input", text])
    assert got["kind"] == "text" and got["scored_by"] == "generator"
    assert got["pseudo_perplexity"] > 1.0


def test_the_electra_objective_on_a_masked_lm_is_one_line(electra_setup, tmp_path, capsys):
    from bertkit.model.hub import GENERATOR_DIR
    import shutil

    lone = tmp_path / "lone"
    shutil.copytree(electra_setup["model"] / GENERATOR_DIR, lone)  # an MLM, no discriminator
    assert main(["evaluate", "--model", str(lone), "--input", str(electra_setup["data"]),
                 "--objective", "electra", "--seq-len", "32"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "the electra objective's, and only theirs" in err


def test_transformers_discriminator_alone_judges_minimal_pairs(electra_setup, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    tokenizer = Tokenizer.load(electra_setup["model"])
    torch.manual_seed(0)
    alone = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)).eval()
    alone.save_pretrained(tmp_path / "d")
    tokenizer.save(tmp_path / "d")
    got = _json(capsys, ["--model", tmp_path / "d", "--input", electra_setup["pairs"]])
    assert got["scored_by"] == DETECTION_SCORING
    good = detection_log_likelihood(load_electra(tmp_path / "d"), tokenizer, [PAIRS[0][0]])[0]
    ids = tokenizer.encode(PAIRS[0][0]).ids
    with torch.no_grad():
        logits = alone(input_ids=torch.tensor([ids])).logits[0]
    keep = torch.tensor([i not in tokenizer.special_ids for i in ids])
    assert good == pytest.approx(float(torch.nn.functional.logsigmoid(-logits)[keep].sum()),
                                 rel=1e-5)
    assert main(["evaluate", "--model", str(tmp_path / "d"), "--input",
                 str(electra_setup["data"])]) == 2
    assert "without its generator" in capsys.readouterr().err
