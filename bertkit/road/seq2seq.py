"""Sequence to sequence with attention: a GRU encoder-decoder, as lecture 17 draws it.

The encoder (a bidirectional GRU) reads the source; its final state, through a tanh layer, is
handed to the decoder as its first state. The decoder (a GRU cell) writes one token at a time,
fed the previous token (the reference one in training: teacher forcing; its own at inference),
until it writes </s>. With attention (Bahdanau et al. 2015) it also gets, at each output step
t, a context vector: the mean of the encoder's outputs h_j weighted by

    a_tj = softmax_j( v . tanh(W s_{t-1} + U h_j + b) )      (padding positions get 0)

where s_{t-1} is the decoder's previous state. Without attention (`attention=False`, the same
class) the context is the encoder's final state at every step, so the whole source must pass
through that one vector: the bottleneck attention removes.

Tokens are WordPiece pieces of a bertkit vocabulary trained on the training text; [CLS] plays
<s> (start of the output) and [SEP] plays </s> (end of either side). One embedding matrix
serves source, target and output projection (tied). `run_seq2seq` trains with the shared loop
(bertkit.training.loop.train) and reports BLEU and chrF (bertkit.road.bleu) of greedy and
beam decoding beside the copy-the-source baseline.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertkit.config import TrainConfig
from bertkit.figures import draw_or_skip, new_figure
from bertkit.files import (UserError, atomic_dir, atomic_file, check_not_input, read_json,
                           read_jsonl)
from bertkit.model.heads import IGNORE_INDEX
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

    def select(self, rows: torch.Tensor) -> "Encoded":
        return Encoded(*(None if t is None else t.index_select(0, rows) for t in
                         (self.memory, self.keys, self.mask, self.summary, self.state)))


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
        return Encoded(memory, keys, mask, summary, torch.tanh(self.bridge(summary)))

    def step(self, prev: torch.Tensor, state: torch.Tensor, enc: Encoded
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One output step: prev [B] ids, state [B, H] -> logits [B, V], new state, attention
        weights [B, S] (None without attention)."""
        emb = self.dropout(self.embed(prev))  # [B, E]
        if self.attention is not None:
            context, weights = self.attention(state, enc.keys, enc.memory, enc.mask)
        else:
            context, weights = enc.summary, None
        state = self.decoder(torch.cat([emb, context], -1), state)
        pre = self.dropout(torch.tanh(self.pre_output(torch.cat([state, context, emb], -1))))
        return pre @ self.embed.weight.T, state, weights

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor,
                tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tgt_in [B, T] (<s> y_1 .. y_{T-1}) -> logits [B, T, V]."""
        enc = self.encode(src, src_mask)
        state, steps = enc.state, []
        for t in range(tgt_in.shape[1]):
            logits, state, _ = self.step(tgt_in[:, t], state, enc)
            steps.append(logits)
        return torch.stack(steps, 1)


def seq2seq_loss(model: Seq2Seq, batch: dict) -> tuple[torch.Tensor, dict]:
    """Mean cross-entropy over the real target tokens (</s> included)."""
    logits = model(batch["input_ids"], batch["src_mask"], batch["tgt_in"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                           ignore_index=IGNORE_INDEX)
    return loss, {}


# Decoding --------------------------------------------------------------------------------------

@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, max_length: int
                  ) -> tuple[list[list[int]], list[np.ndarray | None]]:
    """The most likely next token at each step, until </s> or max_length. Returns the ids
    (without </s>) and, with attention, each sentence's weights [output tokens + 1, S]
    (the last row is the step that wrote </s>)."""
    cfg = model.cfg
    enc = model.encode(src, mask)
    prev = torch.full((src.shape[0],), cfg.bos_id, dtype=torch.long, device=src.device)
    state, done = enc.state, torch.zeros_like(prev, dtype=torch.bool)
    tokens, weights = [], []
    for _ in range(max_length):
        logits, state, w = model.step(prev, state, enc)
        prev = logits.argmax(-1)
        tokens.append(prev)
        weights.append(w)
        done |= prev == cfg.eos_id
        if done.all():
            break
    ids = torch.stack(tokens, 1).tolist()  # [B, steps]
    outs, maps = [], []
    for b, row in enumerate(ids):
        n = row.index(cfg.eos_id) if cfg.eos_id in row else len(row)
        outs.append(row[:n])
        length = int(mask[b].sum())
        maps.append(None if weights[0] is None else
                    torch.stack([w[b, :length] for w in weights[:n + 1]]).cpu().numpy())
    return outs, maps


@torch.no_grad()
def beam_decode(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, max_length: int,
                width: int = 4, length_penalty: float = 1.0
                ) -> tuple[list[int], np.ndarray | None]:
    """Beam search for one sentence (src [1, S]): keep the `width` best partial outputs by
    summed log-probability; an output that writes </s> is finished; stop when `width` are
    finished (or at max_length) and return the best by score / length^length_penalty.
    At width 1 this is greedy decoding."""
    cfg = model.cfg
    enc = model.encode(src, mask)
    alive = [([], 0.0, [])]  # (ids, log-prob, attention rows)
    state = enc.state
    finished = []
    for _ in range(max_length):
        rows = torch.zeros(len(alive), dtype=torch.long, device=src.device)
        prev = torch.tensor([h[0][-1] if h[0] else cfg.bos_id for h in alive], device=src.device)
        logits, new_state, w = model.step(prev, state, enc.select(rows))
        scores = torch.tensor([h[1] for h in alive], device=src.device)[:, None] \
            + logits.float().log_softmax(-1)  # [k, V]
        top = scores.flatten().topk(min(2 * width, scores.numel()))
        V = scores.shape[1]
        next_alive, keep = [], []
        for score, index in zip(top.values.tolist(), top.indices.tolist()):
            k, token = divmod(index, V)
            ids, _, maps = alive[k]
            maps = maps + ([] if w is None else [w[k]])
            if token == cfg.eos_id:
                finished.append((ids, score, maps))
            else:
                next_alive.append((ids + [token], score, maps))
                keep.append(k)
            if len(next_alive) == width:
                break
        if len(finished) >= width:
            break
        alive, state = next_alive, new_state[torch.tensor(keep, device=src.device)]
    else:
        finished.extend(alive)
    ids, _, maps = max(finished, key=lambda h: h[1] / max(1, len(h[0]) + 1) ** length_penalty)
    return ids, (torch.stack(maps).cpu().numpy() if maps else None)


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
    """Undo the spaces WordPiece decoding leaves around punctuation and curly quotes."""
    text = re.sub(r" ([,.;:?!])", r"\1", text)
    text = re.sub(r"(\w) ’ (\w)", r"\1’\2", text)  # an apostrophe inside a word
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
    """Batches of pairs of similar source length (less padding), in an order shuffled anew on
    each pass by a generator seeded with seed + pass number."""

    def __init__(self, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int,
                 cfg: Seq2SeqConfig, seed: int = 0):
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
        self.batches = [[pairs[i] for i in order[k:k + batch_size]]
                        for k in range(0, len(order), batch_size)]
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
        with open(tmp / "seq2seq.json", "w", encoding="utf-8") as f:
            json.dump({"format": CONFIG_FORMAT, **asdict(model.cfg)}, f, indent=2)
        tokenizer.save(tmp)
    return out


def load_seq2seq(model_dir: str | Path) -> tuple[Seq2Seq, Tokenizer]:
    config = read_json(Path(model_dir) / "seq2seq.json", "seq2seq model config", CONFIG_FORMAT)
    config.pop("format")
    model = Seq2Seq(Seq2SeqConfig(**config))
    model.load_state_dict(load_file(str(Path(model_dir) / "model.safetensors")))
    return model.eval(), Tokenizer.load(model_dir)


def translate_with(model: Seq2Seq, tokenizer: Tokenizer, texts: Sequence[str], beam: int = 1,
                   max_length: int = 100, batch_size: int = 64,
                   device: str | torch.device = "cpu") -> list[str]:
    """Output texts for `texts`: greedy (beam=1, batched) or beam search of that width."""
    device = resolve_device(device)
    model.eval().to(device)
    sources = encode_texts(tokenizer, texts)
    outputs: list[list[int]] = []
    if beam == 1:
        for k in range(0, len(sources), batch_size):
            src, mask = pad_sources(sources[k:k + batch_size], model.cfg)
            outputs += greedy_decode(model, src.to(device), mask.to(device), max_length)[0]
    else:
        for s in sources:
            src, mask = pad_sources([s], model.cfg)
            outputs.append(beam_decode(model, src.to(device), mask.to(device), max_length,
                                       beam)[0])
    return [detokenize(tokenizer.decode(ids)) for ids in outputs]


def translate(model_dir: str | Path, texts: Sequence[str], beam: int = 1,
              max_length: int = 100, device: str | torch.device = "cpu") -> list[str]:
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


def attention_map(model: Seq2Seq, tokenizer: Tokenizer, source: str,
                  max_length: int = 100) -> AttentionMap:
    """Greedy-decode `source` and return its attention weights (needs an attention model)."""
    if model.cfg.attention is False:
        raise UserError("this model has no attention (trained with attention=False)")
    model.eval()
    ids = encode_texts(tokenizer, [source])
    src, mask = pad_sources(ids, model.cfg)
    out, maps = greedy_decode(model, src, mask, max_length)
    pieces = [tokenizer.id_to_token(i) for i in ids[0]] + ["</s>"]
    written = [tokenizer.id_to_token(i) for i in out[0]]
    if len(maps[0]) > len(written):
        written.append("</s>")
    return AttentionMap(pieces, written, maps[0])


def save_png(fig, out: str | Path) -> Path:
    with atomic_file(out, "wb") as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
    return Path(out)


def plot_attention_map(amap: AttentionMap, out: str | Path, title: str = "") -> Path:
    """The lecture's alignment picture: source tokens across, output tokens down."""
    S, T = len(amap.source_tokens), len(amap.output_tokens)
    fig = new_figure(out, figsize=(max(4.0, 0.32 * S + 1.5), max(3.0, 0.3 * T + 1.2)))
    ax = fig.add_subplot()
    image = ax.imshow(amap.weights, cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(S), amap.source_tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(T), amap.output_tokens, fontsize=8)
    ax.set_xlabel("source (KJV) pieces")
    ax.set_ylabel("output pieces, written top to bottom")
    ax.set_title(title or "additive attention: weight of each source piece per output step",
                 fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03, label="attention weight")
    return save_png(fig, out)


