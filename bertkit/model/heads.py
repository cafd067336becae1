"""The pretraining heads on top of the encoder, and what the heads share with their data.

MaskedLMHead (transform + the decoder tied to the word embeddings -> logits over the
vocabulary), NextSentenceHead, SpanBoundaryHead (SpanBERT), and PretrainingModel, the encoder
with them (Hugging Face `BertForPreTraining`).

IGNORE_INDEX marks a label position that no loss reads: an unmasked token in masked-LM
pretraining, a special token or a non-first subword in tagging. It is PyTorch's default
`ignore_index` of `cross_entropy`, and Hugging Face's, so labels made here train the same there.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import EncoderConfig
from bertkit.model.encoder import Embeddings, Encoder, EncoderOutput, activation_fn, cls_rows

IGNORE_INDEX = -100


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm, then the decoder tied to the word embeddings, plus a
    bias: states [..., H] -> logits [..., V] (Hugging Face `BertLMPredictionHead`, or
    ModernBERT's `head` + `decoder`).

    The tied weight is the word embedding's own Parameter, held by reference and not
    registered here, so it is saved once, under the embeddings. A fused loss that never
    builds the logits asks for the pieces: `transform(h)` and `decoder()`.
    """

    def __init__(self, cfg: EncoderConfig, word_embeddings: nn.Embedding):
        super().__init__()
        bias = cfg.architecture == "bert"  # "modern" keeps only the vocabulary bias
        E = word_embeddings.embedding_dim  # ELECTRA's generator: the blocks' width -> E
        self.dense = nn.Linear(cfg.hidden_size, E, bias=bias)
        self.act = activation_fn(cfg.activation)
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps, bias=bias)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self._tied = (word_embeddings,)  # a tuple: not a submodule, no second state_dict key

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        """h: [..., H] -> the states the decoder projects onto the vocabulary [..., H]."""
        return self.norm(self.act(self.dense(h)))

    def decoder(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [V, H], bias [V]) of the vocabulary projection."""
        return self._tied[0].weight, self.bias

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: [..., H] -> logits [..., V]."""
        return F.linear(self.transform(h), *self.decoder())


class NextSentenceHead(nn.Linear):
    """Pooled [CLS] [B, H] -> logits [B, 2]: 0 = B follows A, 1 = B is random."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__(cfg.hidden_size, 2)


SBO_FILE = "sbo.safetensors"
"""Where a span-boundary head is saved beside its model: transformers has no place for it and
ignores the file."""


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span-boundary objective: predict each token of a masked span from the two
    tokens just outside it and its offset in the span.

    [h_left; h_right; P[offset]] -> Linear -> GELU -> LayerNorm -> Linear -> GELU -> LayerNorm,
    then the MLM head's decoder (`MaskedLMHead.decoder()`), which the loss applies.
    """

    def __init__(self, cfg: EncoderConfig, max_offset: int = 32):
        super().__init__()
        H = cfg.hidden_size
        self.position = nn.Embedding(max_offset, H)
        self.dense1 = nn.Linear(3 * H, H)
        self.norm1 = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.dense2 = nn.Linear(H, H)
        self.norm2 = nn.LayerNorm(H, eps=cfg.layer_norm_eps)

    def forward(self, left: torch.Tensor, right: torch.Tensor,
                offset: torch.Tensor) -> torch.Tensor:
        """left, right: [N, H] boundary outputs; offset: [N] 0-based position in the span
        (longer spans share the last row) -> states to decode [N, H]."""
        p = self.position(offset.clamp(max=self.position.num_embeddings - 1))  # [N, H]
        x = self.norm1(F.gelu(self.dense1(torch.cat([left, right, p], dim=-1))))  # [N, H]
        return self.norm2(F.gelu(self.dense2(x)))


