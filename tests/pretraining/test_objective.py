"""What every listed objective declares: the command line that asks its trained model what it
learned parses as a bertkit command; its settings (if any) have defaults that validate; its
name is unique."""
from __future__ import annotations

import shlex

import pytest

from bertkit.cli.main import build_parser
from bertkit.pretraining.objectives import OBJECTIVE_TYPES, OBJECTIVES


@pytest.mark.parametrize("kind", OBJECTIVE_TYPES, ids=OBJECTIVES)
def test_the_query_of_each_objective_is_a_command_that_parses(kind, tmp_path):
    argv = shlex.split(kind.query.format(model=shlex.quote(str(tmp_path / "model dir"))))
    assert argv[0] == "bertkit"
    parsed = build_parser().parse_args(argv[1:])
    assert parsed.command.name == argv[1]
    assert str(tmp_path / "model dir") in argv


def test_objective_names_and_settings_keys_are_unique():
    assert len(set(OBJECTIVES)) == len(OBJECTIVES)
    assert len({k.settings_key() for k in OBJECTIVE_TYPES}) == len(OBJECTIVES)
    for kind in OBJECTIVE_TYPES:
        objective = kind()
        assert (objective.settings is None) == (kind.Settings is None)
