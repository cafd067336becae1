"""docs/results.toml is the one source of the figures the README and docs/ show in tables: every
generated table in a page is what the file renders, every ratio and difference agrees with the
figures it is of, every page that quotes an entry's figures quotes them as the file holds them,
and every entry says what, how, where, when and, for an accuracy, on what."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("results", REPO / "bench" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results = _module()
RESULTS = results.load()
SCORES = ("accuracy", "F1", "Spearman", "Pearson")


def test_every_table_in_the_pages_is_what_the_results_file_renders():
    stale = results.stale_tables(RESULTS)
    assert not stale, ("tables that differ from docs/results.toml (python bench/results.py "
                       "--write renders them): " + ", ".join(stale))


def test_every_ratio_agrees_with_its_two_figures():
    assert results.wrong_ratios(RESULTS) == []


def test_every_quote_of_a_figure_says_what_the_results_file_holds():
    assert results.misquoted(RESULTS) == []


def test_every_generated_table_has_its_place_once():
    for name, table in RESULTS["tables"].items():
        text = (REPO / table["file"]).read_text(encoding="utf-8")
        assert text.count(f"<!-- results:{name} -->") == 1, f"{table['file']}: {name}"


@pytest.mark.parametrize("entry", RESULTS["entry"], ids=lambda e: e["id"])
def test_an_entry_names_its_command_machine_date_and_test_sets(entry):
    assert entry["command"] and entry["what"]
    assert entry["machine"] in RESULTS["machines"]
    assert re.fullmatch(r"2\d{3}-\d\d-\d\d", entry["date"])
    assert re.fullmatch(r"[0-9a-f]{7,40}", entry["commit"])
    assert entry.get("model", "all-MiniLM-L6-v2") in RESULTS["models"]
    for name, fig in entry["figures"].items():
        assert fig["value"] and fig["unit"], name
        if any(score in fig["unit"] for score in SCORES):
            assert fig["on"] in RESULTS["test_sets"], f"{name}: an accuracy names its test set"
        if "of" in fig or fig["unit"] == "×":
            assert fig["kind"] in {"figures", "medians", "per-repeat"}, name


def test_the_ids_are_unique():
    ids = [entry["id"] for entry in RESULTS["entry"]]
    assert len(ids) == len(set(ids))


def test_each_model_has_one_name():
    names = list(RESULTS["models"].values())
    assert len(names) == len(set(names))


def _toy(tmp_path: Path, page: str) -> dict:
    """A results file of one entry and one table in a README under tmp_path."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.toml").write_text('''
[machines.m]
name = "a 2-core test machine"
short = "2-core M"
[test_sets]
lines = "the test lines"
[models]
"runs/a" = "model A"
[[entry]]
id = "e"
what = "w"
command = "c"
machine = "m"
date = "2026-11-28"
commit = "abcdef0"
model = "runs/a"
figures.a = { value = "64.6", unit = "steps/s" }
figures.b = { value = "36.8", unit = "steps/s" }
figures.ratio = { value = "1.80", unit = "×", of = ["a", "b"], kind = "figures" }
figures.rep = { value = "1.80", unit = "×", of = ["a", "b"], kind = "per-repeat" }
figures.acc = { value = "0.293", unit = "accuracy", on = "lines" }
quoted = [{ page = "README.md", text = "{model} reaches {acc} on {on:acc}" }]
[tables.t]
file = "README.md"
columns = ["what", "ratio", "machine"]
rows = [["e", "{a} against {b}", "{rep}", "{machine}"]]
''', encoding="utf-8")
    (tmp_path / "README.md").write_text(page, encoding="utf-8")
    return results.load(tmp_path / "docs" / "results.toml")


def test_a_ratio_of_the_figures_shown_is_checked_to_its_digits(tmp_path):
    toy = _toy(tmp_path, "")
    assert results.wrong_ratios(toy) == ["e/ratio: 1.80: 64.6 / 36.8 is 1.76"]
    toy["by_id"]["e"]["figures"]["ratio"]["value"] = "1.76"
    assert results.wrong_ratios(toy) == []


def test_a_ratio_of_medians_may_differ_only_by_the_rounding_of_the_figures():
    entry = {"figures": {"a": {"value": "7,141"}, "b": {"value": "2,187"}}}
    medians = {"value": "3.26", "unit": "×", "of": ["a", "b"], "kind": "medians"}
    # 7,141 / 2,187 is 3.2652: the unrounded medians may give 3.26, not 3.30
    assert results.ratio_problem(RESULTS, entry, "r", medians) is None
    assert results.ratio_problem(RESULTS, entry, "r", {**medians, "value": "3.30"})


def test_a_difference_in_points_is_checked():
    entry = {"figures": {"a": {"value": "0.926"}, "b": {"value": "0.869"}}}
    gain = {"value": "+5.7", "unit": "points", "minus": ["a", "b"]}
    assert results.ratio_problem(RESULTS, entry, "g", gain) is None
    assert results.ratio_problem(RESULTS, entry, "g", {**gain, "value": "+5.9"}) == \
        "0.926 - 0.869 is +5.7 points"


def test_a_table_is_written_between_its_markers_and_a_stale_one_is_found(tmp_path):
    toy = _toy(tmp_path, "# Toy\n\n<!-- results:t -->\n| old |\n<!-- /results -->\n\nafter\n")
    assert results.stale_tables(toy, tmp_path) == ["README.md: t"]
    assert results.write_tables(toy, tmp_path) == ["README.md"]
    assert results.stale_tables(toy, tmp_path) == []
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert text == ("# Toy\n\n<!-- results:t -->\n| what | ratio | machine |\n|---|---|---|\n"
                    "| 64.6 against 36.8 | 1.80\u00d7\u2020 | 2-core M |\n\n"
                    + results.PER_REPEAT_NOTE + "\n<!-- /results -->\n\nafter\n")
    assert results.write_tables(toy, tmp_path) == []  # a second write changes nothing


def test_a_quote_must_hold_the_figure_as_rendered_wrapped_anywhere(tmp_path):
    toy = _toy(tmp_path, "model A reaches 0.293 on\nthe test lines.\n")
    assert results.misquoted(toy, tmp_path) == []
    (tmp_path / "README.md").write_text("model A reaches 0.295 on the test lines.\n")
    assert results.misquoted(toy, tmp_path) == [
        "README.md: e: 'model A reaches 0.293 on the test lines'"]
