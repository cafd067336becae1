"""ONNX export on tiny random models of both architectures: the graphs onnxruntime runs give
PyTorch's outputs within 1e-4 at other batch sizes and lengths than the traced ones; task
models export their logits and score a dev file as PyTorch does; int8 quantization."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.finetuning.heads import init_head, save_task_model
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.tasks import QA, Classify, Spans, Tag
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.export.onnx import (example_inputs, example_word_ids, export_onnx, onnx_session,
                                  run_session, word_inputs)
from bertkit.model.heads import ElectraModel, PretrainingModel, generator_config
from bertkit.text.tokenizer import Tokenizer

pytest.importorskip("onnxruntime")

WORDS = ["the", "film", "was", "good", "bad", "great", "awful", "a", "plot", "mary", "rome",
         "went", "to", "."]


def _config(architecture: str) -> EncoderConfig:
    # a local window shorter than the test inputs, so the modern graph's local layers matter
    modern = dict(local_window=4, global_every=2) if architecture == "modern" else {}
    return EncoderConfig(architecture=architecture, vocab_size=5 + len(WORDS), hidden_size=32,
                         num_layers=3, num_heads=2, intermediate_size=64, max_positions=64,
                         **modern)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    return Tokenizer.from_vocab(vocab)


def _pretrained(path, architecture: str, tokenizer) -> PretrainingModel:
    cfg = _config(architecture)
    model = PretrainingModel(cfg, fast=False)
    init_weights(model, cfg, torch.Generator().manual_seed(1))
    hub.save_model(model, path, tokenizer=tokenizer)
    return model.eval()


def _inputs(cfg, batch: int, length: int) -> dict[str, torch.Tensor]:
    return example_inputs(cfg, batch=batch, length=length, seed=batch * 100 + length)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_encoder_and_fill_mask_graphs_equal_pytorch(tmp_path, tokenizer, architecture):
    model = _pretrained(tmp_path / "m", architecture, tokenizer)
    cfg = model.config
    fill = export_onnx(tmp_path / "m", tmp_path / "fill.onnx")  # auto: it has an MLM head
    enc = export_onnx(tmp_path / "m", tmp_path / "enc.onnx", "encoder")
    assert (fill.kind, fill.outputs, enc.kind, enc.outputs) == \
        ("fill-mask", ["logits"], "encoder", ["last_hidden_state"])
    segments = ["token_type_ids"] if architecture == "bert" else []
    assert fill.inputs == enc.inputs == ["input_ids", *segments, "attention_mask"]
    assert fill.max_abs_diff < 1e-4 and enc.max_abs_diff < 1e-4
    sessions = onnx_session(fill.path), onnx_session(enc.path)
    for batch, length in [(1, 5), (4, 30), (2, 64)]:
        inputs = _inputs(cfg, batch, length)
        with torch.inference_mode():
            logits, _, out = model(*inputs.values()) if architecture == "bert" else \
                model(inputs["input_ids"], None, inputs["attention_mask"])
        got_logits, = run_session(sessions[0], inputs)
        got_states, = run_session(sessions[1], inputs)
        assert got_logits.shape == (batch, length, cfg.vocab_size)
        np.testing.assert_allclose(got_logits, logits.numpy(), atol=1e-4, rtol=0)
        np.testing.assert_allclose(got_states, out.last_hidden_state.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_fill_mask_of_an_electra_pair_is_its_generator(tmp_path, tokenizer, architecture):
    cfg = _config(architecture)
    with torch.random.fork_rng():
        model = ElectraModel(cfg, generator_config(cfg, 0.5), fast=False)
    init_weights(model, cfg, torch.Generator().manual_seed(2))
    hub.save_electra(model.eval(), tmp_path / "e", tokenizer=tokenizer)
    fill = export_onnx(tmp_path / "e", tmp_path / "fill.onnx", "fill-mask")
    enc = export_onnx(tmp_path / "e", tmp_path / "enc.onnx")  # auto: the discriminator
    assert (fill.kind, enc.kind) == ("fill-mask", "encoder")
    assert fill.max_abs_diff < 1e-4 and enc.max_abs_diff < 1e-4
    inputs = _inputs(cfg, 3, 20)
    with torch.inference_mode():
        logits = model.generator(inputs["input_ids"], inputs.get("token_type_ids"),
                                 inputs["attention_mask"])[0]
        states = model.encoder(inputs["input_ids"], inputs.get("token_type_ids"),
                               inputs["attention_mask"]).last_hidden_state
    got_logits, = run_session(onnx_session(fill.path), inputs)
    got_states, = run_session(onnx_session(enc.path), inputs)
    np.testing.assert_allclose(got_logits, logits.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got_states, states.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
@pytest.mark.parametrize("task", [Classify(labels=("negative", "positive")),
                                  Classify(labels=("negative", "positive"), pooling="mean"),
                                  Tag(labels=("O", "B-PER", "I-PER"), scheme="BIO"), QA()],
                         ids=["classify", "classify-mean", "tag", "qa"])
def test_task_models_export_their_logits(tmp_path, tokenizer, architecture, task):
    cfg = _config(architecture)
    model = task.make_model(Encoder(cfg, fast=False))
    init_weights(model, cfg, torch.Generator().manual_seed(2))
    init_head(model, torch.Generator().manual_seed(3))
    save_task_model(model, tmp_path / "t", task=task.to_json(), tokenizer=tokenizer,
                    labels=list(task.label_names()) or None)
    model.eval()
    result = export_onnx(tmp_path / "t", tmp_path / "t.onnx")
    assert result.kind == task.name and result.max_abs_diff < 1e-4
    assert result.outputs == (["start_logits", "end_logits"] if task.name == "qa"
                              else ["logits"])
    session = onnx_session(result.path)
    inputs = _inputs(cfg, 3, 17)
    with torch.inference_mode():
        expected = model(inputs["input_ids"], inputs.get("token_type_ids"),
                         inputs["attention_mask"])
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(run_session(session, inputs), expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_span_models_export_their_span_logits(tmp_path, tokenizer, architecture):
    task = Spans(labels=("LOC", "PER"), max_width=3, ffn_size=16)
    cfg = _config(architecture)
    model = task.make_model(Encoder(cfg, fast=False))
    init_weights(model, cfg, torch.Generator().manual_seed(6))
    init_head(model, torch.Generator().manual_seed(7))
    save_task_model(model, tmp_path / "s", task=task.to_json(), tokenizer=tokenizer,
                    labels=list(task.labels))
    model.eval()
    rows = ["mary\tB-PER\nwent\tO\nto\tO\nrome\tB-LOC\n.\tO\n",
            "the\tO\nfilm\tO\nwas\tO\ngood\tO\n", "rome\tB-LOC\n"] * 4
    dev = tmp_path / "dev.conll"
    dev.write_text("\n".join(rows))
    result = export_onnx(tmp_path / "s", tmp_path / "s.onnx", dev=dev)
    segments = ["token_type_ids"] if architecture == "bert" else []
    assert result.kind == "spans" and result.max_abs_diff < 1e-4
    assert result.inputs == ["input_ids", *segments, "attention_mask", "word_index", "word_mask"]
    session = onnx_session(result.path)
    for batch, length in [(1, 4), (3, 17), (2, 40)]:  # other word counts than the traced one
        inputs = _inputs(cfg, batch, length)
        word_ids = example_word_ids(inputs["attention_mask"], seed=length)
        with torch.inference_mode():
            expected, mask = model(inputs["input_ids"], inputs.get("token_type_ids"),
                                   inputs["attention_mask"], word_ids=word_ids)
        got, = run_session(session, {**inputs, **word_inputs(word_ids)})
        assert got.shape == tuple(expected.shape) == (batch, mask.shape[1], 3, 3)
        # spans past a sentence's end are -inf in both: compare where PyTorch is finite
        finite = torch.isfinite(expected).numpy()
        assert np.array_equal(np.isfinite(got), finite)
        np.testing.assert_allclose(got[finite], expected.numpy()[finite], atol=1e-4, rtol=0)
    # the graph scores a dev file as PyTorch does: the same entities found
    assert result.dev_scores["onnx"] == result.dev_scores["pytorch"]


@pytest.mark.parametrize("architecture", ["bert", "modern"])
@pytest.mark.parametrize("task", [Tag(labels=("O", "B-PER", "I-PER"), scheme="BIO",
                                      case_feature=True),
                                  Spans(labels=("LOC", "PER"), max_width=3, ffn_size=16,
                                        case_feature=True)], ids=["tag", "spans"])
def test_word_case_models_take_case_ids(tmp_path, tokenizer, architecture, task):
    cfg = _config(architecture)
    model = task.make_model(Encoder(cfg, fast=False))
    init_weights(model, cfg, torch.Generator().manual_seed(8))
    init_head(model, torch.Generator().manual_seed(9))
    with torch.no_grad():  # as if fine-tuned: the word cases move the logits
        model.word_case.weight.normal_(0, 1, generator=torch.Generator().manual_seed(10))
    save_task_model(model, tmp_path / "w", task=task.to_json(), tokenizer=tokenizer,
                    labels=list(task.labels))
    model.eval()
    rows = ["Mary\tB-PER\nwent\tO\nto\tO\nRome\tB-LOC\n.\tO\n",
            "the\tO\nfilm\tO\nWAS\tO\ngood\tO\n", "rome\tB-LOC\n"] * 4
    if task.name == "tag":
        rows = [r.replace("B-LOC", "O") for r in rows]
    dev = tmp_path / "dev.conll"
    dev.write_text("\n".join(rows))
    result = export_onnx(tmp_path / "w", tmp_path / "w.onnx", dev=dev)
    segments = ["token_type_ids"] if architecture == "bert" else []
    words = ["word_index", "word_mask"] if task.name == "spans" else []
    assert result.inputs == ["input_ids", *segments, "attention_mask", "case_ids", *words]
    assert result.max_abs_diff < 1e-4
    assert result.dev_scores["onnx"] == result.dev_scores["pytorch"]
    inputs = example_inputs(cfg, batch=3, length=17, seed=5, cases=True)
    word_ids = example_word_ids(inputs["attention_mask"], seed=5)
    extra = {"word_ids": word_ids} if task.name == "spans" else {}
    with torch.inference_mode():
        expected = model(inputs["input_ids"], inputs.get("token_type_ids"),
                         inputs["attention_mask"], case_ids=inputs["case_ids"], **extra)
        lower = model(inputs["input_ids"], inputs.get("token_type_ids"),
                      inputs["attention_mask"], case_ids=inputs["case_ids"].clamp(max=1),
                      **extra)
    expected = expected[0] if task.name == "spans" else expected
    lower = lower[0] if task.name == "spans" else lower
    feed = {**inputs, **(word_inputs(word_ids) if task.name == "spans" else {})}
    got, = run_session(onnx_session(result.path), feed)
    finite = torch.isfinite(expected).numpy()
    np.testing.assert_allclose(got[finite], expected.numpy()[finite], atol=1e-4, rtol=0)
    assert not torch.allclose(expected[torch.isfinite(expected)],
                              lower[torch.isfinite(lower)])  # the graph reads the cases


def test_quantized_graph_scores_the_dev_set(tmp_path, tokenizer):
    task = Classify(labels=("negative", "positive"))
    cfg = _config("bert")
    model = task.make_model(Encoder(cfg, fast=False))
    init_weights(model, cfg, torch.Generator().manual_seed(4))
    init_head(model, torch.Generator().manual_seed(5))
    save_task_model(model, tmp_path / "cls", task=task.to_json(), tokenizer=tokenizer,
                    labels=list(task.labels))
    rows = [{"text": f"the film was {w}", "label": "positive" if w in ("good", "great")
             else "negative"} for w in ("good", "bad", "great", "awful") * 5]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = export_onnx(tmp_path / "cls", tmp_path / "out" / "cls.onnx", quantize=True, dev=dev)
    assert result.quantized == tmp_path / "out" / "cls.int8.onnx"
    assert result.quantized.stat().st_size < result.path.stat().st_size
    scores = result.dev_scores
    assert set(scores) == {"pytorch", "onnx", "onnx-int8"}
    pytorch = TaskModel.load(tmp_path / "cls").evaluate(task.read(dev))
    assert scores["pytorch"]["accuracy"] == pytorch["accuracy"]
    assert scores["onnx"]["accuracy"] == pytorch["accuracy"]
    assert 0.0 <= scores["onnx-int8"]["accuracy"] <= 1.0
    # the int8 graph multiplies int8 weights, and still gives about the float graph's logits
    onnx = pytest.importorskip("onnx")
    ops = {node.op_type for node in onnx.load(str(result.quantized)).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear"}
    inputs = _inputs(cfg, 4, 12)
    exact, = run_session(onnx_session(result.path), inputs)
    int8, = run_session(onnx_session(result.quantized), inputs)
    assert 0 < np.abs(exact - int8).max() < 0.01


def test_refusals_are_one_line(tmp_path, tokenizer):
    _pretrained(tmp_path / "m", "bert", tokenizer)
    with pytest.raises(UserError, match="--dev scores a fine-tuned model"):
        export_onnx(tmp_path / "m", tmp_path / "x.onnx", dev=tmp_path / "dev.jsonl")
    with pytest.raises(UserError, match="--task must be"):
        export_onnx(tmp_path / "m", tmp_path / "x.onnx", "bogus")
    assert not (tmp_path / "x.onnx").exists()


def test_the_command_writes_and_reports(tmp_path, tokenizer, capsys):
    from bertkit.cli.main import main

    _pretrained(tmp_path / "m", "modern", tokenizer)
    assert main(["export", "onnx", "--model", str(tmp_path / "m"), "--out",
                 str(tmp_path / "m.onnx"), "--task", "encoder", "--quantize"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 'm.onnx'}: encoder graph, inputs input_ids, "
                             "attention_mask -> last_hidden_state")
    assert float(out[0].rsplit(" ", 1)[1]) < 1e-4
    assert (tmp_path / "m.int8.onnx").is_file() and "int8" in out[1]
    assert main(["export", "onnx", "--model", str(tmp_path / "m"), "--out",
                 str(tmp_path / "x.onnx"), "--dev", str(tmp_path / "m" / "config.json")]) == 2
    assert capsys.readouterr().err.startswith("error: --dev scores a fine-tuned model")


PAIRS = [("what was the film", "the film was good ."),
         ("who went to rome", "mary went to rome . the plot was awful . a film was great"),
         ("good", "bad")]


@pytest.mark.parametrize("architecture", ["bert", "modern"])
def test_a_reranker_graph_scores_text_pairs_as_bertkit_and_cross_encoder(tmp_path, tokenizer,
                                                                         architecture):
    """A (query, passage) pair in, one relevance logit out: the Reranker's, and (a BERT has the
    segments it reads) sentence-transformers' CrossEncoder's with an identity activation."""
    from bertkit.export.sentence import padded_batch
    from bertkit.finetuning.reranker import Reranker
    from bertkit.finetuning.tasks import Rerank

    cfg, task = _config(architecture), Rerank()
    model = task.make_model(Encoder(cfg, fast=False))
    init_weights(model, cfg, torch.Generator().manual_seed(4))
    init_head(model, torch.Generator().manual_seed(5))
    save_task_model(model, tmp_path / "r", task=task.to_json(), tokenizer=tokenizer)
    result = export_onnx(tmp_path / "r", tmp_path / "r.onnx")
    segments = ["token_type_ids"] if architecture == "bert" else []
    assert (result.kind, result.inputs, result.outputs) == \
        ("rerank", ["input_ids", *segments, "attention_mask"], ["logits"])
    assert result.max_abs_diff < 1e-4
    encoded = tokenizer.encode_batch([q for q, _ in PAIRS], [p for _, p in PAIRS],
                                     with_offsets=False)
    got, = run_session(onnx_session(result.path), padded_batch(list(encoded)))
    assert got.shape == (len(PAIRS), 1)
    ours = Reranker.load(tmp_path / "r").predict(PAIRS)
    np.testing.assert_allclose(got[:, 0], ours, atol=1e-4, rtol=0)
    if architecture == "bert":
        st = pytest.importorskip("sentence_transformers")
        theirs = st.CrossEncoder(str(tmp_path / "r"), device="cpu").predict(
            PAIRS, activation_fn=torch.nn.Identity())
        np.testing.assert_allclose(got[:, 0], theirs, atol=1e-4, rtol=0)
