"""Synthetic workloads drawn the way Gavel's simulator draws them (OSDI'20, §7).

Gavel's on-the-fly generator (``Scheduler.simulate(lam=…)``) makes each job independently:

* **arrivals** -- a Poisson process: exponential inter-arrival gaps with mean
  ``3600 / jobs_per_hour`` seconds. Here the first job arrives at t = 0 (as Gavel's trace-file
  generator does), the next after one gap, and so on;
* **gang size** (``multi_gpu=True``) -- 1, 2, 4 or 8 GPUs with probability 70 / 10 / 15 / 5 %;
  otherwise always 1;
* **job type** -- uniform over the profiled types, restricted to the *distributable* ones (those
  profiled at more than one GPU) when the gang has more than one GPU;
* **duration on a V100** -- Gavel's "Philly distribution": with probability 0.8,
  ``60 · 10^U(1.5, 3)`` s (0.5–16.7 h), else ``60 · 10^U(3, 4)`` s (16.7–167 h);
* **work** -- ``total_steps = round(duration × isolated V100 throughput of (type, gang))``, at
  least 1 (Gavel's traces hold integer step counts);
* **priority** (``multi_priority=True``) -- weight 5 with probability 0.2, else 1.

Randomness comes only from ``random.Random(seed)`` and only through ``random()``, so the same
seed gives the same workload on every platform and Python version. Draw order per job: gap,
gang size (when ``multi_gpu``), type, duration branch, duration, priority (when
``multi_priority``). Job ids are ``"0"``, ``"1"`` ... as in Gavel, so a workload written with
:func:`~tessera.workload.write_gavel_tsv` and read back keeps its ids.
"""

from __future__ import annotations

import math
import random

from tessera.errors import SpecError
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs

SCALE_FACTOR_PROBS: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))
"""Gang size distribution of Gavel's multi-GPU workloads."""
SHORT_JOB_PROB = 0.8
"""Probability a job's duration comes from the short branch ``60 · 10^U(1.5, 3)`` s."""
HIGH_PRIORITY_PROB = 0.2
HIGH_PRIORITY_WEIGHT = 5.0


def _pick(rng: random.Random, items: tuple[str, ...]) -> str:
    return items[min(int(rng.random() * len(items)), len(items) - 1)]


def _scale_factor(rng: random.Random) -> int:
    u = rng.random()
    acc = 0.0
    for sf, p in SCALE_FACTOR_PROBS:
        acc += p
        if u < acc:
            return sf
    return SCALE_FACTOR_PROBS[-1][0]


def philly_duration_s(rng: random.Random) -> float:
    """One draw of Gavel's Philly-like duration distribution (seconds on a V100)."""
    if rng.random() < SHORT_JOB_PROB:
        return 60.0 * 10 ** (1.5 + 1.5 * rng.random())
    return 60.0 * 10 ** (3.0 + rng.random())


def generate_gavel_like(
    num_jobs: int,
    jobs_per_hour: float,
    seed: int,
    multi_gpu: bool = True,
    multi_priority: bool = False,
    *,
    throughputs: ThroughputTable | None = None,
) -> Workload:
    """Draw a Gavel-style synthetic workload (see the module docstring for the distributions).

    Args:
        num_jobs: how many jobs.
        jobs_per_hour: mean arrival rate (Gavel's ``lam = 3600 / jobs_per_hour``).
        seed: the only source of randomness.
        multi_gpu: draw gang sizes 1/2/4/8 (70/10/15/5 %); ``False`` makes every job 1-GPU.
        multi_priority: give 20 % of jobs priority weight 5.
        throughputs: the profiled types and their reference-flavor throughputs; Gavel's by
            default.

    Raises:
        SpecError: ``num_jobs < 1`` or a non-positive rate.
    """
    if num_jobs < 1:
        raise SpecError(f"num_jobs must be >= 1, got {num_jobs}")
    if not jobs_per_hour > 0:
        raise SpecError(f"jobs_per_hour must be > 0, got {jobs_per_hour}")
    table = throughputs or default_throughputs()
    all_types = table.job_types()
    multi_types = table.distributable_types()
    ref = table.reference_flavor
    mean_gap_s = 3600.0 / jobs_per_hour
    rng = random.Random(seed)
    tput_cache: dict[tuple[str, int], float] = {}
    jobs: list[JobSpec] = []
    now_s = 0.0
    for i in range(num_jobs):
        gap_s = -math.log(1.0 - rng.random()) * mean_gap_s
        if i > 0:
            now_s += gap_s
        num_gpus = _scale_factor(rng) if multi_gpu else 1
        job_type = _pick(rng, all_types if num_gpus == 1 else multi_types)
        duration_s = philly_duration_s(rng)
        weight = 1.0
        if multi_priority and rng.random() < HIGH_PRIORITY_PROB:
            weight = HIGH_PRIORITY_WEIGHT
        key = (job_type, num_gpus)
        if key not in tput_cache:
            tput_cache[key] = table.throughput(job_type, ref, num_gpus)
        steps = max(1, round(duration_s * tput_cache[key]))
        jobs.append(
            JobSpec(
                job_id=JobId(str(i)),
                job_type=job_type,
                num_gpus=num_gpus,
                total_steps=float(steps),
                submit_time_s=now_s,
                priority_weight=weight,
                duration_hint_s=duration_s,
            )
        )
    note = (
        f"Gavel-like synthetic: {num_jobs} jobs, {jobs_per_hour:g} jobs/h, seed {seed}, "
        f"multi_gpu={multi_gpu}, multi_priority={multi_priority}"
    )
    return Workload(
        name=f"gavel-synth-s{seed}",
        jobs=tuple(jobs),
        source="tessera.workload.synth.generate_gavel_like",
        notes=(note,),
    )
