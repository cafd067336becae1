"""The ELMo network: a forward and a backward LSTM language model whose layers are contextual
word vectors (Peters et al. 2018), saved and loaded as a model directory.

The vectors of a token, as ELMo hands them on (2E wide each, E the embedding width):

    layer 0: [x; x]                the token embedding, duplicated to match the LSTM layers
    layer j: [h_fwd_j; h_bwd_j]     the two directions' j-th LSTM states, concatenated

`ElmoLM.forward` has the encoder's signature and `hidden_states`, so bertkit.embeddings'
Embedder takes an ELMo directory where it takes a BERT one. Training lives with the earlier
systems, in bertkit.road.elmo.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.files import UserError, atomic_dir, read_json
from bertkit.model.kind import ELMO_FILE, ModelKind, require_kind
from bertkit.text.tokenizer import Tokenizer

CONFIG_FILE = ELMO_FILE
CONFIG_FORMAT = "bertkit-elmo"
WEIGHTS_FILE = "model.safetensors"


@dataclass
class ElmoConfig:
    """The shape of an ELMo model (saved beside its weights as elmo.json)."""
    vocab_size: int
    """Pieces in the vocabulary (input embedding and the tied softmax)."""
    embed_dim: int = 128
    """Token embedding width E; each LSTM projects its state back to E, so every layer of the
    vectors is 2E wide."""
    lstm_dim: int = 512
    """LSTM cells per layer and direction (ELMo: 4096, projected to 512)."""
    num_layers: int = 2
    """LSTM layers per direction."""
    dropout: float = 0.1
    """Dropout on each LSTM's input and on the states the softmax reads, in training."""
    max_positions: int = 512
    """Longest input the Embedder hands over (an LSTM has no limit of its own)."""
    pad_id: int = 0
    """Id of [PAD]."""
    architecture: ClassVar[str] = "elmo"
    """What the Embedder and the explorer call it (an `EncoderConfig` says "bert" or "modern")."""
    num_heads: ClassVar[int] = 0
    """Attention heads: none, so no attention to look at."""

    @property
    def hidden_size(self) -> int:
        """Width of each layer's vectors: forward and backward concatenated."""
        return 2 * self.embed_dim


class ElmoOutput(NamedTuple):
    last_hidden_state: torch.Tensor
    """[B, T, 2E] the top layer, [h_fwd; h_bwd]."""
    hidden_states: tuple[torch.Tensor, ...] | None
    """num_layers + 1 tensors [B, T, 2E]: [x; x], then each LSTM layer (when asked for)."""


def reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """[B, T] positions that read each row's real tokens backwards (padding stays in place):
    row b, position t < length_b -> length_b - 1 - t. Its own inverse."""
    t = torch.arange(T, device=lengths.device)[None, :]
    lengths = lengths[:, None]
    return torch.where(t < lengths, lengths - 1 - t, t)


