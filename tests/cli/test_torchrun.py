"""bertkit-torchrun: quiet when every rank failed with bertkit's one-line error, torchrun's
own report for anything else (the runs themselves: tests/pretraining/test_elastic.py)."""
from __future__ import annotations

import pytest

from bertkit.cli.torchrun import bertkit_errors_only


@pytest.mark.parametrize("codes,quiet", [
    ([2], True), ([2, 2], True), ([2, -15], True), ([2, 143], True), ([2, 130], True),
    ([1], False), ([-9], False), ([2, 1], False), ([-9, 2], False), ([-15, 2], False), ([], False),
])
def test_only_bertkit_errors_are_left_quiet(codes, quiet):
    assert bertkit_errors_only(codes) is quiet
