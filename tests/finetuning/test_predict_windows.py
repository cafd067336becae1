"""`predict` and `evaluate` of a fine-tuned model with `--long-inputs windows`: an input longer
than the task's max_length run in windows, classify, pair and regress predicting from the mean
of the windows' logits; the plain run's predictions wherever an input fits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.files import UserError
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.tasks import Regress, Rerank
from bertkit.text.windows import split, windowed_span

LONG = " ".join(["the movie was good and the plot was awful ."] * 3)  # 30 pieces
SHORT = "the film was great"


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_bert, quick_config, task_files):
    """A classifier, a pair classifier and a regressor of max_length 16, trained one short epoch (their
    predictions need not be right, only computed)."""
    d = tmp_path_factory.mktemp("windows")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    finetune("classify", tiny_bert, task_files["train"], task_files["dev"], d / "cls",
             quick_config(epochs=1, batch_size=32, max_length=16))
    finetune("pair", tiny_bert, task_files["pairs"], None, d / "pair",
             quick_config(epochs=1, batch_size=32, max_length=16, dev_fraction=0.2))
    finetune(Regress(label_column="score"), tiny_bert, task_files["train"], task_files["dev"],
             d / "regress", quick_config(epochs=1, batch_size=32, max_length=16))
    torch.set_num_threads(before)
    return d


def _window_logits(model: TaskModel, text: str, pair: str | None = None) -> torch.Tensor:
    """The mean of the logits of the windows of a long input, each run alone."""
    enc = model.tokenizer.encode(text, pair)
    ids, types = np.asarray(enc.ids), np.asarray(enc.type_ids)
    windows = split(len(ids), windowed_span(types), model.task.max_length)
    assert len(windows.positions) > 1
    logits = []
    with torch.inference_mode():
        for held in windows.positions:
            t = torch.from_numpy(ids[held])[None]
            logits.append(model.model(t, torch.from_numpy(types[held])[None],
                                      torch.ones_like(t))[0])
    return torch.stack(logits).mean(0)


def _predict(model_dir, source, out, *flags):
    return main(["predict", "--model", str(model_dir), "--input", str(source), "--out",
                 str(out), "--quiet", *flags])


def test_a_long_text_is_classified_by_the_mean_of_its_windows_logits(models, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(f"{LONG}\n{SHORT}\n")
    assert _predict(models / "cls", source, tmp_path / "cut.jsonl") == 0
    assert _predict(models / "cls", source, tmp_path / "win.jsonl", "--long-inputs",
                    "windows") == 0
    cut, win = ([json.loads(line) for line in (tmp_path / f"{name}.jsonl").open()]
                for name in ("cut", "win"))
    assert cut[1] == win[1]  # the short line: as the plain run
    model = TaskModel.load(models / "cls")
    probs = torch.softmax(_window_logits(model, LONG), -1)
    assert win[0]["label"] == model.labels[int(probs.argmax())]
    assert win[0]["score"] == pytest.approx(float(probs.max()), abs=1e-5)
    assert win[0]["score"] != pytest.approx(cut[0]["score"], abs=1e-5)


def test_a_long_text_s_number_is_the_mean_of_its_windows(models):
    out = TaskModel.load(models / "regress", windows=True).classify([LONG, SHORT])
    model = TaskModel.load(models / "regress")
    assert out[0]["score"] == pytest.approx(float(_window_logits(model, LONG)[0]), abs=1e-5)
    assert out[1] == model.classify([SHORT])[0]


def test_windows_equal_the_plain_run_where_every_input_fits(models, task_files, tmp_path,
                                                            capsys):
    for model in ("cls", "pair"):
        data = task_files["dev" if model == "cls" else "pairs"]
        assert _predict(models / model, data, tmp_path / "cut.jsonl") == 0
        assert _predict(models / model, data, tmp_path / "win.jsonl", "--long-inputs",
                        "windows") == 0
        assert (tmp_path / "cut.jsonl").read_text() == (tmp_path / "win.jsonl").read_text()
        for flags in ([], ["--long-inputs", "windows"]):
            assert main(["evaluate", "--model", str(models / model), "--input", str(data),
                         "--json", "--quiet", *flags]) == 0
        cut, win = capsys.readouterr().out.splitlines()
        assert json.loads(cut) == json.loads(win)


def test_a_pair_windows_its_second_text_and_refuses_a_first_that_leaves_no_room(models,
                                                                                tmp_path,
                                                                                capsys):
    model = TaskModel.load(models / "pair")
    windowed = TaskModel.load(models / "pair", windows=True)
    out = windowed.classify([SHORT], [LONG])[0]
    probs = torch.softmax(_window_logits(model, SHORT, LONG), -1)
    assert out["score"] == pytest.approx(float(probs.max()), abs=1e-5)
    source = tmp_path / "pairs.jsonl"
    source.write_text(json.dumps({"premise": LONG, "hypothesis": SHORT}) + "\n")
    assert _predict(models / "pair", source, tmp_path / "p.jsonl", "--long-inputs",
                    "windows") == 2
    assert capsys.readouterr().err == ("error: example 1: its first text (33 tokens with the "
                                       "special ones) leaves no room in 16 tokens for a window "
                                       "of the second; shorten it\n")
    assert not (tmp_path / "p.jsonl").exists()


def test_evaluate_refuses_windows_for_a_sentence_model(tiny_bert, tmp_path, capsys):
    from bertkit.embeddings.embedder import Embedder

    Embedder.load(tiny_bert).save(tmp_path / "st")
    pairs = tmp_path / "sts.jsonl"
    pairs.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "score": 1.0}) + "\n")
    assert main(["evaluate", "--model", str(tmp_path / "st"), "--input", str(pairs),
                 "--long-inputs", "windows"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --long-inputs windows reads a fine-tuned model's inputs")
    assert len(err.splitlines()) == 1


def test_the_flag_is_in_help_and_a_task_that_reads_no_windows_refuses_it(capsys):
    for command in ("predict", "evaluate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--long-inputs {cut,windows}" in capsys.readouterr().out
    with pytest.raises(UserError, match="^--long-inputs windows: a rerank model reads no windows"):
        TaskModel(torch.nn.Linear(1, 1), None, Rerank(), windows=True)
