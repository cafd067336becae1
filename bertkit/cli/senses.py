"""Commands on word senses: `wsd split|train|predict|evaluate` (sense embeddings),
`static train|neighbors|similarity|contexts|analogy|plot` (word2vec, the static baseline),
`static distill` (static vectors from a sentence encoder) and `similarity` (one word's
contextual vectors in two texts, layer by layer). Their settings are the library's WsdOptions,
WsdRun (bertkit.senses), SkipGramConfig (bertkit.road.word2vec) and DistillOptions
(bertkit.embeddings.distill_static), and the options of the commands that only read files and
print, here."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bertkit.cli.options import Command, command_line
from bertkit.files import UserError

WSD_OPTIONS = "bertkit.senses.wsd:WsdOptions"
WSD_RUN = "bertkit.senses.data:WsdRun"


@dataclass(kw_only=True)
class WsdSplitFiles:
    input: Path
    """Sense-labelled JSON lines."""
    train_out: Path
    """Output JSON lines: the training part."""
    test_out: Path
    """Output JSON lines: the held-out part."""


def run_wsd_split(files: WsdSplitFiles, settings) -> int:
    from bertkit.senses.data import read_examples, write_examples

    try:
        train, test = settings.split(read_examples(files.input))
    except ValueError as e:
        raise UserError(str(e)) from None
    write_examples(train, files.train_out)
    write_examples(test, files.test_out)
    print(f"{files.train_out}: {len(train)} examples; {files.test_out}: {len(test)} examples")
    return 0


@dataclass(kw_only=True)
class WsdTrainFiles:
    model: Path = field(metadata={"model": True})
    """BERT directory or `bertkit static` directory."""
    input: Path
    """Sense-labelled JSON lines (lemma, pos, synset, sense_rank, gloss, text, start, end)."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory."""


def run_wsd_train(files: WsdTrainFiles, run, options) -> int:
    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import train_wsd

    examples = read_examples(files.input)
    inventory = train_wsd(examples, run.source(files.model, options), options,
                          model_name=str(Path(files.model).resolve()), progress=not run.quiet)
    inventory.save(files.out)
    lemmas = len({s.lemma for s in inventory.senses})
    weights = (f" (gloss weight {inventory.options.gloss_weight}, prior weight "
               f"{inventory.options.prior_weight})" if options.method == "gloss-prior" else "")
    print(f"{files.out}: {len(inventory.senses)} senses of {lemmas} lemmas from "
          f"{len(examples)} examples, method {options.method}{weights}")
    return 0


@dataclass(kw_only=True)
class WsdPredictOptions:
    wsd: Path
    """Word-sense disambiguation (WSD) directory from `bertkit wsd train`."""
    model: Path | None = field(default=None, metadata={"model": True})
    """BERT directory or `bertkit static` directory; none: the one the senses were built
    from."""
    input: Path
    """JSON lines with lemma, text, start, end (pos when the senses were built with it)."""
    out: Path | None = None
    """Output JSON lines; none: stdout."""
    method: Literal["gloss-prior", "1nn", "mfs"] | None = None
    """Score with another method than the one trained; none: the trained one."""


def run_wsd_predict(opts: WsdPredictOptions, run) -> int:
    from bertkit.files import atomic_file
    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import SenseInventory, predict

    inventory = SenseInventory.load(opts.wsd)
    examples = read_examples(opts.input, labelled=False)
    source = run.source(opts.model or inventory.model, inventory.options)
    predictions = predict(inventory, examples, source, opts.method)
    glosses = {s.synset: s.gloss for s in inventory.senses}

    def write(f) -> None:
        for e, p in zip(examples, predictions):
            row = {"lemma": e.lemma, "pos": e.pos, "text": e.text, "start": e.start,
                   "end": e.end, "predicted": p.synset, "predicted_gloss": glosses.get(p.synset),
                   "score": p.score, "candidates": p.candidates, "fallback": p.fallback}
            if e.synset is not None:
                row["synset"] = e.synset
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

    if opts.out:
        with atomic_file(opts.out) as f:
            write(f)
        print(f"{opts.out}: {len(predictions)} predictions", file=sys.stderr)
    else:
        write(sys.stdout)
    return 0


@dataclass(kw_only=True)
class WsdEvaluateOptions:
    wsd: Path
    """Word-sense disambiguation (WSD) directory from `bertkit wsd train`."""
    model: Path | None = field(default=None, metadata={"model": True})
    """BERT directory or `bertkit static` directory; none: the one the senses were built
    from."""
    input: Path
    """Sense-labelled JSON lines."""
    json: bool = False
    """One JSON object."""
    method: Literal["gloss-prior", "1nn", "mfs"] | None = None
    """Score with another method than the one trained (1nn works on gloss-prior senses: same
    sense embeddings); none: the trained one."""


