"""The JSON API of `bertkit serve` through FastAPI's test client: every view's answer checked
against the library it wraps, the limits and bad requests (4xx, one sentence, no traceback),
files that no request can reach, the one-worker queue, and the command line."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.embeddings.embedder import Embedder
from bertkit.model.attention import attention_weights
from bertkit.model.fill_mask import FillMask
from bertkit.serve.app import listen, make_app
from bertkit.serve.workbench import Workbench, word_matches

from fastapi.testclient import TestClient  # noqa: E402  (fastapi: conftest's importorskip)


@pytest.fixture(scope="module")
def client(workbench):
    with TestClient(make_app(workbench)) as c:
        yield c


def test_info_lists_each_model_with_the_views_it_supports(client):
    info = client.get("/api/info").json()
    kinds = {m["name"]: m for m in info["models"]}
    assert kinds["bert2018"]["kind"] == kinds["modern"]["kind"] == "pretrained"
    assert kinds["bert2018"]["fill_mask"] and kinds["modern"]["architecture"] == "modern"
    assert kinds["classifier"]["task"] == "classify" and not kinds["classifier"]["fill_mask"]
    assert kinds["classifier"]["labels"] == ["negative", "positive"]
    assert kinds["tagger"]["verb"] == "tag" and kinds["qa"]["verb"] == "answer"
    assert all(m["attention"] for m in info["models"])
    assert info["runs"] == ["run"] and info["sense_words"] == ["bank"]


def test_the_page_and_its_files_come_from_the_package(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for asset in ("/static/app.js", "/static/style.css"):
        assert client.get(asset).status_code == 200
    # nothing the page or its script loads is outside this server
    import re
    from bertkit.serve.app import STATIC
    for name in ("index.html", "app.js", "style.css"):
        text = (STATIC / name).read_text()
        urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", text) + \
            re.findall(r"url\(([^)]+)\)", text) + re.findall(r"https?://[^\s\"'`)]+", text)
        assert all(u.startswith(("/", "#", "data:")) or u == "http://www.w3.org/2000/svg"
                   for u in urls), (name, urls)


def test_fill_mask_side_by_side_equals_the_library(client, served):
    text = "we sat on the [MASK] bank ."
    answer = client.post("/api/fill-mask", json={"text": text, "top_k": 3}).json()
    assert [m["name"] for m in answer["models"]] == ["bert2018", "modern"]
    for model, path in zip(answer["models"], (served.bert, served.modern)):
        expected = FillMask.load(path)([text], top_k=3)[0]["masks"]
        assert [[g["id"] for g in guesses] for guesses in model["masks"]] == \
            [[g["token"] for g in guesses] for guesses in expected]
        assert [g["score"] for g in model["masks"][0]] == \
            pytest.approx([g["score"] for g in expected[0]], abs=1e-6)
        assert model["ms"] > 0
    one = client.post("/api/fill-mask", json={"text": text, "models": ["modern", "classifier"]})
    models = one.json()["models"]
    assert models[0]["name"] == "modern" and "masks" in models[0]
    assert "masked-LM head" in models[1]["error"]


def test_attention_equals_transformers_eager_attention(client, served):
    transformers = pytest.importorskip("transformers")
    answer = client.post("/api/attention", json={"model": "bert2018", "text": "we sat on the "
                                                 "bank", "pair": "the river was blue"}).json()
    tok = transformers.AutoTokenizer.from_pretrained(served.bert)
    batch = tok("we sat on the bank", "the river was blue", return_tensors="pt")
    hf = transformers.BertModel.from_pretrained(served.bert, attn_implementation="eager")
    with torch.no_grad():
        expected = torch.stack(hf(**batch, output_attentions=True).attentions)[:, 0]
    assert answer["tokens"] == tok.convert_ids_to_tokens(batch["input_ids"][0])
    assert answer["segments"] == batch["token_type_ids"][0].tolist()
    np.testing.assert_allclose(np.array(answer["weights"]), expected.numpy(), atol=1e-4)
    summary = answer["summary"]
    w = expected  # [L, A, T, T]
    np.testing.assert_allclose(summary["cls"], w[..., 0].mean(-1), atol=1e-3)
    np.testing.assert_allclose(summary["self"], w.diagonal(dim1=-2, dim2=-1).mean(-1), atol=1e-3)
    T = w.shape[-1]
    previous = sum(w[..., t, t - 1] for t in range(1, T)) / T
    np.testing.assert_allclose(summary["previous"], previous, atol=1e-3)


def test_similarity_per_layer_equals_word_vectors(client, served):
    a = {"text": "we deposited money at the bank", "word": "bank"}
    b = {"text": "we sat on the river bank", "word": "bank"}
    answer = client.post("/api/similarity", json={"model": "modern", "a": a, "b": b}).json()
    embedder = Embedder.load(served.modern)
    L = embedder.config.num_layers
    assert answer["layers"] == list(range(L + 1)) and answer["words"] == ["bank", "bank"]
    for layer in (0, L):
        va, vb = embedder.word_vectors([a["text"], b["text"]], [(26, 30), (20, 24)],
                                       layers=layer)
        cos = va @ vb / np.linalg.norm(va) / np.linalg.norm(vb)
        assert answer["raw"][layer] == pytest.approx(cos, abs=1e-4)
    assert len(answer["standardized"]) == L + 1  # fitted on the corpus
    assert "corpus.txt" in answer["standardized_with"]


def test_senses_colours_the_labelled_occurrences_and_standardizes(client):
    answer = client.post("/api/senses", json={"model": "bert2018", "word": "bank"}).json()
    assert answer["source"] == "senses.jsonl" and len(answer["senses"]) == 24
    assert set(answer["senses"]) == {"bank.n.01", "bank.n.02"}
    for key in ("raw", "standardized"):
        points = np.array(answer[key]["points"])
        assert points.shape == (24, 2) and np.isfinite(points).all()
        assert -1 <= answer[key]["anisotropy"] <= 1
    assert answer["contexts"][0]["word"] == "bank"
    assert [row["layer"] for row in answer["corpus"]["layers"]] == [0, 1, 2]
    # a word of the corpus only: its occurrences there, one colour
    corpus = client.post("/api/senses", json={"model": "modern", "word": "river",
                                              "layer": 1}).json()
    assert corpus["source"] == "corpus.txt" and set(corpus["senses"]) == {""}
    assert corpus["layers"] == [1] and len(corpus["senses"]) >= 3


def test_runs_are_followed_record_by_record(client, served):
    first = client.get("/api/runs/run").json()
    assert [r["step"] for r in first["records"]] == [10, 20, 30, 30]
    assert first["training_args"] == {"command": "bertkit pretrain"}
    log = served.run / "metrics.jsonl"
    kept = log.read_bytes()
    try:
        with open(log, "a") as f:  # the run goes on
            f.write(json.dumps({"step": 40, "split": "train", "loss": float("nan")}) + "\n")
            f.write('{"step": 50, "spl')  # a line being written right now
        later = client.get(f"/api/runs/run?after={first['next']}").json()
        assert [r["step"] for r in later["records"]] == [40]
        assert later["records"][0]["loss"] is None
        assert client.get("/api/runs/run?after=999").json()["restarted"] is True
    finally:
        log.write_bytes(kept)


def test_predictions_of_each_task(client, served, workbench):
    cls = client.post("/api/predict", json={"model": "classifier", "text": "the cat sat"}).json()
    assert sorted(c["label"] for c in cls["classes"]) == ["negative", "positive"]
    assert sum(c["score"] for c in cls["classes"]) == pytest.approx(1, abs=1e-5)
    best = workbench.models["classifier"].task_model.classify("the cat sat")
    assert cls["classes"][0]["label"] == best["label"]
    assert cls["classes"][0]["score"] == pytest.approx(best["score"], abs=1e-5)
    text = "john went to paris"
    tags = client.post("/api/predict", json={"model": "tagger", "text": text}).json()
    assert tags["entities"] == workbench.models["tagger"].task_model.tag(text)
    for e in tags["entities"]:
        assert text[e["start"]:e["end"]] == e["text"]
    qa = client.post("/api/predict", json={"model": "qa", "question": "who went",
                                           "context": text}).json()
    assert set(qa) >= {"answer", "start", "end", "score"}
    if qa["start"] >= 0:
        assert text[qa["start"]:qa["end"]] == qa["answer"]


@pytest.mark.parametrize("path,body,status,words", [
    ("/api/fill-mask", {"text": "no mask here"}, 400, "no [MASK]"),
    ("/api/fill-mask", {"text": "[MASK]", "top_k": 51}, 400, "top_k"),
    ("/api/fill-mask", {"text": "[MASK]", "top_k": "5"}, 400, "top_k"),
    ("/api/fill-mask", {"text": "x [MASK] " * 400}, 413, "at most 2000"),
    ("/api/fill-mask", {"text": 7}, 400, "must be a string"),
    ("/api/fill-mask", {"text": "[MASK] " * 21}, 413, "at most 20"),
    ("/api/fill-mask", {"text": "[MASK]", "models": [["x"]]}, 400, "list of model names"),
    ("/api/fill-mask", {"text": "[MASK]", "models": ["nope"]}, 404, "no model named"),
    ("/api/attention", {"model": "bert2018", "text": "the cat " * 40}, 413, "at most 48"),
    ("/api/attention", {"model": "../../etc/passwd", "text": "a"}, 404, "no model named"),
    ("/api/attention", {"model": "bert2018", "text": ""}, 400, "empty"),
    ("/api/similarity", {"model": "modern", "a": {"text": "a cat", "word": "dog"},
                         "b": {"text": "a cat", "word": "cat"}}, 400, "occurs 0 time"),
    ("/api/similarity", {"model": "modern", "a": "x", "b": {}}, 400, "must be an object"),
    ("/api/senses", {"model": "modern", "word": "zebra"}, 400, "needs 3 or more"),
    ("/api/senses", {"model": "modern", "word": "bank", "layer": 9}, 400, "does not exist"),
    ("/api/predict", {"model": "modern", "text": "a"}, 400, "not fine-tuned"),
    ("/api/predict", {"model": "qa", "question": "who"}, 400, "context must be a string"),
])
def test_bad_requests_get_one_sentence_and_a_4xx(client, path, body, status, words):
    answer = client.post(path, json=body)
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert words in message and "\n" not in message and "Traceback" not in message


def test_bodies_that_are_not_json_objects_or_too_large(client):
    for raw in (b"not json", b"[1, 2]", b"\xff\xfe", b"x" * 70_000):
        answer = client.post("/api/fill-mask", content=raw,
                             headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500 and "error" in answer.json()
    assert client.get("/api/runs/nope").status_code == 404
    assert client.get("/api/runs/run?after=-1").status_code == 400
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/api/nothing").json() == {"error": "Not Found"}


def test_no_request_names_a_file(client):
    """Paths given as model or run names are only names: nothing is opened."""
    for name in ("/etc/passwd", "..", "corpus.txt"):
        assert client.post("/api/fill-mask", json={"text": "[MASK]", "models": [name]}
                           ).status_code == 404
        assert client.get(f"/api/runs/{name}").status_code == 404
    schema = client.get("/openapi.json").json()
    assert {"/api/fill-mask", "/api/attention", "/api/similarity", "/api/senses",
            "/api/predict", "/api/runs/{name}", "/api/info"} <= set(schema["paths"])


def test_one_worker_queues_concurrent_requests(served):
    """Model calls never overlap: each holds the worker until it is done."""
    inside, overlaps = [0], []
    bench = Workbench.load([served.bert])
    original = bench.fill_mask

    def slow(*args):
        inside[0] += 1
        overlaps.append(inside[0])
        time.sleep(0.05)
        try:
            return original(*args)
        finally:
            inside[0] -= 1

    bench.fill_mask = slow
    with TestClient(make_app(bench)) as c:
        threads = [threading.Thread(target=c.post, args=("/api/fill-mask",),
                                    kwargs={"json": {"text": "the [MASK]"}}) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(overlaps) == 6 and max(overlaps) == 1


def test_word_matches_whole_words_ignoring_case():
    assert list(word_matches("Bank banks bank. riverbank BANK", "bank")) == \
        [(0, 4), (11, 15), (27, 31)]


def test_attention_weights_rows_sum_to_one_under_padding(served):
    embedder = Embedder.load(served.modern)
    enc = embedder.tokenizer(["the cat sat on the mat", "a dog"])
    w = attention_weights(embedder.encoder, enc.input_ids, enc.token_type_ids,
                          enc.attention_mask)  # [L, B, A, T, T]
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    pad = enc.attention_mask[1] == 0
    assert pad.any()
    assert float(w[:, 1][..., pad].abs().max()) == 0.0


# The command line --------------------------------------------------------------------------

def test_serve_refuses_bad_settings_in_one_line(capsys, served):
    cases = [(["serve"], "at least one --model"),
             (["serve", "--model", str(served.bert), "--port", "70000"], "from 0 to 65535"),
             (["serve", "--model", str(served.root / "missing")], "missing"),
             (["serve", "--model", str(served.bert), "--max-top-k", "0"], "at least 1"),
             (["serve", "--run", str(served.root / "no-run")], "no-run")]
    for argv, words in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert words in err[-1] and err[-1].startswith("error:"), err


def test_a_port_in_use_is_one_line():
    taken = listen("127.0.0.1", 0)
    try:
        with pytest.raises(Exception, match="in use"):
            listen("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def test_model_flag_given_twice_keeps_both(monkeypatch, served):
    seen = {}

    def fake_serve(workbench, host, port, announce):
        seen.update(models=list(workbench.models), host=host, port=port)

    monkeypatch.setattr("bertkit.serve.app.serve", fake_serve)
    assert main(["serve", "--model", str(served.bert), "--model", str(served.modern),
                 "--port", "0"]) == 0
    assert seen == {"models": ["bert2018", "modern"], "host": "127.0.0.1", "port": 0}


def test_another_host_is_warned_about(monkeypatch, capsys, served):
    monkeypatch.setattr("bertkit.serve.app.serve", lambda *a, **k: None)
    assert main(["serve", "--model", str(served.bert), "--host", "0.0.0.0"]) == 0
    assert "anyone who can reach this address" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_server_process_answers_and_stops_on_ctrl_c(served):
    """The installed command: it prints its address, answers over HTTP, and Ctrl-C stops it
    with no traceback."""
    import signal
    import subprocess
    import sys
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-m", "bertkit.cli", "serve", "--model", str(served.bert), "--port",
         "0", "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("bertkit serve: http://127.0.0.1:"), line
        address = line.split()[2]
        with urllib.request.urlopen(address + "api/info", timeout=30) as answer:
            assert json.load(answer)["models"][0]["name"] == "bert2018"
        body = json.dumps({"text": "the [MASK] sat"}).encode()
        request = urllib.request.Request(address + "api/fill-mask", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert len(json.load(answer)["models"][0]["masks"][0]) == 5
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode in (0, 130), err
    assert "Traceback" not in err


def test_runs_are_named_by_their_directory_or_as_given(served):
    bench = Workbench.load([], [served.run, f"long={served.run}"])
    assert list(bench.runs) == ["run", "long"]
    with pytest.raises(Exception, match="two runs are named"):
        Workbench.load([], [served.run, f"run={served.run}"])


def test_every_encoder_view_on_the_real_minilm(minilm_dir):
    """all-MiniLM-L6-v2 (a sentence-transformers directory without a masked-LM head): its
    attention equals transformers', its word similarities are those of its layers, and the
    fill-mask view says why it cannot guess."""
    transformers = pytest.importorskip("transformers")
    bench = Workbench.load([minilm_dir])
    served = bench.models["model"]
    assert served.kind == "encoder" and "no trained masked-LM head" in served.no_fill_mask
    answer = bench.fill_mask("the [MASK] sat", 5, ["model"])
    assert "no trained masked-LM head" in answer["models"][0]["error"]
    text = "The bank raised its rates."
    attention = bench.attention("model", text)
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    hf = transformers.BertModel.from_pretrained(minilm_dir, attn_implementation="eager")
    with torch.no_grad():
        ref = torch.stack(hf(**tok(text, return_tensors="pt"), output_attentions=True)
                          .attentions)[:, 0]
    np.testing.assert_allclose(np.array(attention["weights"]), ref.numpy(), atol=1e-4)
    similarity = bench.similarity("model", {"text": text, "word": "bank"},
                                  {"text": "We sat on the river bank.", "word": "bank"})
    assert len(similarity["raw"]) == 7 and similarity["raw"][0] > similarity["raw"][-1]
