"""Shared paths for workload tests: golden traces in tests/data, public traces in ../shared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "workload"
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"


def shared_trace(relative: str) -> Path:
    """A public trace under ../shared/data/traces, or skip the test if it is not there."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"public trace not present: {path}")
    return path


@pytest.fixture
def golden() -> Path:
    return GOLDEN


@pytest.fixture
def shared() -> Callable[[str], Path]:
    """``shared("philly/x.csv")`` -> path, skipping the test when the public data is absent."""
    return shared_trace
