"""Shared fixtures for the GPU-sharing tests: paths to the reference data."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_MIG = Path("/work/shared/data/mig")


@pytest.fixture(scope="session")
def shared_mig() -> Path:
    if not (SHARED_MIG / "mig_maximal_layouts.csv").exists():
        pytest.skip("shared reference tables not available")
    return SHARED_MIG
