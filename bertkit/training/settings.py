"""What a training run records about itself: `training_args.json` in its directory, and the
same settings as one compact block on stderr before it starts.

    record = run_settings({"options": opts}, device=device, precision="bf16",
                          command="bertkit pretrain --data d --out o ...")
    print(settings_block(record), file=sys.stderr)
    train(..., settings=record)   # rank 0 writes OUT/training_args.json once the run
                                  # is known to go on (a refused --resume leaves it as it was)

The record holds every option after defaults and per-task choices are resolved (the options
dataclasses as JSON), the versions of bertkit, torch and python, the device, its CPU (and GPU)
name, the precision that runs, and `command`: a shell line that runs the same settings again
(the CLI makes it from the options; a library call without one records null).
"""
from __future__ import annotations

import dataclasses
import json
import platform
import textwrap
from pathlib import Path
from typing import Any

import torch

from bertkit import __version__
from bertkit.files import write_json
from bertkit.runtime import cpu_name, resolve_device

SETTINGS_FILE = "training_args.json"


def _plain(value: Any) -> Any:
    """JSON-able: dataclasses as dicts, paths and devices as strings, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def environment(device: torch.device | str, precision: str) -> dict:
    """Versions, the device and what it is, and the precision that runs."""
    device = resolve_device(device)  # "auto" from a library call: the device it means
    env = {"bertkit": __version__, "torch": torch.__version__,
           "python": platform.python_version(), "device": str(device),
           "precision": precision, "cpu": cpu_name(), "threads": torch.get_num_threads()}
    if device.type == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def run_settings(options: dict[str, Any], *, device: torch.device | str, precision: str,
                 command: str | None = None) -> dict:
    """The record of a run: `command`, the resolved `options` (name -> a dataclass or a
    value) and the `environment`."""
    return {"command": command, **_plain(options),
            "environment": environment(device, precision)}


def settings_block(record: dict, width: int = 100) -> str:
    """The record as a few lines for stderr: the environment, then every option as
    `name=value`, nested ones flattened (`train.lr=0.001`)."""
    pairs: list[str] = []

    def walk(tree: dict, prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                if value is None:
                    shown = "none"  # as the command line spells it
                elif isinstance(value, str) and (not value or " " in value):
                    shown = json.dumps(value)
                else:
                    shown = value
                pairs.append(f"{prefix}{key}={shown}")

    env = record["environment"]
    head = ", ".join(f"{k} {v}" for k, v in env.items())
    for key, value in record.items():
        if key not in ("command", "environment"):
            walk(value if isinstance(value, dict) else {key: value}, "")
    body = textwrap.fill(" ".join(pairs), width=width, initial_indent="  ",
                         subsequent_indent="  ", break_on_hyphens=False)
    return f"settings ({head}):\n{body}"


def write_settings(out_dir: str | Path, record: dict) -> Path:
    """OUT/training_args.json, written atomically."""
    path = Path(out_dir) / SETTINGS_FILE
    write_json(path, record)
    return path


__all__ = ["SETTINGS_FILE", "environment", "run_settings", "settings_block", "write_settings"]
