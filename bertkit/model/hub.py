"""Hugging Face BERT, ModernBERT and ELECTRA directories in and out.

A bertkit model directory *is* a Hugging Face directory: config.json, model.safetensors,
vocab.txt and the tokenizer files. Reading accepts BertModel, BertForMaskedLM,
BertForPreTraining and the task models (BertForSequenceClassification, ...), ModernBertModel
and ModernBertForMaskedLM, `.safetensors` or `pytorch_model.bin` (read with
weights_only=True, never unpickling code), and the old `gamma`/`beta` LayerNorm names. Writing
produces weight names that `transformers` loads with no missing or unexpected keys.

ELECTRA's pair (`save_electra`, `load_electra`) is a discriminator directory with its generator
in GENERATOR_DIR/: ElectraForPreTraining and ElectraForMaskedLM for "bert" (a discriminator
alone loads as any BERT encoder), a ModernBertModel with its detection head beside it for
"modern".

A model is given as a directory or as its name on the Hugging Face Hub, fetched into the
Hugging Face cache on first use (`bertkit.model.fetch.resolve_model`, the rule that tells a name
from a path); every loader here accepts either, and a `revision` for a name.

Our modules name things their own way (one fused q/k/v projection, `blocks.3.up`); the
tables below translate, one pair per architecture. A task head whose names already match
(`classifier`, `qa_outputs`) passes through unchanged.
"""
from __future__ import annotations

import json
import re
import warnings
from typing import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.config import ConfigError, EncoderConfig
from bertkit.files import UserError, atomic_dir, read_json
from bertkit.model.encoder import Encoder, init_weights
from bertkit.model.fetch import hf_cache_dir, hub_name, resolve_model  # noqa: F401 - one API
from bertkit.model.heads import ElectraModel, PretrainingModel

