"""`bertkit serve`: look inside models in the browser (bertkit.serve)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.cli.options import Command
from bertkit.files import UserError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(kw_only=True)
class ServeOptions:
    model: list[Path] = field(default_factory=list)
    """Model directories (bertkit, Hugging Face, sentence-transformers or fine-tuned), or
    names in the local Hugging Face cache; --model A --model B shows A and B side by side."""
    run: list[str] = field(default_factory=list)
    """Run directories (of pretrain or finetune) whose curves are drawn, live while they
    train, as DIR or NAME=DIR."""
    input: Path | None = None
    """A corpus: text file, one text per line, where the embeddings view finds a word's
    occurrences, and what its standardizer and anisotropy figures are fitted on."""
    sentences: int = 400
    """Lines sampled from --input."""
    senses: Path | None = None
    """Sense-labelled JSON-lines file (the wsd format): occurrences coloured by sense."""
    host: str = "127.0.0.1"
    """Address to listen on. The default answers this machine only; any other lets the
    network reach the models (a warning is printed)."""
    port: int = 8000
    """Port to listen on; 0: any free one (the address is printed)."""
    device: str = "auto"
    """Where the models run: auto (CUDA when there is one, else the CPU), cpu, cuda, ..."""
    allow_untrained_head: bool = False
    """Offer fill-mask for a model without a trained masked-LM head (random guesses)."""
    max_text_chars: int = 2000
    """Longest text a request may send."""
    max_top_k: int = 50
    """Most guesses a fill-mask request may ask for per [MASK]."""
    max_attention_tokens: int = 128
    """Longest text (in tokens) the attention view draws."""


def run_serve(opts: ServeOptions) -> int:
    from bertkit.serve.app import require_server_packages, serve
    from bertkit.serve.workbench import Limits, Workbench

    require_server_packages()
    if not opts.model and not opts.run:
        raise UserError("give at least one --model DIR or --run DIR")
    for number, name in ((opts.max_text_chars, "--max-text-chars"),
                         (opts.max_top_k, "--max-top-k"),
                         (opts.max_attention_tokens, "--max-attention-tokens"),
                         (opts.sentences, "--sentences")):
        if number < 1:
            raise UserError(f"{name} must be at least 1, got {number}")
    if not 0 <= opts.port <= 65535:
        raise UserError(f"--port {opts.port}: a port is a number from 0 to 65535")
    if opts.host not in LOOPBACK:
        print(f"warning: --host {opts.host}: anyone who can reach this address can use the "
              f"models (there is no login); the default 127.0.0.1 answers this machine only",
              file=sys.stderr)
    limits = Limits(text_chars=opts.max_text_chars, top_k=opts.max_top_k,
                    attention_tokens=opts.max_attention_tokens)
    print(f"loading {len(opts.model)} model(s)...", file=sys.stderr)
    workbench = Workbench.load(opts.model, opts.run, corpus=opts.input,
                               corpus_lines=opts.sentences, senses=opts.senses,
                               device=opts.device, limits=limits,
                               allow_untrained_head=opts.allow_untrained_head)
    for m in workbench.models.values():
        shown = m.describe()
        what = [v for v, ok in (("fill-mask", shown["fill_mask"]),
                                ("attention", shown["attention"]),
                                ("embeddings", shown["embeddings"]),
                                ("predict", shown["predict"])) if ok]
        print(f"  {m.name}: {m.kind} ({m.path}); views: {', '.join(what)}", file=sys.stderr)
    serve(workbench, opts.host, opts.port, announce=lambda line: print(line, flush=True))
    return 0


COMMANDS = (
    Command("serve", run_serve, (ServeOptions,),
            help="look inside models in the browser: fill-mask, attention, embeddings, "
                 "training runs, predictions",
            description="A local web application (no network needed: the page's scripts are "
                        "in the package) over the models and run directories given: fill the "
                        "mask side by side, attention of every layer and head, a word's "
                        "contextual vectors, live training curves, a fine-tuned model's "
                        "predictions; and the JSON API the page calls (/openapi.json). Needs "
                        "pip install 'bertkit[serve]'."),
)
