"""Text from a left-to-right model: the textbooks' GPT, the contrast to BERT.

A model pretrained with `--objective clm` reads with causal attention (each position sees
only its left) and learned to predict the next piece. Writing is that prediction in a loop:

    ids = [CLS] + the prompt's pieces
    repeat: logits = model(ids)[last position]; next = choose(logits); ids += [next]
    until [SEP] (pretraining's end of a document) or max_new_tokens

`choose` is greedy (the argmax) or sampling from softmax(logits / temperature), optionally cut
to the k most likely pieces (top-k) and/or to the smallest set whose probability reaches p
(top-p, "nucleus"). Sampling draws from a `torch.Generator` the caller seeds: the same seed
writes the same text. Each step reruns the whole prefix (no key/value cache): simple, and fast
enough for the small models bertkit trains.

Only a causal model may write: `is_causal` reads the flag pretraining stores in config.json
(`"is_decoder": true`, Hugging Face BERT's name for causal self-attention). A masked model has
never predicted a next piece, and its output here would be noise.

    texts = generate("runs/clm", "It is a truth universally", GenerationConfig(strategy="sample",
                     top_p=0.9, seed=1))

Shapes: N sequences written together, T pieces so far, V vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError
from bertkit.model.heads import IGNORE_INDEX, PretrainingModel
from bertkit.model.hub import load_config, load_pretraining_model
from bertkit.model.kind import ModelKind, require_kind
from bertkit.text.tokenizer import Tokenizer

CAUSAL_FLAG = "is_decoder"
"""The config.json key marking a model trained left to right (transformers' BertConfig's)."""


@dataclass
class GenerationConfig:
    """How the next piece is chosen."""

    max_new_tokens: int = 40
    """Pieces written after the prompt at most (fewer when the model writes [SEP])."""
    strategy: Literal["greedy", "sample"] = "greedy"
    """greedy: the most likely piece each step; sample: draw from the (filtered) distribution."""
    temperature: float = 1.0
    """sample: divides the logits; below 1 sharpens the distribution toward greedy, above 1
    flattens it."""
    top_k: int | None = None
    """sample: draw only among the k most likely pieces; none: all."""
    top_p: float | None = None
    """sample: draw only among the smallest set of pieces whose probability reaches p; none:
    all."""
    seed: int = 0
    """sample: seeds the draws (the same seed writes the same text)."""
    num_return_sequences: int = 1
    """Continuations written for the prompt (greedy ones are all the same)."""

    def __post_init__(self) -> None:
        if self.strategy not in ("greedy", "sample"):
            raise UserError(f"--strategy must be greedy or sample, got {self.strategy!r}")
        if self.max_new_tokens < 1 or self.num_return_sequences < 1:
            raise UserError("--max-new-tokens and --num-return-sequences must be at least 1")
        if not self.temperature > 0:
            raise UserError(f"--temperature must be positive, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"--top-k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UserError(f"--top-p must be in (0, 1], got {self.top_p}")


@dataclass(kw_only=True)
class GenerateOptions:
    """`bertkit generate`: continue a prompt with a model pretrained with --objective clm."""

    model: Path = field(metadata={"model": True})
    """Model directory pretrained with --objective clm."""
    prompt: str = field(metadata={"positional": True, "metavar": "PROMPT"})
    """The text to continue."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """How the next piece is chosen."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    json: bool = False
    """One JSON object: {"prompt", "texts"}."""


# Choosing the next piece: pure functions of the logits ------------------------------------------

