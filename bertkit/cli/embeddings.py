"""The `bertkit` commands on contextual embeddings and their analysis: embed, anisotropy,
plot, wsd, static. Registered by `cli.build_parser`; like `cli`, nothing in the library imports
this module, and library imports happen inside each command.
"""
from __future__ import annotations

import sys

from bertkit.files import UserError

def _run_embed(args) -> int:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.files import embed_file

    layers = "last4" if args.last4 else (args.layers if args.layers is not None else args.layer)
    embedder = Embedder.load(args.model, precision=args.precision, max_length=args.max_length,
                             workers=args.workers)
    if args.standardizer:
        from bertkit.embeddings.standardize import Standardizer
        embedder.standardizer = Standardizer.load(args.standardizer)
    try:
        result = embed_file(embedder, args.input, args.out, words=args.words, layers=layers,
                            combine=args.combine, pool=args.pool, subword_pool=args.subword_pool,
                            normalize=args.normalize,
                            standardize=args.standardize or bool(args.standardizer),
                            batch_size=args.batch_size, progress=not args.quiet)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(f"{args.out}: {result.rows} rows from {result.lines} lines "
          f"(index: {result.index_path})")
    return 0


def _run_anisotropy(args) -> int:
    import json

    from bertkit.embeddings.anisotropy import anisotropy_report, sample_lines
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.standardize import STANDARDIZER_FILE

    if args.fit_standardizer and args.standardizer:
        raise UserError("--fit-standardizer fits a new standardizer; --standardizer applies an "
                        "existing one: give one of them")
    embedder = Embedder.load(args.model, precision=args.precision, max_length=args.max_length,
                             workers=args.workers)
    texts = sample_lines(args.corpus, args.sentences, seed=args.seed)
    given = None
    if args.standardizer:
        from bertkit.embeddings.standardize import Standardizer
        given = Standardizer.load(args.standardizer)
    try:
        report, standardizer = anisotropy_report(
            embedder, texts, layers=args.layers, standardizer=given, rogue_k=args.rogue,
            min_count=args.min_count,
            batch_size=args.batch_size, model_name=str(args.model), corpus_name=str(args.corpus),
            progress=not args.quiet)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(f"{report.words} words in {report.sentences} lines of {args.corpus}; "
              f"self-similarity over {report.word_types} word types seen "
              f"{args.min_count}+ times; standardized with the statistics of "
              f"{report.standardized_with}")
        print(report.table())
        print()
        print(report.rogue_table())
    if args.plot:
        from bertkit.embeddings.plots import plot_anisotropy
        print(f"plot: {plot_anisotropy(report, args.plot).path}", file=sys.stderr)
    if args.fit_standardizer:
        from pathlib import Path
        where = standardizer.save(args.standardizer_out or Path(args.model) / STANDARDIZER_FILE)
        print(f"standardizer: {where}", file=sys.stderr)
    return 0


def _run_plot_senses(args) -> int:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.plots import plot_senses, read_sense_instances

    instances = read_sense_instances(args.data, args.lemma, args.max_per_sense, args.min_per_sense)
    embedder = Embedder.load(args.model, precision=args.precision)
    if args.standardizer:
        from bertkit.embeddings.standardize import Standardizer
        embedder.standardizer = Standardizer.load(args.standardizer)
    print(plot_senses(embedder, instances, args.out, layers="last4" if args.last4 else args.layer,
                      method=args.method, standardize=args.standardize or bool(args.standardizer),
                      title_word=args.lemma).path)
    return 0


def _run_plot_attention(args) -> int:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.embeddings.plots import plot_attention

    embedder = Embedder.load(args.model)
    print(plot_attention(embedder, args.text, args.out, layer=args.layer, head=args.head).path)
    return 0


