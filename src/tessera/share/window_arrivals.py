"""Each rate level's own arrivals: the trace's inter-arrivals inside the windows at that level.

:func:`~tessera.share.reconfig.compare_strategies` sizes each window of a trace for its rate
level. Checked with Poisson arrivals, a plan meets p99 in the check and then misses it under the
trace's own bursts (the GenAI trace's inter-arrival coefficient of variation is ~12). This
module gives each level the arrival process its windows really have:

- the arrival times inside each window (one-second stamps spread uniformly inside their second,
  seeded, as :func:`~tessera.share.traces.compressed_streams` does);
- the gaps *within* each window (not the idle gap from one window to the next), pooled over all
  windows at the level, in trace order;
- an :class:`~tessera.share.p99.ArrivalModel` over those gaps: each service replays the pool,
  scaled so its mean gap is ``1 / rate`` at the level, from a seeded offset, at least
  ``min_requests`` requests and at least every pooled gap once.

So the p99 loop (:func:`~tessera.share.p99.plan_for_p99`) tightens each level's plan against the
bursts its windows carry, exactly as it does against Poisson arrivals.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import SpecError
from tessera.share.p99 import ArrivalModel
from tessera.share.traces import RequestTrace


def window_times(trace: RequestTrace, window_h: float, seed: int = 0) -> list[np.ndarray]:
    """The (jittered, sorted) arrival times of each window of ``window_h`` trace hours."""
    if window_h <= 0:
        raise SpecError(f"window must be > 0 h, got {window_h:g}")
    times = trace.arrivals_s
    if trace.tick_s > 0:
        rng = np.random.default_rng(seed)
        times = np.sort(times + rng.uniform(0.0, trace.tick_s, len(times)))
    window_s = window_h * 3600.0
    n_win = len(trace.window_counts(window_s))
    idx = np.minimum((times // window_s).astype(int), n_win - 1)
    return [times[idx == w] for w in range(n_win)]


def level_arrivals(
    trace: RequestTrace, window_h: float, levels: np.ndarray, *, min_requests: int = 5_000,
    seed: int = 0,
) -> dict[float, ArrivalModel]:
    """One arrival model per rate level, from the gaps inside the windows at that level.

    ``levels`` is :func:`~tessera.share.reconfig.window_levels`' output (one per window). A
    level whose windows hold fewer than two arrivals in all gets Poisson arrivals (nothing of
    the trace to replay)."""
    per_window = window_times(trace, window_h, seed)
    if len(per_window) != len(levels):
        raise SpecError(f"{len(levels)} levels for {len(per_window)} windows")
    pooled: dict[float, list[np.ndarray]] = {}
    for times, lv in zip(per_window, levels.tolist(), strict=True):
        if len(times) >= 2:
            pooled.setdefault(lv, []).append(np.diff(times))
    out: dict[float, ArrivalModel] = {}
    for lv in set(levels.tolist()):
        gaps = np.concatenate(pooled.get(lv, [np.empty(0)]))
        if len(gaps) == 0 or float(gaps.sum()) <= 0:
            out[lv] = ArrivalModel("poisson", min_requests, seed)
            continue
        out[lv] = ArrivalModel(
            f"{_short(trace.name)} windows at {lv:.3g} of peak ({len(gaps):,} gaps)",
            max(min_requests, len(gaps)), seed,
            np.concatenate(([0.0], np.cumsum(gaps))),
        )
    return out


def burstiness(model: ArrivalModel) -> float:
    """Coefficient of variation of a model's inter-arrival gaps (1 for Poisson)."""
    if model.trace_times_s is None:
        return 1.0
    gaps = np.diff(model.trace_times_s)
    return float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0


def _short(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1] or name
