"""The tokenizer: text -> [CLS] A [SEP] B [SEP] ids, with offsets and word ids, and back.

A thin typed layer over the `tokenizers` library (Rust), which does all per-token work: the
hot path `encode_batch` hands a whole batch to Rust and builds tensors from flat arrays, never
a Python object per token unless one is asked for.

Two kinds of vocabulary, one interface:
- WordPiece, BERT-style: BertNormalizer (clean control characters, split CJK characters,
  optional lower-casing and accent stripping), BertPreTokenizer (whitespace and punctuation),
  `##` marks a piece that continues a word.
- SentencePiece-Unigram, XLM-R style: NFKC, whitespace becomes part of the piece (`▁`).

A vocabulary bertkit trains reads typographic quotes as plain ones (`bertkit.text.quotes`: ‘ ’
as ', “ ” as "), as a step of its normalizer that tokenizer.json carries: the same apostrophe
typed two ways is one piece, so "don’t" and "don't" are the same pieces.

Both use BERT's special-token names [PAD] [UNK] [CLS] [SEP] [MASK] so the rest of bertkit
never asks which kind it holds. `tokenizer.json` is the source of truth; `vocab.txt` lists the
pieces in id order (for a Unigram vocabulary it is informative only: it cannot carry the piece
scores, so loading a Unigram tokenizer needs tokenizer.json).
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import tokenizers
import torch
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors

from bertkit.files import UserError, atomic_dir, read_json, read_lines
from bertkit.text.quotes import has_plain_quotes, quote_steps

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
"""In this order they take ids 0..4 in a trained vocabulary ([PAD] = 0 = config pad_token_id)."""
TRUNCATION = ("longest_first", "only_first", "only_second")
PADDING = ("longest", "max_length")


@dataclass(frozen=True)
class Encoding:
    """One encoded text (or pair), all lists of the same length T."""
    ids: list[int]
    tokens: list[str]
    type_ids: list[int]
    """Segment of each token: 0 for [CLS] A [SEP], 1 for B [SEP]."""
    attention_mask: list[int]
    """1 for real tokens, 0 for padding."""
    offsets: list[tuple[int, int]]
    """(start, end) character offsets into the original text (into the pair's own text for
    segment B); (0, 0) for special tokens and padding."""
    word_ids: list[int | None]
    """Index of the word (within its own text) each token came from; None for specials."""

    def __len__(self) -> int:
        return len(self.ids)

    def to_dict(self) -> dict:
        return {"ids": self.ids, "tokens": self.tokens, "type_ids": self.type_ids,
                "attention_mask": self.attention_mask, "offsets": [list(o) for o in self.offsets],
                "word_ids": self.word_ids}


class BatchTensors(NamedTuple):
    """A padded batch as the encoder takes it: `model(**batch)`. Also a mapping by name
    (`keys`, `batch["input_ids"]`, `items`), so that code written for a transformers
    BatchEncoding runs on it as it is."""
    input_ids: torch.Tensor
    """[B, T] long."""
    token_type_ids: torch.Tensor
    """[B, T] long."""
    attention_mask: torch.Tensor
    """[B, T] long, 1 = real token."""

    def to(self, device: str | torch.device) -> "BatchTensors":
        return BatchTensors(*(t.to(device) for t in self))

    def keys(self) -> tuple[str, ...]:
        return self._fields

    def items(self) -> list[tuple[str, torch.Tensor]]:
        return list(zip(self._fields, self))

    def __getitem__(self, key):  # a name, as in a mapping, or a position, as in a tuple
        return getattr(self, key) if isinstance(key, str) else tuple.__getitem__(self, key)


class EncodedBatch(Sequence[Encoding]):
    """The Rust encodings of a batch; per-item Python lists are built only when read.

    `as_tensors()` (the hot path) pads on the fly from flat numpy arrays.
    """

    def __init__(self, encodings: list[tokenizers.Encoding], *, pad_to: int | str | None,
                 pad_id: int, pad_token: str, has_pairs: bool, pieces: list[str] | None = None):
        """pad_to: a length, "longest" (the longest item's), or None for no padding."""
        self._encodings = encodings
        self._pieces = pieces
        self._pad = (pad_id, pad_token)
        self._has_pairs = has_pairs
        self.lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64,
                                   count=len(encodings))
        """Number of real tokens (before padding) of each item."""
        self._pad_to = int(self.lengths.max(initial=0)) if pad_to == "longest" else pad_to

    def __len__(self) -> int:
        return len(self._encodings)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        e = self._encodings[i]
        n = 0 if self._pad_to is None else max(0, self._pad_to - len(e))
        pad_id, pad_token = self._pad
        ids = e.ids
        tokens = e.tokens if self._pieces is None else [self._pieces[t] for t in ids]
        return Encoding(ids=ids + [pad_id] * n, tokens=tokens + [pad_token] * n,
                        type_ids=e.type_ids + [0] * n, attention_mask=e.attention_mask + [0] * n,
                        offsets=e.offsets + [(0, 0)] * n, word_ids=e.word_ids + [None] * n)

    def select(self, indices: Sequence[int]) -> "EncodedBatch":
        """The items at `indices` as a batch of their own (e.g. a length bucket), padded as
        this batch is."""
        return EncodedBatch([self._encodings[i] for i in indices], pad_to=self._pad_to,
                            pad_id=self._pad[0], pad_token=self._pad[1],
                            has_pairs=self._has_pairs, pieces=self._pieces)

    @property
    def ids(self) -> list[list[int]]:
        """Each item's ids (padded if the batch was), without building the other fields."""
        rows = [e.ids for e in self._encodings]
        if self._pad_to is None:
            return rows
        pad = self._pad[0]
        return [row + [pad] * (self._pad_to - len(row)) for row in rows]

    @property
    def cut(self) -> np.ndarray:
        """bool [B]: the item was longer than max_length and was cut to it."""
        return np.fromiter((bool(e.overflowing) for e in self._encodings), dtype=bool,
                           count=len(self._encodings))

    def flat_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """(all ids concatenated, int64 [sum of lengths]; lengths [B]), without padding."""
        flat = np.fromiter(itertools.chain.from_iterable(e.ids for e in self._encodings),
                           dtype=np.int64, count=int(self.lengths.sum()))
        return flat, self.lengths

    def as_tensors(self, device: str | torch.device = "cpu") -> BatchTensors:
        """input_ids, token_type_ids, attention_mask [B, T]: padded to the batch's longest
        item, or to max_length when encoded with padding="max_length"."""
        flat, lengths = self.flat_ids()
        T = max(int(lengths.max(initial=0)), self._pad_to or 0)
        real = np.arange(T)[None, :] < lengths[:, None]  # [B, T]
        ids = np.full(real.shape, self._pad[0], dtype=np.int64)
        ids[real] = flat
        types = np.zeros(real.shape, dtype=np.int64)
        if self._has_pairs:
            types[real] = np.fromiter(
                itertools.chain.from_iterable(e.type_ids for e in self._encodings),
                dtype=np.int64, count=len(flat))
        return BatchTensors(torch.from_numpy(ids), torch.from_numpy(types),
                            torch.from_numpy(real.astype(np.int64))).to(device)


