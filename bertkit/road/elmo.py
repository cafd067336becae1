"""ELMo: a forward and a backward LSTM language model whose layers are contextual word vectors
(Peters et al. 2018; lecture 17's "Let's stick to", the BERT explainer's history).

Two language models read the same pieces: the forward one left to right, predicting each next
piece; the backward one right to left, predicting each previous piece. Each is a stack of
`num_layers` LSTMs (each followed by a projection back to the embedding width, with a residual
connection from the second layer on, as ELMo has); they share the input embedding and the softmax (tied:
the output projection is the embedding matrix), as the original ties them across directions.
Neither direction ever sees the other's states: this is why ELMo is only "pseudo
bidirectional" (the explainer), where BERT's every layer sees both sides at once.

The vectors of a token, as ELMo hands them on (2E wide each, E the embedding width):

    layer 0: [x; x]                the token embedding, duplicated to match the LSTM layers
    layer j: [h_fwd_j; h_bwd_j]     the two directions' j-th LSTM states, concatenated

and a task mixes them with learned softmax weights and a scale (bertkit.model.scalar_mix).
`ElmoLM.forward` has the encoder's signature and `hidden_states`, so bertkit.embeddings'
Embedder (and through it `embed`, `wsd`, `anisotropy`, `plot senses`) takes an ELMo directory
where it takes a BERT one. Pieces are a bertkit WordPiece/Unigram vocabulary; [CLS] and [SEP]
play <s> and </s>, so an Embedder input [CLS] text [SEP] is a sentence as ELMo read it.

The network and its directory (`ElmoLM`, `save_elmo`, `load_elmo`) are in bertkit.model.elmo,
where the Embedder finds them. Training (`train_elmo`): rows of `seq_len` pieces cut from the documents of a `bertkit prepare`
directory (or of the paragraphs of a text file), through the shared loop
(bertkit.training.loop.train: progress, checkpoints, resume, precision, devices); held-out
perplexity of each direction (per piece) at every evaluation and at the end.
"""
from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import Precision, TrainConfig
from bertkit.files import UserError, check_not_input, read_lines, write_json
from bertkit.model.elmo import (ElmoConfig, ElmoLM, ElmoOutput, flip, load_elmo,  # noqa: F401
                               reverse_index, save_elmo)
from bertkit.model.heads import IGNORE_INDEX
from bertkit.pretraining.shards import load_manifest, load_split
from bertkit.runtime import autocast, choose_precision, resolve_device
from bertkit.text.tokenizer import Tokenizer
from bertkit.text.vocab import train_tokenizer
from bertkit.training.loop import train
from bertkit.training.settings import run_settings

def next_piece_labels(input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] the id each position predicts when reading left to right: the next real piece,
    IGNORE_INDEX at the last real position and at padding."""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, :-1] = input_ids[:, 1:].masked_fill(mask[:, 1:] == 0, IGNORE_INDEX)
    return labels


def direction_losses(model: ElmoLM, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy per predicted piece of the forward and of the backward LM."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    fwd, bwd, index = model.directions(ids, mask)
    losses = []
    for top, order in ((fwd[-1], ids), (bwd[-1], flip(ids, index))):
        labels = next_piece_labels(order, mask)
        losses.append(F.cross_entropy(model.logits(top).flatten(0, 1).float(),
                                      labels.flatten(), ignore_index=IGNORE_INDEX))
    return losses[0], losses[1]


def elmo_loss(model: ElmoLM, batch: dict) -> tuple[torch.Tensor, dict]:
    """The mean of the two directions' losses (ELMo maximises their summed log-likelihood)."""
    forward, backward = direction_losses(model, batch)
    return (forward + backward) / 2, {"forward_loss": forward.detach(),
                                      "backward_loss": backward.detach()}


# Data ------------------------------------------------------------------------------------------

@dataclass
class Streams:
    """Token streams (documents, or paragraphs of a text file) of one split, back to back."""
    tokens: np.ndarray
    """int64 [N] every stream's pieces."""
    bounds: np.ndarray
    """int64 [S+1] stream s is tokens[bounds[s]:bounds[s+1]]."""

    def windows(self, length: int) -> np.ndarray:
        """[R, 2] (start, length) of consecutive pieces of at most `length`, never crossing
        a stream's end."""
        rows = []
        for a, b in zip(self.bounds[:-1], self.bounds[1:]):
            starts = np.arange(a, b, length)
            rows.append(np.stack([starts, np.minimum(starts + length, b) - starts], 1))
        return np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)


