"""Commands of the road to BERT: the earlier systems the textbooks teach, as runnable baselines
(`road entities`, `road neighbours`, `road seq2seq`, `road translate`, `road elmo`, `road elmo-tag`). Their settings are the
library's options dataclasses in bertkit.road."""
from __future__ import annotations

import json

from bertkit.cli.options import Command, command_line


def _line(name: str, opts) -> str:
    """The shell line that runs command `name` with these options again (training_args.json)."""
    return command_line(next(c for c in COMMANDS if c.name == name), [opts])


def run_entities(opts) -> int:
    from bertkit.road.entities import run_entities as run

    result = run(opts, _line("road entities", opts))
    print(json.dumps({k: v for k, v in result.metrics.items() if k != "neighbours"}, indent=2,
                     default=float))
    return 0


def run_neighbours(opts) -> int:
    from bertkit.road.entities import neighbours

    for movie_id, title, cosine in neighbours(opts.model, opts.movie, opts.top_k,
                                              opts.min_ratings):
        print(f"{cosine:.3f}  {movie_id}  {title}")
    return 0


def run_seq2seq(opts) -> int:
    from bertkit.road.seq2seq_run import run_seq2seq as run

    print(json.dumps(run(opts, _line("road seq2seq", opts)).metrics, indent=2, default=float))
    return 0


def run_translate(opts) -> int:
    import sys

    from bertkit.road.seq2seq_run import translate_file

    outputs, scores = translate_file(opts)
    if opts.out is None:
        print("\n".join(outputs))
    if scores is not None:
        print(json.dumps(scores, indent=2), file=sys.stdout if opts.out else sys.stderr)
    return 0


def run_elmo(opts) -> int:
    from bertkit.road.elmo import train_elmo

    result = train_elmo(opts, _line("road elmo", opts))
    if result.stopped_by == "interrupted":
        return 130
    print(json.dumps({k: v for k, v in result.metrics.items() if k != "config"}, indent=2,
                     default=float))
    return 0


def run_elmo_tag(opts) -> int:
    from bertkit.road.elmo_tagger import tag_words

    print(json.dumps(tag_words(opts, _line("road elmo-tag", opts)), indent=2, default=float))
    return 0


COMMANDS = (
    Command("road entities", run_entities, ("bertkit.road.entities:EntitiesOptions",),
            help="one-hot vs learned entity embeddings on a ratings table (CS109B, lecture 17)",
            description="Train a linear model on one-hot columns, a dot product + biases and "
                        "an MLP over learned user, movie, genre and year embeddings; dev RMSE "
                        "beside the global and per-movie mean; nearest movies; a 2-D map."),
    Command("road neighbours", run_neighbours, ("bertkit.road.entities:NeighboursOptions",),
            help="the movies nearest to one by its learned embedding"),
    Command("road seq2seq", run_seq2seq, ("bertkit.road.seq2seq_run:Seq2SeqOptions",),
            help="GRU encoder-decoder: plain, with additive attention, with attention and "
                 "copying; BLEU and chrF",
            description="Train on parallel JSON lines ({source, target}) for a time budget "
                        "per model, with the BLEU of a dev sample in the progress lines; "
                        "decode dev greedily and with beam search, score BLEU and chrF beside "
                        "copying the source, and draw the curves and the attention (and "
                        "the generate-or-copy switch p_gen) of one dev pair."),
    Command("road translate", run_translate, ("bertkit.road.seq2seq_run:TranslateOptions",),
            help="translate texts or a file with a model saved by road seq2seq (BLEU and chrF "
                 "when the file has targets)"),
    Command("road elmo", run_elmo, ("bertkit.road.elmo:ElmoOptions",),
            help="ELMo: forward and backward LSTM language models; held-out perplexity",
            description="Train ELMo's two 2-layer LSTM language models (shared embedding and "
                        "softmax) on a `bertkit prepare` directory or a text file with the "
                        "shared training loop; the saved directory works with embed, wsd, "
                        "anisotropy and plot senses."),
    Command("road elmo-tag", run_elmo_tag, ("bertkit.road.elmo_tagger:ElmoTagOptions",),
            help="tag words from a frozen ELMo (or BERT): a learned scalar mix of its layers",
            description="ELMo's way of using its layers: the model frozen, a softmax-weighted "
                        "mix of its layers learned with a linear tagger (or one layer alone); "
                        "dev accuracy beside the most frequent tag."),
)
