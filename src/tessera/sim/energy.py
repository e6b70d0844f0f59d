"""Energy of a simulated run: cluster power over time, energy per job, peak power, carbon.

Every GPU of the cluster draws its idle power (:meth:`PowerModel.idle_power_w`) from the first
submission to the last event; a GPU a job holds draws the job's average power on that flavor
(:meth:`PowerModel.estimate`) instead, for the whole run -- its checkpoint restore included --
at the maximum limit unless a power limit capped it: a power budget or Zeus's per-job limits
(:mod:`tessera.sim.power_runs`) tell the book each limit a job runs at from when
(:meth:`EnergyBook.limit_set`), and the stretch of the run at that limit is booked at the
capped draw. So energy, the power series and the peak are one book, whatever set the limits.
A fractional job (``gpu_milli``) adds its share of the busy-over-idle draw. So cluster power is
a step function that changes only when a run starts or stops or a job's limit changes:
:class:`EnergyBook` records one entry per run and limit stretch (not per second) and builds the
step function once, at the end.

* ``energy_kwh`` -- the integral of cluster power over the run.
* ``avg_power_kw`` -- ``energy / span``; ``peak_power_kw`` -- the step function's maximum.
* a job's ``energy_kwh`` -- its GPUs' draw over its runs (the GPUs it held, at its power).
* ``carbon_kg`` -- with a carbon trace, the integral of power × intensity
  (:meth:`tessera.workload.carbon.CarbonTrace.carbon_g`).
* ``jobs_carbon_kg`` -- GAIA's count (Hanafy et al., ASPLOS'24; its simulator charges a job
  its cores' constant draw times the intensity of each slot it runs in, and nothing for idle
  reserved capacity): every job's GPUs at the job's *full* draw (idle baseline included)
  while it runs, times the intensity then; idle and suspended GPUs are not counted.

Suspended servers (:mod:`tessera.sim.server_sleep`) draw their off power instead of idle:
:meth:`EnergyBook.suspended` books each suspension as a negative step of
``GPUs × (idle − off)`` on the cluster's power (not on any job's).

Power numbers come from :func:`tessera.perf.power_estimate.default_power_model` (the model the
power budget and Zeus's limits also use): measured where Zeus measured the job and flavor,
otherwise the documented estimate; the summary's
``power_sources`` says which sources were used.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerModel
from tessera.perf.power_estimate import default_power_model
from tessera.sched.core.snapshot import Placement
from tessera.sim.state import SimJob
from tessera.workload.carbon import CarbonTrace

__all__ = ["EnergyBook", "EnergySummary", "with_carbon"]

MAX_SERIES_POINTS = 2000
"""At most this many points of the power series go into ``--json`` and the report's plot."""


@dataclass(frozen=True, slots=True, eq=False)
class EnergySummary:
    """A run's energy and power.

    Attributes:
        energy_kwh: cluster energy over ``[start_s, end_s]``.
        avg_power_kw: ``energy_kwh`` over the span.
        peak_power_kw: highest cluster power at any instant.
        idle_power_kw: the cluster's power with every GPU idle.
        start_s, end_s: the span (first submission to the last event), simulated seconds.
        times_s, power_w: the power step function (``power_w[i]`` from ``times_s[i]``).
        power_sources: the power models' ``source`` strings used, sorted.
        carbon_kg: emissions under ``carbon_region``'s trace, ``None`` without a trace.
        carbon_region: the trace's name, ``None`` without one.
        jobs_times_s, jobs_power_w: the jobs' full draw (GAIA's count: their GPUs at the
            job's power while it runs, idle baseline included; idle GPUs not counted).
        jobs_carbon_kg: that draw's emissions under the trace, ``None`` without a trace.
    """

    energy_kwh: float
    avg_power_kw: float
    peak_power_kw: float
    idle_power_kw: float
    start_s: float
    end_s: float
    times_s: np.ndarray
    power_w: np.ndarray
    power_sources: tuple[str, ...]
    carbon_kg: float | None = None
    carbon_region: str | None = None
    jobs_times_s: np.ndarray | None = None
    jobs_power_w: np.ndarray | None = None
    jobs_carbon_kg: float | None = None

    def as_dict(self) -> dict[str, object]:
        """The flat metrics ``--json`` carries (the series as ``power_series``)."""
        t, p = self.series(MAX_SERIES_POINTS)
        return {
            "energy_kwh": self.energy_kwh, "avg_power_kw": self.avg_power_kw,
            "peak_power_kw": self.peak_power_kw, "idle_power_kw": self.idle_power_kw,
            "carbon_kg": self.carbon_kg, "carbon_region": self.carbon_region,
            "jobs_carbon_kg": self.jobs_carbon_kg,
            "power_sources": list(self.power_sources),
            "power_series": {"time_s": [round(x, 3) for x in t],
                             "power_kw": [round(x, 6) for x in p]},
        }

    def series(self, max_points: int) -> tuple[list[float], list[float]]:
        """The power step function in kW, thinned to at most ``max_points`` points (each kept
        point is the peak of the points it stands for, so peaks survive thinning)."""
        t, p = self.times_s, self.power_w / 1e3
        if len(t) <= max_points:
            return t.tolist(), p.tolist()
        edges = np.linspace(0, len(t), max_points + 1).astype(int)
        return (t[edges[:-1]].tolist(),
                [float(p[a:b].max()) for a, b in itertools.pairwise(edges)])


