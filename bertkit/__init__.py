"""bertkit: train, inspect and fine-tune BERT-style masked language models.

The names below are imported on first use, so `import bertkit` stays instant and a script that
only tokenizes never imports matplotlib. Functions named like their module (`embed`,
`pretrain`, `finetune`, `fill_mask`, `info`, `train`) are reached through the module
(`from bertkit.pretrain import pretrain`): a package attribute of that name is the submodule.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # foundation
    "EncoderConfig": "config", "TrainConfig": "config", "PRESETS": "config", "preset": "config",
    "Encoder": "model", "PretrainingModel": "model",
    "load_encoder": "hub", "load_pretraining_model": "hub", "save_model": "hub",
    "Tokenizer": "tokenizer", "train_tokenizer": "vocab",
    "FillMask": "fill_mask", "init_model": "create",
    "UserError": "files",
    # pretraining
    "prepare": "corpus", "PretrainingBatches": "examples", "MaskingConfig": "masking",
    "mask_tokens": "masking", "whole_word_mask": "masking", "span_mask": "masking",
    "PretrainOptions": "pretrain",
    # fine-tuning
    "FinetuneConfig": "finetune",
    "TaskModel": "predict", "classify": "predict", "tag": "predict", "answer": "predict",
    "CRF": "crf",
    # embeddings and what they show
    "Embedder": "embed", "word_vector": "embed", "word_vectors": "embed",
    "Standardizer": "analysis", "anisotropy_report": "analysis",
    "SenseInventory": "wsd", "train_wsd": "wsd", "StaticVectors": "static",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
