"""Training checkpoints: the whole state of a run, written atomically, read back exactly.

A checkpoint is a directory `checkpoints/step-00001200/` holding

    model.safetensors      the model's state dict, bertkit names, exact dtypes
    optimizer.safetensors  the optimizer's tensors (AdamW moments, step counts)
    state.safetensors      every other tensor: torch CPU/CUDA generator states, data-iterator
                           generator states
    state.json             the rest: step, tokens, clock, optimizer hyper-parameters, Python and
                           NumPy generator states, each rank's data position, the fingerprint
    manifest.json          sha256 of each file above, written last

It is written into a hidden temporary sibling and renamed into place, so a process killed while
saving leaves the previous checkpoint as it was; the last K are kept. Loading checks the
manifest, then the fingerprint (model shapes, data, objective), and refuses anything that does
not match with a one-line `UserError`. Nothing is pickled: tensors go to safetensors and
everything else to JSON.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.files import UserError, atomic_dir, sha256_file
from bertkit.temporaries import announce_swept, temp_in_use

_STEP_DIR = re.compile(r"^step-(\d{8})$")
_FILES = ("model.safetensors", "optimizer.safetensors", "state.safetensors", "state.json")


# Tensors out of nested Python state and back -------------------------------------------------

def _flatten(obj, tensors: dict[str, torch.Tensor], key: str):
    """JSON-able copy of `obj` with each tensor / array moved into `tensors` under a key."""
    if isinstance(obj, torch.Tensor):
        tensors[key] = obj.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        # Stored as raw bytes: safetensors lacks some NumPy dtypes (uint32 of the MT19937 state).
        data = np.ascontiguousarray(obj)
        tensors[key] = torch.frombuffer(bytearray(data.tobytes()), dtype=torch.uint8)
        return {"__ndarray__": key, "dtype": str(data.dtype), "shape": list(data.shape)}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__dict__": {k: _flatten(v, tensors, f"{key}.{k}") for k, v in obj.items()}}
        if all(isinstance(k, int) for k in obj):
            return {"__intdict__": {str(k): _flatten(v, tensors, f"{key}.{k}")
                                    for k, v in obj.items()}}
        raise TypeError(f"{key}: dict keys must all be str or all int")
    if isinstance(obj, tuple):
        return {"__tuple__": [_flatten(v, tensors, f"{key}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_flatten(v, tensors, f"{key}.{i}") for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"{key}: cannot store a {type(obj).__name__} in a checkpoint")


def _unflatten(obj, tensors: dict[str, torch.Tensor]):
    if isinstance(obj, list):
        return [_unflatten(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        raw = tensors[obj["__ndarray__"]].numpy().tobytes()
        return np.frombuffer(raw, dtype=obj["dtype"]).reshape(obj["shape"]).copy()
    if "__dict__" in obj:
        return {k: _unflatten(v, tensors) for k, v in obj["__dict__"].items()}
    if "__intdict__" in obj:
        return {int(k): _unflatten(v, tensors) for k, v in obj["__intdict__"].items()}
    if "__tuple__" in obj:
        return tuple(_unflatten(v, tensors) for v in obj["__tuple__"])
    raise ValueError(f"unknown entry {sorted(obj)}")


# Random generators ---------------------------------------------------------------------------

def rng_state() -> dict:
    """Every process-wide generator a training step may draw from."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        # one state per GPU the saving process saw: a resume on fewer GPUs (or under another
        # CUDA_VISIBLE_DEVICES) restores those it has (set_rng_state_all fails on the others)
        for index, cuda in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda, index)


# Fingerprints --------------------------------------------------------------------------------

GIVEN = "given"
"""The fingerprint entry a run records with its checkpoints only to explain a refusal in the
user's words (pretraining's --data as typed): the training loop saves it and never compares
it, so that what it spells (a corpus moved under another name) may change on resume."""


