"""How much fine-tuning's defaults depend on luck: each shared task fine-tuned with bertkit's
defaults under several seeds, the dev scores' mean, spread and range beside the baseline.

    .venv/bin/python bench/finetune_seeds.py --model runs/d60                       # 4 tasks, 3 seeds
    .venv/bin/python bench/finetune_seeds.py --model $M --tasks wnut --seeds 0 1 2 --jobs 2
    .venv/bin/python bench/finetune_seeds.py --model $M --tasks wnut --set crf=false --set lr=1e-4
    .venv/bin/python bench/finetune_seeds.py --model mlm=runs/m25 electra=runs/e25   # compared

The seed moves the head's initialisation, the dev split (POS has no dev file), the batch order
and dropout; nothing else changes. Each run is `finetune()` with only the seed set, as
`bertkit finetune TASK --model M --train T [--dev D] --seed S` would run it (`--precision`
fp32 or bf16 sets that too, to compare them; `--set FIELD=VALUE` any other FinetuneConfig
field, to compare a setting against the defaults). `--jobs 2` runs two
fine-tunes at once, one torch thread each (on 2 cores, faster than one at a time with two
threads). Several `--model NAME=DIR` are compared: every model under the same seeds, each
task's rows side by side with each model's mean difference to the first. Needs ../shared/data;
prints the CPU beside the figures and writes every run's dev metrics to --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# name: (task, train, dev or None, the figure reported, settings of the task)
TASKS = {
    "pos": ("tag", "pos/en_ewt-ud-dev.conllu", None, "accuracy", {}),
    "wnut": ("tag", "ner/wnut16.train.conll", "ner/wnut16.dev.conll", "f1", {}),
    "wnut-spans": ("spans", "ner/wnut16.train.conll", "ner/wnut16.dev.conll", "f1", {}),
    "movie": ("classify", "sentiment/movie.train.jsonl", "sentiment/movie.dev.jsonl", "accuracy",
              {}),
    "sick": ("pair", "nli/sick.train.jsonl", "nli/sick.dev.jsonl", "accuracy", {}),
    "sick-rel": ("regress", "nli/sick.train.jsonl", "nli/sick.dev.jsonl", "pearson",
                 {"label_column": "relatedness"}),
    "squad": ("qa", "qa/squad2_subset.dev.json", None, "f1", {}),
}


def one_run(model: str, name: str, seed: int, threads: int, out_root: str,
            precision: str, settings: dict) -> dict:
    import torch

    from dataclasses import fields

    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.task import setting_fields
    from bertkit.finetuning.tasks import task_type

    torch.set_num_threads(threads)
    task, train, dev, figure, own = TASKS[name]
    given, kind = {**own, **settings}, task_type(task)
    own_fields = setting_fields(kind)  # a setting of another task is not this one's
    training = {f.name for f in fields(FinetuneConfig)}
    started = time.perf_counter()
    result = finetune(kind(**{own_fields[k]: v for k, v in given.items() if k in own_fields}),
                      model, DATA / train, DATA / dev if dev else None,
                      Path(out_root) / f"{name}-{seed}",
                      FinetuneConfig(seed=seed, precision=precision, show_progress=False,
                                     **{k: v for k, v in given.items() if k in training}))
    baseline = (result.baseline or {}).get(figure)
    return {"task": name, "seed": seed, "figure": figure,
            "score": float(result.dev_metrics[figure]),
            "dev": {k: float(v) for k, v in result.dev_metrics.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "baseline": None if baseline is None else float(baseline),
            "steps": result.steps, "stopped_by": result.stopped_by,
            "seconds": round(time.perf_counter() - started, 1)}


def parse_settings(pairs: list[str]) -> dict:
    """`FIELD=VALUE` strings: settings of FinetuneConfig or of a task (each task takes its
    own); a ValueError names a field none has, or one this bench sets itself."""
    from dataclasses import fields

    from bertkit.finetuning.recipe import FinetuneConfig
    from bertkit.finetuning.task import setting_fields
    from bertkit.finetuning.tasks import TASKS as TASK_TYPES

    known = ({f.name for f in fields(FinetuneConfig)}
             | {k for t in TASK_TYPES for k in setting_fields(t)}) \
        - {"seed", "precision", "show_progress"}
    settings = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in known:
            raise ValueError(f"--set {pair}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(sorted(known))}")
        try:
            settings[name] = json.loads(text)
        except json.JSONDecodeError:
            settings[name] = text
    return settings


def print_table(runs: list[dict], tasks: list[str], models: list[str]) -> None:
    """A Markdown row per task and model: the seeds' scores, mean, spread and range, and the
    mean's difference to the first model's."""
    print("| task | figure | model | per seed | mean | std | range | vs first | baseline |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in tasks:
        first = None
        for model in models:
            mine = [r for r in runs if r["task"] == name and r["model"] == model]
            scores = [r["score"] for r in mine]
            mean = statistics.mean(scores)
            first = mean if first is None else first
            std = statistics.stdev(scores) if len(scores) > 1 else 0.0
            base = mine[0]["baseline"]
            print(f"| {name} | {mine[0]['figure']} | {model} | "
                  f"{' '.join(f'{s:.3f}' for s in scores)} | {mean:.3f} | {std:.3f} | "
                  f"{min(scores):.3f}-{max(scores):.3f} | "
                  f"{'' if model == models[0] else f'{mean - first:+.3f}'} | "
                  f"{'' if base is None else f'{base:.3f}'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", required=True, metavar="[NAME=]DIR",
                        help="model directories to fine-tune (several: compared, the first "
                             "the reference)")
    parser.add_argument("--tasks", nargs="+", default=["pos", "wnut", "movie", "sick"],
                        choices=list(TASKS), help="the shared tasks (wnut-spans: WNUT-16 by "
                        "the span head; sick-rel: SICK relatedness by regression; squad: the "
                        "SQuAD 2.0 subset, one article in three held out; default: the four of "
                        "the fine-tuning bars)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="fine-tunes at once")
    parser.add_argument("--out", default="finetune_seeds.json", help="every run, as JSON")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                        help="as finetune's --precision (auto: bf16 where the CPU multiplies "
                             "it natively)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a FinetuneConfig field other than the defaults, for every run "
                             "(VALUE read as JSON, else as a string), e.g. crf=true; repeatable")
    args = parser.parse_args()
    try:
        settings = parse_settings(args.set)
    except ValueError as err:
        print(f"finetune_seeds: {err}", file=sys.stderr)
        return 2
    if not DATA.is_dir():
        print(f"finetune_seeds: {DATA} not found (the shared data)", file=sys.stderr)
        return 2
    import torch

    from bertkit.runtime import choose_precision, describe

    threads = 1 if args.jobs > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    precision = args.precision if args.precision != "auto" else choose_precision("cpu")[0]
    print(f"# {describe(precision)}; {args.jobs} run(s) at once", file=sys.stderr)
    models = dict(m.partition("=")[::2] if "=" in m else (Path(m).name, m) for m in args.model)
    runs = []
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(one_run, path, t, s, threads, str(Path(tmp) / name), precision,
                               settings): name
                   for name, path in models.items() for t in args.tasks for s in args.seeds}
        for f, name in futures.items():
            r = {"model": name, **f.result()}
            runs.append(r)
            print(f"{name} {r['task']} seed {r['seed']}: {r['figure']} {r['score']:.3f} "
                  f"({r['steps']} steps, {r['stopped_by']}, {r['seconds']:.0f} s)", file=sys.stderr)
    changed = "".join(f", {k}={v}" for k, v in settings.items())
    print(f"models {', '.join(f'{k}={v}' for k, v in models.items())}, seeds "
          f"{' '.join(map(str, args.seeds))}, precision {precision}{changed}")
    print_table(runs, args.tasks, list(models))
    record = {"models": models, "precision": precision, "settings": settings, "runs": runs}
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