def run_wsd_evaluate(opts: WsdEvaluateOptions, run) -> int:
    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import SenseInventory, evaluate

    inventory = SenseInventory.load(opts.wsd)
    examples = read_examples(opts.input)
    source = run.source(opts.model or inventory.model, inventory.options)
    report = evaluate(inventory, examples, source, opts.method)
    print(json.dumps(report.to_json()) if opts.json else report.summary())
    return 0


@dataclass(kw_only=True)
class StaticTrainFiles:
    input: list[Path]
    """UTF-8 text files, a paragraph a line; or JSONL, CSV, TSV, Parquet, `datasets`
    directories (their --text-field), compressed or not; folders and globs (quoted)."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, that holds the
    text."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory."""
    tokenizer: Path | None = field(default=None, metadata={"model": True})
    """Tokenizer or model directory: train on its pieces; none: whole lowercase words."""
    quiet: bool = False
    """No progress on stderr."""


def run_static_train(files: StaticTrainFiles, config) -> int:
    from bertkit.road.word2vec import train_static_vectors
    from bertkit.training.settings import run_settings

    tokenizer = None
    if files.tokenizer:
        from bertkit.text.tokenizer import Tokenizer
        tokenizer = Tokenizer.load(files.tokenizer)
    model = train_static_vectors(files.input, config, tokenizer, progress=not files.quiet,
                                 text_field=files.text_field)
    static_train = next(c for c in COMMANDS if c.name == "static train")
    model.save(files.out, run_settings({"files": files, "config": config}, device="cpu",
                                       precision="fp32",
                                       command=command_line(static_train, [files, config])))
    print(f"{files.out}: {len(model.tokens):,} {model.tokenization.kind} x {model.dim} "
          f"dimensions, {model.stats['pairs']:,} pairs in {model.stats['seconds']:.0f}s, "
          f"final loss {model.stats['final_loss']:.3f}")
    return 0


def run_static_distill(options) -> int:
    from bertkit.embeddings.distill_static import distill_static

    distill = next(c for c in COMMANDS if c.name == "static distill")
    result = distill_static(options, command_line(distill, [options]))
    print(f"{result.path}: {result.pieces:,} of {result.vocab_size:,} pieces x {result.dims} "
          f"dimensions ({result.explained:.1%} of the teacher's variance)")
    return 0


@dataclass(kw_only=True)
class StaticNeighborsOptions:
    model: Path
    """Directory from `bertkit static train`."""
    words: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "WORD"})
    """Words whose neighbours are listed."""
    top_k: int = 10
    """Neighbours per word."""


def run_static_neighbors(opts: StaticNeighborsOptions) -> int:
    from bertkit.embeddings.static import StaticVectors

    if not opts.words:
        raise UserError("no words: give WORD arguments")
    model = StaticVectors.load(opts.model)
    for word in opts.words:
        pairs = model.neighbors(word, opts.top_k)
        print(f"{word}: " + ", ".join(f"{w} {c:.3f}" for w, c in pairs))
    return 0


@dataclass(kw_only=True)
class StaticSimilarityOptions:
    model: Path
    """Directory from `bertkit static train`."""
    a: str = field(metadata={"positional": True, "metavar": "WORD_A"})
    """The first word."""
    b: str = field(metadata={"positional": True, "metavar": "WORD_B"})
    """The second word."""


def run_static_similarity(opts: StaticSimilarityOptions) -> int:
    from bertkit.embeddings.static import StaticVectors

    print(f"{StaticVectors.load(opts.model).similarity(opts.a, opts.b):.4f}")
    return 0


@dataclass(kw_only=True)
class StaticContextsOptions:
    model: Path
    """Directory from `bertkit static train`."""
    word: str
    """The word compared across the texts."""
    texts: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "TEXT"})
    """Texts that hold the word."""
    bert: Path | None = field(default=None, metadata={"model": True})
    """BERT directory to compare with."""
    standardizer: Path | None = None
    """Also show the contextual vectors standardized with this file (from
    `bertkit anisotropy --fit-standardizer`)."""
    device: str = "auto"
    """Where the BERT model runs: auto (CUDA when there is one, else the CPU), cpu, cuda,
    cuda:1, ..."""


