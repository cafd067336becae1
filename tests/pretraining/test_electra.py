"""ELECTRA's replaced-token detection: the generator's sample, the labels, the detection loss,
the AUC and the total loss, each against a plain Python loop; the generator's shape and the
shared embeddings; the batches' uniform draws."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import EncoderConfig, preset
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import IGNORE_INDEX, ElectraModel, generator_config
from bertkit.pretraining import electra, objectives

pytestmark = pytest.mark.usefixtures("one_thread")

V, T = 40, 12


def _sample_loop(logits: torch.Tensor, uniform: torch.Tensor) -> list[int]:
    """The inverse-CDF draw, one row and one token at a time."""
    picked = []
    for row, u in zip(logits.tolist(), uniform.tolist()):
        top = max(row)
        weights = [math.exp(x - top) for x in row]
        total, acc = sum(weights), 0.0
        choice = len(row) - 1
        for v, w in enumerate(weights):
            acc += w / total
            if u < acc:
                choice = v
                break
        picked.append(choice)
    return picked


def test_sampling_with_a_fixed_generator_equals_a_plain_loop():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(50, V, generator=g) * 2
    uniform = electra.draw_uniform((50,), torch.Generator().manual_seed(7))
    again = electra.draw_uniform((50,), torch.Generator().manual_seed(7))
    assert torch.equal(uniform, again) and bool((uniform >= 0).all() and (uniform < 1).all())
    assert electra.sample_tokens(logits, uniform).tolist() == _sample_loop(logits, uniform)


def test_samples_follow_the_softmax_and_never_draw_an_impossible_token():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]])
    n = 40_000
    uniform = electra.draw_uniform((n,), torch.Generator().manual_seed(0))
    drawn = electra.sample_tokens(logits.expand(n, -1), uniform)
    counts = torch.bincount(drawn, minlength=5).double()
    assert counts[4] == 0
    p = logits.softmax(-1)[0].double()
    # each count within 5 standard deviations of n p (binomial)
    sd = (n * p * (1 - p)).sqrt()
    assert bool(((counts - n * p).abs()[:4] <= 5 * sd[:4]).all()), (counts, n * p)


def test_no_gradient_flows_through_the_sample():
    logits = torch.randn(6, V, requires_grad=True)
    sampled = electra.sample_tokens(logits, torch.rand(6))
    assert not sampled.requires_grad and sampled.dtype == torch.long


def _corrupt_loop(input_ids, positions, labels, sampled):
    ids = input_ids.reshape(-1).tolist()
    replaced = [False] * len(ids)
    for p, label, s in zip(positions.tolist(), labels.tolist(), sampled.tolist()):
        if label == IGNORE_INDEX:
            continue
        ids[p] = s
        replaced[p] = s != label  # a correct sample counts as original
    return ids, replaced


def test_corrupted_input_and_labels_equal_a_plain_loop():
    g = torch.Generator().manual_seed(1)
    original = torch.randint(5, V, (3, T), generator=g)
    positions = torch.tensor([1, 4, 5, 13, 20, 30, 0, 0])  # two padding entries at position 0
    labels = original.reshape(-1)[positions].clone()
    labels[-2:] = IGNORE_INDEX
    masked = original.reshape(-1).clone()
    masked[positions[:-2]] = 4  # [MASK]
    sampled = labels.clamp(min=0).clone()
    sampled[[1, 3, 7]] = torch.tensor([6, 7, 9])  # two replaced, one a padding entry
    sampled[3] = (labels[3] + 1) % V
    ids, replaced = electra.corrupt(masked.view(3, T), positions, labels, sampled)
    want_ids, want_replaced = _corrupt_loop(masked.view(3, T), positions, labels, sampled)
    assert ids.reshape(-1).tolist() == want_ids
    assert replaced.reshape(-1).tolist() == want_replaced
    assert int(replaced.sum()) == int((sampled[:6] != labels[:6]).sum())
    assert ids[0, 0] == masked[0]  # the padding entries changed nothing


def test_detection_loss_is_the_mean_over_non_padding_tokens_of_a_plain_loop():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 5, generator=g)
    replaced = torch.rand(2, 5, generator=g) > 0.6
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    loss_sum, correct, count = electra.detection_terms(logits, replaced, mask)
    total = right = n = 0
    for row in range(2):
        for t in range(5):
            if not mask[row, t]:
                continue
            x, y = float(logits[row, t]), float(replaced[row, t])
            p = 1 / (1 + math.exp(-x))
            total += -(y * math.log(p) + (1 - y) * math.log(1 - p))
            right += (x > 0) == bool(y)
            n += 1
    assert float(loss_sum) == pytest.approx(total, rel=1e-5)
    assert float(correct) == right and float(count) == n
    whole = electra.detection_terms(logits, replaced, None)
    assert float(whole[2]) == 10


def test_auc_equals_the_pairwise_count_ties_half():
    scores = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4, 0.4, -1.0, 2.0])
    labels = torch.tensor([0, 1, 0, 1, 0, 1, 0, 0]).bool()
    pos = [s for s, y in zip(scores.tolist(), labels.tolist()) if y]
    neg = [s for s, y in zip(scores.tolist(), labels.tolist()) if not y]
    pairs = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    assert electra.auc(scores, labels) == pytest.approx(pairs / (len(pos) * len(neg)))
    assert math.isnan(electra.auc(scores, torch.zeros(8, dtype=torch.bool)))


def _tiny_electra(architecture="bert", seed=0) -> ElectraModel:
    cfg = preset("tiny", vocab_size=V, architecture=architecture, max_positions=T,
                 hidden_dropout=0.0, attention_dropout=0.0)
    model = ElectraModel(cfg, generator_config(cfg, 0.25))
    init_weights(model, cfg, torch.Generator().manual_seed(seed))
    return model


def _batch(seed=0, B=3):
    g = torch.Generator().manual_seed(seed)
    original = torch.randint(5, V, (B, T), generator=g)
    original[:, 0] = 2
    positions = torch.tensor([1, 3, 6, 14, 17, 26, 29, 0])
    labels = original.reshape(-1)[positions].clone()
    labels[-1] = IGNORE_INDEX
    masked = original.reshape(-1).clone()
    masked[positions[:-1]] = 4
    mask = torch.ones(B, T, dtype=torch.long)
    mask[-1, -3:] = 0
    return dict(input_ids=masked.view(B, T), token_type_ids=torch.zeros(B, T, dtype=torch.long),
                attention_mask=mask, mlm_positions=positions, mlm_labels=labels,
                sample_uniform=electra.draw_uniform((8,), g))


@pytest.mark.parametrize("architecture", ["bert", "modern"])
@pytest.mark.parametrize("weight", [50.0, 7.0])
def test_total_loss_is_generator_mlm_plus_weight_times_detection(architecture, weight):
    model = _tiny_electra(architecture).eval()
    batch = _batch()
    loss, metrics = objectives.loss_for(
        "electra", electra.ElectraSettings(detection_weight=weight))(model, batch)
    # the same by hand: the generator's full logits, the loop's sample, the loop's labels
    gen_logits, _, _ = model.generator(batch["input_ids"], batch["token_type_ids"],
                                       batch["attention_mask"])
    flat_logits = gen_logits.reshape(-1, V)[batch["mlm_positions"]]
    real = batch["mlm_labels"] != IGNORE_INDEX
    mlm = F.cross_entropy(flat_logits[real], batch["mlm_labels"][real])
    sampled = torch.tensor(_sample_loop(flat_logits, batch["sample_uniform"]))
    ids, replaced = _corrupt_loop(batch["input_ids"], batch["mlm_positions"],
                                  batch["mlm_labels"], sampled)
    detected = model(torch.tensor(ids).view(3, T), batch["token_type_ids"],
                     batch["attention_mask"]).reshape(-1)
    keep = batch["attention_mask"].reshape(-1).bool()
    rtd = F.binary_cross_entropy_with_logits(detected[keep],
                                             torch.tensor(replaced, dtype=torch.float)[keep])
    torch.testing.assert_close(metrics["mlm_loss"], mlm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(metrics["detection_loss"], rtd, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, mlm + weight * rtd, atol=1e-4, rtol=1e-5)


def test_the_generator_learns_only_from_its_own_loss_and_the_embeddings_from_both():
    model = _tiny_electra().train()
    batch = _batch(1)
    loss, _ = objectives.electra_loss(model, batch, detection_weight=50.0)
    loss.backward()
    whole = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    objectives.electra_loss(model, batch, detection_weight=1e-30)[0].backward()
    for name, p in model.named_parameters():
        if name.startswith("generator.encoder.blocks."):
            torch.testing.assert_close(p.grad, whole[name], atol=1e-6, rtol=1e-4)
    embedding = "encoder.embeddings.word.weight"
    assert not torch.allclose(model.get_parameter(embedding).grad, whole[embedding])


def test_the_generator_is_a_fraction_of_the_discriminator_sharing_its_embeddings():
    cfg = preset("mini", vocab_size=V, architecture="bert")
    g = generator_config(cfg, 0.25)
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (64, 1, 256, 4)
    assert g.embedding_size == 256 and g.head_dim == cfg.head_dim
    half = generator_config(cfg, 0.5)
    assert (half.hidden_size, half.num_heads, half.intermediate_size) == (128, 2, 512)
    assert generator_config(cfg, 1.0).embedding_size is None
    model = ElectraModel(cfg, g)
    assert model.generator.encoder.embeddings is model.encoder.embeddings
    assert model.generator.mlm.decoder()[0] is model.encoder.embeddings.word.weight
    assert model.generator.encoder.project.weight.shape == (64, 256)
    assert model.encoder.pooler is None and model.generator.nsp is None
    with pytest.raises(ValueError, match="share the discriminator's embeddings"):
        ElectraModel(cfg, generator_config(preset("tiny", vocab_size=V), 0.25))


def test_settings_are_checked():
    assert electra.ElectraSettings().generator_fraction == 0.25
    assert electra.ElectraSettings().detection_weight == 50.0
    with pytest.raises(UserError, match="--generator-fraction"):
        electra.ElectraSettings(generator_fraction=0.0)
    with pytest.raises(UserError, match="--detection-weight"):
        electra.ElectraSettings(detection_weight=-1.0)


def test_a_config_with_an_embedding_size_round_trips_through_electra_and_modern_json():
    cfg = EncoderConfig(vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                        num_layers=1, embedding_size=64)
    hf = {**cfg.to_hf(), "model_type": "electra"}
    assert EncoderConfig.from_hf(hf) == cfg
    modern = cfg.replace(architecture="modern")
    assert EncoderConfig.from_hf(modern.to_hf()).embedding_size == 64
    assert EncoderConfig.from_hf({**cfg.to_hf(), "embedding_size": 32}).embedding_size is None


def test_electra_batches_carry_one_uniform_per_prediction_alike_on_any_number_of_ranks(
        prepared):
    from bertkit.pretraining.examples import PretrainingBatches

    def first(**kw):
        return next(iter(PretrainingBatches(prepared, objective="electra", seq_len=32, seed=5,
                                            prefetch=0, **kw)))

    whole = first(batch_size=8)
    u = whole["sample_uniform"]
    real = whole["mlm_labels"] != IGNORE_INDEX
    assert u.shape == whole["mlm_labels"].shape and bool(((u >= 0) & (u < 1))[real].all())
    assert len(set(u[real].tolist())) == int(real.sum())  # a fresh draw at each position
    halves = [first(batch_size=4, rank=r, world_size=2) for r in (0, 1)]
    for name in ("mlm_labels", "sample_uniform"):
        got = torch.cat([h[name][h["mlm_labels"] != IGNORE_INDEX] for h in halves])
        assert torch.equal(got, whole[name][real]), name
    mlm = next(iter(PretrainingBatches(prepared, objective="mlm", seq_len=32, seed=5,
                                       prefetch=0, batch_size=8)))
    assert "sample_uniform" not in mlm


def test_through_the_training_loop_the_discriminator_learns_to_detect(tiny, tmp_path):
    """80 steps of the tiny learnable task: the discriminator tells replaced tokens far better
    than guessing "original" everywhere, and the generator learns its masked tokens."""
    from bertkit.config import TrainConfig
    from bertkit.training.loop import train

    cfg = tiny.config()
    model = ElectraModel(cfg, generator_config(cfg, 0.5))
    init_weights(model, cfg, torch.Generator().manual_seed(0))

    def batches(seed: int, n: int | None = None):
        g, made = torch.Generator().manual_seed(seed), 0
        while n is None or made < n:
            batch = tiny.batch(g, 8)
            batch["sample_uniform"] = electra.draw_uniform(batch["mlm_labels"].shape, g)
            made += 1
            yield batch

    held = list(batches(99, 4))
    before = objectives.evaluate_lm(model.eval(), held, "electra")
    train(model, objectives.loss_for("electra"), batches(1),
          TrainConfig(max_steps=80, lr=3e-3, warmup_steps=0, log_every=1000), tmp_path / "run",
          save=tiny.no_save, show_progress=False)
    after = objectives.evaluate_lm(model.eval(), held, "electra")
    assert before["eval_detection_auc"] < 0.7 < 0.95 < after["eval_detection_auc"]
    assert after["eval_detection_accuracy"] > 1 - after["eval_replaced_share"] + 0.05
    assert after["eval_accuracy"] > 0.3 and after["eval_loss"] < before["eval_loss"] - 1


def test_bad_electra_input_is_one_line_and_writes_nothing(prepared, tmp_path, capsys):
    from bertkit.cli.main import main
    from bertkit.model.heads import PretrainingModel
    from bertkit.model.hub import save_model
    from bertkit.text.tokenizer import Tokenizer

    out = tmp_path / "out"
    base = ["pretrain", "--data", str(prepared), "--out", str(out), "--max-steps", "2",
            "--objective", "electra", "--seq-len", "32"]

    def error(args) -> str:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: ")
        return err.strip().splitlines()[-1]

    assert "--generator-fraction must be in (0, 1]" in error(base + ["--generator-fraction",
                                                                     "1.5"])
    assert "--detection-weight must be positive" in error(base + ["--detection-weight", "0"])
    tokenizer = Tokenizer.load(prepared / "tokenizer")
    plain = tmp_path / "plain"
    save_model(PretrainingModel(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                              num_layers=1, num_heads=2, intermediate_size=64)),
               plain, tokenizer=tokenizer)
    assert "continues an ELECTRA run directory" in error(base + ["--init", str(plain)])
    assert not out.exists()
