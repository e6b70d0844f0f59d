"""A validated request bound to an id and a queue: the job the service stores and runs.

:mod:`tessera.live.request` parses and checks what a user submits (a :class:`JobRequest`);
:func:`to_live_job` turns it into a :class:`~tessera.live.livejob.LiveJob`, the core's
:class:`~tessera.model.jobs.JobSpec` plus how to run it. This is the edge where a request's
names become typed values: its flavor names are resolved into catalog flavors and its memory
estimate becomes ``JobSpec.memory_gib``; nothing below parses a string. A stored job is JSON
generated from the dataclasses (:mod:`tessera.live.jobcodec`).

The request's names and :class:`~tessera.live.livejob.LiveJob` are re-exported here
(``from tessera.live.spec import parse_request, LiveJob``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import NoProfileError, SpecError
from tessera.live.livejob import LiveJob
from tessera.live.request import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    RESERVED_ENV,
    BatchRange,
    GpuRange,
    JobRequest,
    describe_errors,
    parse_request,
    validate_request,
)
from tessera.model.gpus import resolve_flavors
from tessera.model.jobs import ElasticRange, JobId, JobSpec, ThreeDParallel
from tessera.perf.efficiency import load_efficiency
from tessera.perf.sia import sia_models

__all__ = [
    "DEFAULT_EXPECTED_DURATION_S", "MAX_GLOBAL_BATCH", "MAX_GPUS", "RESERVED_ENV",
    "UNPROFILED_JOB_TYPE", "BatchRange", "ElasticChoice", "GpuRange", "JobRequest", "LiveJob",
    "describe_errors", "elastic_choice", "exclusive_for", "parse_request", "to_live_job",
    "validate_request",
]

#: Job type given to commands without a profiled model; the oracle runs them at 1 step/s.
UNPROFILED_JOB_TYPE = "command"
#: Work assumed for a job that gives no hint (seconds at 1 step/s).
DEFAULT_EXPECTED_DURATION_S = 3600.0


@dataclass(frozen=True, slots=True)
class ElasticChoice:
    """What becomes of a request's ranges: an elastic range, or rigid with a note why.

    Attributes:
        elastic: the job's :class:`~tessera.model.jobs.ElasticRange`; ``None`` = rigid.
        note: for a request that gave ranges but runs rigid, why (shown in its events).
    """

    elastic: ElasticRange | None
    note: str = ""


def elastic_choice(req: JobRequest) -> ElasticChoice:
    """The elastic range of a request, from its model's statistical-efficiency data.

    A request without ranges is rigid, silently. One with ranges whose ``model`` has no
    validation curves (or names none) runs rigid at its initial GPU count and batch, with a
    note: the efficiency of another batch would be a guess.

    Raises:
        SpecError: the batch range lies outside the range the model's curves measured.
    """
    if not req.asks_elastic:
        return ElasticChoice(None)
    gpus, batch = req.initial_gpus, req.initial_batch
    assert batch is not None and req.max_batch is not None  # the validators saw to it
    rigid = f"it runs rigid on {gpus} GPU(s) at global batch {batch}"
    if req.model is None:
        return ElasticChoice(None, f"elastic range ignored: the job names no model, so no "
                                   f"statistical efficiency is known; {rigid}")
    if req.model not in sia_models():
        return ElasticChoice(None, f"elastic range ignored: model {req.model!r} has no "
                                   f"statistical-efficiency data (profiled: "
                                   f"{', '.join(sia_models())}); {rigid}")
    try:
        eff = load_efficiency(req.model)
    except NoProfileError as e:  # NoEfficiencyDataError: profiled, but no validation curves
        return ElasticChoice(None, f"elastic range ignored: {e}; {rigid}")
    lo, hi = eff.initial_batch_samples, eff.max_batch_samples
    for what, b in (("initial", batch), ("max", req.max_batch)):
        if not lo <= b <= hi:
            raise SpecError(f"invalid job request: global_batch {what} {b} is outside "
                            f"{req.model}'s profiled range {lo}-{hi} (no statistical "
                            "efficiency is known there)")
    low, high = (req.gpus.min, req.gpus.max) if isinstance(req.gpus, GpuRange) else (gpus, gpus)
    return ElasticChoice(ElasticRange(low, high, batch, req.max_batch, req.model,
                                      eff.target_samples))


def exclusive_for(req: JobRequest, queue: str, queue_shares: bool) -> bool:
    """Whether a request's job must keep its GPUs to itself (``JobSpec.exclusive``).

    A live job shares GPUs only where both sides agreed: the queue's admin (``sharing: true``
    in the queue's config, :mod:`tessera.live.tenancy`) and the job (``exclusive`` unset or
    ``false``). On a queue that shares, a job is shareable unless it says ``exclusive: true``;
    on any other queue every job is exclusive.

    Raises:
        SpecError: ``exclusive: false`` on a queue that does not allow sharing.
    """
    if req.exclusive is False and not queue_shares:
        raise SpecError(f"invalid job request: exclusive: false, but queue {queue!r} does not "
                        "allow sharing GPUs (its admin sets sharing: true on the queue); drop "
                        "the field or submit to a queue that shares")
    return True if req.exclusive is None and not queue_shares else bool(req.exclusive)


def to_live_job(req: JobRequest, job_id: str, queue: str, submit_time_s: float,
                queue_shares: bool = False, priority: int = 0) -> LiveJob:
    """Bind a request to an id, a queue and a submission time.

    ``queue_shares``: whether ``queue`` allows its jobs to share GPUs (:func:`exclusive_for`).
    ``priority``: the value of the request's ``priority_class`` (resolved by the service).

    Raises:
        SpecError: an elastic batch range outside its model's profiled range, or
            ``exclusive: false`` on a queue that does not share.
    """
    argv = ("/bin/sh", "-c", req.command) if isinstance(req.command, str) else tuple(req.command)
    steps = req.total_steps or req.expected_duration_s or DEFAULT_EXPECTED_DURATION_S
    spec = JobSpec(
        job_id=JobId(job_id), job_type=req.job_type or UNPROFILED_JOB_TYPE,
        num_gpus=req.initial_gpus, total_steps=steps, submit_time_s=submit_time_s,
        flavors=resolve_flavors(req.flavors), priority_weight=req.priority, queue=queue,
        max_retries=req.max_retries, requires_locality=req.requires_locality,
        elastic=elastic_choice(req).elastic,
        parallelism=(ThreeDParallel(req.model, req.initial_batch)
                     if req.parallelism == "3d" and req.model and req.initial_batch else None),
        exclusive=exclusive_for(req, queue, queue_shares),
        memory_gib=req.memory_gib, priority=priority,
        host=req.host.demand() if req.host is not None else None,
        cpu_steps_per_s=(req.cpu_steps_per_s or 1.0) if req.initial_gpus == 0 else None,
    )
    return LiveJob(spec, req.name, argv, req.checkpoint_dir, tuple(sorted(req.env.items())),
                   req.model, req.max_runtime_s, req.initial_batch, req.parallelism,
                   power_limit_w=req.power_limit_w)
