"""A run's log: metrics.jsonl written as training goes, its lines on stderr through the run's
progress reporter (and TensorBoard scalars when asked), read back, and drawn as loss curves in PNG files.

Drawing uses a bare `matplotlib.figure.Figure` (`bertkit.figures`): no pyplot, no backend
chosen for the process; matplotlib is an extra, imported only to draw. The plotting functions return the curves they drew (label -> (x, y)).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bertkit.config import TrainConfig
from bertkit.figures import new_figure, save_png
from bertkit.files import UserError, atomic_file
from bertkit.progress import Progress

# Writing, as training goes ------------------------------------------------------------------

def format_metrics(values: dict[str, float]) -> str:
    """`name value` pairs, four significant digits, for a log line."""
    return "  ".join(f"{k} {v:.4g}" for k, v in values.items())


def summary_writer():
    """torch's TensorBoard `SummaryWriter` class, imported when a run asks for it (it needs the
    tensorboard package, which nothing else does)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("--tensorboard needs the tensorboard package: pip install tensorboard") \
            from None
    return SummaryWriter


def scalar_tags(record: dict) -> dict[str, float]:
    """A metrics.jsonl record as TensorBoard tags, grouped by split as transformers' callback
    groups them: a train record's `loss` is "train/loss", an eval record's `eval_loss`
    "eval/loss", `dev_f1` "dev/f1"."""
    tags = {}
    for key, value in record.items():
        if key in ("step", "split", "seconds") or isinstance(value, bool) \
                or not isinstance(value, (int, float)):
            continue
        prefix, _, rest = key.partition("_")
        if record.get("split") == "train" or prefix not in ("eval", "dev") or not rest:
            tags[f"{record.get('split', 'train')}/{key}"] = float(value)
        else:
            tags[f"{prefix}/{rest}"] = float(value)
    return tags


