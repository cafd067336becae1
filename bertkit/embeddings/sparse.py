"""SPLADE: a text as a sparse vector over the vocabulary, read off the masked-LM head.

Each token's masked-LM logits say which vocabulary entries it evokes; SPLADE-max keeps, per
entry, the strongest evocation over the text's tokens:

    w[v] = max over real tokens t of log(1 + relu(logits[t, v]))

so a text weighs the words it holds and the words it implies, most entries zero. Two texts'
similarity is the dot product of their vectors: an inverted index serves it.

Training (`bertkit finetune sparse`) ranks each query's passage above the batch's others (a
cross-entropy over dot products, `ranking_loss`) and keeps the vectors sparse with the FLOPS
regulariser (`flops`: the expected cost of a dot product in an inverted index, Paria et al.
2020), weighted apart for queries and documents and warmed up quadratically
(`regulariser_weight`), as sentence-transformers' SpladeLoss with its scheduler does.

The saved directory is sentence-transformers' SparseEncoder layout (`sparse_model_files`): the
encoder with its masked-LM head (`BertForMaskedLM`) and a SpladePooling module, max over
tokens, relu.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.files import UserError
from bertkit.model import hub
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.model.kind import SENTENCE_MODULES_FILE
from bertkit.runtime import reads_are_free

POOLING_DIR = "1_SpladePooling"
SENTENCE_CONFIG_FILE = "sentence_bert_config.json"
MODEL_TYPE_FILE = "config_sentence_transformers.json"
DEFAULT_QUERY_REG = 5e-5
"""The FLOPS weight of queries (sentence-transformers' SpladeLoss example, SPLADE v2's)."""
DEFAULT_DOC_REG = 3e-5
"""The FLOPS weight of documents (sentence-transformers' SpladeLoss example)."""
DEFAULT_REG_WARMUP = 1 / 3
"""The share of the steps over which the FLOPS weights grow to their full value
(sentence-transformers' SpladeRegularizerWeightSchedulerCallback)."""
LEXICAL_COSINE = 0.2
"""A new head's threshold (`lexical_start`): a vocabulary entry is active in a token's vector
where the cosine of its word embedding with the token's state passes it. At 0.2 an untrained
all-MiniLM-L6-v2 head keeps a few hundred entries a sentence (its words, their plurals and
near neighbours); at 0 it keeps nearly all 30,522 and ranks at random."""


# Pure tensor functions ---------------------------------------------------------------------------

def splade_pool(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T, V] masked-LM logits and their [B, T] mask (1 = a real token) -> [B, V]:
    max over real tokens of log(1 + relu(logit)). log1p(relu(.)) never decreases, so the max
    is taken over the raw logits first: one [B, T, V] tensor less, the same values and (but
    for exact ties) the same gradients. A row with no real token is zero."""
    keep = mask.bool().unsqueeze(-1)
    top = logits.masked_fill(~keep, float("-inf")).amax(1)
    return torch.log1p(torch.relu(top))


class _MaxLogits(torch.autograd.Function):
    """max over real tokens of `states @ weight.T + bias`: states [B, T, H], weight [V, H],
    bias [V], mask [B, T] bool -> [B, V], the same as the masked [B, T, V] logits' max.

    The forward builds the logits `rows` texts at a time, longest first (so that texts of a
    chunk have about the same length), up to their last real token, and keeps each entry's
    winning token; the backward reads only those: the gradient of the
    logits is one value per (text, entry), a sparse [B*T, V] matrix, so the head's two
    backward products cost B*V*H each where the dense ones cost B*T*V*H, and no [B, T, V]
    gradient is ever held."""

    @staticmethod
    def forward(ctx, states, weight, bias, mask, rows: int):
        B, T, _ = states.shape
        order = mask.sum(1).argsort(descending=True)  # [B]
        top, where = [], []
        for start in range(0, B, rows):
            chunk = order[start:start + rows]
            real = mask[chunk]
            used = int(real.any(0).nonzero().max()) + 1 if real.any() else 1  # padding after
            logits = F.linear(states[chunk, :used], weight, bias)  # [r, t, V]
            logits.masked_fill_(~real[:, :used, None], float("-inf"))
            value, index = logits.max(1)  # [r, V] each
            top.append(value)
            where.append(index)
        back = order.argsort()  # the batch's order again
        where = torch.cat(where)[back]
        ctx.save_for_backward(states, weight, where)
        ctx.dtypes = (states.dtype, weight.dtype, bias.dtype)
        return torch.cat(top)[back]

    @staticmethod
    def backward(ctx, grad):
        states, weight, where = ctx.saved_tensors
        B, T, H = states.shape
        V = weight.shape[0]
        grad = grad.float()
        text, entry = torch.nonzero(grad, as_tuple=True)  # relu's zeros stay out
        token = text * T + where[text, entry]
        picked = torch.sparse_coo_tensor(torch.stack([token, entry]), grad[text, entry],
                                         (B * T, V), check_invariants=False).coalesce()
        grad_states = torch.sparse.mm(picked, weight.float()).view(B, T, H)
        grad_weight = torch.sparse.mm(picked.t(), states.reshape(B * T, H).float())
        grad_bias = grad.sum(0)
        return (grad_states.to(ctx.dtypes[0]), grad_weight.to(ctx.dtypes[1]),
                grad_bias.to(ctx.dtypes[2]), None, None)


def splade_head_pool(states: torch.Tensor, head: MaskedLMHead, mask: torch.Tensor,
                     rows: int = 8) -> torch.Tensor:
    """`splade_pool(head(states), mask)` without the [B, T, V] logits' gradient: the
    vocabulary projection's max taken `rows` texts at a time, its backward sparse
    (`_MaxLogits`). The same values; the same gradients but for exact ties."""
    weight, bias = head.decoder()
    top = _MaxLogits.apply(head.transform(states), weight, bias, mask.bool(), rows)
    return torch.log1p(torch.relu(top))


def flops(vectors: torch.Tensor) -> torch.Tensor:
    """The FLOPS regulariser of a batch of [N, V] vectors: sum over the vocabulary of the
    squared mean absolute weight, what a dot product costs in an inverted index in
    expectation. Small when few entries are used, and each by few texts."""
    return (vectors.abs().mean(0) ** 2).sum()


def regulariser_weight(step: torch.Tensor | int, total_steps: int, warmup: float,
                       weight: float) -> torch.Tensor:
    """The FLOPS weight at 0-based optimisation `step`: `weight * (step / W) ** 2` over the
    first W = max(1, int(total_steps * warmup)) steps, then `weight` (sentence-transformers'
    quadratic scheduler). A tensor step stays on its device: no wait for a GPU."""
    if warmup <= 0 or total_steps <= 0:
        return torch.as_tensor(float(weight))
    span = max(1, int(total_steps * warmup))
    ratio = (torch.as_tensor(step, dtype=torch.float32) / span).clamp(max=1.0)
    return weight * ratio ** 2


def ranking_loss(queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """In-batch negatives over dot products: query i must pick document i among all N
    documents (`[B, V]` queries, `[N, V]` documents: the B positives first, then any hard
    negatives), a cross-entropy of the unscaled dot products (sentence-transformers'
    SparseMultipleNegativesRankingLoss, scale 1)."""
    if documents.shape[0] < queries.shape[0] or queries.shape[-1] != documents.shape[-1]:
        raise ValueError(f"queries {tuple(queries.shape)} need their positives first among "
                         f"documents {tuple(documents.shape)}")
    scores = queries.float() @ documents.float().T
    return F.cross_entropy(scores, torch.arange(queries.shape[0], device=queries.device))


def splade_loss(columns: list[torch.Tensor], query_weight: torch.Tensor | float,
                doc_weight: torch.Tensor | float) -> torch.Tensor:
    """SpladeLoss around the ranking loss: `columns` are the batch's [B, V] vectors (queries,
    positives, hard negatives...); the FLOPS of the queries and of every other column
    together, each times its weight, are added."""
    documents = torch.cat(columns[1:])
    return ranking_loss(columns[0], documents) + query_weight * flops(columns[0]) \
        + doc_weight * flops(documents)


def active_dims(vectors: torch.Tensor) -> float:
    """The mean count of non-zero entries per row of a [N, V] tensor (dense or sparse)."""
    if vectors.is_sparse:
        vectors = vectors.coalesce()
        return float((vectors.values() != 0).sum()) / max(1, vectors.shape[0])
    return float((vectors != 0).sum(1).float().mean())


def dot_products(queries: torch.Tensor, documents: torch.Tensor, block: int = 1024
                 ) -> torch.Tensor:
    """[Q, N] dot products of sparse [Q, V] queries with sparse [N, V] documents, `block`
    documents made dense at a time (a dev set's whole [N, V] would not fit)."""
    parts = [torch.sparse.mm(queries, documents.index_select(0, torch.arange(
        start, min(start + block, documents.shape[0]))).to_dense().T)
             for start in range(0, documents.shape[0], block)]
    return torch.cat(parts, dim=1)


# The model ---------------------------------------------------------------------------------------

class SpladeModel(nn.Module):
    """An encoder and its masked-LM head: token ids -> [B, V] SPLADE vectors.

    `steps` counts the training steps taken (`count_step`), which the regulariser's warm-up
    reads; a buffer, so that a checkpoint keeps it and a resumed run goes on where it was.
    With the encoder's speed paths on (`Encoder(fast=True)`, the default) and on the CPU the
    vectors come from `splade_head_pool`, whose backward is sparse; else from the plain logits
    (on a GPU the sparse backward would wait for the device to count its entries)."""

    def __init__(self, encoder: Encoder, mlm: MaskedLMHead):
        super().__init__()
        self.encoder, self.mlm = encoder, mlm
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.encoder(input_ids, token_type_ids, attention_mask).last_hidden_state
        if self.encoder.fast and reads_are_free(h):  # it reads which tokens are padding
            return splade_head_pool(h, self.mlm, attention_mask)
        return splade_pool(self.mlm(h), attention_mask)

    def count_step(self) -> torch.Tensor:
        """The 0-based step now, then counted."""
        now = self.steps.clone()
        with torch.no_grad():
            self.steps += 1
        return now


class _LanguageModel(nn.Module):
    """The weights a masked-LM directory holds (the encoder and its head, not the step count),
    in the names `hub.save_model` writes as `BertForMaskedLM`. Shares the model's tensors."""

    def __init__(self, model: SpladeModel):
        super().__init__()
        self.encoder, self.mlm = model.encoder, model.mlm


def new_model(encoder: Encoder) -> SpladeModel:
    """The encoder with a masked-LM head tied to its word embeddings (not initialised)."""
    return SpladeModel(encoder, MaskedLMHead(encoder.config, encoder.embeddings.word))


def head_weights(model_dir: str | Path) -> dict[str, torch.Tensor] | None:
    """The masked-LM head of a directory in bertkit's names (`dense.weight`, ..., `bias`);
    None when it has none (a sentence model such as all-MiniLM-L6-v2, a bare BertModel)."""
    cfg = hub.load_config(model_dir)
    _, rest = hub.from_hf_state_dict(hub.load_weights(model_dir), cfg.architecture)
    head = {k[len("mlm."):]: v for k, v in rest.items() if k.startswith("mlm.")}
    return head or None


def lexical_start(head: MaskedLMHead, cosine: float = LEXICAL_COSINE) -> None:
    """Start a new head as a lexical matcher: the transform the identity (the norm of the
    token's activated state, of length sqrt(H)) and each entry's bias -cosine * sqrt(H) *
    |its word embedding|, so that an entry's logit is positive exactly where its embedding's
    cosine with the state passes `cosine`. A sentence encoder's last states still point at
    their own tokens (all-MiniLM-L6-v2's top entry is the token itself about half the time),
    so the untrained vectors hold a text's words and their neighbours, where a random
    transform gives noise over the whole vocabulary. A head whose transform changes the
    width (ELECTRA's generator) keeps its random transform and gets the bias alone."""
    weight, _ = head.decoder()
    width = head.dense.out_features
    with torch.no_grad():
        if head.dense.in_features == width:
            head.dense.weight.copy_(torch.eye(width))
        if head.dense.bias is not None:
            head.dense.bias.zero_()
        head.norm.reset_parameters()
        head.bias.copy_(-cosine * width ** 0.5 * weight.float().norm(dim=1))


def load_head(model: SpladeModel, model_dir: str | Path) -> bool:
    """`model`'s head from `model_dir`'s masked-LM head; False when the directory has none:
    then the head is tied to the word embeddings and starts as a lexical matcher
    (`lexical_start`), said in one warning."""
    weights = head_weights(model_dir)
    if weights is None:
        lexical_start(model.mlm)
        warnings.warn(f"{model_dir} has no masked-LM head: the vocabulary projection is its "
                      f"word embeddings, with a new transform and bias that start by reading "
                      f"each token back as its own word and its neighbours", stacklevel=2)
        return False
    own = model.mlm.state_dict()
    if set(weights) != set(own) or any(own[k].shape != v.shape for k, v in weights.items()):
        raise UserError(f"{model_dir}: its masked-LM head ({', '.join(sorted(weights))}) does "
                        f"not fit its encoder's")
    model.mlm.load_state_dict(weights)
    return True


# The directory -----------------------------------------------------------------------------------

def sparse_model_files(max_seq_length: int, lowercase: bool = False) -> dict[str, bytes]:
    """The files that make a masked-LM directory a sentence-transformers SparseEncoder: the
    layout SparseEncoder has always read (MLMTransformer -> SpladePooling, max, relu), which
    versions 5 and 6 both load."""
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
               {"idx": 1, "name": "1", "path": POOLING_DIR,
                "type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]
    files = {SENTENCE_MODULES_FILE: modules,
             f"{POOLING_DIR}/config.json": {"pooling_strategy": "max",
                                            "activation_function": "relu"},
             SENTENCE_CONFIG_FILE: {"max_seq_length": max_seq_length,
                                    "do_lower_case": lowercase},
             MODEL_TYPE_FILE: {"model_type": "SparseEncoder",
                               "prompts": {"query": "", "document": ""},
                               "default_prompt_name": None, "similarity_fn_name": "dot"}}
    return {name: (json.dumps(obj, indent=2) + "\n").encode("utf-8")
            for name, obj in files.items()}


def save_sparse_model(model: SpladeModel, path: str | Path, tokenizer, max_seq_length: int
                      ) -> Path:
    """`model` as a SparseEncoder directory, complete or not at all."""
    modern = model.encoder.config.architecture == "modern"
    return hub.save_model(_LanguageModel(model), path, tokenizer=tokenizer,
                          architectures=["ModernBertForMaskedLM" if modern else "BertForMaskedLM"],
                          extra_files=sparse_model_files(max_seq_length))


__all__ = ["splade_pool", "splade_head_pool", "flops", "regulariser_weight", "ranking_loss",
           "splade_loss", "active_dims", "dot_products", "SpladeModel", "new_model",
           "head_weights", "lexical_start", "load_head", "sparse_model_files",
           "save_sparse_model", "DEFAULT_QUERY_REG", "DEFAULT_DOC_REG", "DEFAULT_REG_WARMUP",
           "LEXICAL_COSINE", "POOLING_DIR"]
