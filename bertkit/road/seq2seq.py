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
serves source, target and output projection (tied). `run_seq2seq` trains each variant with
the shared loop (bertkit.training.loop.train) for a time budget on length-bucketed batches,
with the greedy BLEU of a dev sample at each evaluation (curves.png), and reports BLEU and chrF
(bertkit.road.bleu) of greedy and beam decoding beside the copy-the-source baseline;
`translate_file` translates a file and scores it when it has targets.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertkit.config import TrainConfig
from bertkit.figures import draw_or_skip, new_figure, save_png
from bertkit.files import (UserError, atomic_dir, atomic_file, check_not_input, read_json,
                           read_jsonl, read_lines)
from bertkit.model.heads import IGNORE_INDEX
from bertkit.model.kind import SEQ2SEQ_FILE, ModelKind, require_kind
from bertkit.progress import Progress
from bertkit.road.bleu import corpus_bleu, corpus_chrf
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import CLS, PAD, SEP, Tokenizer
from bertkit.text.vocab import train_tokenizer
from bertkit.training.loop import train
from bertkit.training.settings import run_settings

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


# Text, pairs and batches -----------------------------------------------------------------------

def read_pairs(path: str | Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(source, target) of each line of a JSON-lines file of {"source": ..., "target": ...}."""
    pairs = []
    for number, obj in read_jsonl(path, "parallel text"):
        for key in ("source", "target"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise UserError(f"{path}:{number}: needs a non-empty string \"{key}\"")
        pairs.append((obj["source"], obj["target"]))
        if limit is not None and len(pairs) == limit:
            break
    if not pairs:
        raise UserError(f"{path}: no pairs")
    return pairs


def detokenize(text: str) -> str:
    """Undo the spaces WordPiece decoding leaves around punctuation, curly quotes, hyphens
    and dashes (the WEB writes stiff-necked, “Go—” and men’s, all without spaces)."""
    text = re.sub(r" ([,.;:?!])", r"\1", text)
    text = re.sub(r"(\w) ’ (\w)", r"\1’\2", text)  # an apostrophe inside a word
    text = re.sub(r"(\w) - (?=\w)", r"\1-", text)
    text = re.sub(r" ?— ?", "—", text)
    text = re.sub(r"([“‘(\[]) ", r"\1", text)  # an opening quote belongs to the next word
    return re.sub(r" ([”’)\]])", r"\1", text)


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    return tokenizer.encode_batch(list(texts), add_special_tokens=False, with_offsets=False).ids


def pad_sources(sources: Sequence[Sequence[int]], cfg: Seq2SeqConfig
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids + </s>, right-padded: ids [B, S], mask [B, S] bool."""
    rows = [list(s) + [cfg.eos_id] for s in sources]
    S = max(map(len, rows))
    ids = torch.tensor([r + [cfg.pad_id] * (S - len(r)) for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    return ids, torch.arange(S)[None, :] < lengths[:, None]


def collate(pairs: Sequence[tuple[list[int], list[int]]], cfg: Seq2SeqConfig) -> dict:
    src, src_mask = pad_sources([s for s, _ in pairs], cfg)
    T = max(len(t) for _, t in pairs) + 1
    tgt_in = torch.tensor([[cfg.bos_id] + t + [cfg.pad_id] * (T - 1 - len(t)) for _, t in pairs])
    labels = torch.tensor([t + [cfg.eos_id] + [IGNORE_INDEX] * (T - 1 - len(t)) for _, t in pairs])
    n = int(src_mask.sum()) + int((labels != IGNORE_INDEX).sum())
    return {"input_ids": src, "src_mask": src_mask, "tgt_in": tgt_in, "labels": labels,
            "num_tokens": torch.tensor(n)}


class PairBatches:
    """Length-bucketed batches: pairs sorted by source then target length, cut into batches of
    at most `batch_tokens` pieces (source + </s> and target + </s>, padding counted), so a
    batch of short verses holds many and one of long verses few; the batches' order is
    shuffled anew on each pass by a generator seeded with seed + pass number."""

    def __init__(self, pairs: Sequence[tuple[list[int], list[int]]], batch_tokens: int,
                 cfg: Seq2SeqConfig, seed: int = 0):
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
        self.batches: list[list[tuple[list[int], list[int]]]] = []
        batch, longest = [], (0, 0)
        for i in order:
            grown = (max(longest[0], len(pairs[i][0]) + 1), max(longest[1], len(pairs[i][1]) + 1))
            if batch and (len(batch) + 1) * sum(grown) > batch_tokens:
                self.batches.append(batch)
                batch, grown = [], (len(pairs[i][0]) + 1, len(pairs[i][1]) + 1)
            batch.append(pairs[i])
            longest = grown
        self.batches.append(batch)
        self.cfg, self.seed, self.passes = cfg, seed, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.passes)
        self.passes += 1
        for k in torch.randperm(len(self.batches), generator=g).tolist():
            yield collate(self.batches[k], self.cfg)


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


def output_limit(source_pieces: int, max_length: int) -> int:
    """Most pieces written for a source of this many pieces: max_length, or twice the source
    and ten more if that is less (a verse's modern form is about as long as the old one; an
    untrained model that repeats itself stops there)."""
    return min(max_length, 2 * source_pieces + 10)


def translate_with(model: Seq2Seq, tokenizer: Tokenizer, texts: Sequence[str], beam: int = 1,
                   max_length: int = 200, batch_size: int = 64,
                   device: str | torch.device = "cpu", progress: bool = False) -> list[str]:
    """Output texts for `texts`: greedy (beam=1, batched by source length) or beam search of
    that width; `progress` shows sentences/s and the ETA on stderr (`bertkit.progress`)."""
    device = resolve_device(device)
    model.eval().to(device)
    sources = encode_texts(tokenizer, texts)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    groups = [order[k:k + batch_size] for k in range(0, len(order), batch_size)] if beam == 1 \
        else [[i] for i in range(len(sources))]
    outputs: dict[int, list[int]] = {}
    bar = Progress("translate", len(sources), "sentences", enabled=progress)
    for group in groups:
        src, mask = pad_sources([sources[i] for i in group], model.cfg)
        src, mask = src.to(device), mask.to(device)
        limit = output_limit(src.shape[1], max_length)
        decoded = greedy_decode(model, src, mask, limit) if beam == 1 \
            else [beam_decode(model, src, mask, limit, beam)]
        outputs.update((i, d.ids) for i, d in zip(group, decoded))
        bar.update(len(outputs))
    bar.finish()
    return [detokenize(tokenizer.decode(outputs[i])) for i in range(len(sources))]


def translate(model_dir: str | Path, texts: Sequence[str], beam: int = 1,
              max_length: int = 200, device: str | torch.device = "cpu") -> list[str]:
    """Load a saved model and translate `texts` (greedy at beam=1)."""
    model, tokenizer = load_seq2seq(model_dir)
    return translate_with(model, tokenizer, texts, beam, max_length, device=device)


# Attention pictures ----------------------------------------------------------------------------

@dataclass
class AttentionMap:
    """Where each output token looked: weights[i, j] = attention of output token i on source
    token j (rows sum to 1)."""
    source_tokens: list[str]
    """Source pieces, then </s>."""
    output_tokens: list[str]
    """Output pieces, then </s>."""
    weights: np.ndarray
    """[len(output_tokens), len(source_tokens)]."""
    p_gen: np.ndarray | None = None
    """[len(output_tokens)] the copy model's probability of generating (1 - p_gen: of
    copying by the weights) at each output step; None without the copy mechanism."""


def attention_map(model: Seq2Seq, tokenizer: Tokenizer, source: str,
                  max_length: int = 200) -> AttentionMap:
    """Greedy-decode `source` and return its attention weights (needs an attention model)."""
    if model.cfg.attention is False:
        raise UserError("this model has no attention (trained with attention=False)")
    model.eval()
    ids = encode_texts(tokenizer, [source])
    src, mask = pad_sources(ids, model.cfg)
    decoded = greedy_decode(model, src, mask, output_limit(src.shape[1], max_length))[0]
    pieces = [tokenizer.id_to_token(i) for i in ids[0]] + ["</s>"]
    written = [tokenizer.id_to_token(i) for i in decoded.ids]
    if len(decoded.weights) > len(written):
        written.append("</s>")
    return AttentionMap(pieces, written, decoded.weights, decoded.p_gen)


def plot_attention_map(amap: AttentionMap, out: str | Path, title: str = "") -> Path:
    """The lecture's alignment picture: source tokens across, output tokens down; for a copy
    model a second panel at the right gives p_gen per output step (short bars: copied)."""
    S, T = len(amap.source_tokens), len(amap.output_tokens)
    gate = amap.p_gen is not None
    fig = new_figure(out, figsize=(max(4.0, 0.32 * S + 1.5) + (1.2 if gate else 0),
                                   max(3.0, 0.3 * T + 1.2)))
    if gate:
        ax, side = fig.subplots(1, 2, sharey=True, width_ratios=[max(S, 4), 3])
    else:
        ax = fig.add_subplot()
    image = ax.imshow(amap.weights, cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(S), amap.source_tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(T), amap.output_tokens, fontsize=8)
    ax.set_xlabel("source (KJV) pieces")
    ax.set_ylabel("output pieces, written top to bottom")
    ax.set_title(title or "additive attention: weight of each source piece per output step",
                 fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03, label="attention weight")
    if gate:
        side.barh(range(T), amap.p_gen, color="tab:blue", height=0.7)
        side.set_xlim(0, 1)
        side.set_xlabel("p_gen\n(0: copied)", fontsize=8)
        side.tick_params(axis="x", labelsize=7)
    return save_png(fig, out)


def plot_curves(curves: dict[str, list[tuple[float, float]]], copy_bleu: float,
                out: str | Path, sample: int) -> Path:
    """Dev-sample BLEU against training minutes, one line per variant, beside copying."""
    fig = new_figure(out, figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    for variant, points in curves.items():
        if points:
            ax.plot(*zip(*points), marker=".", label=variant)
    ax.axhline(copy_bleu, color="grey", linestyle="--", label="copy the source")
    ax.set_xlabel("training minutes")
    ax.set_ylabel(f"BLEU, greedy, {sample} dev verses")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, out)


# The whole run ---------------------------------------------------------------------------------

VARIANTS = ("plain", "attention", "copy")


@dataclass
class Seq2SeqOptions:
    """Train GRU encoder-decoders (plain, with attention, with attention and copying) on
    parallel text; BLEU and chrF of each beside copying the source."""
    train: Path
    """Training pairs: JSON lines of {"source": ..., "target": ...}."""
    dev: Path
    """Development pairs, same format: BLEU, chrF and the attention picture."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory: one model directory per variant, metrics.json, curves.png, attention
    pictures. Variants run one at a time into the same directory share metrics.json."""
    variants: tuple[str, ...] = VARIANTS
    """Models to train: "plain" (final state only), "attention" (additive attention) and/or
    "copy" (attention and the pointer-generator copy mechanism)."""
    max_pairs: int | None = None
    """Train on the first this many pairs that fit --max-tokens; none: all of them."""
    dev_pairs: int | None = None
    """Score the first this many dev pairs that fit --max-tokens; none: all of them."""
    sample_pairs: int = 200
    """Dev pairs (evenly spread) decoded greedily at each evaluation: the BLEU curve."""
    max_tokens: int = 128
    """Keep pairs whose source and target are at most this many pieces each."""
    vocab_size: int = 4000
    """WordPiece vocabulary size, trained (cased) on the training pairs' both sides."""
    embed_dim: int = 128
    """Token embedding width."""
    hidden: int = 256
    """GRU state size."""
    dropout: float = 0.1
    """Dropout in training."""
    batch_tokens: int = 2500
    """Source and target pieces per batch, padding included (length-bucketed batches)."""
    lr: float = 3e-3
    """Peak learning rate (AdamW, linear decay over the budget)."""
    max_minutes: float | None = field(default=10.0, metadata={"duration": True})
    """Training time budget per variant, in minutes (evaluations not counted)."""
    max_steps: int | None = None
    """Stop each variant after this many steps instead (or as well)."""
    eval_every: int = 200
    """Steps between evaluations on the dev sample (BLEU in the progress lines and curves)."""
    beam: int = 4
    """Beam width for the beam-search figures (greedy is always reported)."""
    seed: int = 0
    """Seed of weight initialisation, batch order and the training loop."""
    resume: bool = False
    """Continue each model from its latest checkpoint under OUT (after Ctrl-C or SIGTERM)."""
    device: str = "auto"
    """Torch device; auto: CUDA when there is one, else the CPU."""


@dataclass
class Seq2SeqResult:
    out: Path
    """The output directory."""
    metrics: dict
    """As in metrics.json: per system, BLEU, chrF, tokens/s, steps."""
    attention: AttentionMap | None = None
    """The last attention map drawn (None without an attention variant)."""


def variant_config(variant: str, vocab_size: int, options: Seq2SeqOptions) -> Seq2SeqConfig:
    return Seq2SeqConfig(vocab_size=vocab_size, embed_dim=options.embed_dim,
                         hidden=options.hidden, attention=variant != "plain",
                         copy=variant == "copy", dropout=options.dropout)


def _vocabulary(pairs: Sequence[tuple[str, str]], options: Seq2SeqOptions) -> Tokenizer:
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        text.write_text("".join(f"{s}\n{t}\n" for s, t in pairs), encoding="utf-8")
        # plain_quotes=False: a translator writes the quotes the references use (’ “ ”)
        tokenizer = train_tokenizer([text], options.vocab_size, cased=True, progress=False,
                                    seed=options.seed, plain_quotes=False)
    if tokenizer.token_to_id(CLS) != 2 or tokenizer.token_to_id(SEP) != 3 \
            or tokenizer.token_to_id(PAD) != 0:
        raise AssertionError("bertkit vocabularies put [PAD] [UNK] [CLS] [SEP] at 0..3")
    return tokenizer


def _fitting(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], max_tokens: int,
             limit: int | None) -> list[tuple[tuple[str, str], tuple[list[int], list[int]]]]:
    """(text pair, id pair) of the first `limit` pairs with both sides 1..max_tokens pieces."""
    ids = zip(encode_texts(tokenizer, [s for s, _ in pairs]),
              encode_texts(tokenizer, [t for _, t in pairs]))
    kept = [(p, i) for p, i in zip(pairs, ids)
            if 0 < len(i[0]) <= max_tokens and 0 < len(i[1]) <= max_tokens]
    return kept[:limit]


def _score(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    return {"bleu": corpus_bleu(hypotheses, references), "chrf": corpus_chrf(hypotheses, references)}


def _earlier_variants(path: Path, data: dict) -> dict:
    """The variants' figures of an earlier run into the same folder on the same data and dev
    verses, so that variants run one at a time end in one metrics.json."""
    if not path.is_file():
        return {}
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if earlier.get("data") != data:
        return {}
    return {k: v for k, v in earlier.items() if k in VARIANTS}


def _curve(variant_dir: Path) -> list[tuple[float, float]]:
    """(training minutes, dev-sample BLEU) of each evaluation in the variant's metrics.jsonl."""
    path = variant_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [(r["seconds"] / 60, r["dev_bleu"]) for r in rows
            if r.get("split") == "eval" and "dev_bleu" in r]


def run_seq2seq(options: Seq2SeqOptions, command_line: str | None = None) -> Seq2SeqResult:
    """Train each variant, decode the dev pairs greedily and by beam search, score them and
    the copy-the-source baseline, write everything into options.out."""
    unknown = set(options.variants) - set(VARIANTS)
    if unknown or not options.variants:
        raise UserError(f"variants must be among {', '.join(VARIANTS)}, got {options.variants}")
    out = Path(options.out)
    check_not_input(out, [options.train, options.dev], names=["training file", "dev file"])
    train_pairs = read_pairs(options.train)
    dev_pairs = read_pairs(options.dev)
    tokenizer = _vocabulary(train_pairs, options)
    train_set = [i for _, i in _fitting(tokenizer, train_pairs, options.max_tokens,
                                        options.max_pairs)]
    dev_set = [p for p, _ in _fitting(tokenizer, dev_pairs, options.max_tokens,
                                      options.dev_pairs)]
    if not train_set or not dev_set:
        raise UserError(f"no pairs of at most {options.max_tokens} pieces: raise max_tokens")
    print(f"seq2seq: {len(train_set)} training pairs, {len(dev_set)} dev pairs of at most "
          f"{options.max_tokens} pieces; vocabulary {tokenizer.vocab_size}", file=sys.stderr)
    sources, references = [s for s, _ in dev_set], [t for _, t in dev_set]
    spread = np.linspace(0, len(dev_set) - 1, min(options.sample_pairs, len(dev_set)))
    sample = sorted(set(spread.round().astype(int).tolist()))
    example_rows = sample[:: max(1, len(sample) // 6)][:6]
    data = {"train": Path(options.train).name, "dev": Path(options.dev).name,
            "train_pairs": len(train_set), "dev_pairs": len(dev_set), "sample_pairs": len(sample),
            "max_tokens": options.max_tokens, "vocab_size": tokenizer.vocab_size}
    metrics = {"data": data, "copy_source": _score(sources, references),
               "copy_source_sample": _score([sources[i] for i in sample],
                                            [references[i] for i in sample]),
               "examples": [{"source": sources[i], "reference": references[i]}
                            for i in example_rows],
               **_earlier_variants(out / "metrics.json", data)}
    amap = None
    for variant in options.variants:
        model, result = _train_variant(variant, tokenizer, train_set, dev_set, sample, out,
                                       options, command_line)
        metrics[variant] = _score_variant(model, tokenizer, result, dev_set, out / variant,
                                          options)
        beam_outputs = metrics[variant].pop("beam_outputs")
        metrics[variant]["examples"] = [beam_outputs[i] for i in example_rows]
        if model.cfg.attention:
            amap = attention_map(model, tokenizer, _picture_source(sources))
            picture = out / f"{variant}_attention.png"
            draw_or_skip(lambda: plot_attention_map(amap, picture), picture)
    curves = {v: _curve(out / v) for v in VARIANTS if v in metrics}
    draw_or_skip(lambda: plot_curves(curves, metrics["copy_source_sample"]["bleu"],
                                     out / "curves.png", len(sample)), out / "curves.png")
    with atomic_file(out / "metrics.json") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
    return Seq2SeqResult(out, metrics, amap)


def _train_variant(variant: str, tokenizer: Tokenizer, train_set, dev_set, sample, out: Path,
                   options: Seq2SeqOptions, command_line: str | None):
    """One model trained with the shared loop; its progress lines carry the dev-sample BLEU."""
    cfg = variant_config(variant, tokenizer.vocab_size, options)
    model = Seq2Seq(cfg, torch.Generator().manual_seed(options.seed))
    sample_sources = [dev_set[i][0] for i in sample]
    sample_references = [dev_set[i][1] for i in sample]

    def evaluate(m: Seq2Seq) -> dict:
        hypotheses = translate_with(m, tokenizer, sample_sources, device=options.device)
        return {f"dev_{k}": v for k, v in _score(hypotheses, sample_references).items()}

    train_cfg = TrainConfig(lr=options.lr, max_steps=options.max_steps,
                            max_time=options.max_minutes, warmup_fraction=0.02,
                            weight_decay=0.0, seed=options.seed, resume=options.resume,
                            log_every=20, eval_every=options.eval_every)
    batches = PairBatches(train_set, options.batch_tokens, cfg, options.seed)
    result = train(model, seq2seq_loss, batches, train_cfg, out / variant, evaluate=evaluate,
                   save=lambda m, path: save_seq2seq(m, tokenizer, path),
                   device=options.device,
                   fingerprint={"task": "seq2seq", "variant": variant,
                                "train_pairs": len(train_set),
                                "batch_tokens": options.batch_tokens},
                   settings=run_settings({"options": options}, device=options.device,
                                         precision=train_cfg.precision, command=command_line))
    if result.stopped_by == "interrupted":
        raise KeyboardInterrupt(f"stopped: continue {out / variant} with resume")
    return model.eval(), result


def _score_variant(model: Seq2Seq, tokenizer: Tokenizer, result, dev_set, variant_dir: Path,
                   options: Seq2SeqOptions) -> dict:
    """BLEU and chrF of greedy and beam decoding on all dev pairs; the outputs are written
    beside the model (dev.greedy.txt, dev.beamK.txt)."""
    sources, references = [s for s, _ in dev_set], [t for _, t in dev_set]
    figures = {"steps": result.step, "train_seconds": result.train_seconds,
               "tokens_per_s": result.tokens / max(result.train_seconds, 1e-9),
               "train_loss": result.train_metrics.get("loss"),
               "parameters": sum(p.numel() for p in model.parameters())}
    for name, beam in (("greedy", 1), (f"beam{options.beam}", options.beam)):
        started = time.perf_counter()
        outputs = translate_with(model, tokenizer, sources, beam=beam, device=options.device,
                                 progress=True)
        figures[name] = {**_score(outputs, references),
                         "seconds": time.perf_counter() - started}
        with atomic_file(variant_dir / f"dev.{name}.txt") as f:
            f.write("".join(line + "\n" for line in outputs))
    figures["beam_outputs"] = outputs
    model.cpu()
    print(f"seq2seq {variant_dir.name}: {result.step} steps, {figures['tokens_per_s']:.0f} "
          f"tokens/s; dev BLEU greedy {figures['greedy']['bleu']:.2f}, beam {options.beam} "
          f"{figures[f'beam{options.beam}']['bleu']:.2f}", file=sys.stderr)
    return figures


def _picture_source(sources: Sequence[str]) -> str:
    """A dev source of 12 to 20 words for the attention picture (the first one, else the first)."""
    return next((s for s in sources if 12 <= len(s.split()) <= 20), sources[0])


# Translating a file ----------------------------------------------------------------------------

@dataclass
class TranslateOptions:
    """Translate texts, or a file of them, with a model saved by `road seq2seq`."""
    model: Path
    """Model directory: OUT/plain, OUT/attention or OUT/copy of a seq2seq run."""
    texts: tuple[str, ...] = field(default=(), metadata={"positional": True})
    """Source texts, one output line each (or give --input)."""
    input: Path | None = None
    """A file of sources: one a line, or JSON lines of {"source": ..., "target": ...} (.jsonl),
    whose targets, when every line has one, score the output with BLEU and chrF."""
    out: Path | None = None
    """Output file of the translations, one a line; none: standard output."""
    beam: int = 1
    """Beam width; 1 decodes greedily."""
    max_length: int = 200
    """Most pieces written per text (and at most twice the source's, plus 10)."""
    device: str = "auto"
    """Torch device; auto: CUDA when there is one, else the CPU."""


def read_sources(path: str | Path) -> tuple[list[str], list[str] | None]:
    """Sources, and targets when every line has one: JSON lines of {"source", "target"?}
    (a .jsonl file), else plain text, one source a line."""
    if Path(path).suffix != ".jsonl":
        sources = []
        for number, line in read_lines(path, "source file"):
            if not line.strip():
                raise UserError(f"{path}:{number}: an empty line (one source a line)")
            sources.append(line.strip())
        if not sources:
            raise UserError(f"{path}: no sources")
        return sources, None
    sources, targets = [], []
    for number, obj in read_jsonl(path, "parallel text"):
        if not isinstance(obj.get("source"), str) or not obj["source"].strip():
            raise UserError(f"{path}:{number}: needs a non-empty string \"source\"")
        if "target" in obj and not isinstance(obj["target"], str):
            raise UserError(f"{path}:{number}: \"target\" must be a string")
        sources.append(obj["source"])
        targets.append(obj.get("target"))
    if not sources:
        raise UserError(f"{path}: no pairs")
    return sources, (targets if all(t is not None for t in targets) else None)


def translate_file(options: TranslateOptions) -> tuple[list[str], dict | None]:
    """Translate options.texts or options.input; write options.out when given. Returns the
    translations and, for an input with targets, BLEU and chrF beside copying the source."""
    if bool(options.texts) == (options.input is not None):
        raise UserError("give texts or --input (one of them)")
    if options.beam < 1:
        raise UserError(f"--beam must be at least 1, got {options.beam}")
    inputs = [options.model] + ([options.input] if options.input is not None else [])
    check_not_input(options.out, inputs, names=["--model", "--input"][:len(inputs)])
    sources, targets = (list(options.texts), None) if options.input is None \
        else read_sources(options.input)
    model, tokenizer = load_seq2seq(options.model)
    outputs = translate_with(model, tokenizer, sources, options.beam, options.max_length,
                             device=options.device, progress=options.input is not None)
    if options.out is not None:
        with atomic_file(options.out) as f:
            f.write("".join(line + "\n" for line in outputs))
    scores = None if targets is None else {
        "sentences": len(sources), "beam": options.beam, **_score(outputs, targets),
        "copy_source": _score(sources, targets)}
    return outputs, scores
