"""One call from a loaded trace to every statistic and the published-vs-measured comparison.

:func:`analyze_trace` runs each applicable analysis (a runtime-only file has no arrivals, an
inventory has no jobs), merges their flat metrics, compares them with the reference figures and
returns one frozen :class:`Analysis`. Renderers (:mod:`.terminal`, :mod:`.plots`, :mod:`.html`)
only read it; :func:`to_json` turns it into plain JSON.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera.analyze import cluster, helios, stats
from tessera.analyze.published import Comparison, Outcome, compare
from tessera.analyze.reference import FIGURES
from tessera.analyze.trace import Trace


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything measured on one trace.

    Attributes:
        trace_name, trace_format, paths, notes: where the data came from and its caveats.
        jobs: job statistics (None for inventories and summaries).
        inventory, occupancy, sharing: cluster-side statistics where the trace has them.
        helios: Helios totals re-aggregated from per-cluster rows.
        metrics: every measured number under a stable key (the comparison's input).
        comparisons: published figures next to the measured values.
        analysis_s: wall time of the analysis (loading excluded).
    """

    trace_name: str
    trace_format: str
    paths: tuple[str, ...]
    notes: tuple[str, ...]
    jobs: stats.JobStats | None
    inventory: cluster.Inventory | None
    occupancy: cluster.Occupancy | None
    sharing: cluster.SharingMix | None
    helios: helios.HeliosTotals | None
    metrics: dict[str, float]
    comparisons: tuple[Comparison, ...]
    analysis_s: float

    def outcome_counts(self) -> dict[str, int]:
        """How many figures were reproduced / differ / are not reproducible."""
        return {o.value: sum(c.outcome is o for c in self.comparisons) for o in Outcome}


def analyze_trace(trace: Trace) -> Analysis:
    """Run every analysis that applies to ``trace`` and compare with the published figures."""
    start = time.perf_counter()
    jobs = stats.job_stats(trace)
    inv = cluster.inventory(trace)
    occ = cluster.occupancy(trace)
    mix = cluster.sharing_mix(trace)
    hel = helios.totals(trace)
    metrics: dict[str, float] = {}
    for part in (jobs, inv, occ, mix, hel):
        if part is not None:
            metrics |= part.metrics()
    if hel is None and trace.capacity is not None:
        for name, (lo, hi) in helios.capacity_ranges(trace).items():
            metrics[f"helios.capacity.{name.lower()}.min_gpus"] = float(lo)
            metrics[f"helios.capacity.{name.lower()}.max_gpus"] = float(hi)
    comparisons = compare(FIGURES, metrics, trace.format, trace.name)
    return Analysis(
        trace_name=trace.name,
        trace_format=trace.format,
        paths=tuple(str(p) for p in trace.paths),
        notes=trace.notes,
        jobs=jobs,
        inventory=inv,
        occupancy=occ,
        sharing=mix,
        helios=hel,
        metrics=metrics,
        comparisons=comparisons,
        analysis_s=time.perf_counter() - start,
    )


def _plain(value: Any) -> Any:
    """Recursively turn dataclasses, enums, tuples and paths into JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN is not valid JSON
        return None
    return value


def to_json(analysis: Analysis) -> dict[str, Any]:
    """The analysis as plain JSON data, with each comparison's verdict spelled out."""
    data: dict[str, Any] = _plain(analysis)
    for c, out in zip(analysis.comparisons, data["comparisons"], strict=True):
        out["verdict"] = c.describe()
    data["outcomes"] = analysis.outcome_counts()
    return data


def dumps(analysis: Analysis) -> str:
    """Indented JSON text of :func:`to_json`."""
    return json.dumps(to_json(analysis), indent=2)