def bert_pipeline(backend: tokenizers.Tokenizer, *, lowercase: bool = True,
                  strip_accents: bool | None = None, chinese_chars: bool = True,
                  plain_quotes: bool = False) -> None:
    """Give a WordPiece `backend` BERT's normalizer, pre-tokenizer and decoder; with
    `plain_quotes` the normalizer first reads typographic quotes as plain ones."""
    bert = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese_chars, strip_accents=strip_accents,
        lowercase=lowercase)
    backend.normalizer = normalizers.Sequence([*quote_steps(), bert]) if plain_quotes else bert
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")


def add_special_tokens(backend: tokenizers.Tokenizer, *, mask_lstrip: bool = False) -> None:
    """Make the specials atomic in raw text: "[MASK]" is one token, never normalized or split.

    A Unigram vocabulary lets [MASK] absorb the space before it, as XLM-R's <mask> does, so
    that no lone `▁` piece precedes it.
    """
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False,
                                           lstrip=mask_lstrip and t == MASK)
                                for t in SPECIAL_TOKENS])


def bert_template(backend: tokenizers.Tokenizer) -> None:
    """[CLS] A [SEP] for one text, [CLS] A [SEP] B [SEP] (B in segment 1) for a pair."""
    cls, sep = backend.token_to_id(CLS), backend.token_to_id(SEP)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls), (SEP, sep)])


