"""Synergy's workload with per-GPU-type speeds, for a cluster of V100 and A100 servers
(issue 33, part 4).

:func:`~tessera.workload.synergy.generate_synergy_like` types every job as one Gavel carrier
(its GPU speed does not matter on Synergy's all-V100 cluster), and Gavel's table has no A100.
Here each job keeps its draw -- arrival, gang size, duration, Synergy model and profile --
and gets the job type of the Sia/Pollux profiles (:mod:`tessera.perf.sia_table`, measured on
V100 and A100-40GB) that trains the same kind of model:

=========  =============================  ============================
class      Synergy's models               Sia job type (A100 / V100)
=========  =============================  ============================
image      alexnet, res18, res50, ...     ``imagenet (batch size 57)`` (1.11×)
language   gnmt, transformer, lstm        ``bert (batch size 11)`` (2.05×)
speech     m5, deepspeech                 ``deepspeech2 (batch size 14)`` (0.64×)
=========  =============================  ============================

``total_steps`` is the drawn duration times the type's rate on the table's reference flavor
(V100) at the job's gang size, so a
job runs its drawn duration on V100s at its proportional CPU share, as in Synergy. The ratios
are Sia's measurements, not a claim about Synergy's own models on an A100. Simulate with
``table=sia_throughputs()`` (``--throughputs sia``).
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable
from tessera.perf.sia_table import sia_throughputs
from tessera.workload.synergy import DEFAULT_SPLIT, generate_synergy_like

#: Synergy class -> the Sia job type standing for its models.
SIA_TYPE_BY_CLASS = {
    "image": "imagenet (batch size 57)",
    "language": "bert (batch size 11)",
    "speech": "deepspeech2 (batch size 14)",
}


def generate_synergy_mixed(num_jobs: int, jobs_per_hour: float, seed: int,
                           split: tuple[int, int, int] = DEFAULT_SPLIT,
                           multi_gpu: bool = False,
                           table: ThroughputTable | None = None) -> Workload:
    """Synergy's draw (same seed, same jobs) typed for the Sia table (module docstring).

    Raises:
        SpecError: as :func:`generate_synergy_like`.
    """
    table = table or sia_throughputs()
    v100 = table.reference_flavor  # (V100-16GB in the Sia table)
    base = generate_synergy_like(num_jobs, jobs_per_hour, seed, split, multi_gpu)
    jobs = []
    for j in base.jobs:
        job_type = SIA_TYPE_BY_CLASS[j.extra["synergy_class"]]
        duration_s = j.duration_hint_s or 0.0
        rate = table.throughput(job_type, v100, j.num_gpus)
        jobs.append(replace(j, job_type=job_type,
                            total_steps=float(max(1, round(duration_s * rate)))))
    return Workload(name=f"synergy-mixed-s{seed}", jobs=tuple(jobs),
                    source="tessera.workload.synergy_mixed.generate_synergy_mixed",
                    notes=(*base.notes, "job types from the Sia table (V100/A100 measured)"))