def model_fingerprint(model: nn.Module) -> dict[str, list[int]]:
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def saved_fingerprint(path: str | Path) -> dict:
    """The fingerprint a checkpoint directory was saved with ({} where it has none or its
    state cannot be read: loading it says why)."""
    try:
        doc = json.loads((Path(path) / "state.json").read_text(encoding="utf-8"))
        found = _unflatten(doc["state"]["__dict__"]["fingerprint"], {})  # holds no tensors
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return found if isinstance(found, dict) else {}


def check_fingerprint(where: Path, saved: dict, current: dict, ignore: tuple = ()) -> None:
    """Refuse a checkpoint made for another model shape, other data or another objective.
    Keys in `ignore` are not compared, on either side (the world size, which checkpoints
    before elastic resumes recorded; what a run records only to explain a refusal). Data
    known by its bytes ("train.jsonl (sha256 ...)") is compared by its digest (`_as_saved`)."""
    saved = {k: v for k, v in saved.items() if k not in ignore}
    current = {k: v for k, v in current.items() if k not in ignore}
    saved_model, model = saved.get("model", {}), current.get("model", {})
    for name, shape in model.items():
        if name not in saved_model:
            raise UserError(f"{where}: checkpoint has no weight {name}: it was made for a "
                            f"different model")
        if saved_model[name] != shape:
            raise UserError(f"{where}: checkpoint weight {name} has shape {saved_model[name]}, "
                            f"this model has {shape}: it was made for a different model")
    if extra := sorted(set(saved_model) - set(model)):
        raise UserError(f"{where}: checkpoint has weights this model lacks ({extra[0]}, ...): it "
                        f"was made for a different model")
    for key in sorted(set(saved) | set(current)):
        then, now = saved.get(key), _as_saved(saved.get(key), current.get(key))
        if key != "model" and then != now:
            raise UserError(f"{where}: checkpoint was made with {key} = {then!r}, this run has "
                            f"{now!r}{_why(key, then, now)}")


def check_fits(path: str | Path, fingerprint: dict, ignore: tuple = ()) -> None:
    """`load_checkpoint`'s refusal of a checkpoint made for another run, from its state.json
    alone (no tensors read): for a run to refuse before it prints or writes anything. One
    whose fingerprint cannot be read is left to `load_checkpoint`, which says why; one that
    differs is checked against its manifest first, so that damage is named as damage."""
    path = Path(path)
    saved = saved_fingerprint(path)
    if not saved:
        return
    try:
        check_fingerprint(path, saved, fingerprint, ignore)
    except UserError:
        _verify(path)
        raise


# "train.jsonl (sha256 1a2b...)", "<stdin> (sha256 ...)": data known by its bytes, the name
# only saying which (finetuning.input_sources.input_identity)
_BY_BYTES = re.compile(r"(.+) \(sha256 ([0-9a-f]+)\)")


def _by_bytes(value) -> tuple[str, str] | None:
    """(name, digest) of data known by its bytes; None for any other value."""
    found = isinstance(value, str) and _BY_BYTES.fullmatch(value)
    return (found.group(1), found.group(2)) if found else None


def _as_saved(saved, current):
    """`current` as the checkpoint knows it: data known by its bytes is `saved` where the
    digests agree, under whatever name (a file moved, the same bytes piped in); a checkpoint
    that recorded a file by its path alone (made before files were known by their bytes)
    compares the path, as it did then."""
    now = _by_bytes(current)
    if now is None:
        return current
    then = _by_bytes(saved)
    if then is None:
        return now[0]
    return saved if then[1] == now[1] else current


def _why(key: str, saved, current) -> str:
    """What a refusal adds where the two values alone say little: digests that differ."""
    if key == "data":  # its value is a digest, which says nothing
        return ": other data (another corpus, a changed one or other mixture weights)"
    both = _by_bytes(saved) is not None and _by_bytes(current) is not None
    return ": not the bytes it was made from" if both else ""


# Directories ---------------------------------------------------------------------------------