def prepared_streams(data: Path, split: str) -> Streams:
    """The documents of a `bertkit prepare` split, each its sentences back to back."""
    corpus = load_split(data, split)
    pieces = [np.asarray(corpus.shards[sh][st:st + n], dtype=np.int64) for sh, st, n in
              zip(corpus.sentence_shard, corpus.sentence_start, corpus.sentence_length)]
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    sentence_bounds = np.concatenate([[0], np.cumsum(corpus.sentence_length)])
    return Streams(tokens, sentence_bounds[corpus.doc_sentences].astype(np.int64))


def text_streams(path: Path, tokenizer: Tokenizer, heldout_every: int
                 ) -> tuple[Streams, Streams]:
    """Each non-empty line of a text file a stream; every `heldout_every`-th one held out."""
    lines = [line for _, line in read_lines(path, "text file") if line.strip()]
    if len(lines) < 2:
        raise UserError(f"{path}: needs at least two non-empty lines (one is held out)")
    ids = tokenizer.encode_batch(lines, add_special_tokens=False, with_offsets=False).ids
    held = [i % heldout_every == heldout_every - 1 for i in range(len(ids))]
    if not any(held):
        held[-1] = True

    def streams(keep: bool) -> Streams:
        chosen = [np.asarray(r, np.int64) for r, h in zip(ids, held) if h == keep and r]
        return Streams(np.concatenate(chosen) if chosen else np.zeros(0, np.int64),
                       np.concatenate([[0], np.cumsum([len(r) for r in chosen])]).astype(np.int64))

    return streams(False), streams(True)


def collate(streams: Streams, windows: np.ndarray, cls_id: int, sep_id: int,
            pad_id: int) -> dict:
    """Rows [CLS] window [SEP], right-padded: input_ids, attention_mask [B, T], num_tokens."""
    T = int(windows[:, 1].max()) + 2
    ids = np.full((len(windows), T), pad_id, dtype=np.int64)
    mask = np.zeros((len(windows), T), dtype=np.int64)
    for r, (start, n) in enumerate(windows):
        ids[r, 0], ids[r, 1:n + 1], ids[r, n + 1] = cls_id, streams.tokens[start:start + n], sep_id
        mask[r, :n + 2] = 1
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "num_tokens": torch.tensor(int(mask.sum()))}