class Tokenizer:
    """A WordPiece or Unigram tokenizer with BERT's special tokens and input template."""

    def __init__(self, backend: tokenizers.Tokenizer, *, model_max_length: int = 512,
                 source: str = "tokenizer"):
        missing = [t for t in SPECIAL_TOKENS if backend.token_to_id(t) is None]
        if missing:
            raise UserError(f"{source}: vocabulary lacks the special token(s) {', '.join(missing)} "
                            f"(bertkit needs {' '.join(SPECIAL_TOKENS)})")
        spec = json.loads(backend.to_str())
        self.kind = {"WordPiece": "wordpiece", "Unigram": "unigram"}.get(spec["model"]["type"])
        if self.kind is None:
            raise UserError(f"{source}: a {spec['model']['type']} vocabulary; bertkit reads "
                            "WordPiece and Unigram")
        added = {t.content for t in backend.get_added_tokens_decoder().values()}
        if not added.issuperset(SPECIAL_TOKENS):
            add_special_tokens(backend, mask_lstrip=self.kind == "unigram")
        if backend.post_processor is None:
            bert_template(backend)
        backend.no_truncation()
        backend.no_padding()
        self._backend = backend
        self.model_max_length = model_max_length
        """Longest input the model that goes with this tokenizer takes (its positions)."""
        self._normalizer = spec.get("normalizer") or {}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            backend.token_to_id(t) for t in SPECIAL_TOKENS)
        self.special_ids = frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id,
                                      self.mask_id))
        # Rust reports a Unigram token as the text it covers (an unknown character as itself,
        # [MASK] with the space it absorbed); we report the vocabulary piece, as WordPiece does.
        self._pieces = None if self.kind == "wordpiece" else [
            backend.id_to_token(i) for i in range(self.vocab_size)]

    # Loading and saving -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        """From a model or tokenizer directory: tokenizer.json if present, else vocab.txt with
        tokenizer_config.json's do_lower_case / strip_accents / tokenize_chinese_chars, as
        transformers' BertTokenizerFast does."""
        p = Path(path)
        if not p.is_dir():
            raise UserError(f"{p}: tokenizer directory does not exist" if not p.exists()
                            else f"{p}: is a file, expected a tokenizer or model directory")
        config = read_json(p / "tokenizer_config.json") \
            if (p / "tokenizer_config.json").is_file() else {}
        if not isinstance(config, dict):
            raise UserError(f"{p / 'tokenizer_config.json'}: expected a JSON object, got "
                            f"{type(config).__name__}")
        for flag in _BERT_FLAGS:
            if not isinstance(config.get(flag, False), bool) and \
                    not (flag == "strip_accents" and config[flag] is None):
                raise UserError(f"{p / 'tokenizer_config.json'}: {flag} should be true or "
                                f"false, not {config[flag]!r}")
        max_length = config.get("model_max_length")
        max_length = max_length if isinstance(max_length, int) and max_length < 10**9 else 512
        if (p / "tokenizer.json").is_file():
            try:
                backend = tokenizers.Tokenizer.from_file(str(p / "tokenizer.json"))
            except Exception as e:  # the Rust side raises a bare Exception
                raise UserError(f"{p / 'tokenizer.json'}: not a tokenizers file ({e})") from None
            spec = json.loads(backend.to_str())
            if spec["model"]["type"] == "WordPiece" and _BERT_FLAGS.keys() & config.keys():
                # BertTokenizerFast rebuilds its normalizer from these flags when present;
                # the quote steps, where the file has them, stay in front of it.
                bert_pipeline(backend, **_bert_flags(config),
                              plain_quotes=has_plain_quotes(spec.get("normalizer") or {}))
            return cls(backend, model_max_length=max_length, source=str(p / "tokenizer.json"))
        if (p / "vocab.txt").is_file():
            if not str(config.get("tokenizer_class", "BertTokenizer")).startswith("Bert"):
                raise UserError(f"{p}: no tokenizer.json, and vocab.txt alone describes only a "
                                f"BERT WordPiece tokenizer, not a {config['tokenizer_class']}")
            return cls.from_vocab(p / "vocab.txt", model_max_length=max_length,
                                  **_bert_flags(config))
        raise UserError(f"{p}: not a tokenizer directory (no tokenizer.json or vocab.txt)")

    @classmethod
    def from_vocab(cls, vocab_file: str | Path, *, lowercase: bool = True,
                   strip_accents: bool | None = None, chinese_chars: bool = True,
                   model_max_length: int = 512) -> "Tokenizer":
        """A BERT WordPiece tokenizer from a vocab.txt (one piece per line, id = line - 1)."""
        vocab = {}
        for number, token in read_lines(vocab_file, "vocabulary"):
            vocab[token] = number - 1  # a repeated piece keeps its last id, as BERT's loader
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise UserError(f"{vocab_file}: vocabulary lacks the special token(s) "
                            f"{', '.join(missing)} (bertkit needs {' '.join(SPECIAL_TOKENS)})")
        backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token=UNK))
        bert_pipeline(backend, lowercase=lowercase, strip_accents=strip_accents,
                      chinese_chars=chinese_chars)
        return cls(backend, model_max_length=model_max_length, source=str(vocab_file))

    def save(self, path: str | Path) -> Path:
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json,
        which `transformers.AutoTokenizer` loads: BertTokenizerFast for BERT's WordPiece, and
        the generic PreTrainedTokenizerFast, which runs tokenizer.json as written, for a
        Unigram vocabulary and for one that reads typographic quotes as plain ones (a
        BertTokenizerFast would rebuild BERT's normalizer from the flags and drop that step)."""
        spec = json.loads(self._backend.to_str())
        spec["truncation"] = spec["padding"] = None
        specials = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"),
                            SPECIAL_TOKENS))
        bert = self.kind == "wordpiece" and not self.plain_quotes
        config = {"tokenizer_class": "BertTokenizer" if bert else "PreTrainedTokenizerFast",
                  **self._config_flags(), **specials,
                  "model_max_length": self.model_max_length, "padding_side": "right",
                  "truncation_side": "right", "clean_up_tokenization_spaces": True,
                  "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}
        vocab = self._backend.get_vocab()
        pieces = sorted(vocab, key=vocab.__getitem__)
        with atomic_dir(path) as tmp:
            (tmp / "vocab.txt").write_text("".join(t + "\n" for t in pieces), encoding="utf-8")
            for name, obj in (("tokenizer.json", spec), ("tokenizer_config.json", config),
                              ("special_tokens_map.json", specials)):
                (tmp / name).write_text(json.dumps(obj, indent=2 if name != "tokenizer.json"
                                                   else None, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
        return Path(path)

    def _config_flags(self) -> dict:
        n = self._normalizer
        n = next((step for step in n.get("normalizers", [])
                  if step.get("type") == "BertNormalizer"), n)  # behind the quote steps
        if n.get("type") == "BertNormalizer":
            return {"do_lower_case": n["lowercase"], "strip_accents": n["strip_accents"],
                    "tokenize_chinese_chars": n["handle_chinese_chars"]}
        steps = [s.get("type") for s in n.get("normalizers", [n])]
        return {"do_lower_case": "Lowercase" in steps, "strip_accents": "StripAccents" in steps}

    # Vocabulary -----------------------------------------------------------------------------
    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The `tokenizers.Tokenizer` underneath, to read (its normalizer, pre-tokenizer,
        model); a changed copy goes through `Tokenizer(...)` again."""
        return self._backend

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def do_lower_case(self) -> bool:
        return bool(self._config_flags()["do_lower_case"])

    @property
    def plain_quotes(self) -> bool:
        """Whether typographic quotes are read as plain ones (`bertkit.text.quotes`)."""
        return has_plain_quotes(self._normalizer)

    def id_to_token(self, id: int) -> str | None:
        return self._backend.id_to_token(id)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def get_vocab(self) -> dict[str, int]:
        return self._backend.get_vocab(with_added_tokens=True)

    # Encoding -------------------------------------------------------------------------------
    def encode(self, text: str | list[str], pair: str | list[str] | None = None, *,
               max_length: int | None = None, truncation: str | bool = "longest_first",
               padding: bool | str = False, add_special_tokens: bool = True,
               is_split_into_words: bool = False) -> Encoding:
        """One text (or pair); see `encode_batch` for the arguments."""
        pairs = None if pair is None else [pair]
        return self.encode_batch([text], pairs, max_length=max_length, truncation=truncation,
                                 padding=padding, add_special_tokens=add_special_tokens,
                                 is_split_into_words=is_split_into_words)[0]

    def encode_batch(self, texts: Sequence[str] | Sequence[list[str]],
                     pairs: Sequence[str | None] | None = None, *,
                     max_length: int | None = None, truncation: str | bool = "longest_first",
                     padding: bool | str = False, add_special_tokens: bool = True,
                     is_split_into_words: bool = False, with_offsets: bool = True,
                     names: Sequence[str] | None = None) -> EncodedBatch:
        """Encode texts (and their pairs: [CLS] A [SEP] B [SEP]) in Rust, in parallel.

        Truncation is set on the shared Rust tokenizer for the duration of the call, so one
        Tokenizer should not encode from several threads at once (processes are fine).

        max_length: longest result in tokens; None = no limit. truncation: how to cut an
        over-long input to max_length ("longest_first", "only_first", "only_second"), or False
        to refuse it with a UserError naming the input (`names[i]`, else "input i+1").
        padding: False, "longest" (to the batch's longest) or "max_length". Texts may be
        lists of words (`is_split_into_words`). `with_offsets=False` skips computing character
        offsets (faster; offsets are then all (0, 0)).
        """
        if truncation is True:
            truncation = "longest_first"
        if truncation and truncation not in TRUNCATION:
            raise ValueError(f"truncation must be one of {TRUNCATION} or False, got {truncation!r}")
        if padding is True:
            padding = "longest"
        if padding and padding not in PADDING:
            raise ValueError(f"padding must be one of {PADDING} or False, got {padding!r}")
        if padding == "max_length" and max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        has_pairs = pairs is not None and any(p is not None for p in pairs)
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
        if max_length is not None and add_special_tokens:
            specials = self._backend.num_special_tokens_to_add(has_pairs)
            if max_length <= specials:
                raise UserError(f"max_length {max_length} leaves no room for text beside the "
                                f"{specials} special tokens")
        inputs = list(texts) if not has_pairs else [
            t if p is None else (t, p) for t, p in zip(texts, pairs)]
        backend = self._backend
        if truncation and max_length is not None:
            backend.enable_truncation(max_length, strategy=truncation)
        encode = backend.encode_batch if with_offsets else backend.encode_batch_fast
        options = dict(is_pretokenized=is_split_into_words, add_special_tokens=add_special_tokens)
        try:
            encodings = encode(inputs, **options)
        except Exception as e:
            if not (truncation and max_length is not None):
                raise
            # Rust cannot cut a pair as asked (only_first with a too short first text, ...).
            raise UserError(self._name_failure(inputs, options, names) + f": cannot truncate "
                            f"to max_length {max_length} with truncation={truncation} "
                            f"({str(e).removeprefix('Truncation error: ')})") from None
        finally:
            backend.no_truncation()
        batch = EncodedBatch(encodings, pad_to=max_length if padding == "max_length" else
                             padding or None, pad_id=self.pad_id, pad_token=PAD,
                             has_pairs=has_pairs, pieces=self._pieces)
        if max_length is not None and not truncation:
            over = np.flatnonzero(batch.lengths > max_length)
            if len(over):
                i = int(over[0])
                name = names[i] if names is not None else f"input {i + 1}"
                raise UserError(f"{name}: {batch.lengths[i]} tokens, longer than max_length "
                                f"{max_length} (truncation is off)")
        return batch

    def _name_failure(self, inputs, options: dict, names) -> str:
        """The name of the first input that fails to encode on its own (truncation still on)."""
        for i, item in enumerate(inputs):
            try:
                self._backend.encode(*(item if isinstance(item, tuple) else (item,)), **options)
            except Exception:
                return names[i] if names is not None else f"input {i + 1}"
        return "a batch input"

    def __call__(self, texts: Sequence[str], pairs: Sequence[str | None] | None = None,
                 **kwargs) -> BatchTensors:
        """Padded tensors for a batch: `model(**tokenizer(texts))`."""
        kwargs.setdefault("max_length", self.model_max_length)
        return self.encode_batch(texts, pairs, with_offsets=False, **kwargs).as_tensors()

    # Decoding -------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        """Text from ids, `##` pieces (or `▁` pieces) merged back into words."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(self, batch: Sequence[Sequence[int]] | torch.Tensor,
                     skip_special_tokens: bool = True) -> list[str]:
        if isinstance(batch, torch.Tensor):
            batch = batch.tolist()
        return self._backend.decode_batch([list(ids) for ids in batch],
                                          skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return (f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, "
                f"lowercase={self.do_lower_case})")


# Identity: what decides the ids, and which pieces begin words ------------------------------

def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of what decides the ids: the kind, lower-casing and the pieces in id order."""
    vocab = tokenizer.get_vocab()
    pieces = sorted(vocab, key=vocab.__getitem__)
    h = hashlib.sha256(f"{tokenizer.kind}\n{tokenizer.do_lower_case}\n".encode())
    h.update("\n".join(pieces).encode("utf-8"))
    return h.hexdigest()[:32]


def word_starts(tokenizer) -> np.ndarray:
    """bool [vocab]: the piece begins a word. WordPiece: no `##`; Unigram: a leading `▁`
    (punctuation after a word is then part of it). Special tokens count as starts."""
    vocab = tokenizer.get_vocab()
    starts = np.ones(tokenizer.vocab_size, dtype=bool)
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    if tokenizer.kind == "unigram":
        flags = np.fromiter((p.startswith("\u2581") for p in vocab), dtype=bool, count=len(vocab))
    else:
        flags = np.fromiter((not p.startswith("##") for p in vocab), dtype=bool, count=len(vocab))
    starts[ids] = flags
    starts[list(tokenizer.special_ids)] = True
    return starts


def check_fits(tokenizer: "Tokenizer", config, where) -> None:
    """UserError naming `where` (the model) when the tokenizer's ids reach past the model's
    vocabulary: its rows would be looked up out of range at the first such piece."""
    if tokenizer.vocab_size > config.vocab_size:
        raise UserError(f"{where}: the tokenizer's {tokenizer.vocab_size} pieces do not fit the "
                        f"model's vocabulary of {config.vocab_size} (a tokenizer of another "
                        f"model?)")


def check_pairs(config, where) -> None:
    """UserError naming `where` (the model) when a sentence pair cannot go through it: a
    "bert" encoder gives the second text segment 1, which needs two segment types. A
    "modern" encoder has no segment table: a pair is [CLS] a [SEP] b [SEP] without types."""
    if config.architecture == "bert" and config.type_vocab_size < 2:
        raise UserError(f"{where}: the model has {config.type_vocab_size} segment type, so it "
                        f"takes no sentence pairs (the second text would be segment 1)")


class CutWarning(UserWarning):
    """Inputs cut to the model's maximum length, with their counts, so that work done chunk
    by chunk can sum its chunks' warnings into one (`cut_warnings_summed`)."""

    def __init__(self, cut: int, total: int, max_length: int, what: str = "texts",
                 where: str | None = None):
        super().__init__(f"{f'{where}: ' if where else ''}{cut} of {total} {what} were longer "
                         f"than {max_length} tokens and were cut")
        # the total is the caller's to sum (a chunk with nothing cut raises no warning)
        self.cut, self.max_length, self.what, self.where = cut, max_length, what, where


def cut_warning(cut: int, total: int, max_length: int, what: str = "texts",
                where: str | None = None, stacklevel: int = 2) -> None:
    """The one warning of a command whose inputs were cut to the model's maximum length."""
    if cut:
        warnings.warn(CutWarning(cut, total, max_length, what, where), stacklevel=stacklevel + 1)


@contextlib.contextmanager
def cut_warnings_summed(total: int):
    """The cut warnings of the block summed into one at its end, of the `total` inputs the
    block reads: a corpus encoded 2,048 texts a call warns once, not once a call (a call with
    nothing cut says nothing, hence the total from the caller). Other warnings pass through
    as they came."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            cuts = [w.message for w in caught if isinstance(w.message, CutWarning)]
            others = [w for w in caught if not isinstance(w.message, CutWarning)]
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if cuts:
        first = cuts[0]
        cut_warning(sum(c.cut for c in cuts), total, first.max_length, first.what, first.where,
                    stacklevel=3)


_BERT_FLAGS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
               "tokenize_chinese_chars": "chinese_chars"}


def _bert_flags(config: dict) -> dict:
    """tokenizer_config.json's BERT flags as `bert_pipeline` arguments, BertTokenizer's
    defaults for the absent ones."""
    flags = {"lowercase": True, "strip_accents": None, "chinese_chars": True}
    flags.update({ours: config[theirs] for theirs, ours in _BERT_FLAGS.items()
                  if theirs in config})
    return flags
