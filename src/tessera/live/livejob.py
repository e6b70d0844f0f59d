"""A live job: the core's spec plus how to run it, and its stored form.

:class:`LiveJob` is what the service stores per job (:mod:`tessera.live.store`) and launches
(:mod:`tessera.live.executors`). It is built from a validated request by
:func:`tessera.live.spec.to_live_job`; its JSON is generated from the dataclass fields
(:mod:`tessera.live.jobcodec`). This module imports neither the request nor the executors, so the
store can read jobs without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.live.jobcodec import MAPPING, decode_job, encode_job
from tessera.model.jobs import ElasticRange, JobSpec


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A validated request bound to an id and a queue: the core's spec plus how to run it.

    Attributes:
        spec: what the decision core sees.
        name: the user's name for the job.
        argv: the command as argv (a shell line becomes ``["/bin/sh", "-c", line]``).
        checkpoint_dir: handed to the job as ``TESSERA_CHECKPOINT_DIR``; ``None`` = a directory
            the executor creates under the state directory.
        env: extra environment variables for every rank.
        model: free-form model name, shown in listings.
        max_runtime_s: each run's runtime limit (``None``: the queue's default, if any).
        global_batch: samples per optimizer step over all ranks (an elastic job's initial
            batch); each launch splits it into per-rank ``TESSERA_LOCAL_BATCH``
            (:mod:`tessera.live.batches`). ``None``: no split. A run of an elastic job may be
            placed at another batch (:func:`tessera.live.resize.run_batch`).
        parallelism: ``data`` or ``3d``: each launch plans tensor × pipeline × data
            parallelism for ``model`` on the run's GPUs and exports every rank's role
            (:func:`tessera.live.batches.plan_rank_roles`).
        power_limit_w: per-GPU power limit the job asks for each run (``None``: none); checked
            against the GPUs' range at submission and at launch, set only where the run holds
            its GPUs alone (:mod:`tessera.live.run_power`).

    Every field is stored, the spec's too (:mod:`tessera.live.jobcodec`).
    """

    spec: JobSpec
    name: str
    argv: tuple[str, ...]
    checkpoint_dir: str | None
    env: tuple[tuple[str, str], ...] = field(metadata=MAPPING)
    model: str | None
    max_runtime_s: float | None = None
    global_batch: int | None = None
    parallelism: str = "data"
    power_limit_w: float | None = None

    @property
    def elastic(self) -> ElasticRange | None:
        """The job's GPU and batch range, ``None`` for a rigid job."""
        return self.spec.elastic

    def to_json(self) -> str:
        """The JSON a job row stores, generated from the fields (:mod:`tessera.live.jobcodec`)."""
        return encode_job(self)

    @classmethod
    def from_json(cls, text: str) -> LiveJob:
        """A job from a stored row, of the current format or the first one.

        Raises:
            StoredJobError: a row that does not decode (names the field).
        """
        return decode_job(text, cls)
