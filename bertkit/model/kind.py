"""What kind of model a directory holds, told from the files it has: the one answer every command
and `bertkit serve` ask before they load a model.

Each kind is written by one command and read by one loader:

    kind             marker files                       loaded by
    CNN              cnn.json, cnn.safetensors          finetuning.predict.TaskModel.load
    ELMO             elmo.json                          model.elmo.load_elmo
    STATIC           vocab.json, vectors.safetensors    embeddings.static.StaticVectors.load
    SEQ2SEQ          seq2seq.json                       road.seq2seq.load_seq2seq
    RECOMMENDER      recommender.json                   road.entities.load_recommender
    STATIC_SENTENCE  config.json of model_type          model.static_encoder.load_static_encoder
                     "model2vec"
    TASK             bertkit_task.json, or config.json  finetuning.predict.TaskModel.load
                     naming a transformers task head
    SPARSE           modules.json naming SpladePooling  embeddings.sparse_encoder.SparseEncoder.load,
                                                        model.info, model.fill_mask
    ENCODER          config.json or modules.json        model.hub.load_encoder, model.fill_mask,
                                                        embeddings.embedder.Embedder.load

The markers are checked in that order: a CNN directory also holds bertkit_task.json, a
distilled static model's config.json and modules.json would read as an encoder's, and an
encoder's is the only marker every transformers directory has. The file names are defined here
once, and the modules that write them import them.
"""
from __future__ import annotations

import enum
import json
from pathlib import Path

from bertkit.files import UserError
from bertkit.model.hub import resolve_model

CNN_FILE = "cnn.json"
CNN_WEIGHTS_FILE = "cnn.safetensors"
ELMO_FILE = "elmo.json"
STATIC_VOCAB_FILE = "vocab.json"
STATIC_VECTORS_FILE = "vectors.safetensors"
SEQ2SEQ_FILE = "seq2seq.json"
RECOMMENDER_FILE = "recommender.json"
TASK_FILE = "bertkit_task.json"
CONFIG_FILE = "config.json"
SENTENCE_MODULES_FILE = "modules.json"
MODEL2VEC_TYPE = "model2vec"
"""config.json's model_type in a static sentence model's directory (model2vec's layout)."""

TASK_ARCHITECTURES = ("BertForSequenceClassification", "BertForTokenClassification",
                      "BertForQuestionAnswering")
"""transformers' task heads that bertkit's tasks read (a directory with no bertkit_task.json)."""


class ModelKind(enum.Enum):
    """The kinds of model directory bertkit reads; the value says it in words."""

    CNN = "a convolutional sentence classifier (finetune --model cnn)"
    ELMO = "an ELMo language model (road elmo)"
    STATIC = "static word vectors (static train)"
    STATIC_SENTENCE = "static sentence vectors (static distill, model2vec)"
    SEQ2SEQ = "a sequence-to-sequence model (road seq2seq)"
    RECOMMENDER = "an entity-embedding recommender (road entities)"
    TASK = "a fine-tuned task model"
    SPARSE = "a sparse (SPLADE) encoder (finetune sparse)"
    ENCODER = "a BERT encoder"


BERTKIT_ONLY = {ModelKind.CNN, ModelKind.ELMO, ModelKind.STATIC, ModelKind.SEQ2SEQ,
                ModelKind.RECOMMENDER}
"""Kinds only bertkit writes: never a model's name in the Hugging Face cache."""

EMBEDDER_KINDS = (ModelKind.ENCODER, ModelKind.TASK, ModelKind.ELMO, ModelKind.STATIC_SENTENCE)
"""The kinds `bertkit.embeddings.embedder.Embedder.load` reads: what every command that turns
text into vectors (embed, evaluate's sentence figures, serve's embeddings and search views)
takes."""


def _has(path: Path, *names: str) -> bool:
    return all((path / name).is_file() for name in names)


