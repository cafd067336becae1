"""Models named on the Hugging Face Hub: the rule that tells a name from a path, and the fetch
into the Hugging Face cache on first use.

The rule, for whatever a command or a loader takes as a model:

1. an existing path always wins, however it is spelled;
2. a name is `ORG/NAME` or `NAME` (letters, digits, `-`, `_`, `.`), so it starts with neither
   `.`, `/` nor `~`, and its first part is not an existing directory: `runs/nosuch`, where
   `runs/` exists, is a missing path, not a name;
3. anything else is a path, and a missing one is the caller's to report ("runs/nosuch: model
   directory does not exist").

A name is fetched with `huggingface_hub.snapshot_download` into its cache ($HF_HUB_CACHE,
$HF_HOME/hub, ~/.cache/huggingface/hub), only the files a model needs (`ALLOW`): the config,
the tokenizer's files, the safetensors weights (a repository's `pytorch_model.bin` only where
it has no safetensors), sentence-transformers' module files and the card; never the onnx/ or
openvino/ copies. Later uses read the cache. huggingface_hub honours HF_TOKEN (or the token
`hf auth login` saved) and HF_ENDPOINT; HF_HUB_OFFLINE=1 reads the cache only. Each is read
when a model is resolved, not when a module is imported. A failure is one UserError line
saying what to do.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.files import UserError

# What the Hub calls a model: "name" or "org/name", letters, digits, '-', '_' and '.'.
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's spelling of a set variable

# The files a model directory is made of, at its top and in an ELECTRA's generator/.
_MODEL_FILES = ["config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
                "special_tokens_map.json", "added_tokens.json", "*.model", "*.safetensors",
                "model.safetensors.index.json"]
ALLOW = [*_MODEL_FILES, *(f"generator/{p}" for p in _MODEL_FILES),
         # sentence-transformers: the module list, its settings, each module's folder
         # (1_Pooling/, 2_Normalize/, 2_Dense/, ...), and the model card
         "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
         "[0-9]*_*/*", "README.md",
         "bertkit_task.json"]  # a model `bertkit finetune` made (bertkit.model.kind.TASK_FILE)
"""What `resolve_model` fetches of a repository (fnmatch patterns, `*` crossing folders)."""
IGNORE = ["onnx/*", "openvino/*", "*/onnx/*", "*/openvino/*"]
"""Other runtimes' copies of the model, which bertkit never reads."""
PICKLED = ["pytorch_model.bin", "generator/pytorch_model.bin"]
"""Fetched only where a repository has no safetensors weights (bertkit reads them with
`torch.load(weights_only=True)`, which runs no pickled code)."""


@dataclass(frozen=True)
class Revision:
    """The revision of models given by name: one flag beside every command's model options
    (`bertkit.cli.options` adds it to any command with a field marked
    `metadata={"model": True}`)."""

    revision: str | None = field(default=None, metadata={"metavar": "REV"})
    """Branch, tag or commit of a model given by Hugging Face Hub name (of each Hub name the
    command takes); none: main. A model directory is read as it is."""


def hf_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded models, by the same variables it reads:
    $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
    ~/.cache/huggingface/hub."""
    env = os.environ
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(variable):
            return Path(env[variable]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: the cache only, no network."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


def is_hub_name(name_or_path: str | Path) -> bool:
    """Whether `name_or_path` is a Hugging Face Hub name by the rule of the module docstring."""
    name = str(name_or_path)
    if Path(name).exists() or not _HUB_NAME.fullmatch(name):
        return False
    first, slash, _ = name.partition("/")
    return not (slash and Path(first).is_dir())


def hub_name(name_or_path: str | Path) -> str | None:
    """The Hub name (`org/name`) a model was given by, or None for a local directory (a model
    card's `base_model` names a Hub model; a local path means nothing there). A snapshot in
    the Hugging Face cache, `models--org--name/snapshots/COMMIT`, is its name's."""
    if is_hub_name(name_or_path):
        return str(name_or_path)
    path = Path(name_or_path)
    repo = path.parent.parent.name
    if path.parent.name == "snapshots" and repo.startswith("models--"):
        return repo[len("models--"):].replace("--", "/")
    return None


def resolve_model(name_or_path: str | Path, revision: str | None = None) -> Path:
    """The directory of a model given as a path or as a Hub name (the rule of the module
    docstring): a path comes back as it is, whether it exists or not, for the caller to read
    or report; a name is fetched into the Hugging Face cache on first use (only `ALLOW`'s
    files) and its snapshot there returned. `revision` (a branch, tag or commit; None: main)
    applies to a name only.

    A name the Hub lacks, a revision it lacks, an empty cache offline or no network is one
    UserError saying so."""
    if not is_hub_name(name_or_path):
        return Path(name_or_path)
    name = str(name_or_path)
    with _said_plainly(name, revision):
        snapshot = _fetch(name, revision, ALLOW)
        if not any(snapshot.glob("*.safetensors")):
            snapshot = _fetch(name, revision, ALLOW + PICKLED)
    return snapshot


def _fetch(name: str, revision: str | None, allow: list[str]) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(
        name, revision=revision, cache_dir=hf_cache_dir(), allow_patterns=allow,
        ignore_patterns=IGNORE, local_files_only=offline(),
        endpoint=os.environ.get("HF_ENDPOINT") or None))


