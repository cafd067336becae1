"""Sequence to sequence with attention (and copying): a GRU encoder-decoder, as lecture 17
draws it.

The encoder (a bidirectional GRU) reads the source; its final state, through a tanh layer, is
handed to the decoder as its first state. The decoder (a GRU cell) writes one token at a time,
fed the previous token (the reference one in training: teacher forcing; its own at inference),
until it writes </s>. With attention (Bahdanau et al. 2015) it also gets, at each output step
t, a context vector: the mean of the encoder's outputs h_j weighted by

    a_tj = softmax_j( v . tanh(W s_{t-1} + U h_j + b) )      (padding positions get 0)

where s_{t-1} is the decoder's previous state. Without attention (`attention=False`, the same
class) the context is the encoder's final state at every step, so the whole source must pass
through that one vector: the bottleneck attention removes.

With the copy mechanism (`copy=True`, a pointer-generator after See et al. 2017) a gate
p_gen = sigmoid(w . [s_t; c_t; y_{t-1}] + b) mixes the vocabulary softmax with copying a
source piece by its attention weight:

    P(w) = p_gen softmax(logits)_w + (1 - p_gen) sum_{j: x_j = w} a_tj

which suits a task where most output words are input words (KJV -> WEB).

Tokens are WordPiece pieces of a bertkit vocabulary trained on the training text; [CLS] plays
<s> (start of the output) and [SEP] plays </s> (end of either side). One embedding matrix
serves source, target and output projection (tied). The pairs, pieces and batches are
`bertkit.road.seq2seq_data`'s. In `bertkit.road.seq2seq_run`: `run_seq2seq` trains each
variant with the shared loop (bertkit.training.loop.train) for a time budget on
length-bucketed batches, with the greedy BLEU of a dev sample at each evaluation (curves.png),
and reports BLEU and chrF (bertkit.road.bleu) of greedy and beam decoding beside the
copy-the-source baseline; `translate` translates texts with a saved model, `translate_file` a
file, scored when it has targets.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertkit.files import atomic_dir, read_json
from bertkit.model.heads import IGNORE_INDEX
from bertkit.model.kind import SEQ2SEQ_FILE, ModelKind, require_kind
from bertkit.text.tokenizer import Tokenizer

CONFIG_FORMAT = "bertkit-seq2seq"


@dataclass
class Seq2SeqConfig:
    """The shape of a Seq2Seq model (saved beside its weights as seq2seq.json)."""
    vocab_size: int
    """Pieces in the shared source/target vocabulary."""
    embed_dim: int = 128
    """Width of the token embeddings (also of the pre-output layer: the projection is tied)."""
    hidden: int = 256
    """GRU state size, per direction in the encoder."""
    attention_dim: int = 128
    """Width of the additive attention's tanh layer."""
    attention: bool = True
    """Additive attention over the encoder outputs; False hands the decoder only the final state."""
    copy: bool = False
    """Pointer-generator output (See et al. 2017; needs attention): a gate p_gen mixes the
    vocabulary softmax with copying each source piece by its attention weight."""
    dropout: float = 0.1
    """Dropout on embeddings and the pre-output layer in training."""
    pad_id: int = 0
    """Id of [PAD]."""
    bos_id: int = 2
    """Id the decoder starts from (<s>; [CLS] in a bertkit vocabulary)."""
    eos_id: int = 3
    """Id that ends a sequence (</s>; [SEP] in a bertkit vocabulary)."""


