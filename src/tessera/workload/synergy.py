"""Synergy's Philly-derived workload, drawn the way its simulator draws it (OSDI'22, section 5).

Synergy's evaluation (``simulator/runner.py``, ``jobs/workload.py``, ``helpers/utils.py``,
``jobs/model_zoo.py`` of github.com/msr-fiddle/synergy; read, not copied) makes a stream of
jobs as follows, and so does :func:`generate_synergy_like`:

* **arrivals** -- Poisson at ``jobs_per_hour``: each gap is ``ceil(-ln(1-U) / rate)`` hours
  in whole seconds, the first job one gap after t = 0;
* **duration** -- in its default ("exponential") mode Synergy takes the jobs of the Philly log
  only for their order and draws every duration from Gavel's distribution: with probability
  0.8 ``60 · 10^U(1.5, 3)`` s, else ``60 · 10^U(3, 4)`` s, the time the job takes at its
  GPU-proportional CPU and memory share (Synergy's iteration count at 1 s per iteration);
* **gang size** -- 1 GPU (``multi_gpu=False``, the paper's Fig. 8), else 1/2/4/8 GPUs with
  probability 70/10/15/5 % (Synergy's ``get_job_gpu_demand``; its Philly mode takes sizes from
  the log, which we do not have);
* **model** -- the class split ``(image, language, speech)`` in percent, met *exactly* rather
  than drawn: each job goes to the class furthest below its share of the jobs so far (ties
  in the order image, language, speech), and within a class the models take turns: image
  alexnet, res18, res50, mobilenet, shufflenet; language gnmt, transformer, lstm; speech m5,
  deepspeech (Synergy's ``ModelAssignment.OVERALL``);
* **profile** -- the job's :class:`~tessera.model.resources.ResourceSensitivity` is the model's
  Synergy profile at its GPU count (:mod:`tessera.perf.host_profiles`).

Every job is typed ``ResNet-50 (batch size 64)`` for its GPU speed (the only thing
``job_type`` sets here: ``total_steps`` is the duration times that type's isolated V100 rate,
so the job runs ``duration`` seconds on a V100 at its proportional share); the Synergy model
is in ``JobSpec.model``. Randomness comes only from ``random.Random(seed)``; draw order per
job: gap, gang size (when ``multi_gpu``), duration branch, duration.
"""

from __future__ import annotations

import math
import random

from tessera.errors import SpecError
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.host_profiles import SYNERGY_CLASSES, synergy_profile
from tessera.perf.profiles import ThroughputTable, default_throughputs

#: The GPU-speed carrier type of every job (see the module docstring).
CARRIER_TYPE = "ResNet-50 (batch size 64)"
#: Synergy's default class split (its runner: image, language, speech).
DEFAULT_SPLIT = (20, 70, 10)
_GANGS = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))


def parse_split(text: str) -> tuple[int, int, int]:
    """``"20,70,10"`` -> ``(20, 70, 10)``.

    Raises:
        SpecError: not three whole numbers >= 0 adding up to 100.
    """
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise SpecError(f"split {text!r}: write three whole percentages, e.g. 20,70,10") from None
    if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) != 100:
        raise SpecError(f"split {text!r}: three percentages >= 0 (image, language, speech) "
                        "adding up to 100")
    return parts[0], parts[1], parts[2]


def _gang(rng: random.Random) -> int:
    u = rng.random()
    acc = 0.0
    for g, p in _GANGS:
        acc += p
        if u < acc:
            return g
    return _GANGS[-1][0]


def _duration_s(rng: random.Random) -> float:
    if rng.random() < 0.8:
        return 60.0 * 10 ** (1.5 + 1.5 * rng.random())
    return 60.0 * 10 ** (3.0 + rng.random())


def generate_synergy_like(num_jobs: int, jobs_per_hour: float, seed: int,
                          split: tuple[int, int, int] = DEFAULT_SPLIT, multi_gpu: bool = False,
                          *, throughputs: ThroughputTable | None = None) -> Workload:
    """Draw Synergy's workload (see the module docstring).

    Raises:
        SpecError: fewer than one job, a rate that is not > 0, or a bad split.
    """
    if num_jobs < 1:
        raise SpecError(f"num_jobs must be >= 1, got {num_jobs}")
    if not (jobs_per_hour > 0 and math.isfinite(jobs_per_hour)):
        raise SpecError(f"jobs_per_hour must be a finite number > 0, got {jobs_per_hour}")
    parse_split(",".join(map(str, split)))
    table = throughputs or default_throughputs()
    ref = table.reference_flavor
    rng = random.Random(seed)
    classes = list(SYNERGY_CLASSES)
    counts = dict.fromkeys(classes, 0)
    turn = dict.fromkeys(classes, 0)
    share = dict(zip(classes, split, strict=True))
    rates: dict[int, float] = {}
    jobs: list[JobSpec] = []
    now_s = 0.0
    for i in range(num_jobs):
        now_s += math.ceil(-math.log(1.0 - rng.random()) / jobs_per_hour * 3600.0)
        gpus = _gang(rng) if multi_gpu else 1
        duration_s = _duration_s(rng)
        # the class furthest below its share so far (all level before the first job)
        cls = max(classes, key=lambda c: share[c] / 100 - (counts[c] / i if i else share[c] / 100))
        models = SYNERGY_CLASSES[cls]
        model = models[turn[cls] % len(models)]
        turn[cls] += 1
        counts[cls] += 1
        if gpus not in rates:
            rates[gpus] = table.throughput(CARRIER_TYPE, ref, gpus)
        jobs.append(JobSpec(
            job_id=JobId(str(i)), job_type=CARRIER_TYPE, num_gpus=gpus,
            total_steps=float(max(1, round(duration_s * rates[gpus]))), submit_time_s=now_s,
            duration_hint_s=duration_s, model=model,
            sensitivity=synergy_profile(model, gpus).sensitivity,
            extra={"synergy_class": cls},
        ))
    note = (f"Synergy-like: {num_jobs} jobs, {jobs_per_hour:g} jobs/h, split "
            f"{','.join(map(str, split))}, multi_gpu={multi_gpu}, seed {seed}")
    return Workload(name=f"synergy-s{seed}", jobs=tuple(jobs),
                    source="tessera.workload.synergy.generate_synergy_like", notes=(note,))
