"""The parallel text of `bertkit.road.seq2seq`: (source, target) pairs read from JSON lines,
encoded into pieces, padded and collated with </s> and teacher forcing's shifted targets, and
cut into length-bucketed batches (`PairBatches`); `detokenize` undoes WordPiece's spaces.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import torch

from bertkit.files import UserError, read_jsonl
from bertkit.model.heads import IGNORE_INDEX
from bertkit.road.seq2seq import Seq2SeqConfig
from bertkit.text.tokenizer import Tokenizer


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