def with_carbon(summary: EnergySummary, trace: CarbonTrace) -> EnergySummary:
    """``summary`` with ``carbon_kg`` (and GAIA's ``jobs_carbon_kg``) under ``trace``."""
    grams = trace.carbon_g(summary.times_s, summary.power_w)
    jobs_g = (trace.carbon_g(summary.jobs_times_s, summary.jobs_power_w)
              if summary.jobs_times_s is not None and summary.jobs_power_w is not None
              else None)
    return replace(summary, carbon_kg=grams / 1e3, carbon_region=trace.name,
                   jobs_carbon_kg=None if jobs_g is None else jobs_g / 1e3)


class EnergyBook:
    """Records each run's GPUs and power; :meth:`summary` integrates at the end."""

    def __init__(self, cluster: ClusterSpec, model: PowerModel | None = None) -> None:
        self.model = model or default_power_model()
        self.idle_w = {f: self.model.idle_power_w(f) for f in cluster.gpus_by_flavor()}
        self.idle_total_w = sum(self.idle_w[f] * n for f, n in cluster.gpus_by_flavor().items())
        self._busy_w: dict[tuple[str, str | None, GpuFlavor, float | None], float] = {}
        self.sources: set[str] = set()
        self.changes: list[tuple[float, float]] = []
        """``(time_s, watts added)``: + at a stretch's start, − at its end."""
        self.job_changes: list[tuple[float, float]] = []
        """``(time_s, watts)`` of the jobs' full draw (GAIA's count): + at a stretch's start,
        − at its end."""
        self.sleep_changes: list[tuple[float, float]] = []
        """``(time_s, watts)`` saved by suspended servers: − from a suspension, + at its end
        (kept apart from ``changes``: a suspension does not extend the run's span)."""
        self.job_j: dict[int, float] = {}
        self._limits: dict[int, list[tuple[float, float | None]]] = {}
        """Each running job's ``(from_s, power limit W or None)`` marks, in time order."""

    def _job_w(self, job: SimJob, flavor: GpuFlavor, limit_w: float | None) -> float:
        """Per-GPU draw of ``job`` on ``flavor`` at ``limit_w`` (``None``: the maximum),
        memoised per job type, model, flavor and limit."""
        key = (job.spec.job_type, job.spec.model, flavor, limit_w)
        w = self._busy_w.get(key)
        if w is None:
            est = self.model.estimate(job.spec.job_type, job.spec.model, flavor, limit_w)
            self.sources.add(est.source)
            w = self._busy_w[key] = est.avg_power_w
        return w

    def limit_set(self, idx: int, t_s: float, limit_w: float | None) -> None:
        """Job ``idx`` runs at ``limit_w`` (``None``: uncapped) from ``t_s`` on, until its
        next mark or the end of its run. Marks are dropped when the run ends."""
        self._limits.setdefault(idx, []).append((t_s, limit_w))

    def run_ended(self, job: SimJob, p: Placement, start_s: float, end_s: float) -> None:
        """``job`` held ``p`` from ``start_s`` to ``end_s``: book its power and energy, each
        stretch at the limit it ran at (a gang over mixed flavors always runs uncapped)."""
        marks = self._limits.pop(job.idx, [])
        limit: float | None = None
        cuts: list[tuple[float, float | None]] = []
        for t_s, lim in marks:
            if t_s <= start_s:
                limit = lim
            elif t_s < end_s:
                cuts.append((t_s, lim))
        if p.node_flavors:
            limit, cuts = None, []
        t0 = start_s
        for t1, nxt in [*cuts, (end_s, None)]:
            self._stretch(job, p, t0, t1, limit)
            t0, limit = t1, nxt

    def _stretch(self, job: SimJob, p: Placement, start_s: float, end_s: float,
                 limit_w: float | None) -> None:
        """Book ``job`` on ``p`` at ``limit_w`` from ``start_s`` to ``end_s``."""
        dur = end_s - start_s
        if dur <= 0:
            return
        share = job.spec.gpu_milli / 1000 if job.spec.gpu_milli else 1.0
        flavors = p.node_flavors or (p.flavors[0],) * len(p.gpus_by_node)
        job_w = extra_w = 0.0
        for (_, k), f in zip(p.gpus_by_node, flavors, strict=True):
            w = self._job_w(job, f, limit_w)
            job_w += k * w * share
            extra_w += k * (w - self.idle_w.get(f, 0.0)) * share
        self.job_j[job.idx] = self.job_j.get(job.idx, 0.0) + job_w * dur
        self.changes.append((start_s, extra_w))
        self.changes.append((end_s, -extra_w))
        self.job_changes.append((start_s, job_w))
        self.job_changes.append((end_s, -job_w))

    def suspended(self, start_s: float, end_s: float, saved_w: float) -> None:
        """A server was suspended from ``start_s`` to ``end_s``, drawing ``saved_w`` less than
        its idle GPUs would (``GPUs × (idle − off)``); stretches past the span are clipped."""
        if end_s > start_s and saved_w > 0:
            self.sleep_changes.append((start_s, -saved_w))
            self.sleep_changes.append((end_s, saved_w))

    def jobs_j(self) -> float:
        """Energy of every job's runs so far, in joules (idle GPUs not counted)."""
        return sum(self.job_j.values())

    def job_kwh(self, idx: int) -> float:
        """Energy of job ``idx``'s runs so far, in kWh."""
        return self.job_j.get(idx, 0.0) / 3.6e6

    def last_change_s(self) -> float:
        """When the last recorded run ended (``-inf`` when none ran)."""
        return max((t for t, _ in self.changes), default=float("-inf"))

    def summary(self, start_s: float, end_s: float) -> EnergySummary:
        """Integrate the recorded runs over ``[start_s, end_s]``."""
        end_s = max(end_s, start_s)
        times, power = _steps(self.changes + self.sleep_changes, self.idle_total_w,
                              start_s, end_s)
        jobs_times, jobs_power = _steps(self.job_changes, 0.0, start_s, end_s)
        energy_j = float(np.sum(power[:-1] * np.diff(times)))
        span = end_s - start_s
        return EnergySummary(
            energy_kwh=energy_j / 3.6e6,
            avg_power_kw=energy_j / span / 1e3 if span > 0 else self.idle_total_w / 1e3,
            peak_power_kw=float(power.max()) / 1e3, idle_power_kw=self.idle_total_w / 1e3,
            start_s=start_s, end_s=end_s, times_s=times, power_w=power,
            power_sources=tuple(sorted(self.sources)),
            jobs_times_s=jobs_times, jobs_power_w=jobs_power,
        )


def _steps(changes: list[tuple[float, float]], base_w: float, start_s: float,
           end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The step function ``base_w`` + the cumulated ``(time_s, watts)`` changes over
    ``[start_s, end_s]`` (changes outside are clipped to the span's ends)."""
    ch = sorted(changes)
    times = np.array([start_s] + [t for t, _ in ch] + [end_s], dtype=float)
    power = base_w + np.concatenate(([0.0], np.cumsum([w for _, w in ch]), [0.0]))
    times = np.clip(times, start_s, end_s)
    power[-1] = power[-2] if len(power) > 1 else power[-1]
    # Collapse equal times (the step's value is the last change at that time).
    keep = np.append(times[1:] != times[:-1], True)
    return times[keep], power[keep]
