"""Shared helpers for the training-runtime tests.

Tests that start ranks are marked ``torch`` and ``slow``: each launch spawns 2-3 processes that
import torch. Keep them few and tiny (2-3 ranks, the ``mlp`` example, a handful of steps).
"""

from __future__ import annotations

import pytest

from tessera.train.emulation import EmulationConfig

FAST_EMULATION = EmulationConfig(overhead_s=0.0, per_sample_s=0.0002)
"""Emulated devices fast enough for tests (a few ms per step) yet still ordered by speed."""


@pytest.fixture
def fast_emulation() -> EmulationConfig:
    return FAST_EMULATION
