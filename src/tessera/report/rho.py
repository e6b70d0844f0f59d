"""Reading finish-time fairness ρ: which jobs make a policy's ρ tail.

ρ = JCT ÷ ideal time (:mod:`tessera.sim.metrics`) counts every second a job waits, relative to
how long it would run alone. A job that runs two minutes alone and waits six for the next
scheduling round has ρ = 4, however fair its share later. Philly is full of such jobs (45 % of
the demo week runs under ten minutes alone), so policies that decide in rounds
(``max_min_fairness``, ``finish_time_fairness``, ``hetero_srpt``; 360 s by default) have a
high ρ p95 made almost entirely of short jobs waiting for the next round, while event-driven
policies start them at once. :func:`rho_by_length` shows the split.

``finish_time_fairness`` does not minimise *this* ρ. It minimises, at each reallocation, the
worst ρ of the jobs present then, measured Gavel's and Themis's way: against an equal time
share of every flavor (old GPUs included) among those jobs, and blind to the wait before the
next round. On the demo week its ρ p95 over jobs of ten minutes or more (1.9) beats ``las``
(4.1); over all jobs it is the highest (8.7), from the short ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.report.settings import decides_in_rounds
from tessera.report.tables import human_duration
from tessera.sim.metrics import SimResult

SHORT_JOB_S = 600.0
"""Jobs whose ideal time is under this count as *short* in :func:`rho_by_length`."""


@dataclass(frozen=True, slots=True)
class RhoSplit:
    """One policy's ρ p95 over all jobs, over short jobs and over the rest."""

    policy: str
    jobs: int
    short_jobs: int
    p95_all: float
    p95_short: float
    p95_long: float


def _p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else math.nan


def rho_by_length(results: Sequence[SimResult], short_s: float = SHORT_JOB_S,
                  ) -> tuple[RhoSplit, ...]:
    """Each policy's ρ p95, split by the jobs' ideal time (shorter than ``short_s`` or not)."""
    out = []
    for r in results:
        pairs = [(j.ftf_rho, j.ideal_s) for j in r.jobs
                 if j.ftf_rho is not None and j.ideal_s is not None]
        short = [rho for rho, ideal in pairs if ideal < short_s]
        long = [rho for rho, ideal in pairs if ideal >= short_s]
        out.append(RhoSplit(r.policy, len(pairs), len(short), _p95([p for p, _i in pairs]),
                            _p95(short), _p95(long)))
    return tuple(out)


def rho_note(results: Sequence[SimResult], short_s: float = SHORT_JOB_S) -> str:
    """One paragraph for the terminal: ρ p95 over the longer jobs next to the table's, and
    what makes short jobs' ρ large."""
    splits = rho_by_length(results, short_s)
    if not splits or not any(s.short_jobs for s in splits):
        return ""
    first = splits[0]
    text = (f"FTF ρ p95 over the jobs that run {human_duration(short_s)} or more alone "
            f"({first.jobs - first.short_jobs:,} of {first.jobs:,}): "
            + ", ".join(f"{s.policy} {s.p95_long:.2f}" for s in splits)
            + ". A job of a few minutes gets a large ρ from any wait")
    rounds = [r.policy for r in results if decides_in_rounds(r.config, r.policy)]
    if rounds:
        text += (f", such as the wait for the next round (every "
                 f"{results[0].config.scheduler.round_s:g} s: {', '.join(rounds)})")
    return text + "."
