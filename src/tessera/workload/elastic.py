"""Elastic jobs from profiled models: their range, and their length when run rigidly.

Two things a reader of Pollux/Sia-style workloads needs from :mod:`tessera.perf`:

* :func:`elastic_range`: a validated :class:`~tessera.model.jobs.ElasticRange` for a model,
  checked against what was measured (a batch outside the profiled range is a clear error;
  a model without validation curves is :class:`~tessera.perf.efficiency.NoEfficiencyDataError`,
  and :func:`elastic_or_rigid` turns that into a rigid job and a note, never a guessed
  efficiency);
* :func:`rigid_duration_s`: how long a job takes run *rigidly* and alone, at a fixed GPU count
  and global batch on one flavor: the steps its batch's validation curve took to reach the
  target, times the measured iteration time on a packed placement (gradient accumulation when
  the per-GPU share does not fit). This is Sia's and Pollux's model of the same job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ElasticRange, Workload
from tessera.perf.efficiency import NoEfficiencyDataError, load_efficiency
from tessera.perf.goodput import load_step_times, packed_placement
from tessera.perf.sia import SIA_SERVER_GPUS, load_sia_profile, sia_flavors


def smallest_local_batch(model: str, root: str | Path | None = None) -> int:
    """The smallest per-GPU batch measured on any flavor: each GPU of a job needs this many."""
    return min(min(load_sia_profile(model, f, root).local_bsz) for f in sia_flavors(model, root))


def elastic_range(
    model: str,
    num_gpus: int,
    initial_batch_samples: int,
    *,
    min_gpus: int = 1,
    max_gpus: int | None = None,
    max_batch_samples: int | None = None,
    root: str | Path | None = None,
) -> ElasticRange:
    """The elastic range of a job of ``model`` that asks for ``num_gpus`` GPUs at first.

    Defaults follow Pollux: any GPU count from ``min_gpus`` up to the most GPUs that can each
    get the smallest measured local batch of the largest profiled batch, and any batch from the
    initial one up to the largest profiled one.

    Raises:
        NoEfficiencyDataError: the model has no validation curves.
        SpecError: a batch outside the profiled range, or an inconsistent range.
    """
    eff = load_efficiency(model, root)
    top = eff.max_batch_samples if max_batch_samples is None else max_batch_samples
    for what, b in (("initial", initial_batch_samples), ("maximum", top)):
        if not eff.initial_batch_samples <= b <= eff.max_batch_samples:
            raise SpecError(
                f"{model}: {what} batch {b} is outside the profiled range "
                f"{eff.initial_batch_samples}-{eff.max_batch_samples}"
            )
    most = top // smallest_local_batch(model, root) if max_gpus is None else max_gpus
    if num_gpus > most and max_gpus is None:
        most = num_gpus
    return ElasticRange(min_gpus, most, initial_batch_samples, top, model, eff.target_samples)


def elastic_or_rigid(
    model: str, num_gpus: int, initial_batch_samples: int, notes: set[str],
    root: str | Path | None = None,
) -> ElasticRange | None:
    """:func:`elastic_range`, or ``None`` (the job stays rigid) with a note in ``notes`` when
    the model has no efficiency data."""
    try:
        return elastic_range(model, num_gpus, initial_batch_samples, root=root)
    except NoEfficiencyDataError:
        notes.add(f"{model}: no statistical-efficiency data; its jobs run rigid")
        return None


def rigid_duration_s(
    model: str, flavor: GpuFlavor, num_gpus: int, batch_samples: int,
    root: str | Path | None = None,
) -> float:
    """Seconds to the target for a job run alone on ``num_gpus`` GPUs of ``flavor`` at a fixed
    global batch, its GPUs packed on as few of Sia's servers as possible.

    Raises:
        SpecError: no validation curve at ``batch_samples``, or the batch cannot be split.
        NoProfileError: the model, flavor or placement was never measured.
    """
    fl = flavor
    steps = load_efficiency(model, root).rigid_steps(batch_samples)
    times = load_step_times(model, fl, root)
    placement = packed_placement(num_gpus, SIA_SERVER_GPUS.get(fl.short, 8))
    config = times.batch_config(placement, batch_samples)
    return steps * times.iteration_time_s(placement, config)


SIA_SLOWDOWNS: Mapping[str, float] = {
    "cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2,
    "ncf": 1.5, "gpt_pmp": 1.0,
}
"""Sia's simulator calibration (``simulator_config.SLOWDOWNS`` in Sia's artifact): every job of
a model trains this many times slower than its profile says, "fitted to real-world data" of
Sia's cluster runs. Its published JCTs are measured with it."""


def sia_calibrated(workload: Workload) -> Workload:
    """``workload`` as Sia's simulator runs it: each elastic job slowed by its model's
    :data:`SIA_SLOWDOWNS` factor -- its rigid work (``total_steps``) scaled by the factor, and
    its true goodput divided by it (``ElasticRange.slowdown``). Jobs without an elastic range
    are returned unchanged."""
    jobs = []
    for j in workload.jobs:
        e = j.elastic
        if e is None:
            jobs.append(j)
            continue
        s = SIA_SLOWDOWNS.get(e.efficiency_model, 1.0)
        hint = None if j.duration_hint_s is None else j.duration_hint_s * s
        jobs.append(replace(j, total_steps=j.total_steps * s, duration_hint_s=hint,
                            elastic=replace(e, slowdown=e.slowdown * s)))
    note = "calibrated as Sia's simulator: cifar10 1.8x, other models 1.2x slower than profiled"
    return replace(workload, jobs=tuple(jobs), notes=(*workload.notes, note))


def tuned_from_m0(workload: Workload) -> Workload:
    """``workload`` with every elastic job's batch range starting at its model's ``M0``.

    Sia's trace gives each job a batch (cifar10 2,048 or 4,096, deepspeech2 320 or 640, bert
    384, imagenet 1,600 or 3,200, yolov3 64), which Tessera's Sia reader makes the job's
    initial batch and so the floor of its tuning. Sia's simulator does not: an adaptive job
    tunes its batch between ``max(M0, smallest local batch × GPUs)`` and the model's largest
    validated batch (``Job.update_local_bsz`` → ``GoodputFunction.optimize`` in Sia's
    artifact, ``M0`` = ``Application.init_batch_size``, the smallest validation batch); the
    trace's batch only caps the batch its *policy* plans with (``Job.get_speedup_fn``), which
    is not modelled here (policies plan up to the model's largest batch, as the job runs).
    Jobs without an elastic range are unchanged."""
    jobs = []
    for j in workload.jobs:
        e = j.elastic
        if e is not None:
            m0 = load_efficiency(e.efficiency_model).initial_batch_samples
            j = replace(j, elastic=replace(e, initial_batch_samples=m0))
        jobs.append(j)
    return replace(workload, jobs=tuple(jobs),
                   notes=(*workload.notes, "elastic jobs tune their batch from their model's M0"))
