"""`embed --long-inputs windows`: a text longer than the model read whole in windows. Equal to
the plain run where a text fits; for a long text each token's vector is the one its most
central window gives run alone, and sentence vectors pool those."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.text.windows import split, windowed_span

LONG = " ".join(["we sat on the river bank . the bank raised rates"] * 4)  # 44 pieces
SHORT = "we sat on the river bank ."


@pytest.fixture(scope="module")
def short_bert(tmp_path_factory, make_tiny_bert):
    """The tiny BERT with 16 positions: LONG takes six windows of it."""
    return make_tiny_bert(tmp_path_factory.mktemp("short-bert"), max_positions=16)


def _alone(embedder: Embedder, ids: np.ndarray) -> np.ndarray:
    """The last layer's vectors of one input run by itself, unbatched."""
    t = torch.from_numpy(ids)[None]
    with torch.inference_mode():
        return embedder.encoder(t, torch.zeros_like(t), torch.ones_like(t)).last_hidden_state[0] \
            .numpy()


def test_each_token_of_a_long_text_has_its_most_central_window_s_vector(short_bert):
    embedder = Embedder.load(short_bert, windows=True)
    tokens = embedder.token_vectors([LONG])[0]
    encoded = embedder.tokenize([LONG])[0]
    assert tokens.shape == (len(encoded.ids), 32) and len(encoded.ids) > 16
    windows = split(len(encoded.ids), windowed_span(encoded.type_ids), 16)
    assert len(windows.positions) > 2
    cls = []
    for k, held in enumerate(windows.positions):
        alone = _alone(embedder, encoded.ids[held])
        central = windows.owned(k) & ~windows.shared[held]
        np.testing.assert_allclose(tokens[held[central]], alone[central], atol=1e-5)
        cls.append(alone[0])
    # [CLS] and the last [SEP], in every window: the mean of theirs
    np.testing.assert_allclose(tokens[0], np.mean(cls, 0), atol=1e-5)
    # the mean pooling of a long text is the mean of those token vectors
    np.testing.assert_allclose(embedder.embed([LONG], pool="mean")[0], tokens.mean(0), atol=1e-5)
    np.testing.assert_allclose(embedder.embed([LONG], pool="cls")[0], tokens[0], atol=1e-5)


def test_a_pair_windows_its_second_text_and_refuses_a_first_that_leaves_no_room(short_bert):
    embedder = Embedder.load(short_bert, windows=True)
    encoded = embedder.tokenize([(SHORT, LONG)])[0]
    assert len(encoded.ids) == 1 + 7 + 1 + 44 + 1
    assert embedder.embed([(SHORT, LONG)]).shape == (1, 32)
    with pytest.raises(Exception, match=r"input 1: its first text \(47 tokens"):
        embedder.embed([(LONG, SHORT)])


def _embed(model, source, out, *flags):
    return main(["embed", "--model", str(model), "--input", str(source), "--out", str(out),
                 "--precision", "fp32", "--quiet", *flags])


def test_cli_windows_equal_the_plain_run_where_every_line_fits(short_bert, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(f"{SHORT}\nthe bank raised rates\n{SHORT}\tunbelievable\n")
    for extra in ([], ["--words"], ["--pool", "max", "--layers", "last4"]):
        assert _embed(short_bert, source, tmp_path / "cut.npy", *extra) == 0
        assert _embed(short_bert, source, tmp_path / "win.npy", "--long-inputs", "windows",
                      *extra) == 0
        np.testing.assert_array_equal(np.load(tmp_path / "cut.npy"),
                                      np.load(tmp_path / "win.npy"))


def test_cli_windows_read_a_long_line_whole(short_bert, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text(f"{LONG}\n{SHORT}\n")
    assert _embed(short_bert, source, tmp_path / "cut.npy") == 0
    assert "1 of 2 lines were longer than 16 tokens and were cut" in capsys.readouterr().err
    assert _embed(short_bert, source, tmp_path / "win.npy", "--long-inputs", "windows") == 0
    assert "were cut" not in capsys.readouterr().err
    cut, win = np.load(tmp_path / "cut.npy"), np.load(tmp_path / "win.npy")
    np.testing.assert_array_equal(cut[1], win[1])
    embedder = Embedder.load(short_bert, windows=True)
    np.testing.assert_allclose(win[0], embedder.token_vectors([LONG])[0].mean(0), atol=1e-5)
    assert not np.allclose(cut[0], win[0], atol=1e-3)
    # --words: every word of the long line, where cutting keeps only the first 14 pieces
    assert _embed(short_bert, source, tmp_path / "w.npy", "--long-inputs", "windows",
                  "--words") == 0
    index = [json.loads(line) for line in (tmp_path / "w.index.jsonl").open()]
    assert [r["text"] for r in index if r["line"] == 1] == LONG.split()
    capsys.readouterr()


def test_cli_flag_in_help_and_a_bad_value_or_pair_refused_in_one_line(short_bert, tmp_path,
                                                                      capsys):
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    assert "--long-inputs {cut,windows}" in capsys.readouterr().out
    source = tmp_path / "in.txt"
    source.write_text(f"{SHORT}\n{LONG}\t{SHORT}\n")
    with pytest.raises(SystemExit) as e:  # argparse's usage, then its one error line
        _embed(short_bert, source, tmp_path / "v.npy", "--long-inputs", "slide")
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "argument --long-inputs: invalid choice: 'slide' (choose from cut, windows)")
    assert _embed(short_bert, source, tmp_path / "v.npy", "--long-inputs", "windows") == 2
    err = capsys.readouterr().err
    assert err == (f"error: {source}:2: its first text (47 tokens with the special ones) "
                   "leaves no room in 16 tokens for a window of the second; shorten it\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