def _model_options(p, batch: bool = True) -> None:
    p.add_argument("--model", required=True, help="bertkit or Hugging Face BERT directory")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="fp32 (exact) or bf16 autocast (about 2x faster on CPUs with AVX512-BF16)")
    p.add_argument("--max-length", type=int, default=None,
                   help="cut inputs to this many tokens (default: the model's maximum)")
    if batch:
        p.add_argument("--batch-size", type=int, default=32)
        p.add_argument("--workers", type=int, default=None,
                       help="batches computed at once, one core each (default: torch's "
                       "thread count); 1 = one batch at a time on all threads")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_embedding_commands(sub) -> None:
    p = sub.add_parser("embed", help="contextual vectors of each line (or word) into a .npy file",
                       description="One float32 row per input line (a tab separates a pair), "
                       "or with --words one row per word, written to --out with an index "
                       "OUT.index.jsonl saying which line / word each row is.")
    _model_options(p)
    p.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    p.add_argument("--out", required=True, help="output .npy file")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--layer", type=int, default=-1,
                       help="hidden layer: 0 = embeddings, -1 = last block (default)")
    which.add_argument("--last4", action="store_true", help="combine the last four layers")
    which.add_argument("--layers", help="comma-separated layers to combine, or 'all'")
    p.add_argument("--combine", choices=("mean", "sum", "concat"), default="mean",
                   help="how several layers are combined (default mean)")
    p.add_argument("--pool", choices=("cls", "mean"), default="mean",
                   help="sentence vector: [CLS] or mean over the tokens (default mean)")
    p.add_argument("--words", action="store_true", help="one row per word instead of per line")
    p.add_argument("--subword-pool", choices=("mean", "first"), default="mean",
                   help="word vector from its pieces: their mean or the first (default mean)")
    p.add_argument("--normalize", action="store_true", help="scale rows to unit length")
    p.add_argument("--standardize", action="store_true",
                   help="z-score each layer with the model's fitted standardizer")
    p.add_argument("--standardizer", help="standardizer file (implies --standardize)")
    p.set_defaults(run=_run_embed)

    p = sub.add_parser("anisotropy", help="expected cosine, rogue dimensions and "
                       "standardization, per layer, on a corpus",
                       description="Embed a sample of corpus lines and report, per layer, the "
                       "expected cosine between word vectors of different lines (anisotropy), "
                       "self-similarity, intra-sentence similarity and the rogue dimensions, "
                       "before and after standardization.")
    _model_options(p)
    p.add_argument("--corpus", required=True, help="UTF-8 text, one sentence or paragraph a line")
    p.add_argument("--layers", default="all", help="'all' (default), 'last4' or e.g. 0,3,6")
    p.add_argument("--sentences", type=int, default=1000,
                   help="lines sampled from the corpus (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rogue", type=int, default=3, help="rogue dimensions listed per layer")
    p.add_argument("--min-count", type=int, default=5,
                   help="instances a word needs for self-similarity (default 5)")
    p.add_argument("--plot", help="PNG of anisotropy per layer, before and after")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument("--standardizer",
                   help="standardize with this fitted file (e.g. from another corpus) instead "
                   "of the statistics of the sample itself")
    p.add_argument("--fit-standardizer", action="store_true",
                   help="save the corpus mean/std for `embed --standardize`")
    p.add_argument("--standardizer-out",
                   help="where to save it (default MODEL/standardize.safetensors)")
    p.set_defaults(run=_run_anisotropy)

    p = sub.add_parser("plot", help="pictures: word senses, attention")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    q = kinds.add_parser("senses", help="2-D projection of one word's vectors, coloured by sense")
    _model_options(q, batch=False)
    q.add_argument("--data", required=True, help="sense-labelled JSON lines (text, start, end, "
                   "lemma, synset or sense, optional gloss)")
    q.add_argument("--lemma", required=True, help="the word to show")
    q.add_argument("--method", choices=("pca", "umap"), default="pca",
                   help="projection: PCA (default) or UMAP (needs umap-learn installed)")
    layer = q.add_mutually_exclusive_group()
    layer.add_argument("--layer", type=int, default=-1)
    layer.add_argument("--last4", action="store_true")
    q.add_argument("--standardize", action="store_true",
                   help="z-score with the model's fitted standardizer first")
    q.add_argument("--standardizer", help="standardizer file (implies --standardize)")
    q.add_argument("--max-per-sense", type=int, default=50)
    q.add_argument("--min-per-sense", type=int, default=1,
                   help="leave out senses with fewer instances")
    q.add_argument("--out", required=True, help="output PNG")
    q.set_defaults(run=_run_plot_senses)
    q = kinds.add_parser("attention", help="attention heatmap of one sentence (layer, head)")
    q.add_argument("--model", required=True)
    q.add_argument("--text", required=True)
    q.add_argument("--layer", type=int, default=-1, help="block 1..L or -1 for the last")
    q.add_argument("--head", type=int, default=None,
                   help="head 0..A-1 (default: all heads in a grid)")
    q.add_argument("--out", required=True, help="output PNG")
    q.set_defaults(run=_run_plot_attention)

    _add_wsd_commands(sub)
    _add_static_commands(sub)


