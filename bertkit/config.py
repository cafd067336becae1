"""Encoder configuration: one typed dataclass, its validation, and the named presets.

The field names are ours; `to_hf` / `from_hf` translate to and from the `config.json` that
Hugging Face `BertConfig` reads and writes, so a bertkit model directory is a BERT directory.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")
Architecture = Literal["bert", "modern"]
ARCHITECTURES: tuple[str, ...] = get_args(Architecture)


class ConfigError(ValueError):
    """A configuration whose sizes or values do not fit together."""


@dataclass
class EncoderConfig:
    architecture: Architecture = "bert"
    """"bert": BERT as published (post-LN blocks, learned positions, segment embeddings, biases,
    a pooler; Hugging Face BertModel). "modern": pre-LN blocks with a LayerNorm after the
    embeddings and after the last block, a gated (GLU) feed-forward, rotary positions, no
    biases, no segment embeddings and no pooler (Hugging Face ModernBertModel)."""
    vocab_size: int = 30522
    """Number of rows of the word-embedding table (and of the tied MLM decoder)."""
    hidden_size: int = 768
    """Width d of every token vector between blocks."""
    num_layers: int = 12
    """Number L of transformer blocks."""
    num_heads: int = 12
    """Attention heads per block; hidden_size must be a multiple of it."""
    intermediate_size: int = 3072
    """Width of the feed-forward layer inside each block (4d in BERT; the gated layer of
    "modern" has two input projections of this width, so about 8d/3 keeps the parameters)."""
    max_positions: int = 512
    """Longest input in tokens ("bert": rows of the learned position-embedding table)."""
    type_vocab_size: int = 2
    """Number of segment ids (A/B for sentence pairs); "modern" has no segment embeddings."""
    hidden_dropout: float = 0.1
    """Dropout on embeddings, attention output and feed-forward output."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""
    layer_norm_eps: float = 1e-12
    """Epsilon of every LayerNorm."""
    activation: str = "gelu"
    """Feed-forward non-linearity: one of ACTIVATIONS (exact erf GELU in BERT)."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation of weights."""
    pad_token_id: int = 0
    """Id of [PAD]; its embedding row starts at zero."""
    rope_theta: float = 160_000.0
    """"modern": base of the rotary position frequencies in the global-attention layers."""
    local_window: int = 0
    """"modern": 0 lets every layer attend to the whole sequence; otherwise the layers that
    are not global see only tokens within local_window // 2 of their own (ModernBERT's
    local_attention, 128 in its published models)."""
    global_every: int = 1
    """"modern" with a local_window: every n-th layer (from the first) attends globally."""
    local_rope_theta: float = 10_000.0
    """"modern": base of the rotary frequencies in the local-attention layers."""
    embedding_size: int | None = None
    """Width of the embeddings where it differs from hidden_size, a projection to hidden_size
    after them (ELECTRA's generator, narrower than the discriminator whose embeddings it
    shares: Hugging Face `ElectraConfig.embedding_size`); None: hidden_size."""
    causal: bool = False
    """Each token attends only to itself and the tokens to its left: a left-to-right model
    (pretrained with --objective clm; Hugging Face's `is_decoder`), run so wherever it runs."""
    extra: dict = field(default_factory=dict, repr=False, compare=False)
    """Keys of config.json that bertkit does not model (labels, task), kept on a round trip."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(f"architecture {self.architecture!r} is not one of "
                              f"{', '.join(ARCHITECTURES)}")
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_positions", "type_vocab_size", "global_every")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.embedding_size is not None and (not isinstance(self.embedding_size, int)
                                                or self.embedding_size <= 0):
            raise ConfigError(f"embedding_size must be a positive integer, got "
                              f"{self.embedding_size!r}")
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"hidden_size {self.hidden_size} is not divisible by num_heads "
                              f"{self.num_heads}")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary "
                              f"of {self.vocab_size}")
        if self.layer_norm_eps <= 0:
            raise ConfigError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}")
        if self.architecture == "modern" and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head width, got {self.head_dim}")
        if self.local_window < 0 or self.rope_theta <= 0 or self.local_rope_theta <= 0:
            raise ConfigError("local_window must be >= 0 and the rotary bases positive")

    def is_global(self, layer: int) -> bool:
        """Whether block `layer` attends to the whole sequence (always, for "bert")."""
        return self.local_window == 0 or layer % self.global_every == 0

    @property
    def embedding_width(self) -> int:
        """Width of the embedding vectors (embedding_size, or hidden_size when None)."""
        return self.embedding_size or self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def block_weights(self) -> int:
        """Weights of the matrices in the transformer blocks: the model's size without its
        vocabulary (which grows with vocab_size, not with what the model can compute)."""
        ffn = 3 if self.architecture == "modern" else 2  # the gated layer has two inputs
        H = self.hidden_size
        return self.num_layers * (4 * H * H + ffn * H * self.intermediate_size)

    def replace(self, **changes) -> "EncoderConfig":
        return dataclasses.replace(self, **changes)

    # Hugging Face config.json ------------------------------------------------------------
    def _shared_hf(self) -> dict:
        """The sizes, spelled alike in BertConfig and ModernBertConfig."""
        return {"vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "max_position_embeddings": self.max_positions}

    def to_hf(self) -> dict:
        if self.architecture == "modern":
            return self._to_modernbert()
        hf = dict(self.extra)
        hf.update({
            "model_type": "bert",
            "architectures": hf.get("architectures", ["BertForPreTraining"]),
            **self._shared_hf(),
            "type_vocab_size": self.type_vocab_size,
            "hidden_dropout_prob": self.hidden_dropout,
            "attention_probs_dropout_prob": self.attention_dropout,
            "layer_norm_eps": self.layer_norm_eps,
            "hidden_act": self.activation,
            "initializer_range": self.initializer_range,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
        })
        if self.embedding_size is not None:  # only ELECTRA's config reads it
            hf["embedding_size"] = self.embedding_size
        if self.causal:
            hf["is_decoder"] = True
        return hf

    def _to_modernbert(self) -> dict:
        layer_types = ["full_attention" if self.is_global(i) else "sliding_attention"
                       for i in range(self.num_layers)]
        hf = dict(self.extra)
        hf.update({
            "model_type": "modernbert",
            "architectures": hf.get("architectures", ["ModernBertForMaskedLM"]),
            **self._shared_hf(),
            "hidden_activation": self.activation,
            "classifier_activation": self.activation,
            "initializer_range": self.initializer_range,
            "norm_eps": self.layer_norm_eps,
            "pad_token_id": self.pad_token_id,
            "norm_bias": False, "attention_bias": False, "mlp_bias": False,
            "classifier_bias": False, "decoder_bias": True, "tie_word_embeddings": True,
            "embedding_dropout": self.hidden_dropout,
            "mlp_dropout": self.hidden_dropout,
            "attention_dropout": self.attention_dropout,
            "layer_types": layer_types,
            "local_attention": self.local_window or 128,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": self.rope_theta},
                "sliding_attention": {"rope_type": "default",
                                      "rope_theta": self.local_rope_theta}},
            # the spellings of transformers before layer_types (4.48-4.56)
            "global_attn_every_n_layers": self.global_every if self.local_window else 1,
            "global_rope_theta": self.rope_theta,
            "local_rope_theta": self.local_rope_theta,
        })
        if self.embedding_size is not None:  # bertkit's own key: ModernBERT has no projection
            hf["embedding_size"] = self.embedding_size
        for name in ("cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id"):
            hf.setdefault(name, None)  # ModernBertConfig's defaults are ids of its own vocabulary
        if self.causal:
            hf["is_decoder"] = True
        return hf

    @classmethod
    def from_hf(cls, hf: dict) -> "EncoderConfig":
        if not isinstance(hf, dict):
            raise ConfigError(f"expected a JSON object, got {type(hf).__name__}")
        if hf.get("model_type") == "modernbert":
            _require_sizes(hf)
            return cls._from_modernbert(hf)
        if hf.get("model_type", "bert") not in ("bert", "electra"):
            raise ConfigError(f"model_type {hf.get('model_type')!r} is neither bert nor "
                              f"modernbert (nor electra)")
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError("only absolute position embeddings are supported, got "
                              f"{hf['position_embedding_type']!r}")
        _require_sizes(hf)
        names = {
            "vocab_size": "vocab_size", "hidden_size": "hidden_size",
            "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
            "intermediate_size": "intermediate_size", "max_position_embeddings": "max_positions",
            "type_vocab_size": "type_vocab_size", "hidden_dropout_prob": "hidden_dropout",
            "attention_probs_dropout_prob": "attention_dropout", "layer_norm_eps": "layer_norm_eps",
            "hidden_act": "activation", "initializer_range": "initializer_range",
            "pad_token_id": "pad_token_id", "embedding_size": "embedding_size",
        }
        kwargs = {ours: hf[theirs] for theirs, ours in names.items() if hf.get(theirs) is not None}
        if kwargs.get("embedding_size") == kwargs.get("hidden_size"):
            kwargs.pop("embedding_size")  # ELECTRA's discriminator spells the default out
        kwargs["causal"] = bool(hf.get("is_decoder", False))
        known = set(names) | {"model_type", "position_embedding_type", "is_decoder"}
        kwargs["extra"] = {k: v for k, v in hf.items() if k not in known}
        return cls(**kwargs)

    @classmethod
    def _from_modernbert(cls, hf: dict) -> "EncoderConfig":
        for flag in ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"):
            if hf.get(flag, False):
                raise ConfigError(f"{flag}: true is not supported (bertkit's modern encoder "
                                  f"has no biases)")
        if not hf.get("decoder_bias", True):
            raise ConfigError("decoder_bias: false is not supported")
        if hf.get("hidden_activation", "gelu") != hf.get("classifier_activation", "gelu"):
            raise ConfigError("hidden_activation and classifier_activation differ")
        layers = hf["num_hidden_layers"]
        every = hf.get("global_attn_every_n_layers", 3)
        types = hf.get("layer_types") or ["full_attention" if i % every == 0
                                          else "sliding_attention" for i in range(layers)]
        rope = hf.get("rope_parameters") or {}
        full = (rope.get("full_attention") or {}).get("rope_theta",
                                                      hf.get("global_rope_theta", 160_000.0))
        local = (rope.get("sliding_attention") or {}).get("rope_theta",
                                                          hf.get("local_rope_theta", 10_000.0))
        for kind in rope.values():
            if kind and kind.get("rope_type", "default") != "default":
                raise ConfigError(f"rope_type {kind['rope_type']!r} is not supported")
        if all(t == "full_attention" for t in types):
            window, every = 0, 1
        else:
            window = hf.get("local_attention", 128)
            globals_ = [i for i, t in enumerate(types) if t == "full_attention"]
            every = globals_[1] - globals_[0] if len(globals_) > 1 else layers
            if [t == "full_attention" for t in types] != [i % every == 0 for i in range(layers)]:
                raise ConfigError("layer_types: global layers must come every n-th from the first")
        if hf.get("embedding_dropout", 0.0) != hf.get("mlp_dropout", 0.0):
            raise ConfigError("embedding_dropout and mlp_dropout differ")
        kwargs = dict(
            architecture="modern", vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
            num_layers=layers, num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            max_positions=hf.get("max_position_embeddings", 8192),
            hidden_dropout=hf.get("mlp_dropout", 0.0),
            attention_dropout=hf.get("attention_dropout", 0.0),
            layer_norm_eps=hf.get("norm_eps", 1e-5),
            activation=hf.get("hidden_activation", "gelu"),
            initializer_range=hf.get("initializer_range", 0.02),
            pad_token_id=hf.get("pad_token_id", 0), rope_theta=float(full),
            local_rope_theta=float(local), local_window=window, global_every=every,
            embedding_size=(None if hf.get("embedding_size") in (None, hf["hidden_size"])
                            else hf["embedding_size"]))
        known = {"model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                 "num_attention_heads", "intermediate_size", "max_position_embeddings",
                 "hidden_activation", "classifier_activation", "initializer_range", "norm_eps",
                 "pad_token_id", "norm_bias", "attention_bias", "mlp_bias", "classifier_bias",
                 "decoder_bias", "tie_word_embeddings", "embedding_dropout", "mlp_dropout",
                 "attention_dropout", "layer_types", "local_attention", "rope_parameters",
                 "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta",
                 "embedding_size", "is_decoder"}
        kwargs["causal"] = bool(hf.get("is_decoder", False))
        kwargs["extra"] = {k: v for k, v in hf.items() if k not in known}
        return cls(**kwargs)


# The weights' shapes follow from these: a config.json without one describes no checkpoint
# (a default would only fail later, on a weight of the wrong shape).
_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size")


def _require_sizes(hf: dict) -> None:
    missing = [k for k in _SIZE_KEYS if hf.get(k) is None]
    if missing:
        raise ConfigError(f"missing {', '.join(map(repr, missing))}")


def _preset(layers: int, hidden: int, heads: int, intermediate: int) -> dict:
    return dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
                intermediate_size=intermediate)


PRESETS: dict[str, dict] = {
    "tiny": _preset(2, 128, 2, 512),
    "mini": _preset(4, 256, 4, 1024),
    "small": _preset(4, 512, 8, 2048),
    "medium": _preset(8, 512, 8, 2048),
    "base": _preset(12, 768, 12, 3072),
    "large": _preset(24, 1024, 16, 4096),
}


# What "modern" changes in a preset besides the architecture: ModernBERT's LayerNorm epsilon,
# no dropout (pretraining on a small budget never sees a token twice), and a gated feed-forward
# about 8d/3 wide, a multiple of 64, so that a block keeps BERT's parameter count.
def _modern(fields: dict) -> dict:
    width = round(fields["hidden_size"] * 8 / 3 / 64) * 64
    return dict(fields, architecture="modern", intermediate_size=width, layer_norm_eps=1e-5,
                hidden_dropout=0.0, attention_dropout=0.0)


def preset(name: str, **overrides) -> EncoderConfig:
    """The named preset (see PRESETS), with any field overridden, e.g. vocab_size.
    `architecture="modern"` also takes the modern defaults of the other fields (`_modern`),
    which `overrides` may still change; its feed-forward width follows an overridden
    hidden_size unless intermediate_size is given too."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    fields = dict(PRESETS[name])
    fields.update({k: overrides[k] for k in ("num_layers", "hidden_size", "num_heads")
                   if k in overrides})
    if overrides.get("architecture") == "modern":
        fields = _modern(fields)
    return EncoderConfig(**{**fields, **overrides})