# Encoder-internal name prefixes, ours -> Hugging Face BertModel; {i} is the layer (q/k/v apart).
_ENCODER_NAMES = [
    ("embeddings.word.", "embeddings.word_embeddings."),
    ("embeddings.position.", "embeddings.position_embeddings."),
    ("embeddings.segment.", "embeddings.token_type_embeddings."),
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("blocks.{i}.attn.out.", "encoder.layer.{i}.attention.output.dense."),
    ("blocks.{i}.attn_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("blocks.{i}.up.", "encoder.layer.{i}.intermediate.dense."),
    ("blocks.{i}.down.", "encoder.layer.{i}.output.dense."),
    ("blocks.{i}.ffn_norm.", "encoder.layer.{i}.output.LayerNorm."),
    ("pooler.", "pooler.dense."),
    ("project.", "embeddings_project."),  # ELECTRA's only: embeddings narrower than the blocks
]
# Pretraining heads, ours -> Hugging Face BertForPreTraining (a name without a final dot is whole).
_HEAD_NAMES = [
    ("mlm.dense.", "cls.predictions.transform.dense."),
    ("mlm.norm.", "cls.predictions.transform.LayerNorm."),
    ("mlm.bias", "cls.predictions.bias"),
    ("nsp.", "cls.seq_relationship."),
]
# The same for ModernBertModel (q/k/v fused there too) and ModernBertForMaskedLM.
_MODERN_ENCODER_NAMES = [
    ("embeddings.word.", "embeddings.tok_embeddings."),
    ("embeddings.norm.", "embeddings.norm."),
    ("blocks.{i}.attn_norm.", "layers.{i}.attn_norm."),
    ("blocks.{i}.attn.qkv.", "layers.{i}.attn.Wqkv."),
    ("blocks.{i}.attn.out.", "layers.{i}.attn.Wo."),
    ("blocks.{i}.ffn_norm.", "layers.{i}.mlp_norm."),
    ("blocks.{i}.up.", "layers.{i}.mlp.Wi."),
    ("blocks.{i}.down.", "layers.{i}.mlp.Wo."),
    ("final_norm.", "final_norm."),
    ("project.", "embeddings_project."),  # bertkit's ELECTRA generator; ModernBERT has none
]
# ELECTRA's heads, ours -> Hugging Face ElectraForPreTraining and ElectraForMaskedLM (the
# discriminator's head sits on an ElectraModel, the generator is a PretrainingModel).
_ELECTRA_HEAD_NAMES = [
    ("detector.dense.", "discriminator_predictions.dense."),
    ("detector.prediction.", "discriminator_predictions.dense_prediction."),
    ("mlm.dense.", "generator_predictions.dense."),
    ("mlm.norm.", "generator_predictions.LayerNorm."),
    ("mlm.bias", "generator_lm_head.bias"),
]
_MODERN_HEAD_NAMES = [
    ("mlm.dense.", "head.dense."),
    ("mlm.norm.", "head.norm."),
    ("mlm.bias", "decoder.bias"),
]


def _table(pairs: list[tuple[str, str]], backward: bool = False) -> list[tuple[str, str]]:
    """(regex, replacement) rules from name pairs, in either direction: one list, no mirror
    copy to drift out of step."""
    rules = []
    for ours, theirs in pairs:
        source, target = (theirs, ours) if backward else (ours, theirs)
        pattern = re.escape(source).replace(r"\{i\}", r"(\d+)")
        rules.append((pattern if source.endswith(".") else pattern + "$",
                      target.replace("{i}", r"\1")))
    return rules


class _Names:
    """One architecture's translation: the rules both ways, the prefix of the encoder inside a
    task or pretraining model, and the keys its checkpoints carry that hold nothing to load."""

    def __init__(self, encoder: list, heads: list, prefix: str, ignored: str):
        self.split_qkv = prefix != "model."  # BERT and ELECTRA keep q, k and v apart
        self.encoder, self.encoder_back = _table(encoder), _table(encoder, backward=True)
        self.heads, self.heads_back = _table(heads), _table(heads, backward=True)
        self.prefix = prefix
        self.ignored = re.compile(ignored)


NAMES = {
    "bert": _Names(_ENCODER_NAMES, _HEAD_NAMES, "bert.",
                   r"(embeddings\.position_ids|cls\.predictions\.decoder\.(weight|bias))$"),
    # the decoder weight is the tied word embeddings
    "modern": _Names(_MODERN_ENCODER_NAMES, _MODERN_HEAD_NAMES, "model.", r"^decoder\.weight$"),
    # the "bert" architecture in ELECTRA's names; the generator's decoder is the tied embeddings
    "electra": _Names(_ENCODER_NAMES, _ELECTRA_HEAD_NAMES, "electra.",
                      r"(embeddings\.(position_ids|token_type_ids)|generator_lm_head\.weight)$"),
}


def names_for(architecture: str, names: list[str]) -> str:
    """The NAMES key of a checkpoint: "electra" for "bert" weights under ELECTRA's prefix."""
    if architecture == "bert" and any(n.startswith("electra.") for n in names):
        return "electra"
    return architecture
# BERT checkpoints keep q, k and v apart; bertkit fuses them.
_QKV = re.compile(r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)$")
_HF_QKV = re.compile(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)$")


def _rename(name: str, table) -> str | None:
    for pattern, template in table:
        new, n = re.subn("^" + pattern, template, name)
        if n:
            return new
    return None


# Ours -> Hugging Face --------------------------------------------------------------------------

def to_hf_state_dict(state: dict[str, torch.Tensor], encoder_prefix: str = "bert.",
                     architecture: str = "bert") -> dict:
    """Translate a bertkit state dict (an Encoder's, or a model holding `.encoder`) to HF names.

    `encoder_prefix` is "bert." ("model." for "modern") for the task and pretraining models
    and "" for a bare BertModel / ModernBertModel.
    """
    names = NAMES[architecture]
    out = {}
    for name, tensor in state.items():
        inner = name[len("encoder."):] if name.startswith("encoder.") else None
        if inner is None and not any(re.match(p, name) for p, _ in names.heads) \
                and re.match(r"(embeddings|blocks|pooler|final_norm|project)\.", name):
            inner = name  # a bare Encoder's own state dict
        if inner is not None:
            if names.split_qkv and (m := _QKV.match(inner)):
                layer, kind = m.groups()
                for part, chunk in zip(("query", "key", "value"), tensor.chunk(3, dim=0)):
                    out[f"{encoder_prefix}encoder.layer.{layer}.attention.self.{part}.{kind}"] = \
                        chunk.contiguous()
                continue
            hf = _rename(inner, names.encoder)
            if hf is None:
                raise KeyError(f"no Hugging Face name for encoder weight {name}")
            out[encoder_prefix + hf] = tensor.contiguous()
        elif (hf := _rename(name, names.heads)) is not None:
            out[hf] = tensor.contiguous()
        else:
            out[name] = tensor.contiguous()  # task heads already carry HF names
    return out


# Hugging Face -> ours --------------------------------------------------------------------------

def from_hf_state_dict(hf: dict[str, torch.Tensor],
                       architecture: str = "bert") -> tuple[dict, dict]:
    """Split HF weights into (encoder state dict in our names, everything else in our names).

    Accepts both the bare BertModel / ModernBertModel names and the prefixed ones (`bert.`,
    `model.`), ELECTRA's (`electra.`, its heads), and the old TF-era `gamma`/`beta`
    LayerNorm names.
    """
    names = NAMES[names_for(architecture, list(hf))]
    encoder, rest, qkv = {}, {}, {}
    for name, tensor in hf.items():
        name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
        name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
        if names.ignored.search(name):
            continue
        inner = name[len(names.prefix):] if name.startswith(names.prefix) else name
        if names.split_qkv and (m := _HF_QKV.match(inner)):
            layer, part, kind = m.groups()
            qkv.setdefault((int(layer), kind), {})[part] = tensor
        elif (ours := _rename(inner, names.encoder_back)) is not None:
            encoder[ours] = tensor
        elif (ours := _rename(name, names.heads_back)) is not None:
            rest[ours] = tensor
        else:
            rest[name] = tensor
    for (layer, kind), parts in qkv.items():
        if set(parts) != {"query", "key", "value"}:
            raise UserError(f"layer {layer} has only {', '.join(sorted(parts))} of query/key/value")
        encoder[f"blocks.{layer}.attn.qkv.{kind}"] = torch.cat(
            [parts["query"], parts["key"], parts["value"]], dim=0)
    return encoder, rest


def our_name(name: str, architecture: str = "bert") -> str | None:
    """bertkit's name of one Hugging Face weight name (q, k and v all name the fused qkv), or
    None for a key that holds nothing to load."""
    names = NAMES[names_for(architecture, [name])]
    if names.ignored.search(name):
        return None
    inner = name[len(names.prefix):] if name.startswith(names.prefix) else name
    if names.split_qkv and (m := _HF_QKV.match(inner)):
        return f"blocks.{m.group(1)}.attn.qkv.{m.group(3)}"
    return (_rename(inner, names.encoder_back) or _rename(name, names.heads_back) or name)


# Directories -------------------------------------------------------------------------------------

def is_model_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "config.json").is_file() and any(
        (p / f).is_file() for f in ("model.safetensors", "pytorch_model.bin"))