class MetricsLog:
    """A run's metrics.jsonl (appended line by line, cut back to the resumed step) and its
    stderr lines; with `tensorboard`, its records as scalars in out_dir/tensorboard too. Silent
    and writing nothing when not `active` (ranks other than 0)."""

    def __init__(self, out_dir: Path, active: bool, resumed_step: int,
                 tensorboard: bool = False, progress: Progress | None = None):
        self.path, self.active = out_dir / "metrics.jsonl", active
        self.progress = progress
        if active and self.path.exists():
            keep = [r for r in read_metrics(self.path, announce=True)
                    if r.get("step", 0) <= resumed_step]
            with atomic_file(self.path) as f:
                f.write("".join(json.dumps(r) + "\n" for r in keep))
        self.file = open(self.path, "a", encoding="utf-8") if active else None
        self.writer = None
        if active and tensorboard:  # a resumed run drops the events after its step
            self.writer = summary_writer()(str(out_dir / "tensorboard"),
                                           purge_step=resumed_step + 1 if resumed_step else None)

    def record(self, obj: dict) -> None:
        if self.file:
            self.file.write(json.dumps(obj) + "\n")
            self.file.flush()
        if self.writer is not None:
            for tag, value in scalar_tags(obj).items():
                self.writer.add_scalar(tag, value, obj["step"])

    def say(self, line: str) -> None:
        """A line on stderr, above the progress bar when there is one."""
        if not self.active:
            return
        if self.progress is not None:
            self.progress.say(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.file = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def progress_note(tokens: int, metrics: dict[str, float] | None = None,
                  logged_at: int | None = None) -> str:
    """The training figures the progress shows beside step, elapsed and ETA: the tokens so far
    (counted on the host, current every step), then the mean loss and metrics of the last log
    window, lr, tokens/s and MFU (where the run counts its FLOPs), read from the device at log step `logged_at` only (a read is a
    host sync) and so labelled with it: between log steps they are that step's, not now's."""
    if not metrics:
        return f"{tokens:,} tokens"
    shown = {k: v for k, v in metrics.items()
             if k not in ("learning_rate", "tokens_per_second", "grad_norm", "mfu")}
    mfu = [f"MFU {metrics['mfu']:.1%}"] if "mfu" in metrics else []
    return f"{tokens:,} tokens, step {logged_at}: " + ", ".join(
        [*(f"{k} {v:.4g}" for k, v in shown.items()), f"lr {metrics['learning_rate']:.2e}",
         f"{metrics['tokens_per_second']:,.0f} tokens/s", *mfu])


# Reading and drawing -----------------------------------------------------------------------

def run_spec(spec: str | Path) -> tuple[str, str]:
    """A run as the command line gives it, DIR or NAME=DIR: (NAME or "", DIR). A path that
    exists is a DIR even when it holds "="."""
    spec = str(spec)
    if "=" in spec and not Path(spec).exists():
        name, _, path = spec.rpartition("=")
        return name, path
    return "", spec


def read_metrics(path: str | Path, announce: bool = False) -> list[dict]:
    """The records of a metrics.jsonl file ([] if it does not exist).

    A last line cut short (the process was killed while writing it) is dropped, with a notice
    on stderr when `announce`; any other line that is not a JSON object is a UserError."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            _check_record(record, f"{path}:{number}")
            records.append(record)
        elif number == len(lines):
            if announce:
                print(f"note: {path}:{number}: dropped a torn last line (the run was stopped "
                      f"while writing it)", file=sys.stderr)
        else:
            raise UserError(f"{path}:{number}: not a JSON object: the run log is damaged")
    return records


def _check_record(record: dict, where: str) -> None:
    """A record as the training loop writes it: a "split" name, an integer "step" and numbers
    (a damaged one would fail later, in a plot or a resume, without a line to point at);
    a plot leaves out the records that lack either."""
    step = record.get("step", 0)
    if not isinstance(record.get("split", ""), str) or not isinstance(step, int) \
            or isinstance(step, bool):
        raise UserError(f"{where}: \"split\" is not a name or \"step\" not an integer: the run "
                        f"log is damaged")
    for key, value in record.items():
        if key != "split" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UserError(f"{where}: {key!r} is {value!r}, not a number: the run log is "
                            f"damaged")


Curves = dict[str, tuple[list[float], list[float]]]
"""label -> (x values, y values) of each line in a picture."""


def _draw(curves: Curves, png: Path, xlabel: str, ylabel: str, marked: set[str],
          marker_size: float, right: Curves | None = None) -> None:
    """`curves` against the left axis; `right` (a metric, and the kept step as one point)
    against a second axis on the right, named after its first curve."""
    fig = new_figure(png, figsize=(7, 4))
    ax = fig.add_subplot()
    for label, (xs, ys) in curves.items():
        ax.plot(xs, ys, "o-" if label in marked else "-", label=label, lw=1.2, ms=marker_size)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    axes = [ax]
    if right:
        other = ax.twinx()
        (metric, (xs, ys)), *points = right.items()
        other.plot(xs, ys, "s--", color="C3", label=metric, lw=1.2, ms=marker_size)
        for label, (px, py) in points:
            other.plot(px, py, "*", color="C3", ms=2.5 * marker_size, label=label)
            ax.axvline(px[0], color="C3", ls=":", lw=1)
        other.set_ylabel(metric)
        axes.append(other)
    handles = [h for a in axes for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [h.get_label() for h in handles], loc="best")
    save_png(fig, png, dpi=110)


def loss_curves(records: list[dict]) -> Curves:
    """The curves of `plot_loss`: training loss, its LM part when the loss has several parts
    (MLM + NSP, MLM + SBO: what eval_loss measures), and the held-out loss; {} with no
    training records."""
    records = [r for r in records if "split" in r and "step" in r]
    train = [r for r in records if r["split"] == "train" and "loss" in r]
    if not train:
        return {}
    steps = [r["step"] for r in train]
    curves = {"train loss": (steps, [r["loss"] for r in train])}
    part = next((k for k in ("mlm_loss", "clm_loss") if all(k in r for r in train)), None)
    if part and any(abs(r[part] - r["loss"]) > 1e-9 for r in train):
        curves[f"train {part}"] = (steps, [r[part] for r in train])
    evals = [r for r in records if r["split"] == "eval"]
    key = next((k for k in ("eval_loss", "loss", "dev_loss") if evals and k in evals[0]), None)
    if key:
        evals = [r for r in evals if key in r]
        curves[key] = ([r["step"] for r in evals], [r[key] for r in evals])
    return curves


def metric_curve(records: list[dict], metric: str, best_step: int | None = None) -> Curves:
    """The evaluation's `metric` against steps, and the kept step as one point labelled
    "kept: step N"; {} when no evaluation holds it. A tracked figure that another figure
    always equals (fine-tuning's dev_selection is the task's dev_f1, dev_accuracy, ...) takes
    that figure's name."""
    evals = [r for r in records if r.get("split") == "eval" and metric in r]
    if not evals:
        return {}
    same = [k for k in evals[0] if k not in (metric, "step", "split", "seconds")
            and all(r.get(k) == r[metric] for r in evals)]
    name = same[0] if same else metric
    curve = {name: ([r["step"] for r in evals], [r[metric] for r in evals])}
    kept = [r[metric] for r in evals if r["step"] == best_step]
    if kept:
        curve[f"kept: step {best_step}"] = ([best_step], kept[:1])
    return curve


def plot_loss(metrics: str | Path, png: str | Path, metric: str | None = None,
              best_step: int | None = None) -> Curves | None:
    """Training loss (and held-out loss when evaluated) against steps, drawn into `png`; with
    `metric`, that evaluation figure on a second axis with the kept `best_step` marked
    (`metric_curve`). Returns the curves drawn, or None (and draws nothing) with no training
    records."""
    records = read_metrics(metrics)
    curves = loss_curves(records)
    if not curves:
        return None
    evals = {k for k in curves if not k.startswith("train")}
    right = metric_curve(records, metric, best_step) if metric else {}
    _draw(curves, Path(png), "step", "loss", evals, marker_size=6, right=right)
    return {**curves, **right}


def run_curves(runs: dict[str, str | Path], *, split: str, key: str,
               x: str = "seconds") -> Curves:
    """The curves of `plot_runs`: per run, `key` of its `split` records against `x` ("step",
    or "seconds" shown in minutes). Records without a clock (older eval records) take the
    clock of the last train record at or before their step."""
    curves = {}
    for label, path in runs.items():
        records = [r for r in read_metrics(Path(path) / "metrics.jsonl" if Path(path).is_dir()
                                           else path) if "split" in r and "step" in r]
        clock = sorted((r["step"], r["seconds"]) for r in records
                       if r["split"] == "train" and "seconds" in r)

        def when(r):
            if x == "step":
                return r["step"]
            if "seconds" in r:
                return r["seconds"]
            before = [s for step, s in clock if step <= r["step"]]
            return before[-1] if before else None

        points = [(when(r), r[key]) for r in records if r["split"] == split and key in r]
        points = [(a / 60 if x == "seconds" else a, b) for a, b in points if a is not None]
        if points:
            xs, ys = zip(*points)
            curves[label] = (list(xs), list(ys))
    return curves


def plot_runs(runs: dict[str, str | Path], png: str | Path, *, split: str, key: str,
              x: str = "seconds", ylabel: str | None = None) -> Curves:
    """One line per run (`run_curves`), drawn into `png`; returns the curves drawn."""
    curves = run_curves(runs, split=split, key=key, x=x)
    _draw(curves, Path(png), "training minutes" if x == "seconds" else "step", ylabel or key,
          set(curves) if split == "eval" else set(), marker_size=3)
    return curves


__all__ = ["MetricsLog", "summary_writer", "scalar_tags", "format_metrics", "progress_note",
           "read_metrics", "loss_curves", "metric_curve", "plot_loss", "run_curves", "plot_runs",
           "Curves"]