def list_checkpoints(root: str | Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU copies safetensors accepts: tied weights sharing storage get their own copy."""
    out, seen = {}, set()
    for name, t in state.items():
        t = t.detach().cpu().contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        out[name] = t.clone() if key in seen else t
        seen.add(key)
    return out


def save_checkpoint(root: str | Path, step: int, *, model: nn.Module,
                    optimizer: torch.optim.Optimizer, state: dict, keep: int) -> Path:
    """Write checkpoint `root/step-<step>` atomically and delete all but the newest `keep`.

    `state` is any nesting of dicts, lists, tuples, numbers, strings, tensors and NumPy arrays
    (the trainer's counters, each rank's generators and data position, the fingerprint).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    # Left by a process killed while saving (this process owns the run: see RunLock), named
    # by atomic_dir, or by versions before it named them with their pid.
    stale = [p for p in root.glob(".step-*.tmp") if not temp_in_use(p.name)]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    announce_swept(stale)
    path = root / f"step-{step:08d}"
    opt_state = optimizer.state_dict()
    opt_tensors: dict[str, torch.Tensor] = {}
    opt_json = _flatten(opt_state, opt_tensors, "optimizer")
    tensors: dict[str, torch.Tensor] = {}
    state_json = _flatten(state, tensors, "state")
    # Saved again at the same step (a resumed run stopped where it was stopped before): the
    # new checkpoint replaces the old one whole, and until then the old one stays.
    replaced = [p.name for p in path.iterdir()] if path.is_dir() else []
    with atomic_dir(path, replaces=replaced) as tmp:
        save_file(_unshared(model.state_dict()), str(tmp / "model.safetensors"))
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        save_file(tensors, str(tmp / "state.safetensors"))
        (tmp / "state.json").write_text(json.dumps({"state": state_json, "optimizer": opt_json}),
                                        encoding="utf-8")
        manifest = {name: sha256_file(tmp / name) for name in _FILES}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        for name in (*_FILES, "manifest.json"):
            with open(tmp / name, "rb") as f:
                os.fsync(f.fileno())
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _verify(path: Path) -> None:
    manifest_path = path / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        manifest = None
    if not isinstance(manifest, dict):
        raise UserError(f"{manifest_path}: checkpoint is corrupt (unreadable manifest); delete "
                        f"{path} to resume from an earlier checkpoint")
    for name in _FILES:
        file = path / name
        if not file.is_file() or manifest.get(name) != sha256_file(file):
            raise UserError(f"{file}: checkpoint is corrupt (missing or checksum mismatch); "
                            f"delete {path} to resume from an earlier checkpoint")


def load_checkpoint(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                    fingerprint: dict, ignore: tuple = ()) -> dict:
    """Restore model and optimizer from checkpoint `path` in place; return the saved `state`.

    Raises UserError for a corrupt checkpoint or one whose fingerprint differs from this run's
    (in any key but those of `ignore`).
    """
    path = Path(path)
    _verify(path)
    try:
        doc = json.loads((path / "state.json").read_text(encoding="utf-8"))
        state = _unflatten(doc["state"], load_file(str(path / "state.safetensors")))
        opt_state = _unflatten(doc["optimizer"], load_file(str(path / "optimizer.safetensors")))
        weights = load_file(str(path / "model.safetensors"))
    except Exception as e:  # the manifest matched, so this is a checkpoint of another format
        raise UserError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    check_fingerprint(path, state.get("fingerprint", {}), fingerprint, ignore)
    model.load_state_dict(weights, strict=True)
    for group in opt_state["param_groups"]:
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    try:
        optimizer.load_state_dict(opt_state)
    except (ValueError, KeyError) as e:
        raise UserError(f"{path}: optimizer state does not fit this run ({e})") from None
    return state


__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "list_checkpoints",
           "rng_state", "set_rng_state", "model_fingerprint", "check_fingerprint",
           "saved_fingerprint", "check_fits", "GIVEN"]
