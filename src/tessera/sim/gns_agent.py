"""The simulated Pollux agent: elastic jobs report their noise scale and step times.

Under ``simulate --goodput reported`` every elastic job in a snapshot carries what its agent
would have reported by now: its gradient noise scale (``JobView.noise_scale_samples``), so
Sia and Pollux value it with Pollux's closed form
(:class:`tessera.perf.goodput_fit.GnsEfficiency`) rather than the bundled efficiency table,
and its throughput model fitted to the step times it observed on each flavor it ran on
(``JobView.step_fits``, :func:`tessera.perf.goodput_fit.fit_throughput`); ``--goodput gns``
reports the noise scale only. The truth still
drives progress: a running job advances at the table's goodput
(:meth:`tessera.sched.elastic.goodput.GoodputModel.steps_per_s`).

**Step times.** Each decision, a running job observes its gang's optimizer step at its local
batch and, the first time it runs on that placement, at the smallest and the largest local
batch the placement fits (as AdaptDL's agent profiles the local batches while it tunes its
batch; with one local batch, compute cost per sample and per step cannot be told apart): the
measured profile's step times there (:mod:`tessera.perf.goodput`; the profile's, not slowed
by ``ElasticRange.slowdown``, as the table the other policies read is not). Each new
``(GPUs, local batch)`` on a flavor goes to the job's
:class:`~tessera.perf.step_book.StepBook`, which refits that flavor's model only where the
observation surprises it and republishes only a fit that moved. On a flavor the
job has not run on, the policy still reads the measured profile: the stand-in for Sia's
bootstrap profile on every GPU type, which is not simulated.

**What is reported.** The data are the bundled Sia/Pollux validation curves
(``tessera/data/sia/<model>/validation-<B>.csv``, :mod:`tessera.perf.efficiency`): the
noise scale ``M0 × grad_var / grad_sqr`` of the epoch under way at the job's progress,
measured at the batch the job runs at (its placement's global batch, clamped into the measured
range; the initial batch while it waits), as an agent inside the job measures it on its own
run. The policy sees one number per job, not the table's statistics at every batch: what it
gets wrong is the gap between the closed form and the curves measured at larger batches.
"""

from __future__ import annotations

import dataclasses
import math

from tessera.errors import NoProfileError, SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.perf.efficiency import load_efficiency
from tessera.perf.goodput import load_step_times
from tessera.perf.goodput_fit import StepFits
from tessera.perf.step_book import DEFAULT_TOLERANCE, StepBook
from tessera.sched.core.snapshot import JobView
from tessera.sched.elastic.goodput import progress_samples


def reported_gns(view: JobView, now_s: float) -> float | None:
    """The noise scale ``view``'s agent reports at ``now_s`` (samples), ``None`` for a rigid
    job or one whose curves give no finite value (``grad_sqr = 0``)."""
    e = view.spec.elastic
    if e is None:
        return None
    prof = load_efficiency(e.efficiency_model)
    p = view.placement
    batch = float(p.global_batch_samples) if p is not None and p.global_batch_samples else 0.0
    batch = min(max(batch or e.initial_batch_samples, prof.initial_batch_samples),
                prof.max_batch_samples)
    phi = prof.noise_scale_samples(batch, progress_samples(view, now_s))
    return phi if math.isfinite(phi) and phi >= 0 else None


def observed_steps(view: JobView) -> tuple[GpuFlavor, list[tuple[int, float, float]]] | None:
    """``(flavor, [(GPUs, local batch, step s)])`` a running elastic job observes now (its
    own local batch, and the placement's smallest and largest), ``None`` when it is not
    running on one flavor at a batch its profile measured."""
    e, p = view.spec.elastic, view.placement
    if e is None or p is None or view.state is not JobState.RUNNING or \
            not p.global_batch_samples or len(p.flavor_counts()) != 1:
        return None
    per_node = tuple(c for _n, c in p.gpus_by_node)
    try:
        times = load_step_times(e.efficiency_model, p.flavor)
        config = times.batch_config(per_node, p.global_batch_samples)
        lo, hi = times.local_batch_range(per_node)
        out = [(p.num_gpus, float(m), times.step_and_sync_s(per_node, m)[0])
               for m in sorted({config.local_batch_samples, float(lo), float(hi)})]
    except (NoProfileError, SpecError):
        return None
    return p.flavor, out


class GoodputAgent:
    """Every elastic job's agent in one simulation: its observations and fits (see the module
    docstring), kept in a :class:`~tessera.perf.step_book.StepBook`: a job refits only when an
    observation surprises its model and republishes only when the fit moves, so the policies'
    caches stay warm for every other job and round. One per simulated world."""

    def __init__(self, fit_steps: bool = True,
                 tolerance: float = DEFAULT_TOLERANCE) -> None:
        self.fit_steps = fit_steps
        """Also fit step times (``--goodput reported``); else the noise scale only (``gns``)."""
        self.book = StepBook(tolerance)

    def fits(self, view: JobView) -> StepFits:
        """``view``'s job's fits after what it observes now."""
        jid = view.spec.job_id
        got = observed_steps(view)
        if got is not None:
            self.book.observe(jid, *got)
        return self.book.fits(jid)

    def views(self, views: tuple[JobView, ...], now_s: float) -> tuple[JobView, ...]:
        """``views`` with each elastic job's reports laid over it."""
        out = []
        for v in views:
            gns = reported_gns(v, now_s)
            fits = self.fits(v) if self.fit_steps and v.spec.elastic is not None else ()
            out.append(v if gns is None and not fits else
                       dataclasses.replace(v, noise_scale_samples=gns, step_fits=fits))
        return tuple(out)


def with_reported_gns(views: tuple[JobView, ...], now_s: float) -> tuple[JobView, ...]:
    """``views`` with each elastic job's reported noise scale laid over it (no step fits)."""
    out = []
    for v in views:
        gns = reported_gns(v, now_s)
        out.append(v if gns is None else dataclasses.replace(v, noise_scale_samples=gns))
    return tuple(out)
