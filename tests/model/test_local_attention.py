"""Local attention block by block (bertkit.model.local_attention) against the dense [T, T]
mask it stands in for: forward and gradients within 1e-5 in fp32, with padding, lengths the
block does not divide, either direction, several sequences; the speed switch that picks it; and
the flags that give a fresh model its window (init, pretrain --local-window, --global-every)."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.model import fast
from bertkit.model.attention import attention_weights
from bertkit.model.encoder import Encoder, attend, build_attention_mask, cls_rows, init_weights
from bertkit.model.hub import load_config
from bertkit.model.local_attention import Band, local_attention
from bertkit.pretraining import plan, recipe

TINY = dict(architecture="modern", vocab_size=101, hidden_size=32, num_layers=3, num_heads=4,
            intermediate_size=48, max_positions=128, layer_norm_eps=1e-5, hidden_dropout=0.0,
            attention_dropout=0.0, local_window=6, global_every=3)

# (B, T, window, padded lengths): lengths a block of window // 2 divides and does not, a
# window wider than the input, the smallest windows, padding that leaves a query no key
CASES = [(1, 64, 8, None), (3, 37, 8, [37, 20, 3]), (2, 50, 6, [50, 1]), (2, 5, 8, [5, 2]),
         (3, 33, 2, [33, 30, 16]), (1, 20, 1, None), (2, 129, 16, [129, 70])]


def padding_of(B: int, T: int, lengths: list[int] | None) -> torch.Tensor | None:
    """[B, T] 1 at the first lengths[b] tokens of each row, 0 after; None for no padding."""
    if lengths is None:
        return None
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,T,window,lengths", CASES)
def test_blocks_equal_the_dense_mask_forward_and_backward(B, T, window, lengths, causal):
    g = torch.Generator().manual_seed(T + window)
    q, k, v = (torch.randn(B, 2, T, 8, generator=g).requires_grad_() for _ in range(3))
    padding = padding_of(B, T, lengths)
    mask = build_attention_mask(padding, T, causal, q.device, window)
    expected = attend(q, k, v, mask, causal, 0.0)  # the reference: SDPA, the dense mask
    got = local_attention(q, k, v, padding, window, causal)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    upstream = torch.randn(expected.shape, generator=g)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), upstream),
                    torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_query_with_no_key_gives_zero():
    """Padding far from any real token: its window holds only padding, as SDPA: 0, no NaN."""
    q = k = v = torch.randn(1, 1, 40, 4)
    out = local_attention(q, k, v, padding_of(1, 40, [3]), 4, False)
    assert torch.equal(out[0, 0, 6:], torch.zeros(34, 4)) and out[0, 0, :5].abs().sum() > 0


def test_blocks_pay_only_for_long_local_layers():
    assert fast.blocks_pay(128 * fast.BLOCKS_FROM, 128)
    assert not fast.blocks_pay(128 * fast.BLOCKS_FROM - 1, 128)
    assert not fast.blocks_pay(8192, 0)  # a global layer


def twins(**changes) -> tuple[Encoder, Encoder]:
    """The same weights with the speed paths (blocked local layers) and as the reference."""
    cfg = EncoderConfig(**{**TINY, **changes})
    quick = Encoder(cfg)
    init_weights(quick, cfg, torch.Generator().manual_seed(0))
    plain = Encoder(cfg, fast=False)
    plain.load_state_dict(quick.state_dict())
    return quick, plain


@pytest.mark.parametrize("causal", [False, True])
def test_the_switch_blocks_long_local_layers_and_agrees_with_the_reference(causal):
    quick, plain = twins(causal=causal)
    ids = torch.randint(5, 101, (2, 61), generator=torch.Generator().manual_seed(1))
    padding = padding_of(2, 61, [61, 40])
    kinds = [type(m) for m, _ in quick.layer_inputs(padding, 61, causal, ids.device)]
    assert kinds == [torch.Tensor, Band, Band]  # global, local, local
    assert not any(isinstance(m, Band) for m, _ in plain.layer_inputs(padding, 61, causal,
                                                                      ids.device))
    assert not any(isinstance(m, Band) for m, _ in quick.layer_inputs(padding[:, :23], 23,
                                                                      causal, ids.device))
    upstream = torch.randn(2, 61, 32, generator=torch.Generator().manual_seed(3))
    outputs = []
    for model in (quick, plain):
        y = model(ids, None, padding).last_hidden_state
        loss = (y * upstream * padding[..., None]).sum() / padding.sum()  # a mean per token
        outputs.append((y, torch.autograd.grad(loss, list(model.parameters()))))
    (y, grads), (y_ref, grads_ref) = outputs
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_rows_and_attention_weights_of_a_long_input():
    """A local last block: `forward_rows` (a few rows and many) and the attention maps still
    give what the reference does."""
    quick, plain = twins(num_layers=2, global_every=2)  # block 1, the last, is local
    ids = torch.randint(5, 101, (2, 50), generator=torch.Generator().manual_seed(2))
    padding = padding_of(2, 50, [50, 31])
    with torch.no_grad():
        full = plain(ids, None, padding).last_hidden_state.reshape(100, -1)
        many = torch.arange(0, 100, 3)
        for rows in (cls_rows(ids), many):
            got, = quick.forward_rows(ids, None, padding, rows)
            torch.testing.assert_close(got, full[rows], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attention_weights(quick, ids, None, padding),
                               attention_weights(plain, ids, None, padding))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_blocks_equal_the_dense_mask_on_cuda():
    B, T, window = 2, 300, 16
    q, k, v = (torch.randn(B, 4, T, 16, device="cuda") for _ in range(3))
    padding = padding_of(B, T, [300, 123]).cuda()
    mask = build_attention_mask(padding, T, False, q.device, window)
    torch.testing.assert_close(local_attention(q, k, v, padding, window, False),
                               attend(q, k, v, mask, False, 0.0), atol=1e-4, rtol=1e-4)


# The flags --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tiny):
    from bertkit.text.vocab import train_tokenizer

    root = tmp_path_factory.mktemp("tok")
    train_tokenizer([tiny.write_corpus(root / "corpus.txt")], vocab_size=120, out=root / "tok",
                    progress=False)
    return root / "tok"


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_init_flags_reach_the_config(tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["init", "--preset", "tiny", "--tokenizer", str(tokenizer_dir), "--out",
                 str(out), "--local-window", "8", "--num-layers", "3"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["local_attention"], config["global_attn_every_n_layers"]) == (8, 3)
    assert (load_config(out).local_window, load_config(out).global_every) == (8, 3)
    assert main(["init", "--preset", "tiny", "--tokenizer", str(tokenizer_dir), "--out",
                 str(tmp_path / "two"), "--local-window", "16", "--global-every", "2"]) == 0
    assert (load_config(tmp_path / "two").local_window,
            load_config(tmp_path / "two").global_every) == (16, 2)
    capsys.readouterr()


BAD = [(["--architecture", "bert", "--local-window", "8"], "are for --architecture modern"),
       (["--architecture", "bert", "--global-every", "2"], "are for --architecture modern"),
       (["--local-window", "7"], "positive even number of tokens.*got 7"),
       (["--local-window", "0"], "positive even number of tokens.*got 0"),
       (["--local-window", "-4"], "positive even number of tokens.*got -4"),
       (["--global-every", "2"], "--global-every needs --local-window"),
       (["--local-window", "8", "--global-every", "0"], "--global-every must be a positive")]


@pytest.mark.parametrize("flags,says", BAD)
@pytest.mark.parametrize("command", ["init", "pretrain"])
def test_bad_windows_are_refused_in_one_line(command, flags, says, tmp_path, capsys):
    base = (["init", "--preset", "tiny", "--tokenizer", str(tmp_path / "tok")]
            if command == "init" else ["pretrain", "--data", str(tmp_path / "data"),
                                       "--max-steps", "1"])
    line = refused(capsys, base + ["--out", str(tmp_path / "out"), *flags])
    assert re.search(says, line), line
    assert not (tmp_path / "out").exists()


def test_pretrain_flags_reach_the_fresh_config(tmp_path, capsys, monkeypatch):
    seen = []
    stopped = SimpleNamespace(stopped_by="interrupted")  # a result with nothing to summarise

    monkeypatch.setattr(recipe, "pretrain",
                        lambda opts, command_line=None: seen.append(opts) or stopped)
    assert main(["pretrain", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "o"),
                 "--max-steps", "1", "--preset", "tiny", "--local-window", "64",
                 "--global-every", "2"]) == 130
    cfg = plan._fresh_config(seen[0], 120)
    assert (cfg.architecture, cfg.local_window, cfg.global_every) == ("modern", 64, 2)
    assert plan._fresh_config(plan.PretrainOptions(data="d", out="o"), 120).local_window == 0
    line = refused(capsys, ["pretrain", "--data", str(tmp_path / "d"), "--out",
                            str(tmp_path / "o"), "--max-steps", "1", "--init", str(tmp_path),
                            "--local-window", "64"])
    assert "--init DIR keeps its own" in line
