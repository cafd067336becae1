"""Long inputs: the modern architecture's local layers block by block (`local_attention`)
against the dense [T, T] mask, and an embed-style encode against transformers' ModernBertModel.

    .venv/bin/python bench/long_context.py --threads 1     # docs/model.md's figures
    .venv/bin/python bench/long_context.py --lengths 256 512 --encode   # the layer table alone
    .venv/bin/python bench/long_context.py --lengths --encode 8192 --repeats 1 --threads 2
    .venv/bin/python bench/long_context.py --device cuda        # bench/gpu_check.sh's "long"

1. One local layer's attention of a modern `small` model (8 heads of 64, window 128), batch 1,
   forward and backward, its mask built as the encoder builds it: the dense path (SDPA under
   the [T, T] mask of `build_attention_mask`, the reference) and the blocked one, interleaved
   in this process, median of --repeats after a warm-up. Wall seconds and CPU seconds (process
   time: on a machine shared with other jobs wall time swings with their load); peak memory
   as the peak resident set above the start, one fresh subprocess per length and path (Linux:
   /proc/self/clear_refs resets the peak). The growth column is the time at T over the time
   at the shortest length: linear in T is the ratio of the lengths, quadratic its square.
2. A modern `small` model with window 128 and a global layer every third (ModernBERT's), saved
   by bertkit as a ModernBERT directory and loaded from it by transformers' ModernBertModel:
   the time to encode one document of T tokens (forward under inference_mode, mean over the
   tokens, what `bertkit embed` runs for a batch), median of --repeats (after a warm-up where
   bertkit times its attention kernels on a new kind of call), with the blocked local
   layers, with the dense ones (bertkit before them) and transformers', and the cosine of the
   vectors to transformers'.

On a GPU (`--device cuda`) the clock is the wall (synchronised), and peak memory is the
allocator's peak above the start, in this process; the ratios and growth read wall seconds.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bertkit.config import preset  # noqa: E402
from bertkit.model import fast, hub  # noqa: E402
from bertkit.model.encoder import Encoder, attend, build_attention_mask, init_weights  # noqa: E402
from bertkit.model.local_attention import local_attention  # noqa: E402
from bertkit.runtime import describe  # noqa: E402

WINDOW, HEADS, HEAD_DIM = 128, 8, 64  # ModernBERT's window; `small`'s heads


def layer_call(path: str, T: int, device: torch.device = torch.device("cpu")):
    """One local layer's attention forward and backward on fresh [1, 8, T, 64] inputs, its
    mask built inside (as the encoder does, once for all its local layers)."""
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, HEADS, T, HEAD_DIM, generator=g).to(device).requires_grad_()
               for _ in range(3))

    def run() -> None:
        if path == "dense":
            mask = build_attention_mask(None, T, False, q.device, WINDOW)
            y = attend(q, k, v, mask, False, 0.0)
        else:
            y = local_attention(q, k, v, None, WINDOW, False)
        torch.autograd.grad(y, (q, k, v), torch.ones_like(y))
    return run


def timed_once(run, device: torch.device = torch.device("cpu")) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, result) of one call; on a GPU, the wall until it is done."""
    synchronize(device)
    w, c = time.perf_counter(), time.process_time()
    result = run()
    synchronize(device)
    return time.perf_counter() - w, time.process_time() - c, result


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_on_gpu(path: str, T: int, device: torch.device) -> float:
    """MiB the allocator's peak rose to above what was allocated before one layer call."""
    run = layer_call(path, T, device)
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2 ** 20


def status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def peak_mib(path: str, T: int) -> float:
    """MiB the process's resident set rose to above its size before one layer call (after
    one short call, which brings the kernels' code into memory)."""
    layer_call(path, 256)()
    run = layer_call(path, T)
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident set := the current
    before = status_kib("VmRSS")
    run()
    return (status_kib("VmHWM") - before) / 1024