def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """logits [N, V] with all but the k largest of each row set to -inf (ties at the k-th value
    kept)."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # [N, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """logits [N, V] cut to the smallest set of most likely pieces whose probability reaches
    p (Holtzman et al. 2020's nucleus), the rest -inf. The most likely piece always stays."""
    probs, order = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True)
    before = probs.cumsum(-1) - probs  # mass of the pieces ranked above each one
    drop_sorted = before >= p  # the set already reached p without this piece
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def next_tokens(logits: torch.Tensor, config: GenerationConfig,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """The next piece of each row, [N], from the last position's logits [N, V]."""
    if config.strategy == "greedy":
        return logits.argmax(-1)
    scores = logits.float() / config.temperature
    if config.top_k is not None:
        scores = top_k_filter(scores, config.top_k)
    if config.top_p is not None:
        scores = top_p_filter(scores, config.top_p)
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


# The loop --------------------------------------------------------------------------------------

def next_token_logits(model: PretrainingModel, ids: torch.Tensor) -> torch.Tensor:
    """ids [N, T] -> the logits of the piece after the last one, [N, V] (causal attention)."""
    h = model.encoder(ids, causal=True).last_hidden_state[:, -1]  # [N, H]
    return model.mlm(h)


@torch.no_grad()
def generate_ids(model: PretrainingModel, prompt_ids: list[int], config: GenerationConfig,
                 stop_id: int | None = None) -> list[list[int]]:
    """The new pieces of `config.num_return_sequences` continuations of `prompt_ids`; each
    ends at `stop_id` (left out) or after max_new_tokens. Longer than the model's positions,
    the prefix keeps its first piece ([CLS]) and the most recent ones."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(config.seed)
    limit = model.config.max_positions
    ids = torch.tensor([prompt_ids] * config.num_return_sequences, device=device)
    written: list[list[int]] = [[] for _ in range(len(ids))]
    done = torch.zeros(len(ids), dtype=torch.bool, device=device)
    try:
        for _ in range(config.max_new_tokens):
            window = ids if ids.shape[1] <= limit else \
                torch.cat([ids[:, :1], ids[:, ids.shape[1] - limit + 1:]], 1)
            new = next_tokens(next_token_logits(model, window), config, generator)  # [N]
            for row, token in enumerate(new.tolist()):
                if not done[row]:
                    if token == stop_id:
                        done[row] = True
                    else:
                        written[row].append(token)
            if done.all():
                break
            ids = torch.cat([ids, new[:, None]], 1)
    finally:
        model.train(was_training)
    return written


@torch.no_grad()
def _next_token_terms(model: PretrainingModel, tokenizer: Tokenizer, texts: list[str],
                      batch_size: int, device: str | torch.device) -> tuple[list, list, list]:
    """Per text: the summed next-token loss (nats) of its pieces given the pieces on their left
    ([CLS] first), the argmax's correct guesses, and the number of pieces predicted."""
    was_training = model.training
    model.eval()
    limit = model.config.max_positions
    rows = [[tokenizer.cls_id] + tokenizer.encode(t, add_special_tokens=False).ids[:limit - 1]
            for t in texts]
    losses, correct, counts = [], [], []
    try:
        with torch.no_grad():
            for lo in range(0, len(rows), batch_size):
                chunk = rows[lo:lo + batch_size]
                T = max(len(r) for r in chunk)
                ids = torch.full((len(chunk), T), tokenizer.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), T), dtype=torch.long)
                for i, r in enumerate(chunk):
                    ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
                ids, mask = ids.to(device), mask.to(device)
                h = model.encoder(ids, attention_mask=mask, causal=True).last_hidden_state
                logits = model.mlm(h[:, :-1]).float()  # [B, T-1, V]: predicts positions 1..T-1
                targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, IGNORE_INDEX)
                known = targets != IGNORE_INDEX  # [B, T-1]
                loss = F.cross_entropy(logits.transpose(1, 2), targets,
                                       ignore_index=IGNORE_INDEX, reduction="none")  # [B, T-1]
                losses += loss.sum(1).tolist()
                correct += ((logits.argmax(-1) == targets) & known).sum(1).tolist()
                counts += known.sum(1).tolist()
    finally:
        model.train(was_training)
    return losses, correct, counts


def next_token_scores(model: PretrainingModel, tokenizer: Tokenizer, texts: list[str],
                      batch_size: int = 32, device: str | torch.device = "cpu") -> dict:
    """How well a left-to-right model predicts each piece of each text from the pieces on
    its left ([CLS] first): mean next-token loss (nats), its perplexity exp(loss), accuracy
    of the argmax, and the number of pieces predicted."""
    losses, correct, counts = _next_token_terms(model, tokenizer, texts, batch_size, device)
    count = sum(counts)
    if count == 0:
        raise UserError("no pieces to predict: the texts are empty")
    loss = sum(losses) / count
    return {"next_token_loss": loss, "next_token_accuracy": sum(correct) / count,
            "perplexity": math.exp(loss), "tokens": count}


def log_likelihoods(model: PretrainingModel, tokenizer: Tokenizer, texts: list[str],
                    batch_size: int = 32, device: str | torch.device = "cpu") -> list[float]:
    """One float per text: log P(its pieces) under a left-to-right model, the sum of log
    P(piece | the pieces on its left), natural log: how a causal model scores a minimal pair
    (a masked model's pseudo-log-likelihood would read the right context it never saw)."""
    return [-loss for loss in _next_token_terms(model, tokenizer, texts, batch_size, device)[0]]


def is_causal(path: str | Path) -> bool:
    """Whether the model directory was pretrained left to right (`--objective clm`)."""
    return load_config(path).causal


def load_causal_model(path: str | Path, device: str | torch.device = "cpu"
                      ) -> tuple[PretrainingModel, Tokenizer]:
    """The model and tokenizer of a directory pretrained with --objective clm; a one-line
    UserError for any other."""
    p = require_kind(path, ModelKind.ENCODER)
    if not is_causal(p):
        raise UserError(f"{p}: not a left-to-right model (config.json has no "
                        f"\"{CAUSAL_FLAG}\": true); generate needs one pretrained with "
                        f"--objective clm")
    return load_pretraining_model(p, device), Tokenizer.load(p)


def generate(model: str | Path | tuple[nn.Module, Tokenizer], prompt: str,
             config: GenerationConfig | None = None, device: str | torch.device = "cpu"
             ) -> list[str]:
    """Continuations of `prompt` (the prompt included) from a clm model directory, or from a
    (model, tokenizer) pair already loaded."""
    config = config or GenerationConfig()
    if isinstance(model, tuple):
        net, tokenizer = model
    else:
        net, tokenizer = load_causal_model(model, device)
    prompt_ids = [tokenizer.cls_id] + tokenizer.encode(prompt, add_special_tokens=False).ids
    new = generate_ids(net, prompt_ids, config, stop_id=tokenizer.sep_id)
    return tokenizer.decode_batch([prompt_ids + row for row in new])


__all__ = ["GenerationConfig", "GenerateOptions", "top_k_filter", "top_p_filter",
           "next_tokens", "next_token_logits", "generate_ids", "next_token_scores", "log_likelihoods",
           "is_causal",
           "load_causal_model", "generate", "CAUSAL_FLAG"]
