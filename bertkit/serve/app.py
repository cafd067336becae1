"""The web application of `bertkit serve`: a page (files inside this package, nothing fetched
from the network) and the JSON API it calls, which scripts can call too (its OpenAPI
description at /openapi.json; FastAPI's browsable /docs page is left out, as it loads its
scripts from a CDN).

One worker: every model call runs on a single thread, one after the other, so concurrent
requests queue instead of fighting over the cores; the event loop keeps answering the page
and the static files meanwhile. A bad request gets a 4xx answer {"error": "one sentence"},
never a traceback.
"""
# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations
# (Request, the path and query types) at run time.
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from bertkit.files import INSTALL_SERVE, UserError
from bertkit.serve.workbench import Limits, RequestError, Workbench

STATIC = Path(__file__).parent / "static"
"""The page's HTML, script and styles."""

MAX_BODY = 64 * 1024
"""Bytes of a request body: a few texts at the length limit fit, anything else is refused."""


def make_app(workbench: Workbench):
    """A FastAPI application over `workbench` (needs the `serve` extra: fastapi, uvicorn)."""
    from fastapi import FastAPI
    from fastapi.staticfiles import StaticFiles

    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-model")
    app = FastAPI(title="bertkit serve", docs_url=None, redoc_url=None,
                  description="Look inside BERT-style models: fill-mask, attention, contextual "
                              "embeddings, training runs, fine-tuned predictions, "
                              "search by sentence vectors.")
    app.state.workbench = workbench
    app.state.worker = worker
    calls = ModelCalls(worker)
    add_error_handlers(app)
    add_read_routes(app, workbench, calls)
    for path, (fn, summary) in model_routes(workbench).items():
        app.add_api_route(path, calls.endpoint(fn), methods=["POST"], summary=summary)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def error_response(status: int, message: str):
    """The answer to a bad request: {"error": "one sentence"} with its status."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


async def read_body(request) -> dict:
    """The JSON object of a request's body ({} when empty); RequestError when it is too
    large or not a JSON object."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise RequestError(f"the request has {len(raw)} bytes; at most {MAX_BODY}", 413)
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise RequestError("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    return data


class ModelCalls:
    """Runs the workbench's calls on the one model thread, answering with their JSON or with
    one sentence saying what was wrong with the request."""

    def __init__(self, worker: ThreadPoolExecutor):
        self.worker = worker

    async def call(self, fn: Callable, *args):
        from fastapi.responses import JSONResponse

        try:
            result = await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)
        except RequestError as e:
            return error_response(e.status, str(e))
        except UserError as e:
            return error_response(400, str(e))
        return JSONResponse(result)

    def endpoint(self, fn: Callable[[dict], Any]):
        """A POST endpoint that calls fn(the request's JSON object)."""
        from fastapi import Request

        async def handle(request: Request):
            try:
                data = await read_body(request)
            except RequestError as e:
                return error_response(e.status, str(e))
            return await self.call(fn, data)
        return handle


def add_error_handlers(app) -> None:
    """Every error, a bug included, is answered with one sentence, never a traceback."""
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def any_error(request, exc):  # a bug: say so in one line, the log keeps the trace
        return error_response(500, f"internal error ({type(exc).__name__}); see the server's log")


def add_read_routes(app, workbench: Workbench, calls: ModelCalls) -> None:
    """The page, what the server holds, and the runs' logs (GET)."""
    from fastapi.responses import FileResponse, JSONResponse

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/api/info", summary="the models, runs and texts this server was started with")
    async def info():
        return JSONResponse(workbench.describe())

    @app.get("/api/runs/{name}", summary="a run's log records from number `after` on")
    async def run(name: str, after: int = 0):
        return await calls.call(workbench.run, name, after)


