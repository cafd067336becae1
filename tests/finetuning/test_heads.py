"""Task heads against transformers: saved directories load as BertFor* with no missing or
unexpected keys and give the same outputs and losses; bertkit extras (CRF, span head) survive a
save/load; freezing and per-part learning rates."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.finetuning import heads
from bertkit.finetuning.crf import CRF, allowed_transitions
from bertkit.finetuning.recipe import freeze, param_groups
from bertkit.finetuning.tasks import Classify, load_task
from bertkit.finetuning.tasks.spans import SpanTagger
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights

transformers = pytest.importorskip("transformers")

CFG = EncoderConfig(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4,
                    intermediate_size=64, max_positions=48)
TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


def make(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    enc = Encoder(CFG)
    if kind == "sequence":
        model = heads.SequenceClassifier(enc, 3)
    elif kind == "multi":
        model = heads.SequenceClassifier(enc, 4, "multi_label_classification")
    elif kind == "regression":
        model = heads.SequenceClassifier(enc, 1, "regression")
    elif kind == "token":
        model = heads.TokenClassifier(enc, len(TAGS), CRF(len(TAGS), allowed_transitions(TAGS)))
    elif kind == "qa":
        model = heads.QuestionAnswerer(enc)
    else:
        model = SpanTagger(enc, 3, max_width=3, ffn_size=8)
    init_weights(model, CFG)
    with torch.no_grad():  # non-trivial biases and CRF scores, so a lost tensor would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or "crf" in name or "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def inputs():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, CFG.vocab_size, (3, 13), generator=g)
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    return ids, types, mask


HF = {"sequence": "BertForSequenceClassification", "multi": "BertForSequenceClassification",
      "regression": "BertForSequenceClassification", "token": "BertForTokenClassification",
      "qa": "BertForQuestionAnswering"}


@pytest.mark.parametrize("kind", list(HF))
def test_transformers_loads_with_no_missing_keys_and_same_outputs(tmp_path, kind):
    model = make(kind)
    labels = {"sequence": ["a", "b", "c"], "multi": ["w", "x", "y", "z"], "token": TAGS}.get(kind)
    heads.save_task_model(model, tmp_path / "m", task={"task": kind}, labels=labels)
    cls = getattr(transformers, HF[kind])
    ref, info = cls.from_pretrained(tmp_path / "m", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == [HF[kind]]
    if labels:
        assert config["id2label"] == {str(i): name for i, name in enumerate(labels)}
        assert config["label2id"] == {name: i for i, name in enumerate(labels)}
    if kind in ("sequence", "multi", "regression"):
        assert ref.config.problem_type == model.problem_type
    ids, types, mask = inputs()
    ref.eval()
    with torch.no_grad():
        theirs = ref(input_ids=ids, token_type_ids=types, attention_mask=mask)
        ours = model(ids, types, mask)
    real = mask.bool()
    if kind == "qa":
        torch.testing.assert_close(ours[0][real], theirs.start_logits[real], atol=1e-5, rtol=0)
        torch.testing.assert_close(ours[1][real], theirs.end_logits[real], atol=1e-5, rtol=0)
    elif kind == "token":
        torch.testing.assert_close(ours[real], theirs.logits[real], atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(ours, theirs.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["sequence", "multi", "regression"])
def test_sequence_losses_equal_transformers(tmp_path, kind):
    model = make(kind)
    heads.save_task_model(model, tmp_path / "m", task={"task": kind})
    ref = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    ids, types, mask = inputs()
    labels = {"sequence": torch.tensor([0, 2, 1]),
              "multi": torch.tensor([[1., 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]]),
              "regression": torch.tensor([0.5, 3.0, -1.0])}[kind]
    with torch.no_grad():
        theirs = ref(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)
        ours = model.loss(model(ids, types, mask), labels)
    torch.testing.assert_close(ours, theirs.loss, atol=1e-5, rtol=1e-5)


def test_qa_loss_is_the_sum_of_two_cross_entropies():
    model = make("qa")
    ids, types, mask = inputs()
    start, end = torch.tensor([8, 0, 2]), torch.tensor([10, 0, 3])
    with torch.no_grad():
        s, e = model(ids, types, mask)
        loss = model.loss((s, e), start, end)
    cross_entropy = torch.nn.functional.cross_entropy
    expected = cross_entropy(s, start) + cross_entropy(e, end)
    torch.testing.assert_close(loss, expected)
    # padding is never an answer
    assert s[2, 4:].max() < -1e3


@pytest.mark.parametrize("kind", ["token", "spans", "sequence", "qa"])
def test_save_load_round_trip_keeps_every_weight(tmp_path, kind):
    model = make(kind)
    task = {"task": kind, "labels": TAGS if kind == "token" else ["a", "b", "c"],
            "scheme": "BIO"}
    heads.save_task_model(model, tmp_path / "m", task=task,
                          labels=task["labels"] if kind != "qa" else None)
    if kind in ("token", "spans"):
        assert (tmp_path / "m" / heads.HEAD_FILE).is_file()
    assert heads.read_task_file(tmp_path / "m")["head"] == model.head_spec()
    loaded = heads.load_task_weights(make(kind, seed=1), tmp_path / "m")  # other weights first
    own = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        if name.startswith("encoder.pooler.") and not model.uses_pooler:
            continue  # transformers' token / QA models have no pooler
        torch.testing.assert_close(tensor, own[name], msg=name)


def test_loading_a_transformers_saved_task_model(tmp_path):
    config = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=48, num_labels=2,
                                     id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    ref = transformers.BertForSequenceClassification(config).eval()
    ref.save_pretrained(tmp_path / "hf")
    task = load_task(tmp_path / "hf")
    assert task == Classify(labels=("neg", "pos"), max_length=48)
    model = heads.load_task_weights(task.make_model(Encoder(hub.load_config(tmp_path / "hf"))),
                                    tmp_path / "hf")
    ids, types, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, types, mask),
                                   ref(input_ids=ids, token_type_ids=types,
                                       attention_mask=mask).logits, atol=1e-5, rtol=0)


def test_crf_head_decodes_only_allowed_sequences():
    model = make("token")
    with torch.no_grad():
        model.crf.transitions.zero_()
    ids, types, mask = inputs()
    logits = torch.randn(3, 13, len(TAGS))
    logits[..., TAGS.index("I-PER")] += 5  # tempt every position towards I-PER
    paths = model.piece_labels(logits, mask.bool())
    for path in paths:
        tags = [TAGS[i] for i in path]
        assert tags[0] != "I-PER"  # I-X cannot open a sentence in BIO
        for a, b in zip(tags, tags[1:]):
            assert not (b.startswith("I-") and a[2:] != b[2:]), (a, b)
    loss = model.loss(logits.requires_grad_(), torch.where(mask.bool(), 0, -100))
    loss.backward()
    assert torch.isfinite(loss) and model.crf.transitions.grad is not None


def test_sentence_heads_read_cls_through_the_last_block_rows():
    model = make("sequence")
    ids, types, mask = inputs()
    with torch.no_grad():
        full = model.encoder(ids, types, mask)
        expected = model.classifier(full.pooled)
        torch.testing.assert_close(model(ids, types, mask), expected, atol=1e-6, rtol=0)
    # gradients reach every encoder weight but nothing the head does not read
    model.train()
    model.loss(model(ids, types, mask), torch.tensor([0, 1, 2])).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_a_mean_pooled_head_reads_the_mean_of_the_real_tokens(tmp_path):
    torch.manual_seed(0)
    model = heads.SequenceClassifier(Encoder(CFG), 3, pooling="mean")
    init_weights(model, CFG)
    model.eval()
    ids, types, mask = inputs()
    with torch.no_grad():
        h = model.encoder(ids, types, mask).last_hidden_state
        means = torch.stack([h[b, :int(n)].mean(0) for b, n in enumerate(mask.sum(1))])
        torch.testing.assert_close(model(ids, types, mask), model.classifier(means),
                                   atol=1e-6, rtol=0)
        # padding changes nothing: the short row alone gives the same logits
        n = int(mask[2].sum())
        torch.testing.assert_close(model(ids[2:, :n], types[2:, :n], mask[2:, :n])[0],
                                   model(ids, types, mask)[2], atol=1e-5, rtol=0)
    # transformers' BertForSequenceClassification reads [CLS]: this one is saved as a
    # BertModel with its classifier beside, and comes back as it was
    heads.save_task_model(model, tmp_path / "m", task={"task": "classify",
                                                      "labels": ["a", "b", "c"],
                                                      "pooling": "mean"})
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    again = load_task(tmp_path / "m")
    assert again.pooling == "mean"
    loaded = heads.load_task_weights(again.make_model(Encoder(CFG)), tmp_path / "m")
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, types, mask), model(ids, types, mask),
                                   atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="pooling"):
        heads.SequenceClassifier(Encoder(CFG), 3, pooling="max")


def test_first_subword_index():
    word_ids = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, -1], [-1, 0, 1, 1, -1, -1, -1, -1]])
    index, mask = heads.first_subword_index(word_ids, 3)
    assert index.tolist() == [[1, 3, 4], [1, 2, 0]]
    assert mask.tolist() == [[True, True, True], [True, True, False]]


@pytest.mark.parametrize("layers,trainable_blocks", [(None, 3), (0, 0), (1, 1), (2, 2)])
def test_freeze_top_layers(layers, trainable_blocks):
    model = make("sequence")
    freeze(model, layers)
    blocks = [all(p.requires_grad for p in b.parameters()) for b in model.encoder.blocks]
    assert blocks == [False] * (3 - trainable_blocks) + [True] * trainable_blocks
    assert model.encoder.embeddings.word.weight.requires_grad == (layers is None)
    assert all(p.requires_grad for p in model.classifier.parameters())


def test_param_groups_give_head_and_encoder_their_own_rates():
    model = make("sequence")
    freeze(model, 1)
    groups = param_groups(model, 5e-5, 1e-3, 0.01)
    by_id = {id(p): g for g in groups for p in g["params"]}
    assert by_id[id(model.classifier.weight)]["lr"] == 1e-3
    assert by_id[id(model.classifier.bias)]["weight_decay"] == 0.0
    assert by_id[id(model.encoder.blocks[2].up.weight)]["lr"] == 5e-5
    assert id(model.encoder.blocks[0].up.weight) not in by_id  # frozen
    assert sum(len(g["params"]) for g in groups) == sum(
        p.requires_grad for p in model.parameters())