class WindowBatches:
    """Batches of windows in an order shuffled anew each pass (seed + pass); resumable."""

    def __init__(self, streams: Streams, windows: np.ndarray, batch_size: int,
                 tokenizer: Tokenizer, seed: int = 0):
        self.streams, self.windows, self.batch_size, self.seed = streams, windows, batch_size, seed
        self.ids = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
        self.epoch, self.served = 0, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        order = torch.randperm(len(self.windows), generator=g).numpy()
        batches = [order[k:k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        for rows in batches[self.served:]:
            self.served += 1
            yield collate(self.streams, self.windows[rows], *self.ids)
        self.epoch, self.served = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.served = state["epoch"], state["served"]


@torch.no_grad()
def perplexity(model: ElmoLM, streams: Streams, windows: np.ndarray, tokenizer: Tokenizer,
               batch_size: int = 32, device: str | torch.device = "cpu",
               precision: str = "fp32") -> dict[str, float]:
    """Held-out cross-entropy and perplexity per piece of each direction (and their mean)."""
    was_training = model.training
    model.eval()
    device = torch.device(device)
    sums, count = torch.zeros(2, dtype=torch.float64), 0
    for k in range(0, len(windows), batch_size):
        batch = collate(streams, windows[k:k + batch_size], tokenizer.cls_id, tokenizer.sep_id,
                        tokenizer.pad_id)
        batch = {key: v.to(device) for key, v in batch.items()}
        n = int(batch["attention_mask"].sum()) - len(batch["input_ids"])  # predicted pieces
        with autocast(device, precision):
            forward, backward = direction_losses(model, batch)
        sums += torch.tensor([float(forward), float(backward)], dtype=torch.float64) * n
        count += n
    model.train(was_training)
    fwd, bwd = (sums / max(count, 1)).tolist()
    return {"heldout_forward_loss": fwd, "heldout_backward_loss": bwd,
            "heldout_forward_ppl": math.exp(fwd), "heldout_backward_ppl": math.exp(bwd),
            "heldout_loss": (fwd + bwd) / 2, "heldout_pieces": count}


# Saving and loading ----------------------------------------------------------------------------

# The whole run ---------------------------------------------------------------------------------

@dataclass
class ElmoOptions:
    """Train ELMo's forward and backward LSTM language models on a corpus."""
    data: Path
    """A `bertkit prepare` directory (its shards, held-out split and tokenizer), or a text
    file (one paragraph a line; every --heldout-every-th line held out)."""
    out: Path
    """Run directory: checkpoints, metrics.jsonl, loss.png, then the model (elmo.json,
    model.safetensors, tokenizer) and metrics.json (held-out perplexities) at the top."""
    tokenizer: Path | None = field(default=None, metadata={"model": True})
    """Text file only: a tokenizer (or model) directory; none trains a WordPiece vocabulary
    of --vocab-size on the file."""
    vocab_size: int = 8000
    """Text file without --tokenizer: size of the WordPiece vocabulary trained on it."""
    cased: bool = False
    """Text file without --tokenizer: keep case and accents."""
    heldout_every: int = 50
    """Text file: hold out every this many-th line."""
    embed_dim: int = 128
    """Token embedding width E (each layer's vectors are 2E wide)."""
    lstm_dim: int = 512
    """LSTM cells per layer and direction."""
    num_layers: int = 2
    """LSTM layers per direction."""
    dropout: float = 0.1
    """Dropout in training."""
    seq_len: int = 64
    """Pieces per training row (plus [CLS] and [SEP])."""
    batch_size: int = 32
    """Rows per step."""
    lr: float = 2e-3
    """Peak learning rate (AdamW, 2% warm-up, linear decay)."""
    max_minutes: float | None = field(default=4.0, metadata={"duration": True})
    """Training time budget in minutes (the schedule decays over it without --max-steps)."""
    max_steps: int | None = None
    """Stop after this many steps instead (or as well)."""
    eval_every: int | None = None
    """Steps between held-out evaluations; none: only at the end."""
    eval_rows: int = 512
    """Held-out rows the perplexity is measured on (the first ones, always the same)."""
    save_every: int | None = None
    """Steps between checkpoints (one is also saved on Ctrl-C or SIGTERM)."""
    precision: Precision = "fp32"
    """fp32, bf16 autocast, fp16 (GPU), or auto (bf16 where this device is faster at it)."""
    seed: int = 0
    """Seed of weight initialisation, batch order and dropout."""
    resume: bool = False
    """Continue from the latest checkpoint in OUT (after Ctrl-C, SIGTERM or a kill)."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""


@dataclass
class ElmoResult:
    out: Path
    metrics: dict
    """As in metrics.json: held-out perplexities, tokens/s, steps, data sizes."""
    stopped_by: str


def _tokenizer_and_streams(options: ElmoOptions) -> tuple[Tokenizer, Streams, Streams]:
    data = Path(options.data)
    if data.is_dir():
        if options.tokenizer is not None:
            raise UserError(f"{data}: a prepared directory brings its own tokenizer; "
                            f"--tokenizer is for a text file")
        load_manifest(data)
        tokenizer = Tokenizer.load(data / "tokenizer")
        return tokenizer, prepared_streams(data, "train"), prepared_streams(data, "heldout")
    if options.heldout_every < 2:
        raise UserError(f"--heldout-every must be at least 2, got {options.heldout_every}")
    if options.tokenizer is not None:
        tokenizer = Tokenizer.load(options.tokenizer)
    else:
        tokenizer = train_tokenizer([data], options.vocab_size, cased=options.cased,
                                    progress=False, seed=options.seed)
    return (tokenizer, *text_streams(data, tokenizer, options.heldout_every))


def train_elmo(options: ElmoOptions, command_line: str | None = None) -> ElmoResult:
    """Train, evaluate held-out perplexity of both directions, save the model into out."""
    options = replace(options, device=str(resolve_device(options.device)))  # "auto": this one
    out = Path(options.out)
    check_not_input(out, [options.data, options.tokenizer], names=["data", "tokenizer"])
    if options.seq_len < 1 or options.batch_size < 1 or options.eval_rows < 1:
        raise UserError("--seq-len, --batch-size and --eval-rows must be at least 1")
    tokenizer, train_streams, heldout_streams = _tokenizer_and_streams(options)
    train_windows = train_streams.windows(options.seq_len)
    heldout_windows = heldout_streams.windows(options.seq_len)[:options.eval_rows]
    if not len(train_windows) or not len(heldout_windows):
        raise UserError(f"{options.data}: no {'training' if not len(train_windows) else 'held-out'}"
                        f" text")
    cfg = ElmoConfig(vocab_size=tokenizer.vocab_size, embed_dim=options.embed_dim,
                     lstm_dim=options.lstm_dim, num_layers=options.num_layers,
                     dropout=options.dropout, pad_id=tokenizer.pad_id)
    model = ElmoLM(cfg, torch.Generator().manual_seed(options.seed))
    print(f"elmo: {len(train_streams.tokens):,} training pieces in {len(train_windows):,} rows, "
          f"{int(heldout_windows[:, 1].sum()):,} held-out pieces; vocabulary "
          f"{tokenizer.vocab_size:,}; {sum(p.numel() for p in model.parameters()):,} weights",
          file=sys.stderr)
    train_cfg = TrainConfig(lr=options.lr, max_steps=options.max_steps,
                            max_time=options.max_minutes, warmup_fraction=0.02,
                            weight_decay=0.0, precision=options.precision, seed=options.seed,
                            eval_every=options.eval_every, save_every=options.save_every,
                            resume=options.resume, log_every=20)
    batches = WindowBatches(train_streams, train_windows, options.batch_size, tokenizer,
                            options.seed)
    precision = options.precision  # the loop settles "auto" for itself; evaluation too
    if precision == "auto":
        precision, _ = choose_precision(torch.device(options.device))
    evaluate = lambda m: perplexity(m, heldout_streams, heldout_windows, tokenizer,  # noqa: E731
                                    options.batch_size, options.device, precision)
    fingerprint = {"task": "elmo", "data": str(options.data), "seq_len": options.seq_len,
                   "batch_size": options.batch_size, "vocab_size": tokenizer.vocab_size}
    result = train(model, elmo_loss, batches, train_cfg, out, evaluate=evaluate,
                   save=lambda m, path: save_elmo(m, tokenizer, path), device=options.device,
                   fingerprint=fingerprint,
                   settings=run_settings({"options": options}, device=options.device,
                                         precision=train_cfg.precision, command=command_line))
    if result.stopped_by == "interrupted":
        return ElmoResult(out, {}, result.stopped_by)
    metrics = {**result.eval_metrics, "steps": result.step,
               "train_seconds": result.train_seconds, "train_tokens": result.tokens,
               "tokens_per_s": result.tokens / max(result.train_seconds, 1e-9),
               "train_loss": result.train_metrics.get("loss"),
               "data": {"train_pieces": len(train_streams.tokens),
                        "heldout_pieces": int(heldout_windows[:, 1].sum()),
                        "vocab_size": tokenizer.vocab_size},
               "config": asdict(cfg)}
    write_json(out / "metrics.json", metrics)
    print(f"elmo: {result.step} steps, {metrics['tokens_per_s']:.0f} tokens/s; held-out "
          f"perplexity per piece: forward {metrics['heldout_forward_ppl']:.1f}, backward "
          f"{metrics['heldout_backward_ppl']:.1f}", file=sys.stderr)
    return ElmoResult(out, metrics, result.stopped_by)


__all__ = ["ElmoConfig", "ElmoLM", "ElmoOutput", "ElmoOptions", "ElmoResult", "elmo_loss",
           "direction_losses", "next_piece_labels", "reverse_index", "flip", "perplexity",
           "save_elmo", "load_elmo", "train_elmo", "Streams", "WindowBatches",
           "prepared_streams", "text_streams", "collate"]
