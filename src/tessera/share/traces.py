"""Readers for real inference traces, and their replay against a plan over time.

Two Alibaba traces in ``shared/data/traces`` (not bundled: no licence is stated upstream, so
they are read from the data folder like the other shared-data readers):

- ``alibaba_genai_2026/lora_request_trace.csv`` -- a *request log*: one row per diffusion
  request, ``gmt_create`` (one-second stamps, ~23 days), ``exec_time_seconds``,
  ``predict_type``, ``num_images_per_prompt``, ``num_inference_steps``. Rows must be in time
  order: an out-of-order stamp is an error naming the line, not something to sort away.
- ``alibaba_dlrm_2025/disaggregated_DLRM_trace.csv`` -- an *instance table*: one row per DLRM
  inference pod with ``creation_time`` / ``scheduled_time`` / ``deletion_time`` (seconds from
  the trace start; empty = outside the trace). Rows are grouped by app, not by time, so the
  reader orders instances by creation time; a negative time or a deletion before the creation
  is an error. Instances with no creation time (created before the trace) are counted, not
  read as arrivals.

A third reader takes any CSV with an ``arrival_s`` column (and optionally ``service``), for
one's own logs; unsorted or negative times are an error there too.

**Replay** (:func:`replay`): every service receives the trace's arrivals *time-compressed* so
that their mean rate equals the service's rate (the trace's shape -- bursts, day and night --
at the service's load). Attainment is then reported per window of *trace* time, so every
service shares one time axis whatever its rate.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from tessera.errors import SpecError, TraceFormatError
from tessera.share.plan import SharePlan
from tessera.share.profiles import ProfileTable
from tessera.share.serving_sim import RequestStream, request_latencies_ms

GENAI_FILE = "alibaba_genai_2026/lora_request_trace.csv"
DLRM_FILE = "alibaba_dlrm_2025/disaggregated_DLRM_trace.csv"


@dataclass(frozen=True, slots=True, eq=False)
class RequestTrace:
    """Arrival times (s from the first, non-decreasing) and what the file says about each.

    Attributes:
        name: where it came from.
        arrivals_s: arrival (or instance creation) times.
        size: the per-event size the data holds (GenAI: ``exec_time_seconds``; DLRM: the
            instance lifetime ``deletion - creation`` in s, NaN when unknown; CSV: ones).
        size_unit: what ``size`` measures.
        skipped: rows without a time (DLRM instances created before the trace).
    """

    name: str
    arrivals_s: np.ndarray
    size: np.ndarray
    size_unit: str
    skipped: int = 0
    labels: tuple[str, ...] = field(default=(), repr=False)
    tick_s: float = 0.0  # resolution of the stamps: replay jitters each inside its tick

    def window_counts(self, window_s: float) -> np.ndarray:
        """Events per window of ``window_s`` trace seconds, from time 0."""
        n_win = max(1, math.ceil(self.duration_s / window_s))
        idx = np.minimum((self.arrivals_s // window_s).astype(int), n_win - 1)
        return np.bincount(idx, minlength=n_win)

    def peak_to_mean(self, window_s: float) -> float:
        """Busiest window's rate over the mean rate."""
        c = self.window_counts(window_s)
        return float(c.max() / c.mean())

    @property
    def duration_s(self) -> float:
        return float(self.arrivals_s[-1] - self.arrivals_s[0]) if len(self.arrivals_s) else 0.0

    @property
    def mean_rate_rps(self) -> float:
        return (len(self.arrivals_s) - 1) / self.duration_s if self.duration_s > 0 else 0.0


def _need(path: Path) -> None:
    if not path.is_file():
        raise SpecError(f"trace file not found: {path}")


def _check_order(times: list[float], lines: list[int], path: Path, column: str,
                 origin: float = 0.0) -> None:
    """Refuse a time earlier than the one before it (``origin``: shown times are relative)."""
    for k in range(1, len(times)):
        if times[k] < times[k - 1]:
            raise TraceFormatError(
                str(path), lines[k], column,
                f"times are not sorted ({times[k] - origin:g} s after {times[k - 1] - origin:g} s"
                + (" from the first request)" if origin else ")"))


