"""Step-time statistics of a finished run, shared by ``tessera train --json`` and benchmarks.

A run's log holds one record per step (``wall_s``: the synchronous step as rank 0 saw it,
``loss``, and with this module's callers ``sent_bytes``). These helpers turn the measured
records (warm-up steps excluded by the caller) into the figures the issue's tables compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by the nearest-rank method (no interpolation:
    with 30 steps, p99 is the slowest step)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def time_to_loss_s(records: Sequence[dict[str, Any]], target: float, window: int = 5
                   ) -> float | None:
    """Wall time from the first step's start until the mean loss of the last ``window`` steps
    first reaches ``target`` (``None`` if it never does). The moving mean keeps one lucky
    batch from counting."""
    elapsed = 0.0
    losses: list[float] = []
    for r in records:
        elapsed += r["wall_s"]
        losses.append(r["loss"])
        recent = losses[-window:]
        if len(recent) == window and sum(recent) / window <= target:
            return elapsed
    return None


def step_summary(records: Sequence[dict[str, Any]], default_batch: int) -> dict[str, Any]:
    """``samples_per_s``, ``p99_step_s`` and ``bytes_per_step`` (this rank's bytes on the wire,
    mean over steps) of the measured ``records``."""
    samples = sum(r.get("global_batch", default_batch) for r in records)
    walls = [r["wall_s"] for r in records]
    return {
        "samples_per_s": samples / sum(walls),
        "p99_step_s": percentile(walls, 0.99),
        "bytes_per_step": sum(r.get("sent_bytes", 0.0) for r in records) / len(records),
        "exchange_s": sum(r.get("exchange_s", 0.0) for r in records) / len(records),
    }