class AdditiveAttention(nn.Module):
    """Bahdanau attention: score_j = v . tanh(W s + U h_j + b), softmax over real positions."""

    def __init__(self, query_dim: int, key_dim: int, dim: int):
        super().__init__()
        self.query = nn.Linear(query_dim, dim, bias=False)  # W
        self.key = nn.Linear(key_dim, dim)  # U and b, applied once per sentence
        self.v = nn.Linear(dim, 1, bias=False)

    def forward(self, state: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """state [B, Q], keys = self.key(memory) [B, S, A], memory [B, S, K], mask [B, S] bool
        -> context [B, K], weights [B, S]."""
        scores = self.v(torch.tanh(keys + self.query(state)[:, None])).squeeze(-1)  # [B, S]
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        context = torch.bmm(weights[:, None], memory).squeeze(1)  # [B, 1, S] @ [B, S, K]
        return context, weights


@dataclass
class Encoded:
    """What the decoder reads of an encoded batch."""
    memory: torch.Tensor
    """[B, S, 2H] encoder outputs (both directions), zero at padding."""
    keys: torch.Tensor | None
    """[B, S, A] U h_j + b, precomputed for attention (None without)."""
    mask: torch.Tensor
    """[B, S] bool, True at real source tokens."""
    summary: torch.Tensor
    """[B, 2H] the final forward and backward states: the whole source in one vector."""
    state: torch.Tensor
    """[B, H] the decoder's first state, tanh(bridge(summary))."""
    src: torch.Tensor
    """[B, S] the source ids (padding included): where the copy mechanism puts its weight."""

    def select(self, rows: torch.Tensor) -> "Encoded":
        return Encoded(*(None if t is None else t.index_select(0, rows) for t in
                         (self.memory, self.keys, self.mask, self.summary, self.state,
                          self.src)))


class Step(NamedTuple):
    """One decoder step's output."""
    log_probs: torch.Tensor
    """[B, V] log-probability of each next piece (float32)."""
    state: torch.Tensor
    """[B, H] the decoder's new state."""
    weights: torch.Tensor | None
    """[B, S] attention weights (None without attention)."""
    p_gen: torch.Tensor | None
    """[B] probability of generating from the vocabulary rather than copying (None without
    the copy mechanism)."""


def copy_mixture(logits: torch.Tensor, weights: torch.Tensor, p_gen: torch.Tensor,
                 src: torch.Tensor) -> torch.Tensor:
    """The pointer-generator distribution, as log-probabilities [..., V]:

        P(w) = p_gen softmax(logits)_w + (1 - p_gen) sum_{j: src_j = w} weights_j

    logits [..., V], weights [..., S] (0 at padding, summing to 1), p_gen [...], src [..., S].
    Source and output share one vocabulary, so a copied piece is an ordinary id."""
    p_gen = p_gen.float()[..., None]
    copied = torch.zeros_like(logits, dtype=torch.float32).scatter_add(
        -1, src, (1 - p_gen) * weights.float())
    probs = p_gen * logits.float().softmax(-1) + copied
    return probs.clamp_min(torch.finfo(torch.float32).tiny).log()


class Seq2Seq(nn.Module):
    def __init__(self, cfg: Seq2SeqConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        E, H = cfg.embed_dim, cfg.hidden
        self.embed = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_id)
        self.encoder = nn.GRU(E, H, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * H, H)
        self.attention = AdditiveAttention(H, 2 * H, cfg.attention_dim) if cfg.attention else None
        self.decoder = nn.GRUCell(E + 2 * H, H)
        self.pre_output = nn.Linear(H + 2 * H + E, E)
        if cfg.copy and not cfg.attention:
            raise ValueError("the copy mechanism copies by attention: it needs attention=True")
        self.gate = nn.Linear(H + 2 * H + E, 1) if cfg.copy else None  # p_gen
        self.dropout = nn.Dropout(cfg.dropout)
        if generator is not None:
            self.init_weights(generator)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """PyTorch's default initialisation, drawn from `generator`: N(0, 1) embeddings,
        U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for linear layers and the GRUs. (Sutskever's
        U(-0.1, 0.1) leaves the tied output projection so flat that training sits at the
        unigram distribution for hundreds of steps.)"""
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, 1.0, generator=generator)
                module.weight[self.cfg.pad_id].zero_()
            elif isinstance(module, (nn.Linear, nn.GRU, nn.GRUCell)):
                fan_in = module.in_features if isinstance(module, nn.Linear) \
                    else module.hidden_size
                for p in module.parameters(recurse=False):
                    p.uniform_(-fan_in ** -0.5, fan_in ** -0.5, generator=generator)

    def encode(self, src: torch.Tensor, mask: torch.Tensor) -> Encoded:
        """src [B, S] ids, mask [B, S] bool (every row at least one real token)."""
        emb = self.dropout(self.embed(src))  # [B, S, E]
        packed = pack_padded_sequence(emb, mask.sum(1).cpu(), batch_first=True,
                                      enforce_sorted=False)
        out, last = self.encoder(packed)  # last [2 directions, B, H]
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        summary = torch.cat([last[0], last[1]], -1)  # [B, 2H]
        keys = self.attention.key(memory) if self.attention is not None else None
        return Encoded(memory, keys, mask, summary, torch.tanh(self.bridge(summary)), src)

    def step(self, prev: torch.Tensor, state: torch.Tensor, enc: Encoded) -> Step:
        """One output step: prev [B] ids, state [B, H] -> log-probabilities [B, V], the new
        state, the attention weights and (with copy) p_gen."""
        state, weights, features = self.advance(prev, state, enc)
        log_probs, p_gen = self.predict(features, weights, enc.src)
        return Step(log_probs, state, weights, p_gen)

    def advance(self, prev: torch.Tensor, state: torch.Tensor, enc: Encoded
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The recurrent half of a step: the new state [B, H], the attention weights [B, S]
        and the features [B, H + 2H + E] (state, context, input) the output is read from."""
        emb = self.dropout(self.embed(prev))  # [B, E]
        if self.attention is not None:
            context, weights = self.attention(state, enc.keys, enc.memory, enc.mask)
        else:
            context, weights = enc.summary, None
        state = self.decoder(torch.cat([emb, context], -1), state)
        return state, weights, torch.cat([state, context, emb], -1)

    def predict(self, features: torch.Tensor, weights: torch.Tensor | None, src: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output half, for one step or many at once (features [..., F], weights and src
        [..., S]): log-probabilities [..., V] and p_gen [...] (None without copy)."""
        logits = self.dropout(torch.tanh(self.pre_output(features))) @ self.embed.weight.T
        if self.gate is None:
            return logits.float().log_softmax(-1), None
        p_gen = torch.sigmoid(self.gate(features)).squeeze(-1)
        return copy_mixture(logits, weights, p_gen, src), p_gen

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor,
                tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tgt_in [B, T] (<s> y_1 .. y_{T-1}) -> log-probabilities [B, T, V].
        Only the recurrence runs step by step; the output layer reads all steps at once (one
        large product is faster than T small ones)."""
        enc = self.encode(src, src_mask)
        state, weights, features = enc.state, [], []
        for t in range(tgt_in.shape[1]):
            state, w, f = self.advance(tgt_in[:, t], state, enc)
            weights.append(w)
            features.append(f)
        T = tgt_in.shape[1]
        log_probs, _ = self.predict(
            torch.stack(features, 1), None if weights[0] is None else torch.stack(weights, 1),
            enc.src[:, None].expand(-1, T, -1))
        return log_probs


def seq2seq_loss(model: Seq2Seq, batch: dict) -> tuple[torch.Tensor, dict]:
    """Mean negative log-likelihood of the real target tokens (</s> included)."""
    log_probs = model(batch["input_ids"], batch["src_mask"], batch["tgt_in"])
    loss = F.nll_loss(log_probs.flatten(0, 1), batch["labels"].flatten(),
                      ignore_index=IGNORE_INDEX)
    return loss, {}


# Decoding --------------------------------------------------------------------------------------

@dataclass
class Decoded:
    """One decoded sentence."""
    ids: list[int]
    """Output ids, without </s>."""
    weights: np.ndarray | None
    """[len(ids) + 1, source pieces + </s>] attention weights per output step (the last row
    wrote </s>, when it was written); None without attention."""
    p_gen: np.ndarray | None
    """[rows of weights] p_gen per output step; None without the copy mechanism."""


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, max_length: int
                  ) -> list[Decoded]:
    """The most likely next token at each step, until </s> or max_length, for each row."""
    cfg = model.cfg
    enc = model.encode(src, mask)
    prev = torch.full((src.shape[0],), cfg.bos_id, dtype=torch.long, device=src.device)
    state, done = enc.state, torch.zeros_like(prev, dtype=torch.bool)
    tokens, weights, gates = [], [], []
    for _ in range(max_length):
        out = model.step(prev, state, enc)
        prev, state = out.log_probs.argmax(-1), out.state
        tokens.append(prev)
        weights.append(out.weights)
        gates.append(out.p_gen)
        done |= prev == cfg.eos_id
        if done.all():
            break
    ids = torch.stack(tokens, 1).tolist()  # [B, steps]
    decoded = []
    for b, row in enumerate(ids):
        n = row.index(cfg.eos_id) if cfg.eos_id in row else len(row)
        length = int(mask[b].sum())
        decoded.append(Decoded(
            row[:n],
            None if weights[0] is None else
            torch.stack([w[b, :length] for w in weights[:n + 1]]).cpu().numpy(),
            None if gates[0] is None else
            torch.stack([g[b] for g in gates[:n + 1]]).cpu().numpy()))
    return decoded


@torch.no_grad()
def beam_decode(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, max_length: int,
                width: int = 4, length_penalty: float = 1.0) -> Decoded:
    """Beam search for one sentence (src [1, S]): keep the `width` best partial outputs by
    summed log-probability; an output that writes </s> is finished; stop when `width` are
    finished (or at max_length) and return the best by score / length^length_penalty.
    At width 1 this is greedy decoding."""
    cfg = model.cfg
    enc = model.encode(src, mask)
    alive = [([], 0.0, [], [])]  # (ids, log-prob, attention rows, p_gen per step)
    state = enc.state
    finished = []
    for _ in range(max_length):
        rows = torch.zeros(len(alive), dtype=torch.long, device=src.device)
        prev = torch.tensor([h[0][-1] if h[0] else cfg.bos_id for h in alive], device=src.device)
        out = model.step(prev, state, enc.select(rows))
        scores = torch.tensor([h[1] for h in alive], device=src.device)[:, None] \
            + out.log_probs  # [k, V]
        top = scores.flatten().topk(min(2 * width, scores.numel()))
        V = scores.shape[1]
        next_alive, keep = [], []
        for score, index in zip(top.values.tolist(), top.indices.tolist()):
            k, token = divmod(index, V)
            ids, _, maps, gates = alive[k]
            maps = maps + ([] if out.weights is None else [out.weights[k]])
            gates = gates + ([] if out.p_gen is None else [out.p_gen[k]])
            if token == cfg.eos_id:
                finished.append((ids, score, maps, gates))
            else:
                next_alive.append((ids + [token], score, maps, gates))
                keep.append(k)
            if len(next_alive) == width:
                break
        if len(finished) >= width:
            break
        alive, state = next_alive, out.state[torch.tensor(keep, device=src.device)]
    else:
        finished.extend(alive)
    ids, _, maps, gates = max(finished,
                              key=lambda h: h[1] / max(1, len(h[0]) + 1) ** length_penalty)
    return Decoded(ids, torch.stack(maps).cpu().numpy() if maps else None,
                   torch.stack(gates).cpu().numpy() if gates else None)


# Saving and loading ----------------------------------------------------------------------------

def save_seq2seq(model: Seq2Seq, tokenizer: Tokenizer, out: str | Path) -> Path:
    """model.safetensors, seq2seq.json and the tokenizer files into `out`, published together
    in one folder swap: `out` holds the old model or the new one, never half of each."""
    out = Path(out)
    with atomic_dir(out) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(tmp / "model.safetensors"))
        with open(tmp / SEQ2SEQ_FILE, "w", encoding="utf-8") as f:
            json.dump({"format": CONFIG_FORMAT, **asdict(model.cfg)}, f, indent=2)
        tokenizer.save(tmp)
    return out


def load_seq2seq(model_dir: str | Path) -> tuple[Seq2Seq, Tokenizer]:
    """The model (in eval mode) and tokenizer of a directory saved by save_seq2seq."""
    model_dir = require_kind(model_dir, ModelKind.SEQ2SEQ)
    config = read_json(Path(model_dir) / SEQ2SEQ_FILE, "seq2seq model config", CONFIG_FORMAT)
    config.pop("format")
    model = Seq2Seq(Seq2SeqConfig(**config))
    model.load_state_dict(load_file(str(Path(model_dir) / "model.safetensors")))
    return model.eval(), Tokenizer.load(model_dir)