def read_genai(path: Path) -> RequestTrace:
    """The GenAI request log: arrivals from ``gmt_create``, size = execution seconds."""
    _need(path)
    times: list[float] = []
    execs: list[float] = []
    lines: list[int] = []
    kinds: list[str] = []
    with path.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            stamp = (row.get("gmt_create") or "").strip()
            try:
                t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
            except ValueError as e:
                raise TraceFormatError(str(path), line, "gmt_create", str(e)) from None
            ex = (row.get("exec_time_seconds") or "").strip()
            times.append(t)
            execs.append(float(ex) if ex else math.nan)
            lines.append(line)
            kinds.append(row.get("predict_type") or "")
    if len(times) < 2:
        raise SpecError(f"{path}: fewer than two requests")
    _check_order(times, lines, path, "gmt_create", origin=times[0])
    arr = np.asarray(times) - times[0]
    return RequestTrace(str(path), arr, np.asarray(execs), "exec_time_s", 0, tuple(kinds), 1.0)


def _opt_float(row: dict[str, str], col: str, path: Path, line: int) -> float | None:
    v = (row.get(col) or "").strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError as e:
        raise TraceFormatError(str(path), line, col, str(e)) from None
    if x < 0 or not math.isfinite(x):
        raise TraceFormatError(str(path), line, col, f"negative or non-finite time {v}")
    return x


def read_dlrm(path: Path) -> RequestTrace:
    """The DLRM instance table: arrivals = creation times (ordered), size = lifetime (s)."""
    _need(path)
    events: list[tuple[float, float, str]] = []
    skipped = 0
    with path.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            created = _opt_float(row, "creation_time", path, line)
            deleted = _opt_float(row, "deletion_time", path, line)
            if created is None:
                skipped += 1
                continue
            if deleted is not None and deleted < created:
                raise TraceFormatError(str(path), line, "deletion_time",
                                       f"deleted at {deleted:g} s before created at {created:g} s")
            life = deleted - created if deleted is not None else math.nan
            events.append((created, life, row.get("app_name") or ""))
    if len(events) < 2:
        raise SpecError(f"{path}: fewer than two instances with a creation time")
    events.sort(key=lambda e: e[0])
    arr = np.asarray([e[0] for e in events])
    return RequestTrace(str(path), arr - arr[0], np.asarray([e[1] for e in events]),
                        "lifetime_s", skipped, tuple(e[2] for e in events), 1.0)


def read_arrivals_csv(path: Path) -> RequestTrace:
    """Any CSV with an ``arrival_s`` column (s, non-negative, non-decreasing)."""
    _need(path)
    times: list[float] = []
    lines: list[int] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if "arrival_s" not in (reader.fieldnames or []):
            raise SpecError(f"{path}: no arrival_s column (columns: {reader.fieldnames})")
        for line, row in enumerate(reader, start=2):
            t = _opt_float(row, "arrival_s", path, line)
            if t is None:
                raise TraceFormatError(str(path), line, "arrival_s", "empty time")
            times.append(t)
            lines.append(line)
    if len(times) < 2:
        raise SpecError(f"{path}: fewer than two arrivals")
    _check_order(times, lines, path, "arrival_s")
    arr = np.asarray(times)
    return RequestTrace(str(path), arr - arr[0], np.ones(len(arr)), "requests")


def read_request_trace(name: str, traces_dir: Path | None) -> RequestTrace:
    """``genai``, ``dlrm`` (from ``traces_dir``) or a path to an ``arrival_s`` CSV."""
    if name in ("genai", "dlrm"):
        if traces_dir is None:
            raise SpecError(f"trace {name!r} needs the traces folder (--traces-dir)")
        return (read_genai(traces_dir / GENAI_FILE) if name == "genai"
                else read_dlrm(traces_dir / DLRM_FILE))
    path = Path(name)
    if path.suffix != ".csv":
        raise SpecError(f"unknown trace {name!r}: use genai, dlrm or a CSV with arrival_s")
    return read_arrivals_csv(path)


