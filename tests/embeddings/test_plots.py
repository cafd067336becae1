"""Pictures: attention weights re-derived correctly, projections, and what each PNG shows."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.anisotropy import anisotropy_report
from bertkit.embeddings.plots import (attention_probabilities, plot_anisotropy, plot_attention,
                                      project_2d)
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError
from bertkit.senses.data import SenseExample
from bertkit.senses.plots import plot_senses, read_sense_instances

PNG = b"\x89PNG\r\n\x1a\n"


def sense_data(path):
    """'bank' as a river side and as money, in sentences that say so."""
    rows = []
    for text, sense in [("we sat on the river bank .", "river"),
                        ("the water of the river bank", "river"), ("a river bank", "river"),
                        ("the bank raised rates", "money"), ("the money bank", "money"),
                        ("the bank raised money", "money")]:
        start = text.index("bank")
        rows.append({"lemma": "bank", "synset": sense, "gloss": f"{sense} sense", "text": text,
                     "start": start, "end": start + 4})
    rows.append({"lemma": "river", "synset": "x", "text": "river", "start": 0, "end": 5})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_attention_weights_equal_transformers(tiny_bert_dir, embedder, sentences):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(
        str(tiny_bert_dir), attn_implementation="eager").eval()
    text = sentences[3]
    ids = torch.from_numpy(embedder.tokenize([text])[0].ids)[None]
    with torch.no_grad():
        hf = reference(ids, output_attentions=True).attentions
    for layer in (1, 3, -1):
        probs, tokens = attention_probabilities(embedder, text, layer)
        assert probs.shape == (4, len(tokens), len(tokens)) and tokens[0] == "[CLS]"
        np.testing.assert_allclose(probs, hf[layer - 1 if layer > 0 else layer][0].numpy(),
                                   atol=1e-5)
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    with pytest.raises(UserError, match="blocks 1..3"):
        attention_probabilities(embedder, text, 0)


def test_pca_finds_the_direction_of_largest_variance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 10)) * 0.1
    x[:, 4] += np.repeat([-5.0, 5.0], 100)  # two clusters along dimension 4
    points, labels = project_2d(x)
    assert points.shape == (200, 2) and "principal component 1" in labels[0]
    assert (np.sign(points[:100, 0]) != np.sign(points[100:, 0])[0]).all()  # split on PC1
    np.testing.assert_allclose(points, project_2d(x)[0])  # deterministic


def test_umap_missing_is_a_clear_error():
    try:
        import umap  # noqa: F401
        pytest.skip("umap-learn is installed")
    except ImportError:
        pass
    with pytest.raises(UserError, match="umap-learn"):
        project_2d(np.eye(5), "umap")


def test_read_sense_instances(tmp_path):
    data = sense_data(tmp_path / "wsd.jsonl")
    found = read_sense_instances(data, "bank", max_per_sense=2)
    assert [i.synset for i in found] == ["river", "river", "money", "money"]
    assert found[0].text[found[0].start:found[0].end] == "bank"
    with pytest.raises(UserError, match="0 instances of 'cat'"):
        read_sense_instances(data, "cat")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"lemma": "bank", "text": "bank"}) + "\n")
    with pytest.raises(UserError, match="bad.jsonl:1"):
        read_sense_instances(bad, "bank")
    # "sense" is read as the label when "synset" is absent
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"lemma": "bank", "sense": s, "text": "a bank",
                                         "start": 2, "end": 6}) + "\n"
                             for s in ("a", "a", "b")))
    assert [i.synset for i in read_sense_instances(other, "bank")] == ["a", "a", "b"]


def _bank(text: str, sense: str, gloss: str) -> SenseExample:
    start = text.index("bank")
    return SenseExample("bank", text, start, start + 4, synset=sense, gloss=gloss)


def test_sense_plot_shows_each_instance_in_its_sense(embedder, tmp_path):
    instances = [_bank("the river bank", "river", "side of a river"),
                 _bank("a river bank", "river", "side of a river"),
                 _bank("the bank raised rates", "money", "a financial institution")]
    plot = plot_senses(embedder, instances, tmp_path / "senses.png", layers="last4")
    assert plot.path.read_bytes()[:8] == PNG
    points = plot.data["points"]
    assert {k: len(v) for k, v in points.items()} == {"river": 2, "money": 1}
    # The points are the PCA projection of the instances' word vectors, in file order by sense.
    vectors = embedder.word_vectors([i.text for i in instances],
                                    [(i.start, i.end) for i in instances], layers="last4")
    expected, axes = project_2d(vectors)
    np.testing.assert_allclose(points["river"], expected[:2])
    np.testing.assert_allclose(points["money"], expected[2:])
    # ... and they are what the figure draws: one scatter per sense, labelled with its gloss.
    ax = plot.figure.axes[0]
    drawn = {c.get_label(): c.get_offsets() for c in ax.collections}
    assert sorted(drawn) == ["money: a financial institution (1)", "river: side of a river (2)"]
    np.testing.assert_allclose(drawn["river: side of a river (2)"], expected[:2])
    assert ax.get_xlabel() == axes[0] and "\"bank\" in 3 sentences" in ax.get_title()


def test_anisotropy_plot_shows_the_report(embedder, sentences, tmp_path):
    report, _ = anisotropy_report(embedder, sentences * 2, min_count=2)
    plot = plot_anisotropy(report, tmp_path / "a.png")
    assert plot.path.read_bytes()[:8] == PNG
    assert plot.data["layers"] == [0, 1, 2, 3]
    lines = plot.data["lines"]
    assert lines["expected cosine (anisotropy), raw"] == [s.anisotropy for s in report.layers]
    assert lines["intra-sentence similarity, standardized"] == [s.intra_sentence_std
                                                                 for s in report.layers]
    shares = plot.data["rogue_share"]
    assert shares.shape == (3, 4)
    np.testing.assert_allclose(shares[0], [s.rogue[0].share for s in report.layers])
    left, right = plot.figure.axes
    curves = {line.get_label(): line.get_ydata() for line in left.get_lines()}
    for label, values in lines.items():
        np.testing.assert_allclose(curves[label], values)
    tops = [bar.get_y() + bar.get_height() for bar in right.patches]
    np.testing.assert_allclose(tops[-4:], shares.sum(0))  # the stacked bars reach the total


def test_attention_plot_shows_the_weights(embedder, sentences, tmp_path):
    probs, tokens = attention_probabilities(embedder, sentences[0], 2)
    one = plot_attention(embedder, sentences[0], tmp_path / "h.png", layer=2, head=1)
    assert one.path.read_bytes()[:8] == PNG
    assert list(one.data["weights"]) == [1] and one.data["tokens"] == tokens
    np.testing.assert_allclose(one.data["weights"][1], probs[1])
    image = one.figure.axes[0].get_images()[0]
    np.testing.assert_allclose(image.get_array(), probs[1])
    assert [t.get_text() for t in one.figure.axes[0].get_xticklabels()] == tokens
    every = plot_attention(embedder, sentences[0], tmp_path / "all.png", layer=-1)
    last = attention_probabilities(embedder, sentences[0], -1)[0]
    assert sorted(every.data["weights"]) == [0, 1, 2, 3]
    drawn = [ax.get_images()[0].get_array() for ax in every.figure.axes if ax.get_images()]
    np.testing.assert_allclose(np.stack(drawn), last)
    with pytest.raises(UserError, match="heads 0..3"):
        plot_attention(embedder, sentences[0], tmp_path / "x.png", head=4)
    assert not (tmp_path / "x.png").exists()


def test_plot_commands(tiny_bert_dir, tmp_path, capsys):
    data = sense_data(tmp_path / "wsd.jsonl")
    out = tmp_path / "bank.png"
    assert main(["plot", "senses", "--model", str(tiny_bert_dir), "--input", str(data), "--lemma",
                 "bank", "--layers", "last4", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    out = tmp_path / "att.png"
    assert main(["plot", "attention", "--model", str(tiny_bert_dir), "--text", "the bank raised rates",
                 "--layer", "-1", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert main(["plot", "senses", "--model", str(tiny_bert_dir), "--input", str(data), "--lemma",
                 "cat", "--out", str(tmp_path / "no.png")]) == 2
    assert "0 instances" in capsys.readouterr().err


@pytest.mark.slow
def test_plots_leave_matplotlib_global_state_alone(tiny_bert_dir, tmp_path):
    """In a fresh process: drawing chooses no backend and never imports pyplot."""
    code = (
        "import sys, matplotlib\n"
        "from bertkit.embeddings.embedder import Embedder\n"
        "from bertkit.embeddings.plots import plot_attention\n"
        "before = matplotlib.rcParams._get_backend_or_none()\n"
        f"plot_attention(Embedder.load({str(tiny_bert_dir)!r}), 'the bank', "
        f"{str(tmp_path / 'a.png')!r})\n"
        "print(before == matplotlib.rcParams._get_backend_or_none(), "
        "'matplotlib.pyplot' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_attention_of_an_over_long_text_is_cut_and_says_so(tmp_path, make_tiny_bert):
    small = Embedder.load(make_tiny_bert(tmp_path, max_positions=8))
    with pytest.warns(UserWarning, match="^1 of 1 texts were longer than 8 tokens and were cut$"):
        probs, tokens = attention_probabilities(small, "the bank raised rates on the river bank")
    assert probs.shape[-1] == len(tokens) == 8


def test_plot_commands_without_matplotlib_exit_2_with_one_line(tiny_bert_dir, tmp_path,
                                                              capsys, no_matplotlib):
    out = tmp_path / "att.png"
    assert main(["plot", "attention", "--model", str(tiny_bert_dir), "--text", "the bank",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: matplotlib not installed (pip install 'bertkit[plot]', or pip install -e "
        "'.[plot]' in a checkout); cannot draw att.png"]
    assert not out.exists()


def test_plot_runs_draws_each_runs_figure_against_steps_or_time(tmp_path, capsys):
    runs = {}
    for name, slope in (("a", 1.0), ("b", 2.0)):
        run = tmp_path / name
        run.mkdir()
        records = [{"step": s, "split": "train", "seconds": 30.0 * s, "loss": 10 - slope * s}
                   for s in (1, 2, 3)]
        records.append({"step": 3, "split": "eval", "eval_accuracy": 0.1 * slope})
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs[name] = run
    out = tmp_path / "runs.png"
    assert main(["plot", "runs", "--run", f"first={runs['a']}", str(runs["b"]),
                 "--out", str(out), "--x", "seconds"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    from bertkit.training.runlog import run_curves

    curves = run_curves({"first": runs["a"], "b": runs["b"]}, split="train", key="loss")
    assert curves["first"] == ([0.5, 1.0, 1.5], [9.0, 8.0, 7.0])  # minutes
    assert curves["b"][1] == [8.0, 6.0, 4.0]
    capsys.readouterr()
    assert main(["plot", "runs", "--run", str(runs["a"]), "--out", str(out),
                 "--key", "nothing"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: no train record of these runs holds 'nothing'"]
    assert main(["plot", "runs", "--run", str(tmp_path / "absent"), "--out", str(out)]) == 2
