"""The tables of README.md's Results, docs/performance.md and docs/gpu.md, rendered from one file,
docs/results.toml, where each figure is written once beside its command, machine, test set and
date (the file's head says how an entry and a table are written).

    python bench/results.py            # say which tables, ratios and quotes disagree (exit 1)
    python bench/results.py --write    # render every table into its page

A table lives in its page between `<!-- results:NAME -->` and `<!-- /results -->`; what is
between them is generated, so a figure changes in docs/results.toml, never in a page.
tests/test_results.py runs the same checks.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib is new in 3.11; tomli is the same parser (bertkit's dependency there)
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results.toml"
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)
PLACEHOLDER = re.compile(r"\{(on:)?(?:([\w.-]+)/)?(\w+)\}")
DAGGER = "†"
PER_REPEAT_NOTE = (f"{DAGGER} the median of the per-repeat ratios (`bench/finetune_speed.py` "
                   "alternates the two sides repeat by repeat), not the ratio of the two medians "
                   "shown.")


def load(path: Path = RESULTS) -> dict:
    results = tomllib.loads(path.read_text(encoding="utf-8"))
    results["by_id"] = {entry["id"]: entry for entry in results["entry"]}
    return results


def number(value: str) -> float:
    """A printed figure as a number: '7,679' -> 7679, '15.7M' -> 15700000, '+5.7' -> 5.7."""
    scale = 1e6 if value.endswith("M") else 1.0
    return float(value.rstrip("M").replace(",", "")) * scale


def _half_unit(value: str) -> float:
    """Half the place of a printed figure's last digit: what its rounding may have moved it."""
    digits = value.rstrip("M").replace(",", "")
    decimals = len(digits.partition(".")[2])
    return 0.5 * 10.0 ** -decimals * (1e6 if value.endswith("M") else 1.0)


def figure(results: dict, entry: dict, ref: str) -> dict:
    """A figure named `NAME` (of `entry`) or `ENTRY/NAME`."""
    owner, _, name = ref.rpartition("/")
    source = results["by_id"][owner] if owner else entry
    return source["figures"][name]


def render_figure(fig: dict) -> str:
    """A figure's value; a ratio with its sign, and a dagger when it is a median of ratios."""
    if "kind" not in fig:
        return fig["value"]
    return fig["value"] + fig["unit"] + (DAGGER if fig["kind"] == "per-repeat" else "")


def field(results: dict, entry: dict, name: str) -> str:
    """What {NAME} stands for in a cell of `entry`'s row."""
    if name in entry.get("figures", {}):
        return render_figure(entry["figures"][name])
    if name == "machine":
        return results["machines"][entry["machine"]]["short"]
    if name == "model":
        return results["models"][entry["model"]]
    return str(entry[name])


def fill(results: dict, entry: dict, template: str) -> str:
    def one(match: re.Match) -> str:
        on, owner, name = match.groups()
        source = results["by_id"][owner] if owner else entry
        if on:
            return results["test_sets"][source["figures"][name]["on"]]
        return field(results, source, name)
    return PLACEHOLDER.sub(one, template)


def render_table(results: dict, name: str) -> str:
    """A table as its page holds it between the markers: header, rows, and the note on a
    dagger where one is shown."""
    table = results["tables"][name]
    lines = ["| " + " | ".join(table["columns"]) + " |",
             "|" + "---|" * len(table["columns"])]
    for entry_id, *cells in table["rows"]:
        entry = results["by_id"][entry_id]
        lines.append("| " + " | ".join(fill(results, entry, c) for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    return text + ("\n" + PER_REPEAT_NOTE + "\n" if DAGGER in text else "")


def shown_tables(text: str) -> dict[str, str]:
    """The generated tables a page holds, by name."""
    return {match.group(2): match.group(3) for match in BLOCK.finditer(text)}


def stale_tables(results: dict, repo: Path = REPO) -> list[str]:
    """'FILE: NAME' for each table whose page differs from what the results file renders, or
    that its page lacks."""
    stale = []
    for name, table in results["tables"].items():
        shown = shown_tables((repo / table["file"]).read_text(encoding="utf-8"))
        if shown.get(name) != render_table(results, name):
            stale.append(f"{table['file']}: {name}")
    return stale


def write_tables(results: dict, repo: Path = REPO) -> list[str]:
    """Render every table into its page; the pages changed."""
    changed = []
    for file in sorted({table["file"] for table in results["tables"].values()}):
        path = repo / file
        text = path.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: m.group(1) + render_table(results, m.group(2)) + m.group(4),
                        text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(file)
    return changed


def ratio_problem(results: dict, entry: dict, name: str, fig: dict) -> str | None:
    """Why a ratio or difference disagrees with the figures it is of, or None."""
    if "minus" in fig:
        a, b = (figure(results, entry, ref)["value"] for ref in fig["minus"])
        expected = f"{(number(a) - number(b)) * 100:+.1f}"
        return None if expected == fig["value"] else f"{a} - {b} is {expected} points"
    if "of" not in fig or fig["kind"] == "per-repeat":
        return None
    a, b = (figure(results, entry, ref)["value"] for ref in fig["of"])
    decimals = len(fig["value"].partition(".")[2])
    if fig["kind"] == "figures":
        expected = f"{number(a) / number(b):.{decimals}f}"
        return None if expected == fig["value"] else f"{a} / {b} is {expected}"
    low = (number(a) - _half_unit(a)) / (number(b) + _half_unit(b))
    high = (number(a) + _half_unit(a)) / (number(b) - _half_unit(b))
    slack = 0.5 * 10.0 ** -decimals
    if low - slack <= number(fig["value"]) <= high + slack:
        return None
    return f"{a} / {b} is {low:.{decimals + 2}f} to {high:.{decimals + 2}f}"


def wrong_ratios(results: dict) -> list[str]:
    """'ENTRY/FIGURE: VALUE: why' for each ratio or difference its two figures contradict."""
    found = []
    for entry in results["entry"]:
        for name, fig in entry.get("figures", {}).items():
            if problem := ratio_problem(results, entry, name, fig):
                found.append(f"{entry['id']}/{name}: {fig['value']}: {problem}")
    return found


def misquoted(results: dict, repo: Path = REPO) -> list[str]:
    """'PAGE: ENTRY: text' for each quote of an entry's figures that its page does not hold as
    the results file renders it."""
    found = []
    for entry in results["entry"]:
        for quote in entry.get("quoted", []):
            text = " ".join(fill(results, entry, quote["text"]).split())
            # a page's lines may be wrapped anywhere: words are compared, not line breaks
            if text not in " ".join((repo / quote["page"]).read_text(encoding="utf-8").split()):
                found.append(f"{quote['page']}: {entry['id']}: {text!r}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="render every table into its page")
    args = parser.parse_args(argv)
    results = load()
    if args.write:
        for file in write_tables(results):
            print(f"wrote {file}")
    problems = ([f"stale table {t}" for t in stale_tables(results)]
                + [f"ratio {r}" for r in wrong_ratios(results)]
                + [f"misquoted {q}" for q in misquoted(results)])
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
