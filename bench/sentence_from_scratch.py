"""Sentence embeddings from bertkit's own pretrained model: mean pooling as it is, after
unsupervised SimCSE on the pretraining books, after SICK's pairs, and after both.

    bertkit pretrain --data ../shared/data/corpus/english_books.txt --out runs/m60 --max-time 60
    flock /tmp/bertkit-cpu.lock .venv/bin/python bench/sentence_from_scratch.py --model runs/m60

Each step is the `bertkit finetune embed` command it prints (run here in-process, with every
default but the ones printed):

- SimCSE: sentences cut from english_books.txt (one a line, 6 to 40 words, shuffled),
  `--max-time` minutes;
- SICK: its training file read as it is: entailments as positives and contradictions as hard
  negatives (`--loss mnrl`, the default for an NLI file), or its relatedness as scored pairs
  (`--loss cosent`).

The dev figure that picks each run's best checkpoint comes from one tenth of SICK train's
premises, held back from training, so SICK dev, where every model is scored (Spearman of
cosine against relatedness), takes no part in training. Prints the CPU and a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit.runtime import describe  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z])")


def write_sentences(corpus: Path, out: Path, limit: int, seed: int) -> int:
    """Sentences of 6 to 40 words cut from the corpus's paragraphs, distinct, shuffled."""
    seen: dict[str, None] = {}
    with corpus.open(encoding="utf-8") as f:
        for paragraph in f:
            for sentence in _SENTENCE_END.split(paragraph.strip()):
                if 6 <= len(sentence.split()) <= 40:
                    seen[sentence] = None
    sentences = list(seen)
    random.Random(seed).shuffle(sentences)
    out.write_text("\n".join(sentences[:limit]) + "\n", encoding="utf-8")
    return min(limit, len(sentences))


def split_sick(train: Path, fit: Path, select: Path) -> tuple[int, int]:
    """SICK train's rows, one tenth of its premises (by a hash of the text) held back."""
    rows = [line for line in train.read_text(encoding="utf-8").splitlines() if line.strip()]
    held = [zlib.crc32(json.loads(r)["premise"].encode()) % 10 == 0 for r in rows]
    fit.write_text("".join(r + "\n" for r, h in zip(rows, held) if not h), encoding="utf-8")
    select.write_text("".join(r + "\n" for r, h in zip(rows, held) if h), encoding="utf-8")
    return held.count(False), held.count(True)


def train(model: Path, data: Path, select: Path, out: Path, **settings) -> dict:
    """One `bertkit finetune embed` run; its command, time and steps."""
    from bertkit.finetuning.recipe import FinetuneConfig, finetune
    from bertkit.finetuning.tasks import Embed

    task = {k: v for k, v in settings.items() if k in ("objective",)}
    training = {k: v for k, v in settings.items() if k not in task}
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in training.items())
    loss = f" --loss {task['objective']}" if task else ""
    command = (f"bertkit finetune embed --model {model} --train {data} --dev {select} "
               f"--out {out}{loss} {flags}").strip()
    print(command, flush=True)
    start = time.perf_counter()
    result = finetune(Embed(**task), model, data, select, out,
                      FinetuneConfig(show_progress=False, **training))
    return {"command": command, "seconds": time.perf_counter() - start, "steps": result.steps}


def sick_dev(model: Path, dev: Path) -> dict:
    from bertkit.embeddings.embedder import Embedder
    from bertkit.finetuning.tasks.embed import evaluate_sentence_model

    return evaluate_sentence_model(Embedder.load(model), dev)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the pretrained model")
    parser.add_argument("--out", type=Path, default=Path("runs/sentence_from_scratch"))
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--simcse-minutes", type=float, default=10.0)
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out, dev = args.out, args.data / "nli" / "sick.dev.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {describe()}", flush=True)
    n = write_sentences(args.data / "corpus" / "english_books.txt", out / "sentences.txt",
                        args.sentences, args.seed)
    fit, select = out / "sick.fit.jsonl", out / "sick.select.jsonl"
    print(f"{n} sentences; SICK train split {split_sick(args.data / 'nli' / 'sick.train.jsonl', fit, select)}",
          flush=True)
    runs = {"simcse": train(args.model, out / "sentences.txt", select, out / "simcse",
                            max_time=args.simcse_minutes, seed=args.seed)}
    for loss in ("mnrl", "cosent"):
        runs[f"sick-{loss}"] = train(args.model, fit, select, out / f"sick-{loss}",
                                     objective=loss, seed=args.seed)
        runs[f"simcse+sick-{loss}"] = train(out / "simcse", fit, select,
                                            out / f"simcse+sick-{loss}", objective=loss,
                                            seed=args.seed)
    rows = {"mean pooling, no sentence training": sick_dev(args.model, dev)}
    rows.update({name: sick_dev(out / name, dev) for name in runs})
    print(f"\nCPU: {describe()}\n\n| model | SICK dev Spearman | Pearson | training |")
    print("|---|---|---|---|")
    base = rows["mean pooling, no sentence training"]["spearman"]
    for name, figures in rows.items():
        run = runs.get(name)
        spent = f"{run['steps']} steps, {run['seconds'] / 60:.1f} min" if run else ""
        print(f"| {name} | {figures['spearman']:.4f} ({figures['spearman'] - base:+.4f}) | "
              f"{figures['pearson']:.4f} | {spent} |")
    (out / "table.json").write_text(json.dumps({"cpu": describe(), "rows": rows, "runs": runs},
                                               indent=2, default=str))


if __name__ == "__main__":
    main()