def run_static_contexts(opts: StaticContextsOptions) -> int:
    from bertkit.embeddings.anisotropy import cosine_matrix
    from bertkit.embeddings.context_similarity import find_word
    from bertkit.embeddings.static import StaticVectors

    if not opts.texts:
        raise UserError("no texts: give TEXT arguments")
    spans = [find_word(t, opts.word) for t in opts.texts]
    tables = [("static (one vector per word type)",
               StaticVectors.load(opts.model).instance_vectors(opts.texts, spans))]
    if opts.bert:
        from bertkit.embeddings.embedder import Embedder
        embedder = Embedder.load(opts.bert, device=opts.device)
        tables.append(("contextual (last four layers, mean over pieces)",
                       embedder.word_vectors(opts.texts, spans)))
        if opts.standardizer:
            from bertkit.embeddings.standardize import Standardizer
            embedder.standardizer = Standardizer.load(opts.standardizer)
            tables.append(("contextual, standardized",
                           embedder.word_vectors(opts.texts, spans, standardize=True)))
    for i, text in enumerate(opts.texts, 1):
        print(f"[{i}] {text}")
    for title, vectors in tables:
        cos = cosine_matrix(vectors)
        print(f"\ncosine of {opts.word!r} between contexts, {title}:")
        print("     " + "".join(f"{f'[{j}]':>8}" for j in range(1, len(cos) + 1)))
        for i, row in enumerate(cos, 1):
            print(f"{f'[{i}]':>5}" + "".join(f"{c:8.3f}" for c in row))
    return 0


@dataclass(kw_only=True)
class ContextSimilarityOptions:
    """`bertkit similarity`: one word's contextual vectors in two texts, layer by layer."""

    text1: str = field(metadata={"positional": True, "metavar": "TEXT1"})
    """The first text."""
    span1: str = field(metadata={"positional": True, "metavar": "SPAN1"})
    """The word in TEXT1: the word itself (its first occurrence) or START:END characters."""
    text2: str = field(metadata={"positional": True, "metavar": "TEXT2"})
    """The second text."""
    span2: str = field(metadata={"positional": True, "metavar": "SPAN2"})
    """The word in TEXT2, as SPAN1."""
    model: Path = field(metadata={"model": True})
    """BERT directory (bertkit or Hugging Face)."""
    device: str = "auto"
    """Where the model runs: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:1,
    ..."""
    json: bool = False
    """One JSON object: {"layers": [cosine per layer, 0 = embeddings]}."""


@dataclass(kw_only=True)
class AnalogyOptions:
    """`bertkit static analogy`: a - b + c, or the accuracy on a file of analogies."""

    vectors: Path
    """Directory from `bertkit static train`."""
    words: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "WORD"})
    """A B C: the words nearest to A - B + C (king man woman -> queen)."""
    input: Path | None = None
    """Analogy questions instead, `a b c d` a line (d = a - b + c): prints the accuracy."""
    top_k: int = 1
    """Answers shown for A B C."""
    json: bool = False
    """One JSON object."""


@dataclass(kw_only=True)
class PlotWordsOptions:
    """`bertkit static plot`: chosen words on the plane of their first two principal
    components."""

    vectors: Path
    """Directory from `bertkit static train`."""
    words: list[str] = field(default_factory=list, metadata={"positional": True,
                                                             "metavar": "WORD"})
    """The words to place (at least three)."""
    out: Path = field(metadata={"output": True})
    """PNG file to write."""
    title: str | None = None
    """Title of the picture; none: the number of words and the width of the vectors."""


def run_static_analogy(opts: AnalogyOptions) -> int:
    from bertkit.embeddings.static import StaticVectors
    from bertkit.road.analogies import analogy_accuracy, read_analogies

    vectors = StaticVectors.load(opts.vectors)
    if opts.input is not None:
        if opts.words:
            raise UserError("give either WORD arguments (A B C) or --input, not both")
        report = analogy_accuracy(vectors, read_analogies(opts.input))
        if opts.json:
            print(json.dumps(report))
        else:
            print(f"{opts.input}: {report['correct']}/{report['answered']} correct "
                  f"(accuracy {report['accuracy']:.4f}), {report['skipped']} skipped "
                  f"(a word out of the vocabulary)")
        return 0
    if len(opts.words) != 3:
        raise UserError(f"give three words A B C (the answer is nearest to A - B + C), "
                        f"got {len(opts.words)}")
    answers = vectors.analogy(*opts.words, k=opts.top_k)
    if opts.json:
        print(json.dumps({"question": opts.words, "answers": answers}))
    else:
        a, b, c = opts.words
        print(f"{a} - {b} + {c} = " + ", ".join(f"{w} {s:.3f}" for w, s in answers))
    return 0


