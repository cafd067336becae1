"""bertkit: train, inspect and fine-tune BERT-style masked language models.

The names below are imported on first use, so `import bertkit` stays instant and a script that
only tokenizes never imports matplotlib. Functions named like their module (`embed`,
`pretrain`, `finetune`, `fill_mask`, `info`, `train`) are reached through the module
(`from bertkit.pretraining.recipe import pretrain`): a package attribute of that name is the submodule.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # foundation
    "EncoderConfig": "config", "TrainConfig": "config", "PRESETS": "config", "preset": "config",
    "Encoder": "model.encoder", "PretrainingModel": "model.heads",
    "load_encoder": "model.hub", "load_pretraining_model": "model.hub", "save_model": "model.hub",
    "Tokenizer": "text.tokenizer", "train_tokenizer": "text.vocab",
    "extend_vocabulary": "model.extend",
    "FillMask": "model.fill_mask", "fill_mask": "model.fill_mask", "init_model": "model.create",
    "info": "model.info", "train": "training.loop", "TrainResult": "training.loop",
    "UserError": "files",
    # pretraining
    "prepare": "pretraining.corpus", "PretrainingBatches": "pretraining.examples", "MaskingConfig": "pretraining.masking",
    "mask_tokens": "pretraining.masking", "whole_word_mask": "pretraining.masking", "span_mask": "pretraining.masking",
    "PretrainOptions": "pretraining.options", "PretrainSchedule": "pretraining.options",
    "pretrain": "pretraining.recipe", "prepare_text": "pretraining.corpus",
    "prepare_corpora": "pretraining.corpus",
    "masked_token_scores": "pretraining.evaluation", "pseudo_log_likelihood": "pretraining.evaluation",
    "pseudo_perplexity": "pretraining.evaluation", "minimal_pairs": "pretraining.evaluation",
    "read_pairs": "pretraining.evaluation",
    "ElectraSettings": "pretraining.electra", "ElectraModel": "model.heads", "load_electra": "model.hub", "save_electra": "model.hub",
    # fine-tuning
    "FinetuneConfig": "finetuning.recipe", "finetune": "finetuning.recipe",
    "TaskModel": "finetuning.predict", "classify": "finetuning.predict", "tag": "finetuning.predict", "answer": "finetuning.predict",
    "CRF": "finetuning.crf", "Reranker": "finetuning.reranker",
    # retrieval
    "Index": "retrieval.corpus_index", "Searcher": "retrieval.corpus_index", "build_index": "retrieval.corpus_index",
    # embeddings and what they show
    "Embedder": "embeddings.embedder", "word_vector": "embeddings.embedder", "word_vectors": "embeddings.embedder",
    "embed": "embeddings.embedder", "SparseEncoder": "embeddings.sparse_encoder",
    "Standardizer": "embeddings.standardize", "anisotropy_report": "embeddings.anisotropy",
    "SenseInventory": "senses.wsd", "train_wsd": "senses.wsd", "StaticVectors": "embeddings.static",
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
