"""Learned speeds: policies see estimates of a job's per-flavor speed, never the table.

Under ``tessera simulate --speeds learned`` the simulator keeps two oracles over one table:

* the **truth** (:class:`ObservedOracle`, a :class:`ThroughputOracle` that reports every true
  rate it hands out for a job on a flavor: the simulator asks it exactly when the job runs
  there, to advance it) drives the simulated progress;
* the **policies' view** (:class:`LearnedOracle`) answers :meth:`rates`, :meth:`rate`,
  :meth:`best_rate`, :meth:`fastest_first`, :meth:`faster_than` and
  :meth:`placement_rate` from :class:`tessera.perf.estimate.SpeedEstimator`: before a job has
  run, the prior (the table's *other* job types completed in log space; when the table has
  job types of the same model, their measured cells interpolated at the job's batch size,
  :func:`tessera.perf.model_shape.measured_prior`: the job's own type is left out, as if the
  table had never measured it); once it has run on a flavor, its observed rate there
  (exactly: the observation, not the fitted row), which also fixes the whole row's scale.
  Flavors whose estimates are a near tie are ordered by what other jobs gain from them
  (:meth:`LearnedOracle.fastest_first`).

What the view still takes from the truth, and why: *where* a job can run (which flavors fit
its memory: a memory model answers that, not a speed estimate), and the ratio of its split to
its consolidated speed on a flavor (the network penalty, not the GPU's speed). A 3-D
(``parallelism``) job is priced by the planner as before. Rates are in the table's unit
(steps per second for the gang); a gang's prior is the 1-GPU estimate times its size times
the table's scaling prior for that size (:mod:`tessera.perf.scaling_prior`: the per-GPU
efficiency of the other job types' gangs of that size on that flavor). Once the gang has run
on some flavors at its size, those per-GPU rates, divided by their flavors' prior, fix the
1-GPU row, and each other flavor gets the row times its own prior (:meth:`_one_gpu`).

:meth:`LearnedOracle.error_note` states, for the run's notes, how far the estimates the
policies saw were from the truth: at a job's first decision (prior) and at its last;
:meth:`LearnedOracle.error_of` gives one job's error now (the run's error-over-time series,
:mod:`tessera.sim.estimate_error`).

**Measurement noise.** With ``noise`` > 0 every observed rate is the true one times
``exp(noise · z)``, ``z`` a standard normal drawn from a generator seeded by the run's seed,
the job, the flavor and the gang size (so a run is reproducible whatever the order of events).

**Bootstrap profiles** (:mod:`tessera.sim.bootstrap`): while a job runs its short 1-GPU
profiles its spec is a pinned copy under its own id (``<job>/profile``, so no policy's memory
mixes a profile with the job); :attr:`LearnedOracle.profiling` maps those ids to the jobs',
observations on a profile count for its job, and profiles are left out
of the first/last-decision errors (a profile is not a decision about the job's real gang), and
a 1-GPU profile's observations give the gang's *shape* across flavors, and the gang's own runs
its scale (:meth:`LearnedOracle.observed`).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.perf.estimate import SpeedEstimator, model_of
from tessera.perf.model_shape import measured_prior
from tessera.perf.scaling_prior import ScalingPrior
from tessera.sched.core.oracle import FlavorRate, ThroughputOracle
from tessera.sched.core.snapshot import Placement

#: Two flavors whose estimates for a job are closer than this (relative) are a near tie
#: (:meth:`LearnedOracle.fastest_first`): about the estimate's error on a flavor the job has
#: not run on (Sia's table, leave-one-job-type-out: 1-GPU prior 8.6 % and gang scaling prior
#: 8.2 % mean |log error|; first-decision error of Sia's Philly runs 6.7-7.6 %). On those
#: runs 0.05 and 0.10 give the same ``las`` JCTs, 0.03 none of the gain (docs/scheduler.md).
NEAR_TIE = 0.10

SPEEDS = ("table", "learned")
"""``--speeds`` values: ``table`` (policies read the table) or ``learned`` (estimates)."""


class ObservedOracle(ThroughputOracle):
    """The truth, telling a listener each (job, flavor) whose true rate it hands out."""

    listener: Callable[[JobSpec, GpuFlavor], None] | None = None

    def rate(self, job: JobSpec, flavor: GpuFlavor, consolidated: bool) -> float:
        if self.listener is not None:
            self.listener(job, flavor)
        return super().rate(job, flavor, consolidated)


class LearnedOracle(ThroughputOracle):
    """The policies' view under learned speeds (see the module docstring)."""

    per_job_rates = True

    def __init__(self, truth: ObservedOracle, noise: float = 0.0, seed: int = 0) -> None:
        """Args:
            truth: the oracle that drives progress; it tells this one what it hands out.
            noise: relative measurement noise of each observation (``exp(noise · z)``).
            seed: the run's seed (the noise's only source of randomness).
        """
        if not (math.isfinite(noise) and noise >= 0):
            raise SpecError(f"measurement noise {noise!r}: must be a finite number >= 0")
        super().__init__(truth.table, truth.cluster, split_large_gangs=truth.split_large_gangs,
                         truth=truth, plans=truth.plans)
        self._true = truth
        truth.listener = self.observe
        self.noise = noise
        self.seed = seed
        #: bootstrap profiles' ids -> their jobs' ids (see the module docstring)
        self.profiling: dict[str, str] = {}
        self._profiled: set[str] = set()  # (the jobs' ids of those)
        self._estimators: dict[str, SpeedEstimator | None] = {}
        self.scaling = ScalingPrior(truth.table)
        self._model_rows: dict[str, dict[str, float]] = {}  # job type -> measured_prior
        self._flavor_by_short = {f.short: f for f in truth.cluster_flavors}
        # job id -> (flavor short name, gang size) -> observed per-GPU steps/s
        self._observed: dict[str, dict[tuple[str, int], float]] = {}
        # job id -> (the spec the view was made for, the view): a profile's pinned copy and
        # the real spec share the id, so a hit must be for the very same spec.
        self._per_job: dict[str, tuple[JobSpec, tuple[FlavorRate, ...]]] = {}
        self._first_error: dict[str, float] = {}
        self._last_error: dict[str, float] = {}

    # -- learning -----------------------------------------------------------------------------

    def observe(self, job: JobSpec, flavor: GpuFlavor) -> None:
        """``job`` ran on ``flavor``: its (1-GPU equivalent) consolidated rate there is known."""
        if job.parallelism is not None:
            return
        job_id = self.profiling.get(job.job_id, job.job_id)  # (a profile's: its job's)
        if job_id != job.job_id and len(job.flavors) > 1:
            return  # (a concurrent profile's copy over several flavors: each part is
            # observed alone, by the bootstrap)
        seen = self._observed.setdefault(job_id, {})
        key = (flavor.short, job.num_gpus)
        if key in seen:
            return
        true = ThroughputOracle.rate(self._true, job, flavor, True)
        if true > 0:
            seen[key] = true / job.num_gpus * self._noise(job_id, job, flavor)
            self._per_job.pop(job_id, None)

    def start_profile(self, profile_id: str, job_id: str) -> None:
        """``job_id`` runs its bootstrap profiles as ``profile_id`` (see the module
        docstring): their observations are the job's, and neither counts in the
        first/last-decision errors until :meth:`end_profile`."""
        self.profiling[profile_id] = job_id
        self._profiled.add(job_id)

    def end_profile(self, profile_id: str) -> None:
        """The profiles of ``profile_id`` are over (done, failed or cut short)."""
        job_id = self.profiling.pop(profile_id, None)
        if job_id is not None:
            self._profiled.discard(job_id)
            self._per_job.pop(job_id, None)

    def _noise(self, job_id: str, job: JobSpec, flavor: GpuFlavor) -> float:
        """The measurement's factor, ``exp(noise · z)`` (1.0 without noise)."""
        if not self.noise:
            return 1.0
        key = f"{self.seed}/{job_id}/{flavor.short}/{job.num_gpus}".encode()
        return math.exp(self.noise * random.Random(zlib.crc32(key)).gauss(0.0, 1.0))

    def observed(self, job: JobSpec) -> dict[str, float]:
        """Per-GPU rates of ``job`` at its own gang size, by flavor short name: those observed
        at that size, and those observed at another (a 1-GPU bootstrap profile) scaled by the
        job's measured scaling (the geometric mean, over the flavors observed at both sizes,
        of own-size / other-size per-GPU rate) or, before the gang has run anywhere, by the
        table's scaling prior for its size on that flavor (:class:`ScalingPrior`)."""
        obs = self._observed.get(job.job_id)
        if not obs:
            return {}
        own = {f: r for (f, g), r in obs.items() if g == job.num_gpus}
        other = {(f, g): r for (f, g), r in obs.items() if g != job.num_gpus and f not in own}
        if not other:
            return own
        both = [math.log(own[f] / r) for (f, g), r in obs.items()
                if g != job.num_gpus and f in own]
        if both:
            scale = math.exp(sum(both) / len(both))
            return {**{f: r * scale for (f, _g), r in other.items()}, **own}
        by_short = self._flavor_by_short
        return {**{f: r * self._efficiency(job, by_short.get(f), job.num_gpus)
                   / self._efficiency(job, by_short.get(f), g)
                   for (f, g), r in other.items()}, **own}

    def _one_gpu(self, job: JobSpec, seen: dict[str, float]) -> dict[str, float]:
        """``seen`` (per-GPU rates at the job's gang size, :meth:`observed`) as 1-GPU rates:
        each divided by the table's scaling prior for that size on its flavor. The estimator's
        row is a 1-GPU row; fitting it to a gang's per-GPU rate took the gang's scaling on the
        flavor it ran on for its scaling everywhere. Divided here, and multiplied back by each
        other flavor's own prior in :meth:`rates`, a gang seen on T4s, whose gangs keep less
        per GPU than an A100's, is not taken to scale as badly on A100s (Sia's Philly gangs
        with one flavor observed: mean error on the others 17.6 % -> 15.1 %)."""
        return {f: r / self._efficiency(job, self._flavor_by_short.get(f), job.num_gpus)
                for f, r in seen.items()}

    def _efficiency(self, job: JobSpec, flavor: GpuFlavor | None, num_gpus: int) -> float:
        """The table's scaling prior for ``job`` at ``num_gpus`` on ``flavor`` (1 for a
        flavor the cluster lacks: ``None``)."""
        return 1.0 if flavor is None else self.scaling.efficiency(job.job_type, flavor,
                                                                   num_gpus)

    def _model_row(self, job_type: str, one_gpu: dict[str, float],
                   guess: dict[str, float]) -> dict[str, float]:
        """The job's 1-GPU row from its model's measured job types
        (:func:`tessera.perf.model_shape.measured_prior`, at the job's batch size) where the
        table has some: that row moved by the mean log gap to the job's ``one_gpu``
        observations (none: the fit's own scale), on the flavors the fit answers; the
        estimator's ``guess`` on the others, moved by the mean log gap between the two on the
        flavors both answer (one scale for the whole row). Without such job types:
        ``guess``. Leave-one-job-type-out on Sia's table (T4, RTX 2080 Ti, A100): mean |log
        error| of the prior 0.396 -> 0.149, with one observation 0.154 -> 0.109
        (docs/scheduler.md "Learned speeds")."""
        if job_type not in self._model_rows:
            self._model_rows[job_type] = measured_prior(self.table, job_type)
        fit = self._model_rows[job_type]
        if not fit:
            return guess
        on_fit = [math.log(r / fit[f]) for f, r in one_gpu.items() if f in fit]
        if on_fit:
            move = math.exp(sum(on_fit) / len(on_fit))
            fit = {f: r * move for f, r in fit.items()}
        both = [math.log(fit[f] / guess[f]) for f in fit if f in guess]
        shift = math.exp(sum(both) / len(both)) if both else 1.0
        return {f: fit.get(f, g * shift) for f, g in guess.items()}

    def _estimator(self, job_type: str) -> SpeedEstimator | None:
        if job_type not in self._estimators:
            try:
                est: SpeedEstimator | None = SpeedEstimator.from_table(
                    self.table, without_job_types=[job_type])
            except SpecError:
                est = None
            self._estimators[job_type] = est
        return self._estimators[job_type]

    # -- what policies see ----------------------------------------------------------------------

    def rates(self, job: JobSpec) -> tuple[FlavorRate, ...]:
        """Estimated rates on the flavors where the job can run (cached until it runs anew)."""
        hit = self._per_job.get(job.job_id)
        if hit is not None and (hit[0] is job or hit[0] == job):
            return hit[1]
        real = self.real_rates(job)
        est = self._estimator(job.job_type) if job.parallelism is None else None
        if est is None or not real:
            view = real
        else:
            seen = self.observed(job)
            one_gpu = self._one_gpu(job, seen)
            guess = self._model_row(job.job_type, one_gpu,
                                    est.estimate(one_gpu, model_of(job.job_type)))
            out = []
            for r in real:
                try:  # (a flavor it was observed on: the observation, not the row's fit;
                    # another: the 1-GPU row times that flavor's scaling prior)
                    c = seen.get(r.flavor.short) or guess[est.flavors[est.column(
                        r.flavor.short)]] * self.scaling.efficiency(
                            job.job_type, r.flavor, job.num_gpus)
                    c *= job.num_gpus  # (per-GPU rates: times the gang's size)
                except SpecError:
                    c = r.consolidated  # (a flavor the table answers but the estimator lacks)
                out.append(FlavorRate(r.flavor, c, c * r.spread / r.consolidated))
            view = tuple(out)
            if job.job_id not in self.profiling and job.job_id not in self._profiled:
                error = _mean_error(view, real)
                self._first_error.setdefault(job.job_id, error)
                self._last_error[job.job_id] = error
        self._per_job[job.job_id] = (job, view)
        return view

    def error_of(self, job: JobSpec) -> float | None:
        """Mean |estimate / true - 1| over the flavors where ``job`` can run, as policies
        see it now (``None`` if it can run nowhere)."""
        real = self.real_rates(job)
        if not real:
            return None
        return _mean_error(self.rates(job), real)

    def rate(self, job: JobSpec, flavor: GpuFlavor, consolidated: bool) -> float:
        """Estimated steps/s of ``job`` on ``flavor`` (0.0 if it cannot run there)."""
        for r in self.rates(job):
            if r.flavor == flavor:
                return r.consolidated if consolidated else r.spread
        return 0.0

    def fastest_first(self, job: JobSpec) -> tuple[GpuFlavor, ...]:
        """Flavors fastest first by estimate, except a *near tie*: two neighbours whose
        estimates are within :data:`NEAR_TIE` of each other, one of them never observed for
        this job at its own gang size (a 1-GPU profile does not tell the gang's scaling), go
        in the order of the typical job's speed, the flavor other
        jobs gain less from first (both observed: the observations decide).

        Why: an estimate cannot order flavors closer than its own error, and the order
        decides where an order-reading policy (``las``) puts a job for as long as it runs.
        Sia's DeepSpeech2 batch 57 on 12 GPUs runs 9.82 steps/s on RTX 2080 Tis and 9.54 on
        A100s; put on the A100s by an estimate 3 % the other way, its hours-long gangs held
        12 of the cluster's 16 A100s that the short CIFAR-10 gangs run 4.4x faster on
        (``las``, sia-philly-2: 1.102x the table's average JCT; with this rule 1.000)."""
        rates = sorted(self.rates(job), key=lambda r: -r.consolidated)
        seen = {f for f, g in self._observed.get(job.job_id, {}) if g == job.num_gpus}
        est = self._estimator(job.job_type)
        for i in range(len(rates) - 1):
            a, b = rates[i], rates[i + 1]
            if (est is None or (a.flavor.short in seen and b.flavor.short in seen)
                    or a.consolidated >= b.consolidated * (1 + NEAR_TIE)):
                continue
            if _typical(est, a.flavor) > _typical(est, b.flavor):
                rates[i], rates[i + 1] = b, a
        return tuple(r.flavor for r in rates)

    def faster_than(self, job: JobSpec, flavor: GpuFlavor, consolidated: bool
                    ) -> tuple[GpuFlavor, float, float] | None:
        rates = self.rates(job)
        current = next((r for r in rates if r.flavor == flavor), None)
        if current is None:
            return None
        cur = current.consolidated if consolidated else current.spread
        best = max(rates, key=lambda r: r.consolidated)
        if best.flavor != flavor and best.consolidated > cur > 0:
            return best.flavor, best.consolidated, cur
        return None

    def placement_rate(self, job: JobSpec, placement: Placement) -> float:
        if placement.is_mixed or job.parallelism is not None:
            return super().placement_rate(job, placement)
        return self.rate(job, placement.flavor, placement.consolidated)

    def error_note(self) -> str:
        """How far the estimates policies saw were from the truth, for the run's notes."""
        if not self._first_error:
            return "--speeds learned: no job was estimated"
        n = len(self._first_error)
        first = 100 * sum(self._first_error.values()) / n
        last = 100 * sum(self._last_error.values()) / n
        return (f"--speeds learned: mean |estimate/true - 1| over a job's flavors: "
                f"{first:.1f} % at its first decision, {last:.1f} % at its last ({n} jobs)")



def _typical(est: SpeedEstimator, flavor: GpuFlavor) -> float:
    """The typical job's log speed on ``flavor`` (the completion's column bias; a flavor the
    estimator lacks: -inf, first in a near tie)."""
    try:
        return float(est.col_bias[est.column(flavor.short)])
    except SpecError:
        return -math.inf


def _mean_error(view: tuple[FlavorRate, ...], real: tuple[FlavorRate, ...]) -> float:
    """Mean |estimate / true - 1| of consolidated rates over the flavors of ``real``."""
    return sum(abs(v.consolidated / r.consolidated - 1) for v, r in
               zip(view, real, strict=True)) / len(real)