class PretrainingModel(nn.Module):
    """Encoder + masked-LM head + next-sentence head (Hugging Face `BertForPreTraining`; a
    "modern" one has no next-sentence head: `ModernBertForMaskedLM`).

    `sbo` optionally adds SpanBERT's span-boundary head; it has no Hugging Face name, so
    `hub.save_model` must not see it (pretraining saves it apart, in sbo.safetensors).
    `to_teacher` optionally projects the last hidden states to a teacher's width (pretraining's
    distillation, `pretraining/objectives/distill.py`); saved in checkpoints, never in the
    Hugging Face directory.
    `fast` is the encoder's switch (`bertkit.model.fast`); the losses read it too, to fuse the
    vocabulary projection with the cross-entropy.
    """

    def __init__(self, cfg: EncoderConfig, sbo: SpanBoundaryHead | None = None,
                 fast: bool = True, embeddings: Embeddings | None = None,
                 next_sentence: bool = True, to_teacher: nn.Linear | None = None):
        super().__init__()
        self.config = cfg
        self.fast = fast
        # `embeddings`: shared (ELECTRA); without the next-sentence head, no pooler either
        self.encoder = Encoder(cfg, fast, embeddings, pooler=next_sentence)
        self.mlm = MaskedLMHead(cfg, self.encoder.embeddings.word)
        # transformers' ModernBERT has no next-sentence head (RoBERTa showed it does not help)
        self.nsp = NextSentenceHead(cfg) if next_sentence and cfg.architecture == "bert" \
            else None
        self.sbo = sbo
        self.to_teacher = to_teacher
        # the weights at their initial draw: all of a fresh model's, those a loaded directory
        # lacked (`hub.load_pretraining_model`): a run that does not train them must not save
        # them as if they were learned
        self.not_loaded: frozenset[str] = frozenset()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, *,
                positions: torch.Tensor | None = None, causal: bool = False,
                output_hidden_states: bool = False):
        """Returns (mlm_logits, nsp_logits [B, 2] (None without an NSP head), encoder output).

        mlm_logits are [B, T, V] for every position, or [N, V] for `positions`, a [N] tensor
        of flat indices into B*T: then only those positions (and [CLS]) pass the last block
        (`Encoder.forward_rows`), and the encoder output holds their states [N, H].
        """
        if positions is None:
            out = self.encoder(input_ids, token_type_ids, attention_mask, causal=causal,
                               output_hidden_states=output_hidden_states)
        else:
            if causal or output_hidden_states:
                raise ValueError("positions= takes neither causal nor output_hidden_states")
            h, cls = self.encoder.forward_rows(input_ids, token_type_ids, attention_mask,
                                               positions, cls_rows(input_ids))
            out = EncoderOutput(h, self.encoder.pool(cls), None)
        nsp = self.nsp(out.pooled) if self.nsp is not None else None
        return self.mlm(out.last_hidden_state), nsp, out


class ReplacedTokenHead(nn.Module):
    """ELECTRA's discriminator head: states [..., H] -> one logit per token [...], > 0 for
    "replaced" (Hugging Face `ElectraDiscriminatorPredictions`: dense, activation, a
    projection to one number)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = activation_fn(cfg.activation)
        self.prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.prediction(self.act(self.dense(h))).squeeze(-1)


def generator_config(cfg: EncoderConfig, fraction: float) -> EncoderConfig:
    """ELECTRA's generator for a discriminator of `cfg`: as deep, its hidden size, heads and
    feed-forward width `fraction` of the discriminator's (Clark et al. 2020 scale all three
    and found 1/4 to 1/2 best). It keeps the head width: round(fraction x heads) heads, at
    least one. Its embeddings are the discriminator's (their width, `embedding_size`), projected
    to its own width."""
    heads = max(1, round(cfg.num_heads * fraction))
    hidden = heads * cfg.head_dim
    intermediate = max(1, round(cfg.intermediate_size * hidden / cfg.hidden_size))
    return cfg.replace(hidden_size=hidden, num_heads=heads, intermediate_size=intermediate,
                       embedding_size=cfg.embedding_width if hidden != cfg.embedding_width
                       else None, extra={})


class ElectraModel(nn.Module):
    """ELECTRA (Clark et al. 2020): a small masked-LM generator and the discriminator, which
    tells each token of the generator's output as original or replaced; both read the same
    embeddings (token, and for "bert" position and segment, with their LayerNorm: one module).

    `encoder` + `detector` are the discriminator (Hugging Face `ElectraForPreTraining`: no
    pooler), `generator` a PretrainingModel with neither pooler nor next-sentence head
    (`ElectraForMaskedLM`); None for a discriminator alone (`generator_cfg` None), which
    judges text but cannot train. The discriminator is the model to fine-tune.
    """

    def __init__(self, cfg: EncoderConfig, generator_cfg: EncoderConfig | None,
                 fast: bool = True):
        super().__init__()
        if generator_cfg is not None and (
                generator_cfg.embedding_width != cfg.embedding_width
                or generator_cfg.architecture != cfg.architecture):
            raise ValueError("the generator must share the discriminator's embeddings: the "
                             "same architecture and embedding width")
        self.config = cfg
        self.fast = fast
        # detection reads every token, [CLS] no more than others: no pooler
        self.encoder = Encoder(cfg, fast, pooler=False)
        self.detector = ReplacedTokenHead(cfg)
        self.generator = None
        if generator_cfg is not None:
            self.generator = PretrainingModel(generator_cfg, fast=fast,
                                              embeddings=self.encoder.embeddings,
                                              next_sentence=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The discriminator's logits [B, T], > 0 where it judges a token replaced;
        `document_ids` as `Encoder.forward` takes them (rows packed from several documents)."""
        h = self.encoder(input_ids, token_type_ids, attention_mask,
                         document_ids=document_ids).last_hidden_state
        return self.detector(h)


__all__ = ["IGNORE_INDEX", "MaskedLMHead", "NextSentenceHead", "SpanBoundaryHead", "SBO_FILE",
           "PretrainingModel", "ReplacedTokenHead", "ElectraModel", "generator_config"]
