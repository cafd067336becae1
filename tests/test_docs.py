"""The documentation site: `mkdocs build --strict` succeeds (a warning is an error: every link
and anchor resolves, every docstring renders), the API reference has a page for every public
module of the tree as it is, and the build hooks do what they say."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")
pytest.importorskip("material")

REPO = Path(__file__).resolve().parents[1]


def hook(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api = hook("api_reference")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(REPO / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    problems = [line for line in run.stderr.splitlines()
                if line.startswith(("WARNING", "ERROR")) or "Error" in line]
    assert run.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        problems or run.stderr.splitlines()[-20:])
    return out


def test_the_site_builds_strictly_with_every_page(site):
    for page in ["index", "tokenizer", "model", "pretraining", "recipe", "embeddings",
                 "finetuning", "road", "serve", "gpu", "architecture", "performance"]:
        assert (site / page / "index.html").exists() if page != "index" else \
            (site / "index.html").exists(), page


def test_every_public_module_has_its_reference_page(site):
    modules = api.public_modules(REPO)
    assert {"bertkit", "bertkit.model.encoder", "bertkit.finetuning.tasks.qa"} <= set(modules)
    for name in modules:
        page = site / api.page_of(name).removesuffix(".md") / "index.html"
        assert page.exists(), f"{name}: no page {page.relative_to(site)}"
    index = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert all(f"<code>{name}</code>" in index for name in modules)


def test_a_reference_page_renders_the_docstrings(site):
    html = (site / "reference/bertkit/model/fill_mask/index.html").read_text(encoding="utf-8")
    assert "FillMask" in html and "masked-LM head" in html
    assert "[MASK]" in html  # escaped, shown as written, not taken for a link


def test_public_modules_leave_out_private_names(tmp_path):
    for path in ["bertkit/__init__.py", "bertkit/a.py", "bertkit/_private.py",
                 "bertkit/sub/__init__.py", "bertkit/sub/b.py", "bertkit/sub/__main__.py",
                 "bertkit/_hidden/c.py"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text('"""First line.\n\nMore."""\n')
    modules = api.public_modules(tmp_path)
    assert list(modules) == ["bertkit", "bertkit.a", "bertkit.sub", "bertkit.sub.b"]
    assert api.summary(modules["bertkit.a"]) == "First line."
    assert api.nav_of(modules) == [
        {"Overview": "reference/index.md"},
        {"bertkit": "reference/bertkit.md"},
        {"bertkit.a": "reference/bertkit/a.md"},
        {"bertkit.sub": [{"bertkit.sub": "reference/bertkit/sub.md"},
                         {"bertkit.sub.b": "reference/bertkit/sub/b.md"}]}]


def test_brackets_in_prose_are_escaped_and_code_is_left_alone():
    pytest.importorskip("griffe")
    escape = hook("prose_docstrings").escape_brackets
    assert escape("[CLS] [SEP] and `x[0]`, ``a[b]``") == \
        "\\[CLS\\] \\[SEP\\] and `x[0]`, ``a[b]``"
    assert escape("already \\[escaped]") == "already \\[escaped\\]"


def built_page(site: Path, target: str) -> Path:
    """The file the built site serves for a page link `target` (relative to docs/, anchor
    dropped): mkdocs writes `a/b.md` as `a/b/index.html` and `a/index.md` as `a/index.html`."""
    path = Path(target.partition("#")[0])
    if path.suffix != ".md":
        return site / path
    if path.name in ("index.md", "README.md"):
        return site / path.parent / "index.html"
    return site / path.with_suffix("") / "index.html"


def broken_links(docs: Path, site: Path) -> list[str]:
    """'PAGE: TARGET' for each relative link of docs/*.md that a reader cannot follow: a link
    must find its file in docs/ (where GitHub shows the pages), except a link to a page the
    build generates (the API reference, `api.ROOT`/...), which must be in the built site."""
    import re
    problems = []
    for page in sorted(docs.glob("*.md")):
        body = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", body):
            path = target.partition("#")[0]
            if not path or re.match(r"[a-z]+:", target):
                continue  # an anchor on the page itself (test_readme.py checks it), a URL
            if path.startswith(api.ROOT + "/"):
                ok = built_page(site, path).exists()
            else:
                dest = (docs / path).resolve()
                ok = dest.is_relative_to(docs.resolve()) and dest.exists()
            if not ok:
                problems.append(f"{page.name}: {target}")
    return problems


def test_every_link_in_docs_finds_a_page_of_docs_or_of_the_built_site(site):
    assert not broken_links(REPO / "docs", site)


def test_a_link_outside_docs_or_to_a_page_not_built_is_broken(tmp_path):
    docs, site = tmp_path / "docs", tmp_path / "site"
    (site / "reference" / "bertkit").mkdir(parents=True)
    (site / "reference" / "index.html").write_text("")
    (site / "reference" / "bertkit" / "files" / "index.html").parent.mkdir()
    (site / "reference" / "bertkit" / "files" / "index.html").write_text("")
    (docs / "img").mkdir(parents=True)
    (docs / "img" / "a.png").write_text("")
    (docs / "other.md").write_text("# Other\n")
    (tmp_path / "README.md").write_text("")
    (docs / "index.md").write_text(
        "[ok](other.md#other) [ok](img/a.png) [ok](#here) [ok](https://example.org/x.md)\n"
        "[ok](reference/index.md) [ok](reference/bertkit/files.md#bertkit.files.UserError)\n"
        "[no](missing.md) [no](../README.md) [no](reference/bertkit/gone.md)\n"
        "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(docs, site) == [
        "index.md: missing.md", "index.md: ../README.md", "index.md: reference/bertkit/gone.md"]
