"""`bertkit serve`: look inside models in the browser (bertkit.serve)."""
from __future__ import annotations

import sys

from bertkit.cli.options import Command
from bertkit.files import INSTALL_SERVE

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def run_serve(opts) -> int:
    from bertkit.serve.app import require_server_packages, serve

    require_server_packages()
    opts.check()
    if opts.host not in LOOPBACK:
        print(f"warning: --host {opts.host}: anyone who can reach this address can use the "
              f"models (there is no login); the default 127.0.0.1 answers this machine only",
              file=sys.stderr)
    print(f"loading {len(opts.model)} model(s)...", file=sys.stderr)
    workbench = opts.workbench()
    for m in workbench.models.values():
        shown = m.describe()
        what = [v for v, ok in (("fill-mask", shown["fill_mask"]),
                                ("attention", shown["attention"]),
                                ("embeddings", shown["embeddings"]),
                                ("predict", shown["predict"]),
                                ("search", shown["search"] and workbench.line_index)) if ok]
        print(f"  {m.name}: {m.kind} ({m.path}); views: {', '.join(what)}", file=sys.stderr)
    if workbench.searcher is not None:
        shown = workbench.describe()["index"]
        print(f"  index: {shown['passages']} passages by {', '.join(shown['retrievers'])}"
              + (f", top {shown['rerank_top']} reranked" if shown["rerank_top"] else ""),
              file=sys.stderr)
    workbench.prepare_search()  # the sentence models' vectors of --input, before the address
    serve(workbench, opts.host, opts.port, announce=lambda line: print(line, flush=True))
    return 0


COMMANDS = (
    Command("serve", run_serve, ("bertkit.serve.app:ServeOptions",),
            help="look inside models in the browser: fill-mask, attention, embeddings, "
                 "training runs, predictions",
            description="A local web application (no network needed: the page's scripts are "
                        "in the package) over the models and run directories given: fill the "
                        "mask side by side, attention of every layer and head, a word's "
                        "contextual vectors, live training curves, a fine-tuned model's "
                        "predictions, the --input lines nearest to a query by sentence "
                        "vectors, the passages of an --index (`bertkit index`) best for a "
                        "query, fused and reranked as `bertkit search` does; and the JSON API the page calls (/openapi.json). Needs "
                        f"{INSTALL_SERVE}."),
)