def peak_in_subprocess(path: str, T: int, threads: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--peak-of", path, str(T),
                          "--threads", str(threads)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def layer_table(lengths: list[int], repeats: int, threads: int,
                device: torch.device = torch.device("cpu")) -> None:
    print(f"\n1. one local layer's attention, forward + backward, batch 1, {HEADS} heads of "
          f"{HEAD_DIM}, window {WINDOW} (median of {repeats}) on {device.type}")
    print(f"{'T':>6} {'path':>8} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'growth':>7} "
          f"{'dense/blocked':>14}")
    for path in ("dense", "blocked"):  # a warm-up: the first call of each pays for its setup
        layer_call(path, lengths[0], device)()
    first = {}
    for T in lengths:
        runs = {path: layer_call(path, T, device) for path in ("dense", "blocked")}
        wall, cpu = {path: [] for path in runs}, {path: [] for path in runs}
        for _ in range(repeats):  # interleaved, so that others' load hits both alike
            for path, run in runs.items():
                w, c, _ = timed_once(run, device)
                wall[path].append(w)
                cpu[path].append(c)
        clock = cpu if device.type == "cpu" else wall  # a GPU's work is no CPU time
        for path in runs:
            c = statistics.median(clock[path])
            first.setdefault(path, c)
            ratio = (f"{statistics.median(clock['dense']) / c:14.1f}" if path == "blocked"
                     else "")
            peak = peak_in_subprocess(path, T, threads) if device.type == "cpu" \
                else peak_on_gpu(path, T, device)
            print(f"{T:6d} {path:>8} {statistics.median(wall[path]):8.3f} "
                  f"{statistics.median(cpu[path]):8.3f} {peak:9.1f} {c / first[path]:7.1f} "
                  f"{ratio}", flush=True)


def make_model(directory: Path, max_positions: int) -> Path:
    """A fresh modern `small` (window 128, every third layer global) saved as a ModernBERT
    directory."""
    cfg = preset("small", architecture="modern", local_window=WINDOW, global_every=3,
                 max_positions=max_positions)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(0))
    return hub.save_model(encoder, directory / "small")


def mean_vector(hidden: torch.Tensor) -> torch.Tensor:
    return hidden[0].mean(0)


def encode_table(lengths: list[int], repeats: int,
                 device: torch.device = torch.device("cpu")) -> None:
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        path = make_model(Path(tmp), max(lengths))
        ours = hub.load_encoder(path, device)
        theirs = transformers.ModernBertModel.from_pretrained(path).to(device).eval()
    print(f"\n2. encode one document, modern small (window {WINDOW}, global every 3), "
          f"median of {repeats} on {device.type}; transformers {transformers.__version__} "
          f"({theirs.config._attn_implementation} attention)")
    print(f"{'T':>6} {'run':>13} {'wall s':>8} {'CPU s':>8} {'x blocked':>16} "
          f"{'cosine to transformers':>23}")
    for T in lengths:
        ids = torch.randint(5, ours.config.vocab_size, (1, T),
                            generator=torch.Generator().manual_seed(T)).to(device)
        mask = torch.ones_like(ids)
        runs = {"blocked": lambda: mean_vector(ours(ids, None, mask).last_hidden_state),
                "dense": lambda: dense(ours, ids, mask),
                "transformers": lambda: mean_vector(
                    theirs(input_ids=ids, attention_mask=mask).last_hidden_state)}
        wall, cpu = {name: [] for name in runs}, {name: [] for name in runs}
        vectors = {}
        with torch.inference_mode():
            # a warm-up where bertkit times its attention kernels on a new kind of call (at
            # 8k the global layers' scores are past Attend's max_scores: SDPA, untimed)
            if HEADS * T * T <= fast.Attend(attend).max_scores:
                vectors = {name: run() for name, run in runs.items()}
            for _ in range(repeats):
                for name, run in runs.items():
                    w, c, vectors[name] = timed_once(run, device)
                    wall[name].append(w)
                    cpu[name].append(c)
        clock = cpu if device.type == "cpu" else wall  # a GPU's work is no CPU time
        base = statistics.median(clock["blocked"])
        for name in runs:
            cosine = torch.nn.functional.cosine_similarity(vectors[name].float(),
                                                           vectors["transformers"].float(), dim=0)
            print(f"{T:6d} {name:>13} {statistics.median(wall[name]):8.2f} "
                  f"{statistics.median(cpu[name]):8.2f} "
                  f"{statistics.median(clock[name]) / base:16.2f} {cosine.item():23.6f}",
                  flush=True)


def dense(encoder: Encoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The encoder's vector with its local layers under the dense mask, as before the blocks."""
    kept, fast.BLOCKS_FROM = fast.BLOCKS_FROM, 1 << 62
    try:
        return mean_vector(encoder(ids, None, mask).last_hidden_state)
    finally:
        fast.BLOCKS_FROM = kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", nargs="*", type=int, default=[1024, 2048, 4096, 8192],
                        help="lengths of the local-layer table (none: no table)")
    parser.add_argument("--encode", nargs="*", type=int, default=[2048, 8192],
                        help="lengths of the encode table (none: no table)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", type=torch.device,
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--peak-of", nargs=2, metavar=("PATH", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.peak_of:
        print(peak_mib(args.peak_of[0], int(args.peak_of[1])))
        return
    print(f"environment: {describe()}")
    if args.lengths:
        layer_table(args.lengths, args.repeats, args.threads, args.device)
    if args.encode:
        encode_table(args.encode, args.repeats, args.device)


if __name__ == "__main__":
    main()