@contextlib.contextmanager
def _said_plainly(name: str, revision: str | None):
    """huggingface_hub's failures as one UserError line each, saying what to do (its own
    messages run to several lines about `repo_id` and urls)."""
    from huggingface_hub import utils as hf  # imported when a name is fetched: a second

    try:
        yield
    except hf.GatedRepoError:
        raise UserError(f"{name}: a gated model on the Hugging Face Hub: accept its terms at "
                        f"https://huggingface.co/{name} and set HF_TOKEN") from None
    except hf.RepositoryNotFoundError:
        raise UserError(f"{name}: no such model on the Hugging Face Hub (or it is private: set "
                        f"HF_TOKEN){_nor(name)}") from None
    except hf.RevisionNotFoundError:
        raise UserError(f"{name}: no revision {revision!r} on the Hugging Face Hub (a branch, "
                        f"tag or commit of the model)") from None
    except hf.LocalEntryNotFoundError as e:
        raise UserError(_not_cached(name, revision, e)) from None
    except hf.HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", "an error")
        raise UserError(f"{name}: the Hugging Face Hub answered {status} "
                        f"({_first_line(e)})") from None
    except ValueError as e:  # HFValidationError: a name the Hub cannot have
        raise UserError(f"{name}: not a Hugging Face Hub name ({_first_line(e)})") from None
    except Exception as e:  # noqa: BLE001 - the network's, re-raised unless it is
        if not _unreachable(e):
            raise
        raise UserError(f"{name}: cannot reach the Hugging Face Hub ({_first_line(e)}); "
                        f"connect, or pass a model directory") from None


def _not_cached(name: str, revision: str | None, error: Exception) -> str:
    """Why a name is neither fetched nor in the cache: offline, or the Hub unreachable."""
    at = f" at {revision!r}" if revision else ""
    fetch = f"`hf download {name}{' --revision ' + revision if revision else ''}`"
    cache = hf_cache_dir()
    if type(error).__name__ == "IncompleteSnapshotError":  # a newer huggingface_hub's: a
        # fetch interrupted, the files it listed not all there
        why = "HF_HUB_OFFLINE is set" if offline() else "the Hub cannot be reached"
        return (f"{name}: its snapshot in the Hugging Face cache ({cache}) lacks files and {why} "
                f"to finish it: run again online")
    if offline():
        return (f"{name}: not in the Hugging Face cache{at} ({cache}){_nor(name)}, and "
                f"HF_HUB_OFFLINE is set: fetch it once online ({fetch}), or pass a model "
                f"directory")
    cause = error.__cause__ or error
    return (f"{name}: cannot reach the Hugging Face Hub ({_first_line(cause)}) and the model "
            f"is not in its cache{at} ({cache}){_nor(name)}: connect, fetch it elsewhere with "
            f"{fetch} and copy the cache, or pass a model directory")


def _nor(name: str) -> str:
    """A bare NAME may have meant a directory: say that there is none."""
    return "" if "/" in name else ", nor a directory here"


def _unreachable(error: Exception) -> bool:
    """A failure of the network: no route, a refused connection, a time-out."""
    module = type(error).__module__.partition(".")[0]
    return isinstance(error, (ConnectionError, TimeoutError)) or module in (
        "httpx", "httpx2", "httpcore", "requests", "urllib3")


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split("\n")[0].split())
    return text[:200] or type(error).__name__


__all__ = ["ALLOW", "IGNORE", "PICKLED", "Revision", "hf_cache_dir", "hub_name", "is_hub_name",
           "offline", "resolve_model"]
