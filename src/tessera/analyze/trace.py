"""The columnar analysis view of a trace: a few polars frames with normalised column names.

Public GPU-cluster traces disagree on almost everything (Philly stores wall-clock strings, ITP
seconds from an unknown origin, FGD milli-GPUs, PAI a header-less machine table). Loaders in
:mod:`tessera.analyze.loaders` translate each into at most five frames, always with the same
column names and units, so the statistics never need to know where data came from:

``jobs`` (one row per job / task / pod)
    ``submit_time_s`` (s since the trace's first submission), ``submit_at`` (wall-clock datetime,
    only where the trace has one), ``duration_s``, ``num_gpus`` (whole GPUs asked for; 1 for a
    fractional task), ``gpu_request`` (GPUs as a float: ``gpu_milli / 1000`` for fractional
    tasks), ``gpu_time_s`` (``duration_s × gpu_request``), ``tenant`` (VC / cluster),
    ``status``, ``gpu_type`` (allowed GPU types, ``|``-separated), ``gpu_milli``, ``wait_s``,
    ``qos``, ``job_type`` (model / application). Any column may be absent when the trace lacks it.
``nodes`` (one row per machine)
    ``node``, ``gpu_type`` (null for CPU-only machines), ``num_gpus``, ``cpu_cores``.
``occupancy`` (a time series)
    ``time`` (datetime), ``active_nodes``, ``total_nodes``.
``summary`` (pre-aggregated per-cluster rows, Helios)
    the authors' columns, unchanged.
``capacity`` (daily per-VC GPU counts, Helios)
    ``date``, ``cluster``, ``vc``, ``gpus``.

This view is for characterisation. The simulator's typed ``JobSpec`` lists come from
``tessera.workload.readers``, which validates per job; here we validate per column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import polars as pl


class Clock(StrEnum):
    """What the trace's submit times are measured against."""

    WALL = "wall"
    """Local wall-clock timestamps (Philly): hour-of-day and weekday are real."""
    RELATIVE = "relative"
    """Seconds from an undisclosed origin (ITP, FGD, Sia, Gavel): patterns are relative."""
    NONE = "none"
    """No submit times at all (runtime-only tables, inventories, summaries)."""


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace, ready for :func:`tessera.analyze.report.analyze_trace`.

    Attributes:
        name: short display name (``philly``, ``itp``, ``fgd`` ...), used in output folders.
        format: the format key from :data:`tessera.analyze.formats.FORMATS`.
        paths: the files read.
        clock: how to interpret ``submit_time_s`` for diurnal / weekly patterns.
        jobs, nodes, occupancy, summary, capacity: the frames described in the module docstring.
        notes: caveats a reader of the report must know (copied into every output).
    """

    name: str
    format: str
    paths: tuple[Path, ...]
    clock: Clock = Clock.NONE
    jobs: pl.DataFrame | None = None
    nodes: pl.DataFrame | None = None
    occupancy: pl.DataFrame | None = None
    summary: pl.DataFrame | None = None
    capacity: pl.DataFrame | None = None
    notes: tuple[str, ...] = field(default=())