def run_static_plot(opts: PlotWordsOptions) -> int:
    from bertkit.embeddings.static import StaticVectors
    from bertkit.road.analogies import plot_words

    plot_words(StaticVectors.load(opts.vectors), opts.words, opts.out, opts.title)
    print(f"{opts.out}: {len(opts.words)} words")
    return 0


def run_similarity(opts: ContextSimilarityOptions) -> int:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.context_similarity import context_similarity, parse_span

    span1, span2 = parse_span(opts.text1, opts.span1), parse_span(opts.text2, opts.span2)
    embedder = Embedder.load(opts.model, device=opts.device)
    cosines = context_similarity(embedder, opts.text1, span1, opts.text2, span2)
    if opts.json:
        print(json.dumps({"layers": cosines}))
        return 0
    print(f"[1] {opts.text1}  ({opts.text1[span1[0]:span1[1]]!r})")
    print(f"[2] {opts.text2}  ({opts.text2[span2[0]:span2[1]]!r})")
    print("layer  cosine")
    for layer, c in enumerate(cosines):
        print(f"{'emb' if layer == 0 else layer:>5}  {c:.4f}")
    return 0


COMMANDS = (
    Command("wsd split", run_wsd_split, (WsdSplitFiles, "bertkit.senses.data:SplitSettings"),
            help="reproducible train/test split of sense-labelled data",
            description="For each sense, one instance drawn at random stays in training and "
                        "each other instance goes to the test side with probability "
                        "--fraction: every test sense has training instances."),
    Command("wsd train", run_wsd_train, (WsdTrainFiles, WSD_RUN, WSD_OPTIONS),
            help="sense embeddings from sense-labelled examples",
            description="Each sense's embedding is the mean vector of its training instances. "
                        "Methods: gloss-prior (nearest sense embedding + gloss similarity + log "
                        "sense-frequency prior, weights tuned by leave-one-out on the training "
                        "data) or 1nn (the nearest sense embedding alone)."),
    Command("wsd predict", run_wsd_predict, (WsdPredictOptions, WSD_RUN),
            help="label examples with senses (JSON lines out)"),
    Command("wsd evaluate", run_wsd_evaluate, (WsdEvaluateOptions, WSD_RUN),
            help="accuracy against the most-frequent-sense baseline"),
    Command("static train", run_static_train,
            (StaticTrainFiles, "bertkit.road.word2vec:SkipGramConfig"),
            help="train word2vec vectors (skip-gram or CBOW) on text files",
            description="Skip-gram or CBOW, with negative sampling (K negatives from "
                        "unigram^0.75) or the full softmax (small vocabularies); window, "
                        "frequent-word subsampling. Tokens are lowercase words, or a bertkit "
                        "tokenizer's pieces with --tokenizer."),
    Command("static distill", run_static_distill,
            ("bertkit.embeddings.distill_static:DistillOptions",),
            help="static sentence vectors from a sentence encoder, as model2vec distils them",
            description="Each vocabulary entry through the teacher alone ([CLS] piece [SEP]), "
                        "PCA to --dims, weights by rank as Zipf and SIF have them; no data. "
                        "A sentence's vector is the mean of its pieces'; embed, evaluate and "
                        "serve take the directory, and so do model2vec and "
                        "sentence-transformers."),
    Command("static neighbors", run_static_neighbors, (StaticNeighborsOptions,),
            help="nearest words by cosine"),
    Command("static similarity", run_static_similarity, (StaticSimilarityOptions,),
            help="cosine between two words"),
    Command("static contexts", run_static_contexts, (StaticContextsOptions,),
            help="one word in several texts: its static vector is the same everywhere, "
                 "contextual vectors are not",
            description="Cosines between the vectors of WORD in each TEXT: static (always "
                        "exactly 1) and, with --bert, contextual."),
    Command("static analogy", run_static_analogy, (AnalogyOptions,),
            help="a - b + c: the nearest words by cosine, the inputs left out",
            description="With A B C, the words nearest to A - B + C (king man woman -> "
                        "queen); with --input, the accuracy on a file of `a b c d` lines."),
    Command("static plot", run_static_plot, (PlotWordsOptions,),
            help="chosen words on their first two principal components (PNG)"),
    Command("similarity", run_similarity, (ContextSimilarityOptions,),
            help="cosine of one word's contextual vectors in two texts, per layer",
            description="The 'bank' test of a contextual model (a river bank, a savings bank): "
                        "the vector of the word at SPAN1 in TEXT1 "
                        "against the word at SPAN2 in TEXT2, at every layer of a BERT model "
                        "(0 = embeddings). A span is the word itself or START:END."),
)