def _config(path: Path) -> dict:
    """config.json as a dict; {} when it is absent or unreadable (the loader of the kind it
    then reads as names what is wrong with it)."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return config if isinstance(config, dict) else {}


def _names_task_head(path: Path) -> bool:
    architectures = _config(path).get("architectures")
    return bool(architectures) and isinstance(architectures, list) \
        and architectures[0] in TASK_ARCHITECTURES


def _names_splade_pooling(path: Path) -> bool:
    """Whether a sentence-transformers modules.json names a SpladePooling module: a
    SparseEncoder, whose vectors are no pooling of token states."""
    try:
        modules = json.loads((path / SENTENCE_MODULES_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # the sentence-model reader names what is wrong with it
    return isinstance(modules, list) and any(
        isinstance(m, dict) and str(m.get("type", "")).endswith("SpladePooling")
        for m in modules)


def model_kind(path: str | Path) -> ModelKind:
    """The kind of model in `path` (a directory, or a model's name in the local Hugging Face
    cache). A path that holds none of the kinds is a one-line UserError naming it."""
    p = resolve_model(path)
    if not p.is_dir():
        raise UserError(f"{p}: model directory does not exist" if not p.exists()
                        else f"{p}: is a file, expected a model directory")
    if _has(p, CNN_FILE, CNN_WEIGHTS_FILE):
        return ModelKind.CNN
    if _has(p, ELMO_FILE):
        return ModelKind.ELMO
    if _has(p, STATIC_VOCAB_FILE, STATIC_VECTORS_FILE):
        return ModelKind.STATIC
    if _has(p, SEQ2SEQ_FILE):
        return ModelKind.SEQ2SEQ
    if _has(p, RECOMMENDER_FILE):
        return ModelKind.RECOMMENDER
    if _has(p, CONFIG_FILE) and _config(p).get("model_type") == MODEL2VEC_TYPE:
        return ModelKind.STATIC_SENTENCE
    if _has(p, CONFIG_FILE) and (_has(p, TASK_FILE) or _names_task_head(p)):
        return ModelKind.TASK
    if _has(p, SENTENCE_MODULES_FILE) and _names_splade_pooling(p):
        return ModelKind.SPARSE
    if _has(p, CONFIG_FILE) or _has(p, SENTENCE_MODULES_FILE):
        return ModelKind.ENCODER
    raise UserError(f"{p}: not a model directory (no {CONFIG_FILE}, {SENTENCE_MODULES_FILE}, "
                    f"{ELMO_FILE}, {CNN_FILE}, {SEQ2SEQ_FILE}, {RECOMMENDER_FILE} or "
                    f"{STATIC_VOCAB_FILE} with {STATIC_VECTORS_FILE})")


def require_kind(path: str | Path, *kinds: ModelKind) -> Path:
    """The directory of `path` when it holds one of `kinds`; otherwise a one-line UserError
    saying what it holds instead."""
    if set(kinds) <= BERTKIT_ONLY and not Path(path).exists():
        # no hub holds these: the Hugging Face cache and its download hint would mislead
        raise UserError(f"{path}: no such directory; expected "
                        f"{' or '.join(k.value for k in kinds)}")
    p = resolve_model(path)
    found = model_kind(p)
    if found not in kinds:
        wanted = " or ".join(k.value for k in kinds)
        raise UserError(f"{p}: {found.value}, not {wanted}")
    return p


__all__ = ["ModelKind", "EMBEDDER_KINDS", "model_kind", "require_kind", "CNN_FILE",
           "CNN_WEIGHTS_FILE", "ELMO_FILE", "STATIC_VOCAB_FILE", "STATIC_VECTORS_FILE",
           "SEQ2SEQ_FILE", "RECOMMENDER_FILE", "TASK_FILE", "CONFIG_FILE",
           "SENTENCE_MODULES_FILE", "TASK_ARCHITECTURES", "MODEL2VEC_TYPE"]
