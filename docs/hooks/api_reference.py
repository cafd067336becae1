"""The API reference pages, generated at build time from the package tree.

Every public module of bertkit (no part of its dotted name starts with `_`) gets a page
`reference/<dotted/path>.md` holding one mkdocstrings directive, and a place in the nav under
"API reference", grouped by package; `reference/index.md` lists them with the first line of
each module's docstring. Nothing is written into docs/: a module that moves, appears or goes
away changes the reference at the next build, with no list to keep by hand. mkdocstrings reads
the sources statically (griffe), so building the site imports neither bertkit nor torch.
"""
from __future__ import annotations

import ast
from pathlib import Path

from mkdocs.structure.files import File

PACKAGE = "bertkit"
ROOT = "reference"


def public_modules(repo: Path) -> dict[str, Path]:
    """Dotted name -> source file, for every public module and package under `repo/bertkit`,
    in path order (a package before its modules)."""
    found = {}
    for path in sorted((repo / PACKAGE).rglob("*.py")):
        parts = path.relative_to(repo).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            found[".".join(parts)] = path
    return dict(sorted(found.items(), key=lambda item: item[0].split(".")))


def page_of(module: str) -> str:
    return f"{ROOT}/{module.replace('.', '/')}.md"


def summary(path: Path) -> str:
    """The first line of a module's docstring, or nothing."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def nav_of(modules: dict[str, Path]) -> list:
    """Nav entries: the overview, `bertkit` and its top-level modules, then one section per
    subpackage holding the package and everything under it."""
    entries: list = [{"Overview": f"{ROOT}/index.md"}]
    sections: dict[str, list] = {}
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) == 1 or (len(parts) == 2 and path.name != "__init__.py"):
            entries.append({name: page_of(name)})
            continue
        section = f"{PACKAGE}.{parts[1]}"
        if section not in sections:
            sections[section] = []
            entries.append({section: sections[section]})
        sections[section].append({name: page_of(name)})
    return entries


def _repo(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def on_config(config):
    nav = [entry for entry in config["nav"] if "API reference" not in entry]
    config["nav"] = nav + [{"API reference": nav_of(public_modules(_repo(config)))}]
    return config


def on_files(files, config):
    modules = public_modules(_repo(config))
    rows = "\n".join(f"| [`{name}`]({page_of(name).removeprefix(ROOT + '/')}) | {summary(path)} |"
                     for name, path in modules.items())
    index = ("# API reference\n\nGenerated from the docstrings of every public module at build "
             "time (`docs/hooks/api_reference.py`).\n\n| module | what it holds |\n|---|---|\n"
             f"{rows}\n")
    files.append(File.generated(config, f"{ROOT}/index.md", content=index))
    for name in modules:
        files.append(File.generated(config, page_of(name), content=f"# `{name}`\n\n::: {name}\n"))
    return files
