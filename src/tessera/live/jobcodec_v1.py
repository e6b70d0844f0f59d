"""Job rows in the first stored shape: what ``tessera serve`` wrote before format 2.

Format 1 was written by hand: one flat object mixing the core's ``JobSpec`` fields and the
``LiveJob`` ones, with ``memory_gib`` as a string, without ``slo_factor``,
``duration_hint_s`` or an elastic range's ``slowdown`` (a live job never set them, so their
defaults are what was meant), and a 3-D job's plan rebuilt from ``model`` and
``global_batch``. A store written then is read through :func:`decode`, so a restart after an
upgrade loses nothing (``tests/live/test_jobcodec.py`` reads a state file that release wrote);
rows are rewritten in format 2 only when a job is stored anew.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavors
from tessera.model.jobs import ElasticRange, JobId, JobSpec, ThreeDParallel

T = TypeVar("T")


def decode(d: dict[str, Any], live_job: Callable[..., T]) -> T:
    """A job from a format-1 row's decoded JSON; ``live_job`` is ``LiveJob`` (passed in, so
    this module does not import the one that imports it).

    Raises:
        SpecError: a field missing or a value the job's checks refuse.
    """
    try:
        memory = d.get("memory_gib")
        spec = JobSpec(
            job_id=JobId(d["job_id"]), job_type=d["job_type"], num_gpus=d["num_gpus"],
            total_steps=d["total_steps"], submit_time_s=d["submit_time_s"],
            flavors=resolve_flavors(d["flavors"]), priority_weight=d["priority_weight"],
            queue=d["queue"], max_retries=d["max_retries"],
            requires_locality=d["requires_locality"],
            elastic=ElasticRange(**d["elastic"]) if d.get("elastic") else None,
            parallelism=(ThreeDParallel(d["model"], d["global_batch"])
                         if d.get("parallelism") == "3d" else None),
            # A job stored before co-location existed never agreed to share.
            exclusive=d.get("exclusive", True),
            memory_gib=float(memory) if memory else None,
        )
        return live_job(spec, d["name"], tuple(d["argv"]), d["checkpoint_dir"],
                       tuple(sorted(d["env"].items())), d["model"], d.get("max_runtime_s"),
                       d.get("global_batch"), d.get("parallelism", "data"))
    except KeyError as e:
        raise SpecError(f"lacks the field {e.args[0]!r}") from None