def flip(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [B, T, ...] with each row's real part reversed by `reverse_index`."""
    shape = index.shape + (1,) * (x.dim() - 2)
    return x.gather(1, index.view(shape).expand_as(x))


class ElmoLM(nn.Module):
    """The two LSTM language models (one embedding, one tied softmax) and their layers as an
    encoder."""

    def __init__(self, cfg: ElmoConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = cfg
        E, H = cfg.embed_dim, cfg.lstm_dim
        self.embed = nn.Embedding(cfg.vocab_size, E)
        # An LSTM of H cells, then a linear map back to E applied to all positions at once:
        # ELMo projects inside the recurrence (nn.LSTM's proj_size), which runs about 2.5x
        # slower on a CPU (no fused kernel for it).
        self.forward_lstms = nn.ModuleList(
            nn.LSTM(E, H, batch_first=True) for _ in range(cfg.num_layers))
        self.backward_lstms = nn.ModuleList(
            nn.LSTM(E, H, batch_first=True) for _ in range(cfg.num_layers))
        self.forward_projections = nn.ModuleList(
            nn.Linear(H, E) for _ in range(cfg.num_layers))
        self.backward_projections = nn.ModuleList(
            nn.Linear(H, E) for _ in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.dropout)
        if generator is not None:
            self.init_weights(generator)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """Embeddings N(0, 1/E) (unit-length rows, so the tied softmax starts near uniform
        but not flat); LSTM weights U(-1/sqrt(H), 1/sqrt(H)) as PyTorch's default, drawn from
        `generator`; the forget gates' biases at 1 so that early gradients flow through time."""
        E, H = self.config.embed_dim, self.config.lstm_dim
        self.embed.weight.normal_(0.0, E ** -0.5, generator=generator)
        for lstm in (*self.forward_lstms, *self.backward_lstms):
            for name, p in lstm.named_parameters():
                p.uniform_(-H ** -0.5, H ** -0.5, generator=generator)
                if name.startswith("bias_ih"):
                    p[H:2 * H] = 1.0  # gates are ordered input, forget, cell, output
        for linear in (*self.forward_projections, *self.backward_projections):
            linear.weight.uniform_(-H ** -0.5, H ** -0.5, generator=generator)
            linear.bias.zero_()

    def directions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Each direction's layers in its own reading order: forward [x, h_1 .. h_L] left to
        right, backward [x', h'_1 .. h'_L] with each row's real part reversed; and the
        reversing index [B, T]."""
        B, T = input_ids.shape
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        index = reverse_index(mask.sum(1), T)
        x = self.embed(input_ids)  # [B, T, E]
        outputs = []
        for lstms, projections, start in (
                (self.forward_lstms, self.forward_projections, x),
                (self.backward_lstms, self.backward_projections, flip(x, index))):
            states = [start]
            for j, (lstm, projection) in enumerate(zip(lstms, projections)):
                h, _ = lstm(self.dropout(states[-1]))  # padding sits at the end in both orders
                h = projection(h)
                states.append(h + states[-1] if j > 0 else h)  # residual from layer 2 on
            outputs.append(states)
        return outputs[0], outputs[1], index

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *,
                output_hidden_states: bool = False) -> ElmoOutput:
        """The encoder's interface: input_ids, attention_mask [B, T] (right padding; segment
        ids are ignored) -> the top layer and, if asked, every layer [B, T, 2E]."""
        fwd, bwd, index = self.directions(input_ids, attention_mask)
        layers = tuple(torch.cat([f, flip(b, index)], -1) for f, b in zip(fwd, bwd))
        return ElmoOutput(layers[-1], layers if output_hidden_states else None)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """The shared softmax's scores [..., V] for top states [..., E]."""
        return self.dropout(states) @ self.embed.weight.T


def save_elmo(model: ElmoLM, tokenizer: Tokenizer, out: str | Path,
              replaces: Sequence[str] = ()) -> Path:
    """model.safetensors, elmo.json and the tokenizer files into `out`, all at once
    (bertkit.files.atomic_dir: the directory is the old one or the new one, whole)."""
    with atomic_dir(out, replaces) as tmp:
        save_file({k: v.detach().cpu().float().contiguous()
                   for k, v in model.state_dict().items()}, str(tmp / WEIGHTS_FILE))
        (tmp / CONFIG_FILE).write_text(
            json.dumps({"format": CONFIG_FORMAT, **asdict(model.config)}, indent=2) + "\n",
            encoding="utf-8")
        tokenizer.save(tmp)
    return Path(out)


def load_elmo(path: str | Path, device: str | torch.device = "cpu") -> ElmoLM:
    """The model of a directory saved by save_elmo, in eval mode."""
    p = require_kind(path, ModelKind.ELMO)
    config = read_json(p / CONFIG_FILE, "ELMo model config", CONFIG_FORMAT)
    config.pop("format")
    try:
        model = ElmoLM(ElmoConfig(**config))
    except TypeError as e:
        raise UserError(f"{p / CONFIG_FILE}: not an ELMo config ({e})") from None
    try:
        state = load_file(str(p / WEIGHTS_FILE))
    except FileNotFoundError:
        raise UserError(f"{p / WEIGHTS_FILE}: weights missing") from None
    except Exception as e:  # safetensors raises its own error types
        raise UserError(f"{p / WEIGHTS_FILE}: unreadable weights ({e})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise UserError(f"{p / WEIGHTS_FILE}: does not fit {p / CONFIG_FILE} "
                        f"({str(e).splitlines()[0]})") from None
    return model.to(device).eval()


__all__ = ["ElmoConfig", "ElmoLM", "ElmoOutput", "reverse_index", "flip", "save_elmo",
           "load_elmo", "CONFIG_FILE", "WEIGHTS_FILE"]