def model_routes(workbench: Workbench) -> dict[str, tuple[Callable[[dict], Any], str]]:
    """The POST endpoints that run a model: path -> (the call on a request's JSON, summary)."""

    def fill_mask(d):
        return workbench.fill_mask(d.get("text"), d.get("top_k", 5), d.get("models"))

    def attention(d):
        return workbench.attention(d.get("model"), d.get("text"), d.get("pair"))

    def similarity(d):
        return workbench.similarity(d.get("model"), d.get("a"), d.get("b"))

    def senses(d):
        return workbench.senses(d.get("model"), d.get("word"), d.get("layer", "last4"))

    def predict(d):
        return workbench.predict(d.get("model"), d.get("text"), d.get("pair"),
                                 d.get("question"), d.get("context"))

    def search(d):
        return workbench.search(d.get("query"), d.get("k", 10), d.get("models"))

    def index_search(d):
        return workbench.index_search(d.get("query"), d.get("k", 10))

    return {
        "/api/fill-mask": (fill_mask, 'each model\'s top-k guesses for every [MASK]: '
                                      '{"text", "top_k"?, "models"?}'),
        "/api/attention": (attention, 'every layer\'s and head\'s attention weights and a '
                                      'summary per head: {"model", "text", "pair"?}'),
        "/api/similarity": (similarity, 'a word\'s cosine similarity in two contexts per layer:'
                                        ' {"model", "a": {"text", "word"}, "b": {...}}'),
        "/api/senses": (senses, 'a word\'s occurrences projected to 2-D, raw and standardized: '
                                '{"model", "word", "layer"?}'),
        "/api/predict": (predict, 'a fine-tuned model\'s prediction: {"model", "text", "pair"?}'
                                  ' or {"model", "question", "context"}'),
        "/api/search": (search, 'the k lines of --input nearest to a query by cosine, each '
                                'model side by side: {"query", "k"?, "models"?}'),
        "/api/index-search": (index_search, 'the k passages of --index best for a query, its '
                                            'retrievers fused and the first reranked: '
                                            '{"query", "k"?}'),
    }


def require_server_packages() -> None:
    """A one-line UserError when the `serve` extra is not installed."""
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"bertkit serve needs {' and '.join(missing)}: "
                        f"{INSTALL_SERVE}")


