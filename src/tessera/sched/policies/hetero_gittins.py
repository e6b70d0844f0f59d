"""``hetero_gittins``: :class:`~tessera.sched.policies.hetero_srpt.HeteroSrpt` without oracle
durations.

``hetero_srpt`` ranks jobs by their remaining time, which only a simulator (or an oracle of job
lengths) knows. A live scheduler knows how much service a job has *attained* and, from the
trace's history, a prior over job durations. The Gittins index turns those two into a priority:
the best rate, per second of service invested, at which the job can be expected to finish.
Everything else -- flavor matching, gang defragmentation, no starvation -- is ``hetero_srpt``'s;
this module only replaces its remaining-time estimate.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import JobView
from tessera.sched.policies.hetero_srpt import HeteroSrpt, HeteroSrptConfig


class HeteroGittinsConfig(HeteroSrptConfig):
    prior_minutes: tuple[tuple[float, float, float], ...] = Field(
        ((0.8, 10**1.5, 10**3), (0.2, 10**3, 10**4)),
        description="job-duration prior on the fastest flavor: (weight, low, high) minutes, "
        "log-uniform within each piece (default: Gavel's Philly-derived distribution)",
    )
    prior_points: int = Field(256, ge=8, le=4096,
                              description="equally likely points the prior is drawn as")


class HeteroGittins(HeteroSrpt):
    """:class:`HeteroSrpt` without oracle durations.

    A job's remaining time is not known; what is known is how much service it has attained
    (steps done, converted to seconds on its fastest flavor) and a prior over job durations.
    The Gittins index of a job with attained service ``a`` is

        G(a) = max_Δ  P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a],

    the best achievable rate of completing the job per second of service invested. Its
    inverse ``1 / G(a)`` replaces the oracle remaining time in :class:`HeteroSrpt`: with a
    heavy-tailed prior (most jobs short, a few very long) young jobs rank first, a job that
    has survived past the short mode sinks, and a job near a likely end point rises again.
    A job that outlives every point of the prior is given ``remaining = attained``.
    """

    Config = HeteroGittinsConfig
    oracle = ""  # attained service, not the remaining time: what a real scheduler knows

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        cfg = self.config
        assert isinstance(cfg, HeteroGittinsConfig)
        self._sizes = _prior_quantiles(cfg.prior_minutes, cfg.prior_points)

    def _remaining_best_s(self, j: JobView, best_rate: float, now_s: float,
                          ctx: PolicyContext) -> float:
        attained = max(j.spec.total_steps - j.remaining_at(now_s), 0.0) / best_rate
        # One-minute buckets keep the cache small. Attained service often lands on a whole
        # minute (whole rounds on the fastest flavor); rounding to a microsecond first keeps
        # one ulp of float noise (steps summed in another order, as the live service and the
        # simulator do) from moving a job to the minute before.
        key = int(round(attained, 6) // 60)
        table: dict[int, float] = ctx.cache(self, "gittins_remaining_s", dict)
        hit = table.get(key)
        if hit is None:
            hit = _gittins_remaining(self._sizes, key * 60.0)
            table[key] = hit
        return hit


def _prior_quantiles(pieces: tuple[tuple[float, float, float], ...], n: int) -> np.ndarray:
    """``n`` equally likely points (seconds) of a piecewise log-uniform distribution."""
    total = sum(w for w, _lo, _hi in pieces)
    out = []
    for q in (np.arange(n) + 0.5) / n:
        acc = 0.0
        for w, lo, hi in pieces:
            p = w / total
            if q <= acc + p or (w, lo, hi) == pieces[-1]:
                u = min(max((q - acc) / p, 0.0), 1.0)
                out.append(60.0 * 10 ** (math.log10(lo) + u * (math.log10(hi) - math.log10(lo))))
                break
            acc += p
    return np.sort(np.array(out))


def _gittins_remaining(sizes: np.ndarray, attained: float) -> float:
    """``1 / G(attained)`` over the empirical distribution ``sizes`` (sorted, seconds)."""
    tail = sizes[sizes > attained] - attained
    n = len(tail)
    if n == 0:
        return max(attained, 1.0)
    k = np.arange(1, n + 1)
    # E[min(S - a, tail_k)] · n  =  sum of the first k remainders + (n - k) · tail_k
    invested = np.cumsum(tail) + (n - k) * tail
    return float(np.min(invested / k))
