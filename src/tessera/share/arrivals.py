"""Trace-shaped request streams: real burstiness, rescaled to each service's rate.

Poisson arrivals are the textbook assumption; production traffic is burstier. Two Alibaba
traces in ``shared/data/traces`` carry real time stamps:

- ``alibaba_genai_2026/lora_request_trace.csv``: one row per diffusion-serving request
  (``gmt_create``, one-second resolution, ~23 days);
- ``alibaba_dlrm_2025/disaggregated_DLRM_trace.csv``: creation times of DLRM inference
  instances (``creation_time`` in seconds), a proxy for how DLRM load arrives in waves.

Neither trace is a request log of the profiled CNN models, so we borrow only their *shape*:
the inter-arrival sequence (stamps jittered uniformly inside their one-second tick) is scaled so
its mean rate equals the service's rate, started at a random offset per service, and repeated
if the window runs past the end. The result keeps the trace's burstiness (its coefficient of
variation) at the service's load.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import numpy as np

from tessera.errors import SpecError, TraceFormatError
from tessera.share.profiles import Service
from tessera.share.serving_sim import RequestStream

TRACE_FILES: tuple[tuple[str, str, str], ...] = (
    ("genai", "alibaba_genai_2026/lora_request_trace.csv", "gmt_create"),
    ("dlrm", "alibaba_dlrm_2025/disaggregated_DLRM_trace.csv", "creation_time"),
)


def read_trace_times(kind: str, traces_dir: Path) -> np.ndarray:
    """Sorted event times (s from the first event) of a trace, jittered within their tick."""
    spec = next((t for t in TRACE_FILES if t[0] == kind), None)
    if spec is None:
        raise SpecError(f"unknown trace {kind!r}: use {', '.join(t[0] for t in TRACE_FILES)}")
    path = traces_dir / spec[1]
    if not path.is_file():
        raise SpecError(f"trace file not found: {path}")
    times: list[float] = []
    with path.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            value = (row.get(spec[2]) or "").strip()
            if not value:
                continue
            try:
                if kind == "genai":
                    times.append(datetime.strptime(value, "%Y-%m-%d %H:%M:%S").timestamp())
                else:
                    times.append(float(value))
            except ValueError as e:
                raise TraceFormatError(str(path), line, spec[2], str(e)) from None
    if len(times) < 2:
        raise SpecError(f"{path}: fewer than two time stamps")
    arr = np.sort(np.asarray(times))
    arr = arr - arr[0]
    return np.sort(arr + np.random.default_rng(0).uniform(0.0, 1.0, len(arr)))


def shaped_streams(
    services: tuple[Service, ...], trace_times_s: np.ndarray, duration_s: float, seed: int = 0
) -> tuple[RequestStream, ...]:
    """One stream per service with the trace's inter-arrival shape at the service's rate."""
    rng = np.random.default_rng(seed)
    gaps = np.diff(trace_times_s)
    gaps = gaps[gaps >= 0]
    mean_gap = float(gaps.mean())
    if mean_gap <= 0:
        raise SpecError("trace has no time spread")
    out = []
    for s in services:
        scaled = gaps / mean_gap / s.rate_rps  # mean gap becomes 1 / rate
        need = int(s.rate_rps * duration_s * 1.2) + 10
        start = int(rng.integers(len(scaled)))
        idx = (start + np.arange(need)) % len(scaled)
        arrivals = np.cumsum(scaled[idx])
        out.append(RequestStream(s.name, arrivals[arrivals < duration_s]))
    return tuple(out)