@dataclass(frozen=True, slots=True)
class WindowAttainment:
    """One window of trace time: requests and the fraction on time, per service."""

    start_h: float
    requests: dict[str, int]
    attainment: dict[str, float]  # NaN when the service had no request in the window


@dataclass(frozen=True, slots=True)
class Replay:
    """A trace replayed against a plan."""

    trace: str
    window_h: float
    windows: tuple[WindowAttainment, ...]
    p99_ms: dict[str, float]
    attainment: dict[str, float]
    slo_ms: dict[str, float]
    requests: dict[str, int]

    def worst_window(self, service: str) -> float:
        vals = [w.attainment[service] for w in self.windows
                if not math.isnan(w.attainment[service])]
        return min(vals) if vals else 1.0


def compressed_streams(
    plan: SharePlan, trace: RequestTrace, *, rate_is: str = "mean", window_h: float = 6.0,
    seed: int = 0,
) -> tuple[tuple[RequestStream, ...], dict[str, float]]:
    """Each service's copy of the trace, time-compressed so that the service's ``rate_rps``
    is the trace's mean rate (``rate_is="mean"``) or its busiest ``window_h`` window's rate
    (``"peak"``); and the factor per service (trace seconds per replay second). Stamps of
    one-second resolution are spread uniformly inside their second first (seeded)."""
    if trace.mean_rate_rps <= 0:
        raise SpecError(f"{trace.name}: no time spread")
    if rate_is not in ("mean", "peak"):
        raise SpecError(f"rate_is must be mean or peak, got {rate_is!r}")
    times = trace.arrivals_s
    if trace.tick_s > 0:
        rng = np.random.default_rng(seed)
        times = np.sort(times + rng.uniform(0.0, trace.tick_s, len(times)))
    ref = trace.mean_rate_rps
    if rate_is == "peak":
        ref *= trace.peak_to_mean(window_h * 3600.0)
    streams, factor = [], {}
    for s in plan.services:
        c = s.rate_rps / ref
        factor[s.name] = c
        streams.append(RequestStream(s.name, times / c))
    return tuple(streams), factor


def replay(plan: SharePlan, trace: RequestTrace, table: ProfileTable, *, window_h: float = 6.0,
           rate_is: str = "mean", seed: int = 0) -> Replay:
    """Replay ``trace`` against ``plan`` (see the module docstring); attainment per window.
    ``rate_is`` says which rate of the trace each service's ``rate_rps`` stands for."""
    if window_h <= 0:
        raise SpecError(f"window must be > 0 h, got {window_h:g}")
    streams, factor = compressed_streams(plan, trace, rate_is=rate_is, window_h=window_h,
                                         seed=seed)
    by_name = {s.name: s for s in plan.services}
    n_win = max(1, math.ceil(trace.duration_s / (window_h * 3600.0)))
    edges = np.arange(n_win + 1) * window_h * 3600.0
    win_req: list[dict[str, int]] = [{} for _ in range(n_win)]
    win_att: list[dict[str, float]] = [{} for _ in range(n_win)]
    p99, att, reqs = {}, {}, {}
    rng = np.random.default_rng(seed)
    for st in streams:
        svc = by_name[st.service]
        lat = request_latencies_ms(plan, st, table, rng)
        ok = lat <= svc.slo_ms
        p99[svc.name] = float(np.percentile(lat, 99))
        att[svc.name] = float(ok.mean())
        reqs[svc.name] = len(lat)
        idx = np.clip(np.searchsorted(edges, st.arrivals_s * factor[svc.name], "right") - 1,
                      0, n_win - 1)
        counts = np.bincount(idx, minlength=n_win)
        good = np.bincount(idx, weights=ok.astype(float), minlength=n_win)
        for w in range(n_win):
            win_req[w][svc.name] = int(counts[w])
            win_att[w][svc.name] = float(good[w] / counts[w]) if counts[w] else math.nan
    windows = tuple(WindowAttainment(w * window_h, win_req[w], win_att[w]) for w in range(n_win))
    return Replay(trace.name, window_h, windows, p99, att,
                  {s.name: s.slo_ms for s in plan.services}, reqs)