# Training ------------------------------------------------------------------------------------

DURATION_FORMS = "e.g. 90s, 10m, 1.5h, or minutes as a number"
"""What a time budget may be, as its error and its --help say."""
_NUMBER = r"(\d+\.?\d*|\.\d+)"
_DURATION = re.compile(f"(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s)?")


def parse_minutes(value: str | float, name: str = "max_time") -> float:
    """A time budget in minutes: a number (minutes, as before units were read), or a string
    of hours, minutes and seconds in that order, each optional, "30s", "90s", "10m", "1.5h",
    "1h30m"; a bare number in a string is minutes too. Anything else, zero or less included,
    is a ConfigError "NAME VALUE: not a duration (...)". Summed exactly and rounded once, so
    that every spelling of one budget is one float ("6s" is 0.1)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        minutes = float(value)
    elif isinstance(value, str) and (parts := _DURATION.fullmatch(value.strip())) and any(
            parts.groups()):
        hours, mins, secs = (Fraction(p or 0) for p in parts.groups())
        minutes = float(hours * 60 + mins + secs / 60)
    else:
        try:  # float's spellings of a number, as the flag took before
            minutes = float(value) if isinstance(value, str) else math.nan
        except ValueError:
            minutes = math.nan
    if not (math.isfinite(minutes) and minutes > 0):
        raise ConfigError(f"{name} {value}: not a duration ({DURATION_FORMS})")
    return minutes


Schedule = Literal["linear", "cosine", "constant", "wsd"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]

@dataclass
class TrainConfig:
    """Settings of `bertkit.training.loop.train`, shared by pretraining and fine-tuning.
    max_time may be given as a duration, "90s", "1h30m" (`parse_minutes`): it is kept in
    minutes."""

    lr: float = 1e-4
    """Peak learning rate, reached at the end of warm-up (groups passed in keep their own)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps; the schedule decays over them."""
    max_time: float | None = field(default=None, metadata={"duration": True})
    """Stop after this many minutes of training (eval and checkpoint time not counted); without
    --max-steps the schedule decays over the time budget instead of steps."""
    warmup_steps: int | None = None
    """Linear warm-up length in steps; none: --warmup-fraction of the run."""
    warmup_fraction: float = 0.05
    """Warm-up as a fraction of the run (its steps, or its time budget) without
    --warmup-steps."""
    schedule: Schedule = "linear"
    """Decay after warm-up: "linear" to --min-lr-ratio, "cosine", "constant", or "wsd"
    (warmup-stable-decay: the peak until the last --decay-fraction of the run, then linear)."""
    decay_fraction: float = 0.2
    """"wsd": the share of the run spent decaying."""
    min_lr_ratio: float = 0.0
    """Learning rate at the end of the decay, as a fraction of the peak."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay, never applied to biases and LayerNorm weights."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (beta1, beta2)."""
    eps: float = 1e-6
    """AdamW epsilon."""
    grad_accum: int = 1
    """Micro-batches accumulated into one optimizer step (effective batch = batch x this)."""
    grad_accum_final: int | None = None
    """Batch growth (as Geiping and Goldstein's "Cramming", 2022): the micro-batches per step
    grow linearly from --grad-accum at the start to this at the end of the run (by steps, or
    by time for a time budget): small, frequent steps while the loss falls fast, larger and
    quieter ones later; none: fixed."""
    clip_norm: float = 1.0
    """Clip the global gradient norm to this; 0 turns clipping off."""
    precision: Precision = "fp32"
    """"fp32", "bf16" (autocast on CPU and GPU, fp32 weights), "fp16" (GPU, loss scaling), or
    "auto": bf16 where this device multiplies it natively (a GPU that has it, a CPU measured at
    start to multiply bf16 faster than fp32), else fp32."""
    compile: bool = False
    """Run the model through torch.compile (slow first steps; pays on long GPU runs)."""
    seed: int = 0
    """Seeds torch's generator (dropout) as seed + rank at the start of a fresh run."""
    log_every: int = 10
    """Steps between train records in metrics.jsonl and the figures progress shows (the only
    host syncs), labelled with their step; the progress itself (step, tokens, time, ETA) moves
    every step, as a live bar, or a line every few seconds in a log."""
    eval_every: int | None = None
    """Steps between evaluations (one also runs at the end); none: only at the end."""
    save_every: int | None = None
    """Steps between checkpoints in OUT/checkpoints (one is also saved on Ctrl-C or SIGTERM
    and at the end); none: only then."""
    keep_checkpoints: int = 2
    """Number of most recent checkpoints kept."""
    best_metric: str | None = None
    """The evaluation figure to track (e.g. "eval_loss", "dev_f1"); the best weights are kept
    and, with --restore-best, become the final model."""
    best_mode: Literal["max", "min"] = "max"
    """"max" if a larger --best-metric is better (accuracy, F1), "min" for a loss."""
    patience: int | None = None
    """Stop after this many evaluations without improving --best-metric; none: never early."""
    restore_best: bool = True
    """With --best-metric set, save the best evaluated weights as the final model, not the
    last."""
    resume: bool = False
    """Continue from the latest checkpoint in OUT/checkpoints (a fresh start if none); with a
    larger --max-steps, extend a finished run."""
    tensorboard: bool = False
    """Also write the logged figures (loss, learning rate, metrics, tokens/s) as TensorBoard
    scalars into OUT/tensorboard (needs the tensorboard package)."""

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if isinstance(self.max_time, str):  # "90s", "1h30m": the budget in minutes
            self.max_time = parse_minutes(self.max_time)
        if self.max_steps is None and self.max_time is None:
            # the one error of an option left out, so the user has typed nothing to map it from
            raise ConfigError("give max_steps or max_time, or both (--max-steps, --max-time "
                              "on the command line)")
        if self.max_steps is not None and self.max_steps <= 0:
            raise ConfigError(f"max_steps must be positive, got {self.max_steps}")
        if self.max_time is not None and self.max_time <= 0:
            raise ConfigError(f"max_time must be positive, got {self.max_time}")
        if self.schedule not in get_args(Schedule):
            raise ConfigError(f"schedule must be one of {', '.join(get_args(Schedule))}, got "
                              f"{self.schedule!r}")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ConfigError(f"decay_fraction must be in (0, 1], got {self.decay_fraction}")
        if self.precision not in get_args(Precision):
            raise ConfigError(f"precision must be one of {', '.join(get_args(Precision))}, got "
                              f"{self.precision!r}")
        if self.best_mode not in ("max", "min"):
            raise ConfigError(f"best_mode must be max or min, got {self.best_mode!r}")
        for name in ("grad_accum", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.grad_accum_final is not None and self.grad_accum_final < self.grad_accum:
            raise ConfigError(f"grad_accum_final ({self.grad_accum_final}) must be at least "
                              f"grad_accum ({self.grad_accum})")
        for name in ("eval_every", "save_every", "patience", "warmup_steps"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "warmup_steps" else 1):
                raise ConfigError(f"{name} must be positive, got {value}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)