# WSD and the static baseline ------------------------------------------------------------------

def _wsd_source(args, model: str, options):
    from bertkit.senses.data import load_source

    return load_source(model, layers=options.layers, subword_pool=options.subword_pool,
                       window=options.window, batch_size=args.batch_size,
                       progress=not args.quiet)


def _run_wsd_split(args) -> int:
    from bertkit.senses.data import read_examples, split_examples, write_examples

    try:
        train, test = split_examples(read_examples(args.data), args.fraction, args.seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    write_examples(train, args.train)
    write_examples(test, args.test)
    print(f"{args.train}: {len(train)} examples; {args.test}: {len(test)} examples")
    return 0


def _run_wsd_train(args) -> int:
    from pathlib import Path

    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import WsdOptions, train_wsd

    options = WsdOptions(method=args.method, standardize=args.standardize,
                         use_pos=not args.ignore_pos, layers=args.layers,
                         subword_pool=args.subword_pool, window=args.window,
                         gloss_weight=args.gloss_weight, prior_weight=args.prior_weight)
    examples = read_examples(args.data)
    inventory = train_wsd(examples, _wsd_source(args, args.model, options), options,
                          model_name=str(Path(args.model).resolve()), progress=not args.quiet)
    inventory.save(args.out)
    lemmas = len({s.lemma for s in inventory.senses})
    weights = (f" (gloss weight {inventory.options.gloss_weight}, prior weight "
               f"{inventory.options.prior_weight})" if args.method == "gloss-prior" else "")
    print(f"{args.out}: {len(inventory.senses)} senses of {lemmas} lemmas from "
          f"{len(examples)} examples, method {args.method}{weights}")
    return 0


def _run_wsd_predict(args) -> int:
    import json

    from bertkit.files import atomic_file
    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import SenseInventory, predict

    inventory = SenseInventory.load(args.wsd)
    examples = read_examples(args.data, labelled=False)
    source = _wsd_source(args, args.model or inventory.model, inventory.options)
    predictions = predict(inventory, examples, source, args.method)
    glosses = {s.synset: s.gloss for s in inventory.senses}

    def write(f) -> None:
        for e, p in zip(examples, predictions):
            row = {"lemma": e.lemma, "pos": e.pos, "text": e.text, "start": e.start,
                   "end": e.end, "predicted": p.synset, "predicted_gloss": glosses.get(p.synset),
                   "score": p.score, "candidates": p.candidates, "fallback": p.fallback}
            if e.synset is not None:
                row["synset"] = e.synset
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

    if args.out:
        with atomic_file(args.out) as f:
            write(f)
        print(f"{args.out}: {len(predictions)} predictions", file=sys.stderr)
    else:
        write(sys.stdout)
    return 0


def _run_wsd_evaluate(args) -> int:
    import json

    from bertkit.senses.data import read_examples
    from bertkit.senses.wsd import SenseInventory, evaluate

    inventory = SenseInventory.load(args.wsd)
    examples = read_examples(args.data)
    source = _wsd_source(args, args.model or inventory.model, inventory.options)
    report = evaluate(inventory, examples, source, args.method)
    print(json.dumps(report.to_json()) if args.json else report.summary())
    return 0


def _add_wsd_commands(sub) -> None:
    p = sub.add_parser("wsd", help="word-sense disambiguation with sense embeddings: split, "
                       "train, predict, evaluate")
    kinds = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(q, model_required: bool) -> None:
        q.add_argument("--model", required=model_required,
                       help="BERT directory or `bertkit static` directory" +
                       ("" if model_required else " (default: the one the senses were built "
                        "from)"))
        q.add_argument("--batch-size", type=int, default=32)
        q.add_argument("--quiet", action="store_true", help="no progress on stderr")

    q = kinds.add_parser("split", help="reproducible train/test split of sense-labelled data",
                         description="For each sense, one instance drawn at random stays in "
                         "training and each other instance goes to the test side with "
                         "probability --fraction: every test sense has training instances.")
    q.add_argument("--data", required=True, help="sense-labelled JSON lines")
    q.add_argument("--fraction", type=float, default=0.5,
                   help="chance that a non-reserved instance is held out (default 0.5)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--train", required=True, help="output JSON lines: training part")
    q.add_argument("--test", required=True, help="output JSON lines: held-out part")
    q.set_defaults(run=_run_wsd_split)

    q = kinds.add_parser("train", help="sense embeddings from sense-labelled examples",
                         description="Each sense's embedding is the mean vector of its training "
                         "instances. Methods: gloss-prior (default: nearest sense embedding + "
                         "gloss similarity + log sense-frequency prior, weights tuned by "
                         "leave-one-out on the training data) or 1nn (the nearest sense "
                         "embedding alone).")
    common(q, True)
    q.add_argument("--data", required=True, help="sense-labelled JSON lines (lemma, pos, "
                   "synset, sense_rank, gloss, text, start, end)")
    q.add_argument("--out", required=True, help="output directory")
    q.add_argument("--method", choices=("gloss-prior", "1nn"), default="gloss-prior")
    q.add_argument("--standardize", action="store_true",
                   help="z-score target vectors with the training instances' mean and std")
    q.add_argument("--ignore-pos", action="store_true",
                   help="candidates are all senses of the lemma, whatever the part of speech")
    q.add_argument("--layers", default="last4",
                   help="layers averaged into word vectors (default last4)")
    q.add_argument("--subword-pool", choices=("mean", "first"), default="mean")
    q.add_argument("--window", type=int, default=5,
                   help="static models: context words on each side of the target")
    q.add_argument("--gloss-weight", type=float, default=None,
                   help="fix the gloss weight instead of tuning it")
    q.add_argument("--prior-weight", type=float, default=None,
                   help="fix the prior weight instead of tuning it")
    q.set_defaults(run=_run_wsd_train)

    q = kinds.add_parser("predict", help="label examples with senses (JSON lines out)")
    common(q, False)
    q.add_argument("--wsd", required=True, help="directory from `bertkit wsd train`")
    q.add_argument("--data", required=True, help="JSON lines with lemma, text, start, end "
                   "(pos when the senses were built with it)")
    q.add_argument("--out", help="output JSON lines (default: stdout)")
    q.add_argument("--method", choices=("gloss-prior", "1nn", "mfs"), default=None,
                   help="score with another method than the one trained")
    q.set_defaults(run=_run_wsd_predict)

    q = kinds.add_parser("evaluate", help="accuracy against the most-frequent-sense baseline")
    common(q, False)
    q.add_argument("--wsd", required=True, help="directory from `bertkit wsd train`")
    q.add_argument("--data", required=True, help="sense-labelled JSON lines")
    q.add_argument("--json", action="store_true", help="one JSON object")
    q.add_argument("--method", choices=("gloss-prior", "1nn", "mfs"), default=None,
                   help="score with another method than the one trained (1nn works on "
                   "gloss-prior senses: same sense embeddings)")
    q.set_defaults(run=_run_wsd_evaluate)


def _run_static_train(args) -> int:
    from bertkit.senses.static import SkipGramConfig, StaticVectors

    tokenizer = None
    if args.tokenizer:
        from bertkit.text.tokenizer import Tokenizer
        tokenizer = Tokenizer.load(args.tokenizer)
    try:
        config = SkipGramConfig(dim=args.dim, window=args.window, negatives=args.negatives,
                                epochs=args.epochs, min_count=args.min_count,
                                subsample=args.subsample, lr=args.lr,
                                batch_size=args.batch_size, seed=args.seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    model = StaticVectors.train(args.corpus, config, tokenizer, progress=not args.quiet)
    model.save(args.out)
    print(f"{args.out}: {len(model.tokens):,} {model.tokenization.kind} x {model.dim} "
          f"dimensions, {model.stats.pairs:,} pairs in {model.stats.seconds:.0f}s, "
          f"final loss {model.stats.final_loss:.3f}")
    return 0


def _run_static_neighbors(args) -> int:
    from bertkit.senses.static import StaticVectors

    model = StaticVectors.load(args.model)
    for word in args.words:
        pairs = model.neighbors(word, args.k)
        print(f"{word}: " + ", ".join(f"{w} {c:.3f}" for w, c in pairs))
    return 0


def _run_static_similarity(args) -> int:
    from bertkit.senses.static import StaticVectors

    print(f"{StaticVectors.load(args.model).similarity(args.a, args.b):.4f}")
    return 0


def _run_static_contexts(args) -> int:
    from bertkit.embeddings.anisotropy import cosine_matrix
    from bertkit.senses.static import StaticVectors, find_word

    spans = [find_word(t, args.word) for t in args.texts]
    tables = [("static (one vector per word type)",
               StaticVectors.load(args.model).instance_vectors(args.texts, spans))]
    if args.bert:
        from bertkit.embeddings.embedder import Embedder
        embedder = Embedder.load(args.bert)
        tables.append(("contextual (last four layers, mean over pieces)",
                       embedder.word_vectors(args.texts, spans)))
        if args.standardizer:
            from bertkit.embeddings.standardize import Standardizer
            embedder.standardizer = Standardizer.load(args.standardizer)
            tables.append(("contextual, standardized",
                           embedder.word_vectors(args.texts, spans, standardize=True)))
    for i, text in enumerate(args.texts, 1):
        print(f"[{i}] {text}")
    for title, vectors in tables:
        cos = cosine_matrix(vectors)
        print(f"\ncosine of {args.word!r} between contexts, {title}:")
        print("     " + "".join(f"{f'[{j}]':>8}" for j in range(1, len(cos) + 1)))
        for i, row in enumerate(cos, 1):
            print(f"{f'[{i}]':>5}" + "".join(f"{c:8.3f}" for c in row))
    return 0


def _add_static_commands(sub) -> None:
    p = sub.add_parser("static", help="static word vectors (skip-gram with negative sampling): "
                       "train, neighbors, similarity")
    kinds = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = kinds.add_parser("train", help="train word2vec skip-gram vectors on text files",
                         description="Skip-gram with negative sampling: window, K negatives "
                         "from unigram^0.75, frequent-word subsampling. Tokens are lowercase "
                         "words (default) or a bertkit tokenizer's pieces (--tokenizer).")
    q.add_argument("--corpus", nargs="+", required=True, help="UTF-8 text files, a paragraph a line")
    how = q.add_mutually_exclusive_group()
    how.add_argument("--tokenizer", help="tokenizer or model directory: train on its pieces")
    how.add_argument("--words", action="store_true", help="whole lowercase words (the default)")
    q.add_argument("--dim", type=int, default=100, help="vector width (default 100)")
    q.add_argument("--window", type=int, default=5, help="largest context distance (default 5)")
    q.add_argument("--negatives", type=int, default=5, help="noise words per pair (default 5)")
    q.add_argument("--epochs", type=int, default=5, help="passes over the corpus (default 5)")
    q.add_argument("--min-count", type=int, default=5,
                   help="drop tokens seen fewer times (default 5)")
    q.add_argument("--subsample", type=float, default=1e-3,
                   help="frequent-word subsampling threshold t (default 1e-3; 0 = off)")
    q.add_argument("--lr", type=float, default=0.025, help="starting SGD learning rate")
    q.add_argument("--batch-size", type=int, default=2048, help="pairs per update")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", required=True, help="output directory")
    q.add_argument("--quiet", action="store_true", help="no progress on stderr")
    q.set_defaults(run=_run_static_train)
    q = kinds.add_parser("neighbors", help="nearest words by cosine")
    q.add_argument("--model", required=True, help="directory from `bertkit static train`")
    q.add_argument("-k", type=int, default=10, help="neighbours per word (default 10)")
    q.add_argument("words", nargs="+", metavar="WORD")
    q.set_defaults(run=_run_static_neighbors)
    q = kinds.add_parser("similarity", help="cosine between two words")
    q.add_argument("--model", required=True, help="directory from `bertkit static train`")
    q.add_argument("a", metavar="WORD")
    q.add_argument("b", metavar="WORD")
    q.set_defaults(run=_run_static_similarity)
    q = kinds.add_parser("contexts", help="one word in several texts: its static vector is the "
                         "same everywhere, contextual vectors are not",
                         description="Cosines between the vectors of WORD in each TEXT: static "
                         "(always exactly 1) and, with --bert, contextual.")
    q.add_argument("--model", required=True, help="directory from `bertkit static train`")
    q.add_argument("--bert", help="BERT directory to compare with")
    q.add_argument("--standardizer", help="also show the contextual vectors standardized with "
                   "this file (from `bertkit anisotropy --fit-standardizer`)")
    q.add_argument("--word", required=True)
    q.add_argument("texts", nargs="+", metavar="TEXT")
    q.set_defaults(run=_run_static_contexts)
