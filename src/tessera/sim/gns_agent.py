"""The simulated Pollux agent: elastic jobs report their gradient noise scale to the policy.

Under ``simulate --goodput reported`` every elastic job in a snapshot carries the noise scale
its agent would report now (``JobView.noise_scale_samples``), so Sia and Pollux value it with
Pollux's closed form (:class:`tessera.perf.goodput_fit.GnsEfficiency`) rather than the bundled
efficiency table. The truth still drives progress: a running job advances at the table's
goodput (:meth:`tessera.sched.elastic.goodput.GoodputModel.steps_per_s`).

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

from tessera.perf.efficiency import load_efficiency
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


def with_reported_gns(views: tuple[JobView, ...], now_s: float) -> tuple[JobView, ...]:
    """``views`` with each elastic job's reported noise scale laid over it."""
    out = []
    for v in views:
        gns = reported_gns(v, now_s)
        out.append(v if gns is None else dataclasses.replace(v, noise_scale_samples=gns))
    return tuple(out)