def listen(host: str, port: int):
    """A socket bound to host:port (port 0: any free one), or a one-line UserError."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host}: {e.strerror or 'not an address of this machine'}") \
            from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        why = {errno.EADDRINUSE: "is in use (another server?): choose another --port",
               errno.EACCES: "needs privileges: choose a --port above 1023",
               errno.EADDRNOTAVAIL: "is not an address of this machine"}.get(e.errno,
                                                                              e.strerror)
        raise UserError(f"{host}:{port} {why}") from None
    sock.listen(64)
    return sock


def serve(workbench: Workbench, host: str = "127.0.0.1", port: int = 8000,
          announce: Callable[[str], None] = print) -> None:
    """Run the application until interrupted; `announce` gets the address (with the port the
    system chose for port 0)."""
    import uvicorn

    app = make_app(workbench)
    sock = listen(host, port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    shown = f"[{host}]" if ":" in host else host
    announce(f"bertkit serve: http://{shown}:{port}/  (Ctrl-C stops it)")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.state.worker.shutdown(wait=False, cancel_futures=True)


@dataclass(kw_only=True)
class ServeOptions:
    """What `bertkit serve` shows and how: the models, runs and corpus, where it listens, the
    limits of one request."""

    model: list[Path] = field(default_factory=list, metadata={"model": True})
    """Model directories (bertkit, Hugging Face, sentence-transformers or fine-tuned); --model
    A --model B shows A and B side by side (one --revision for the Hub names among them)."""
    run: list[str] = field(default_factory=list)
    """Run directories (of pretrain or finetune) whose curves are drawn, live while they
    train, as DIR or NAME=DIR."""
    input: Path | None = None
    """A corpus: text file, one text per line (or JSON lines, CSV, TSV, Parquet or Arrow, one
    text per record: its --text-field; or a folder, glob or `datasets` directory of them),
    where the embeddings view finds a word's occurrences, and what its standardizer and
    anisotropy figures are fitted on; the search view ranks its texts."""
    text_field: str = "text"
    """The field of a JSONL object, or the column of a CSV, TSV or table, of --input that holds
    the text."""
    sentences: int = 400
    """Lines sampled from --input for the embeddings view."""
    search_lines: int = 10_000
    """Lines of --input (the first ones) the search view ranks; a sentence model encodes them
    at start-up, another encoder on its first search (0: no search view)."""
    senses: Path | None = None
    """Sense-labelled JSON-lines file (the wsd format): occurrences coloured by sense."""
    index: Path | None = None
    """Index directory written by `bertkit index`: the index search view answers queries from
    it, as `bertkit search` does."""
    fusion: Literal["rrf", "sum"] | None = None
    """How an --index of several retrievers combines them: rrf (reciprocal-rank fusion, k 60)
    or sum (min-max normalised scores added); none: the index has one."""
    rerank: Path | None = field(default=None, metadata={"model": True})
    """Reranker from `finetune rerank`: reorders the first --rerank-top passages of each
    index search."""
    rerank_top: int = 20
    """Passages reranked per index search."""
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
    max_search_k: int = 100
    """Most lines a search request may ask for per model."""

    def check(self) -> None:
        """The cheap checks, before any model is loaded: a one-line UserError."""
        if not self.model and not self.run and self.index is None:
            raise UserError("give at least one --model DIR, --run DIR or --index DIR")
        if self.index is None and (self.fusion or self.rerank):
            raise UserError("--fusion and --rerank are of the index search: give --index DIR")
        if self.index is not None:
            from bertkit.retrieval.corpus_index import INDEX_FILE

            if not (self.index / INDEX_FILE).is_file():
                raise UserError(f"{self.index}: not an index directory (no {INDEX_FILE}; "
                                f"`bertkit index` writes one)")
        for number, name in ((self.max_text_chars, "--max-text-chars"),
                             (self.max_top_k, "--max-top-k"),
                             (self.max_attention_tokens, "--max-attention-tokens"),
                             (self.max_search_k, "--max-search-k"),
                             (self.sentences, "--sentences"),
                             (self.rerank_top, "--rerank-top")):
            if number < 1:
                raise UserError(f"{name} must be at least 1, got {number}")
        if self.search_lines < 0:
            raise UserError(f"--search-lines must be at least 0, got {self.search_lines}")
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port {self.port}: a port is a number from 0 to 65535")

    def workbench(self) -> Workbench:
        """The models, runs and corpus loaded, with these limits; long work (encoding the
        lines to search: `Workbench.prepare_search`) shows its progress on stderr."""
        limits = Limits(text_chars=self.max_text_chars, top_k=self.max_top_k,
                        attention_tokens=self.max_attention_tokens,
                        search_k=self.max_search_k)
        bench = Workbench.load(self.model, self.run, corpus=self.input,
                               corpus_lines=self.sentences, senses=self.senses,
                               device=self.device, limits=limits,
                               allow_untrained_head=self.allow_untrained_head,
                               search_lines=self.search_lines, text_field=self.text_field)
        bench.progress = True
        bench.searcher = self.searcher()
        return bench

    def searcher(self):
        """The Searcher over --index (None without one), with its fusion and reranker."""
        if self.index is None:
            return None
        from bertkit.retrieval.corpus_index import Index, Searcher
        from bertkit.retrieval.fusion import fusion_named
        from bertkit.retrieval.reranking import load_reranker
        from bertkit.runtime import resolve_device

        device = resolve_device(self.device)
        index = Index.load(self.index, device)
        fusion = None if self.fusion is None else fusion_named(self.fusion, None,
                                                              len(index.retrievers))
        reranker = None if self.rerank is None else load_reranker(self.rerank, device)
        return Searcher(index, fusion, reranker, self.rerank_top)


__all__ = ["ServeOptions", "STATIC", "MAX_BODY", "make_app", "require_server_packages", "listen",
           "serve"]
