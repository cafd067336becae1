"""The run of `bertkit.road.seq2seq` (`bertkit road seq2seq`): each variant (plain, attention,
copy) trained with the shared loop for a time budget, the greedy BLEU of a dev sample at each
evaluation (curves.png), BLEU and chrF of greedy and beam decoding beside the copy-the-source
baseline, and where one output token looked (`attention_map`); texts translated, greedy or by
beam search (`translate_with`, `translate` with a saved model), and `translate_file`, which
translates a file and scores it when it has targets.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertkit.config import TrainConfig
from bertkit.figures import draw_or_skip, new_figure, save_png
from bertkit.files import UserError, atomic_file, check_not_input, read_jsonl, read_lines
from bertkit.progress import Progress
from bertkit.road.bleu import corpus_bleu, corpus_chrf
from bertkit.road.seq2seq import (Seq2Seq, Seq2SeqConfig, beam_decode, greedy_decode,
                                  load_seq2seq, save_seq2seq, seq2seq_loss)
from bertkit.road.seq2seq_data import (PairBatches, detokenize, encode_texts, pad_sources,
                                       read_pairs)
from bertkit.runtime import resolve_device
from bertkit.text.tokenizer import CLS, PAD, SEP, Tokenizer
from bertkit.text.vocab import train_tokenizer
from bertkit.training.loop import train
from bertkit.training.settings import run_settings


# Translating ----------------------------------------------------------------------------------

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