def load_config(path: str | Path, revision: str | None = None) -> EncoderConfig:
    p = resolve_model(path, revision)
    if not p.is_dir():
        raise UserError(f"{p}: model directory does not exist" if not p.exists()
                        else f"{p}: is a file, expected a model directory")
    if not (p / "config.json").is_file():
        raise UserError(f"{p}: not a model directory (no config.json)")
    hf = read_json(p / "config.json", "config.json")
    try:
        return EncoderConfig.from_hf(hf)
    except ConfigError as e:
        raise UserError(f"{p / 'config.json'}: {e}") from None
    except (TypeError, ValueError, AttributeError) as e:  # a value of the wrong JSON type
        raise UserError(f"{p / 'config.json'}: a value of the wrong type ({e})") from None


def load_weights(path: str | Path, revision: str | None = None) -> dict[str, torch.Tensor]:
    """The raw weights of a directory (or a Hub model's name), in Hugging Face names, on the
    CPU."""
    p = resolve_model(path, revision)
    if (p / "model.safetensors").is_file():
        try:
            return load_file(str(p / "model.safetensors"))
        except Exception as e:  # safetensors raises its own error types
            raise UserError(f"{p / 'model.safetensors'}: unreadable weights ({e})") from None
    if (p / "pytorch_model.bin").is_file():
        try:
            return torch.load(p / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:
            raise UserError(f"{p / 'pytorch_model.bin'}: unreadable weights ({e})") from None
    raise UserError(f"{p}: not a model directory (no model.safetensors or pytorch_model.bin)")


def load_state_into(module: nn.Module, encoder_state: dict, other_state: dict,
                    where: str | Path, quiet: tuple[str, ...] = ()) -> list[str]:
    """Load translated weights into `module` (an Encoder, or a model with `.encoder`).

    Shapes must match. Returns the names of `module`'s weights the checkpoint lacked (left at
    their initial values), after warning about them (but those of the submodules `quiet`
    names); weights the module has no place for are ignored (a BertForPreTraining checkpoint
    loaded as a bare encoder).
    """
    prefix = "" if isinstance(module, Encoder) else "encoder."
    state = {prefix + k: v for k, v in encoder_state.items()}
    if prefix:
        state.update(other_state)
    own = module.state_dict()
    for name, tensor in state.items():
        if name in own and own[name].shape != tensor.shape:
            raise UserError(f"{where}: weight {name} has shape {tuple(tensor.shape)}, the config "
                            f"says {tuple(own[name].shape)}")
    missing = [k for k in own if k not in state]
    if any(k.startswith(prefix + "blocks.") or k.startswith(prefix + "embeddings.")
           for k in missing):
        raise UserError(f"{where}: encoder weights missing ({missing[0]}, ...): not a BERT "
                        f"checkpoint of this shape")
    module.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    told = [k for k in missing if not k.startswith(tuple(f"{q}." for q in quiet))]
    if told:
        warnings.warn(f"{where}: no weights for {', '.join(told)}; initialised randomly",
                      stacklevel=2)
    return missing


def _missing_weights_generator() -> torch.Generator:
    """Weights a directory lacks (a head) start from the same draw on every load, and loading
    leaves the process's random stream alone."""
    return torch.Generator().manual_seed(0)


def load_encoder(path: str | Path, device: str | torch.device = "cpu",
                 revision: str | None = None) -> Encoder:
    path = resolve_model(path, revision)
    cfg = load_config(path)
    encoder_state, _ = from_hf_state_dict(load_weights(path), cfg.architecture)
    model = Encoder(cfg)
    init_weights(model, cfg, _missing_weights_generator())
    load_state_into(model, encoder_state, {}, path)
    return model.to(device).eval()


def load_pretraining_model(path: str | Path, device: str | torch.device = "cpu",
                           revision: str | None = None, extra: dict[str, nn.Module] | None = None,
                           extra_state: dict[str, torch.Tensor] | None = None) -> PretrainingModel:
    """Encoder + MLM + NSP heads; heads the directory lacks are initialised (with a warning)
    and named in the model's `not_loaded`. `extra`: optional heads beside the Hugging Face
    ones given to the constructor (`sbo`, `to_teacher`), their weights from `extra_state`
    ("sbo.…" names) where it has them, else at their first draw without a warning."""
    path = resolve_model(path, revision)
    cfg = load_config(path)
    encoder_state, other = from_hf_state_dict(load_weights(path), cfg.architecture)
    model = PretrainingModel(cfg, **(extra or {}))
    init_weights(model, cfg, _missing_weights_generator())
    other.update(extra_state or {})
    model.not_loaded = frozenset(load_state_into(model, encoder_state, other, path,
                                                 quiet=tuple(extra or ())))
    return model.to(device).eval()


def _hf_config(cfg: EncoderConfig, architectures: list[str], extra_config: dict | None,
               tokenizer) -> dict:
    config = cfg.to_hf()
    config["architectures"] = architectures
    config.update(extra_config or {})
    if cfg.architecture == "modern" and tokenizer is not None:
        # ModernBertConfig's defaults are the ids of its own vocabulary: give ours
        config.update(cls_token_id=tokenizer.cls_id, sep_token_id=tokenizer.sep_id,
                      bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    return config


def _cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's weights as they are saved: on the CPU, floating point ones in fp32."""
    return {k: v.detach().to("cpu", torch.float32) if v.is_floating_point() else v.detach().cpu()
            for k, v in module.state_dict().items()}


def _write_model(where: Path, hf: dict, config: dict, tokenizer) -> None:
    """model.safetensors, config.json and the tokenizer files into directory `where`."""
    where.mkdir(parents=True, exist_ok=True)
    save_file(hf, str(where / "model.safetensors"), metadata={"format": "pt"})
    (where / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save(where)


def save_model(module: nn.Module, path: str | Path, *, tokenizer=None,
               architectures: list[str] | None = None, extra_config: dict | None = None,
               extra_files: dict[str, bytes] | None = None,
               leave_out: Sequence[str] = ()) -> Path:
    """Write a Hugging Face directory for `module` (an Encoder or a model with `.encoder`).

    The directory appears complete or not at all. `tokenizer` (a bertkit Tokenizer) adds
    vocab.txt and the tokenizer files; `extra_config` adds keys such as `id2label`;
    `leave_out` names submodules ("sbo", "encoder.pooler") whose weights are not written:
    those without a Hugging Face name, and heads never trained.
    """
    cfg = module.config if isinstance(module, Encoder) else module.encoder.config
    modern = cfg.architecture == "modern"
    if isinstance(module, Encoder):
        prefix, default_arch = "", ["ModernBertModel" if modern else "BertModel"]
    else:
        prefix = NAMES[cfg.architecture].prefix
        default_arch = ["ModernBertForMaskedLM" if modern else "BertForPreTraining"]
    config = _hf_config(cfg, architectures or default_arch, extra_config, tokenizer)
    state = {k: v for k, v in _cpu_state(module).items()
             if not k.startswith(tuple(f"{name}." for name in leave_out))}
    hf = to_hf_state_dict(state, prefix, cfg.architecture)
    if config["architectures"] in (["BertForMaskedLM"], ["BertLMHeadModel"]):
        # transformers' BertForMaskedLM (and BertLMHeadModel) has neither pooler nor NSP head:
        # leave them out so it loads with no unexpected keys (an MLM-only run never trains them).
        hf = {k: v for k, v in hf.items()
              if not k.startswith(("bert.pooler.", "cls.seq_relationship."))}
    with atomic_dir(path) as tmp:
        _write_model(tmp, hf, config, tokenizer)
        for name, data in (extra_files or {}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)  # "1_Pooling/config.json"
            (tmp / name).write_bytes(data)
    return Path(path)


# ELECTRA -----------------------------------------------------------------------------------------

GENERATOR_DIR = "generator"
"""Where an ELECTRA directory keeps its generator: a model directory inside the
discriminator's."""
DETECTOR_FILE = "detector.safetensors"
"""A "modern" ELECTRA discriminator's detection head, beside its ModernBertModel weights."""


def _electra_parts(model: ElectraModel, tokenizer) -> tuple[tuple, tuple]:
    """((weights, config) of the discriminator, the same of the generator), in Hugging Face
    names, and the modern discriminator's head in bertkit's (or None)."""
    cfg = model.config
    disc = {"encoder." + k: v for k, v in _cpu_state(model.encoder).items()}
    head = {"detector." + k: v for k, v in _cpu_state(model.detector).items()}
    gen = model.generator
    gcfg = None if gen is None else gen.config
    if cfg.architecture == "bert":
        electra = {"model_type": "electra"}
        return ((to_hf_state_dict({**disc, **head}, "electra.", "electra"),
                 _hf_config(cfg, ["ElectraForPreTraining"],
                            {**electra, "embedding_size": cfg.embedding_width}, tokenizer),
                 None),
                None if gen is None else
                (to_hf_state_dict(_cpu_state(gen), "electra.", "electra"),
                 _hf_config(gcfg, ["ElectraForMaskedLM"],
                            {**electra, "embedding_size": gcfg.embedding_width}, tokenizer)))
    return ((to_hf_state_dict(_cpu_state(model.encoder), "", "modern"),
             _hf_config(cfg, ["ModernBertModel"], None, tokenizer), head),
            None if gen is None else
            (to_hf_state_dict(_cpu_state(gen), "model.", "modern"),
             _hf_config(gcfg, ["ModernBertForMaskedLM"], None, tokenizer)))


def save_electra(model: ElectraModel, path: str | Path, *, tokenizer=None) -> Path:
    """An ELECTRA directory, whole or not at all: the discriminator at the top and the
    generator in GENERATOR_DIR/, each with the tokenizer files.

    "bert": `ElectraForPreTraining` and `ElectraForMaskedLM` (config.json model_type
    "electra"; the generator's embedding_size is the discriminator's width, projected by its
    `embeddings_project`), which transformers loads as they are. "modern": the discriminator's
    body as `ModernBertModel` (what every encoder command and transformers read) with its
    detection head beside it in DETECTOR_FILE; the generator in ModernBERT's names with an
    `embeddings_project` and `embedding_size`, which ModernBERT lacks: bertkit reads it."""
    (disc, config, head), generator = _electra_parts(model, tokenizer)
    with atomic_dir(path) as tmp:
        _write_model(tmp, disc, config, tokenizer)
        if head is not None:
            save_file({k[len("detector."):]: v for k, v in head.items()},
                      str(tmp / DETECTOR_FILE), metadata={"format": "pt"})
        if generator is not None:
            _write_model(tmp / GENERATOR_DIR, *generator, tokenizer)
    return Path(path)


def is_electra_dir(path: str | Path) -> bool:
    """Whether `path` holds an ELECTRA pair: a discriminator with its GENERATOR_DIR/."""
    return is_model_dir(path) and is_model_dir(Path(path) / GENERATOR_DIR)


def has_detector(path: str | Path) -> bool:
    """Whether `path` holds an ELECTRA discriminator with its detection head, its generator
    beside it or not: transformers' ElectraForPreTraining, or bertkit's modern layout."""
    p = Path(path)
    if not is_model_dir(p):
        return False
    if (p / DETECTOR_FILE).is_file():
        return True
    config = read_json(p / "config.json", "config.json")
    return isinstance(config, dict) and config.get("architectures") == ["ElectraForPreTraining"]


def _electra_state(path: Path, cfg: EncoderConfig, gcfg: EncoderConfig | None) -> dict:
    """The ElectraModel state dict of an ELECTRA directory; the generator's embeddings are
    the discriminator's (saved twice, one module)."""
    encoder, rest = from_hf_state_dict(load_weights(path), cfg.architecture)
    if (path / DETECTOR_FILE).is_file():
        rest.update({"detector." + k: v for k, v in load_file(str(path / DETECTOR_FILE)).items()})
    state = {"encoder." + k: v for k, v in encoder.items() if not k.startswith("pooler.")}
    state.update({k: v for k, v in rest.items() if k.startswith("detector.")})
    if gcfg is None:
        return state
    gen_encoder, gen_rest = from_hf_state_dict(load_weights(path / GENERATOR_DIR),
                                               gcfg.architecture)
    state.update({"generator.encoder." + k: v for k, v in gen_encoder.items()
                  if not k.startswith(("embeddings.", "pooler."))})
    state.update({"generator.encoder." + k: v for k, v in encoder.items()
                  if k.startswith("embeddings.")})
    state.update({"generator." + k: v for k, v in gen_rest.items() if k.startswith("mlm.")})
    return state


def load_electra(path: str | Path, device: str | torch.device = "cpu",
                 fast: bool = True, revision: str | None = None) -> ElectraModel:
    """An ELECTRA directory (`save_electra`'s, or transformers' ElectraForPreTraining with an
    ElectraForMaskedLM in GENERATOR_DIR/ or alone: then `generator` is None) as an
    ElectraModel, every weight from the files (`fast`: as for `Encoder`)."""
    path = resolve_model(path, revision)
    if not has_detector(path):
        raise UserError(f"{path}: not an ELECTRA directory (a discriminator with its detection "
                        f"head, its generator in {GENERATOR_DIR}/)")
    cfg = load_config(path)
    gcfg = load_config(path / GENERATOR_DIR) if is_electra_dir(path) else None
    try:
        with torch.random.fork_rng(devices=[]):  # every weight is then loaded
            model = ElectraModel(cfg, gcfg, fast=fast)
        model.load_state_dict(_electra_state(path, cfg, gcfg), strict=True)
    except (ValueError, RuntimeError) as e:
        first = " ".join(str(e).split())[:300]
        raise UserError(f"{path}: not an ELECTRA pair bertkit reads ({first})") from None
    return model.to(device).eval()