# The whole run ---------------------------------------------------------------------------------

VARIANTS = ("attention", "plain")


@dataclass
class Seq2SeqOptions:
    """Train a GRU encoder-decoder (with and without attention) on parallel text; BLEU and chrF."""
    train: Path
    """Training pairs: JSON lines of {"source": ..., "target": ...}."""
    dev: Path
    """Development pairs, same format: BLEU, chrF and the attention picture."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory: one model directory per variant, metrics.json, attention.png."""
    variants: tuple[str, ...] = VARIANTS
    """Models to train: "attention" (additive attention) and/or "plain" (final state only)."""
    max_pairs: int = 4000
    """Train on the first this many pairs that fit max_tokens."""
    dev_pairs: int = 300
    """Evaluate on the first this many dev pairs that fit max_tokens."""
    max_tokens: int = 32
    """Keep pairs whose source and target are at most this many pieces each."""
    vocab_size: int = 4000
    """WordPiece vocabulary size, trained (cased) on the training pairs' both sides."""
    embed_dim: int = 128
    """Token embedding width."""
    hidden: int = 256
    """GRU state size."""
    dropout: float = 0.1
    """Dropout in training."""
    batch_size: int = 64
    """Pairs per batch."""
    lr: float = 3e-3
    """Peak learning rate (AdamW, linear decay)."""
    max_minutes: float = 4.0
    """Training time budget per variant, in minutes."""
    max_steps: int | None = None
    """Stop each variant after this many steps instead (or as well)."""
    beam: int = 4
    """Beam width for the beam-search figures (greedy is always reported)."""
    seed: int = 0
    """Seed of weight initialisation, batch order and the training loop."""
    resume: bool = False
    """Continue each model from its latest checkpoint under out (after Ctrl-C or SIGTERM)."""
    device: str = "auto"
    """Torch device; auto: CUDA when there is one, else the CPU."""


