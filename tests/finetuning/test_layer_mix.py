"""`finetune --layer-mix`: the head reads ELMo's learned mix of all the encoder's layers; the
mix trains (also with a frozen encoder), is saved beside the head and comes back on load."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.cli.main import main
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import finetune
from bertkit.model import hub
from bertkit.model.scalar_mix import ScalarMix

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_mix_with_one_dominating_weight_reads_that_layer(tiny_bert):
    from bertkit.finetuning.heads import Parts, TokenClassifier
    encoder = hub.load_encoder(tiny_bert)
    ids = torch.tensor([[2, 7, 8, 9, 3]])
    plain = TokenClassifier(encoder, 3).eval().token_states(ids)
    model = TokenClassifier(encoder, 3, parts=Parts(layer_mix=True)).eval()
    assert model.layer_mix.num_layers == encoder.config.num_layers + 1  # declared, built
    with torch.no_grad():
        model.layer_mix.weights.fill_(0.0)
        model.layer_mix.weights[-1] = 40.0
    torch.testing.assert_close(model.token_states(ids), plain, atol=1e-6, rtol=0)
    with torch.no_grad():
        model.layer_mix.weights.fill_(0.0)
        model.layer_mix.weights[0] = 40.0
    embeddings = model.encoder(ids, output_hidden_states=True).hidden_states[0]
    torch.testing.assert_close(model.token_states(ids), embeddings, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_tagging_with_a_layer_mix_over_a_frozen_encoder(tiny_bert, task_files, quick_config,
                                                        tmp_path):
    out = tmp_path / "mix"
    result = finetune("tag", tiny_bert, task_files["ner_train"], task_files["ner_dev"], out,
                      quick_config(epochs=3, batch_size=16, layer_mix=True, train_layers=0))
    assert result.dev_metrics["f1"] > 0
    head = json.loads((out / "bertkit_task.json").read_text())["head"]
    assert head["layer_mix"] == 3  # embeddings + 2 blocks
    runner = TaskModel.load(out)
    mix = runner.model.layer_mix
    assert not torch.allclose(mix.weights, torch.zeros(3)) or float(mix.gamma) != 1.0  # learned
    # the kept weights are reported and drawn
    saved = json.loads((out / "dev_metrics.json").read_text())
    assert saved["layer_weights"] == pytest.approx(mix.layer_weights().tolist())
    assert saved["layer_mix_gamma"] == pytest.approx(float(mix.gamma.detach()))
    assert (out / "layer_weights.png").stat().st_size > 0
    batch = runner.tokenizer(["mary went to new york ."])
    # the reloaded model reads the same mix as the trained one: equal outputs to a fresh load
    again = TaskModel.load(out)
    torch.testing.assert_close(runner.model(*batch), again.model(*batch))
    # the encoder stayed frozen
    before, after = hub.load_weights(tiny_bert), hub.load_weights(out)
    name = next(k for k in before if k.startswith("encoder."))
    # saved as BertForTokenClassification, or as a BertModel when it reads word case
    saved = after.get("bert." + name, after.get(name))
    torch.testing.assert_close(saved, before[name], atol=0, rtol=0)


@pytest.mark.slow
def test_the_cli_flag(tiny_bert, task_files, tmp_path):
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train",
                 str(task_files["train"]), "--dev", str(task_files["dev"]), "--out",
                 str(tmp_path / "c"), "--layer-mix", "--epochs", "1", "--quiet"]) == 0
    runner = TaskModel.load(tmp_path / "c")
    assert isinstance(runner.model.layer_mix, ScalarMix)


@pytest.mark.parametrize("task", ["embed", "sparse"])
def test_a_task_whose_head_reads_no_layers_refuses_the_flag(tiny_bert, tmp_path, task, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("anchor\tpositive\na cat sits\ta cat is sitting\nthe dog runs\ta dog runs\n")
    code = main(["finetune", task, "--model", str(tiny_bert), "--train", str(pairs),
                 "--out", str(tmp_path / "o"), "--layer-mix"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --layer-mix is for tasks whose head reads the encoder's layers; "
        f"{task}'s does not")
    assert not (tmp_path / "o").exists()


def test_the_cnn_refuses_the_transformer_layer_flags(task_files, tmp_path, capsys):
    for flag in (["--layer-mix"], ["--train-layers", "0"]):
        code = main(["finetune", "classify", "--model", "cnn", "--train",
                     str(task_files["train"]), "--out", str(tmp_path / "o"), *flag])
        assert code == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: {flag[0]} chooses among a transformer's layers; --model cnn "
                       f"has none")


def test_plot_layer_mix_draws_every_run(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "metrics.json").write_text(json.dumps({"layer_weights": [0.2, 0.5, 0.3]}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dev_metrics.json").write_text(json.dumps(
        {"f1": 0.4, "layer_weights": [0.1, 0.1, 0.1, 0.7]}))
    out = tmp_path / "mix.png"
    assert main(["plot", "layer-mix", "--run", f"elmo={tmp_path / 'a'}", "--run",
                 str(tmp_path / "b"), "--out", str(out)]) == 0
    assert out.stat().st_size > 0
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "dev_metrics.json").write_text(json.dumps({"f1": 0.4}))
    assert main(["plot", "layer-mix", "--run", str(tmp_path / "c"), "--out",
                 str(tmp_path / "no.png")]) == 2
    assert "no layer_weights in" in capsys.readouterr().err
    assert not (tmp_path / "no.png").exists()