@dataclass
class Seq2SeqResult:
    out: Path
    """The output directory."""
    metrics: dict
    """As in metrics.json: per system, BLEU, chrF, tokens/s, steps."""
    attention: AttentionMap | None = None
    """The attention map drawn in attention.png (None without an attention variant)."""
    examples: list[dict] = field(default_factory=list)
    """A few dev sources with reference and each system's output."""


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
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        text.write_text("".join(f"{s}\n{t}\n" for s, t in train_pairs), encoding="utf-8")
        tokenizer = train_tokenizer([text], options.vocab_size, cased=True, progress=False,
                                    seed=options.seed)
    if tokenizer.token_to_id(CLS) != 2 or tokenizer.token_to_id(SEP) != 3 \
            or tokenizer.token_to_id(PAD) != 0:
        raise AssertionError("bertkit vocabularies put [PAD] [UNK] [CLS] [SEP] at 0..3")

    def fitting(pairs, limit):
        ids = zip(encode_texts(tokenizer, [s for s, _ in pairs]),
                  encode_texts(tokenizer, [t for _, t in pairs]))
        kept = [(p, i) for p, i in zip(pairs, ids)
                if 0 < len(i[0]) <= options.max_tokens and 0 < len(i[1]) <= options.max_tokens]
        return kept[:limit]

    train_set = [i for _, i in fitting(train_pairs, options.max_pairs)]
    dev_set = [p for p, _ in fitting(dev_pairs, options.dev_pairs)]
    if not train_set or not dev_set:
        raise UserError(f"no pairs of at most {options.max_tokens} pieces: raise max_tokens")
    print(f"seq2seq: {len(train_set)} training pairs, {len(dev_set)} dev pairs of at most "
          f"{options.max_tokens} pieces; vocabulary {tokenizer.vocab_size}", file=sys.stderr)
    sources, references = [s for s, _ in dev_set], [t for _, t in dev_set]
    metrics = {"data": {"train_pairs": len(train_set), "dev_pairs": len(dev_set),
                        "max_tokens": options.max_tokens, "vocab_size": tokenizer.vocab_size},
               "copy_source": {"bleu": corpus_bleu(sources, references),
                               "chrf": corpus_chrf(sources, references)}}
    outputs = {}
    amap = None
    for variant in options.variants:
        cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, embed_dim=options.embed_dim,
                            hidden=options.hidden, attention=variant == "attention",
                            dropout=options.dropout)
        model = Seq2Seq(cfg, torch.Generator().manual_seed(options.seed))
        train_cfg = TrainConfig(lr=options.lr, max_steps=options.max_steps,
                                max_time=options.max_minutes, warmup_fraction=0.02,
                                weight_decay=0.0, seed=options.seed, resume=options.resume,
                                log_every=20)
        batches = PairBatches(train_set, options.batch_size, cfg, options.seed)
        result = train(model, seq2seq_loss, batches, train_cfg, out / variant,
                       save=lambda m, path: save_seq2seq(m, tokenizer, path),
                       device=options.device,
                       fingerprint={"task": "seq2seq", "variant": variant},
                       settings=run_settings({"options": options}, device=options.device,
                                             precision=train_cfg.precision,
                                             command=command_line))
        if result.stopped_by == "interrupted":
            raise KeyboardInterrupt(f"stopped: continue {out / variant} with resume")
        model.cpu().eval()
        started = time.perf_counter()
        greedy = translate_with(model, tokenizer, sources, beam=1, device=options.device)
        greedy_s = time.perf_counter() - started
        started = time.perf_counter()
        beam = translate_with(model, tokenizer, sources, beam=options.beam, device=options.device)
        beam_s = time.perf_counter() - started
        model.cpu()
        outputs[variant] = greedy
        metrics[variant] = {
            "greedy": {"bleu": corpus_bleu(greedy, references),
                       "chrf": corpus_chrf(greedy, references), "seconds": greedy_s},
            f"beam{options.beam}": {"bleu": corpus_bleu(beam, references),
                                    "chrf": corpus_chrf(beam, references), "seconds": beam_s},
            "steps": result.step, "train_seconds": result.train_seconds,
            "tokens_per_s": result.tokens / max(result.train_seconds, 1e-9),
            "train_loss": result.train_metrics.get("loss")}
        print(f"seq2seq {variant}: {result.step} steps, "
              f"{metrics[variant]['tokens_per_s']:.0f} tokens/s; dev BLEU greedy "
              f"{metrics[variant]['greedy']['bleu']:.2f}, beam {options.beam} "
              f"{metrics[variant][f'beam{options.beam}']['bleu']:.2f} (copy the source "
              f"{metrics['copy_source']['bleu']:.2f})", file=sys.stderr)
        if variant == "attention":
            amap = attention_map(model, tokenizer, _picture_source(sources))
            draw_or_skip(lambda: plot_attention_map(amap, out / "attention.png"),
                         out / "attention.png")
    examples = [{"source": s, "reference": r, **{v: outputs[v][i] for v in outputs}}
                for i, (s, r) in enumerate(zip(sources[:8], references[:8]))]
    with atomic_file(out / "metrics.json") as f:
        json.dump({**metrics, "examples": examples}, f, indent=2, ensure_ascii=False)
    return Seq2SeqResult(out, metrics, amap, examples)


def _picture_source(sources: Sequence[str]) -> str:
    """A dev source of 12 to 20 words for the attention picture (the first one, else the first)."""
    return next((s for s in sources if 12 <= len(s.split()) <= 20), sources[0])


@dataclass
class TranslateOptions:
    """Translate texts with a model saved by run_seq2seq (greedy, or beam search)."""
    model: Path
    """Model directory: OUT/attention or OUT/plain of a seq2seq run."""
    texts: tuple[str, ...] = field(metadata={"positional": True})
    """Source texts, one output line each."""
    beam: int = 1
    """Beam width; 1 decodes greedily."""
    max_length: int = 100
    """Most pieces written per text."""
    device: str = "auto"
    """Torch device; auto: CUDA when there is one, else the CPU."""
