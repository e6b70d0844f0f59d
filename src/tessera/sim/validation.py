"""Pre-run validation: a big gang's attempt first runs briefly on one GPU.

Philly's lesson (Jeon et al., ATC'19, §4; ``docs/lessons.md``): most failures are user errors
that strike within minutes, and a failing 8-GPU gang wastes eight GPUs while it does. So before
each attempt of a gang of at least ``min_gpus`` GPUs, the simulator runs the job for
``validation_s`` seconds on *one* GPU of a flavor it accepts:

1. **begin** -- the job's spec is swapped for a 1-GPU copy with just ``validation_s`` of work
   (on its fastest flavor); the real spec, remaining work and startup cost are put aside. The
   decision core sees an ordinary 1-GPU job and places it like any other -- it never learns
   that validation exists;
2. **pass** -- the short run completes: the world stops it, gives the job back its real spec
   and work (:meth:`PreRunValidation.end`) and requeues it for its gang;
3. **fail** -- an early failure strikes the single GPU instead of the gang (a late one, which
   the short run cannot catch, is left for the real run: see
   :meth:`PreRunValidation.real_run_s`).

:class:`PreRunValidation` keeps what was put aside; :class:`~tessera.sim.world.SimWorld`
calls it at arrival, retry, completion, failure and the end of the run.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import JobSpec
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sim.config import ValidationConfig
from tessera.sim.state import SimJob


class PreRunValidation:
    """The jobs in their validation run, and what they put aside (see the module docstring).

    Args:
        cfg: ``min_gpus`` (0: off) and ``validation_s``.
        truth: the true speeds (a validation run lasts ``validation_s`` on its fastest flavor).
    """

    def __init__(self, cfg: ValidationConfig, truth: ThroughputOracle) -> None:
        self.cfg = cfg
        self.truth = truth
        # idx -> (real spec, real remaining steps, real startup_s)
        self._saved: dict[int, tuple[JobSpec, float, float]] = {}

    def __contains__(self, job_idx: int) -> bool:
        """Whether job ``job_idx`` is in its validation run."""
        return job_idx in self._saved

    def begin(self, job: SimJob) -> None:
        """Turn a big gang's next attempt into a 1-GPU validation run of ``validation_s``
        (nothing happens for a small job, or with validation off)."""
        spec = job.spec
        if not self.cfg.min_gpus or spec.num_gpus < self.cfg.min_gpus:
            return
        vspec = replace(spec, num_gpus=1, requires_locality=False, total_steps=1.0)
        rate = max((r.consolidated for r in self.truth.real_rates(vspec)), default=0.0)
        if rate <= 0:
            return
        steps = rate * self.cfg.validation_s
        self._saved[job.idx] = (spec, job.remaining, job.startup_s)
        job.spec = replace(vspec, total_steps=steps)
        job.remaining = steps
        job.startup_s = 0.0
        job.view = None

    def end(self, job: SimJob) -> None:
        """Give the job back its real spec and work (validation passed, failed or cut short)."""
        saved = self._saved.pop(job.idx, None)
        if saved is None:
            return
        job.spec, job.remaining, job.startup_s = saved
        job.view = None

    def validating(self) -> list[int]:
        """Indices of the jobs in their validation run."""
        return list(self._saved)

    def real_run_s(self, job_idx: int) -> float | None:
        """For a job in validation, how long its real run would last alone on its fastest
        flavor (0 if it can run nowhere); ``None`` for a job not in validation."""
        saved = self._saved.get(job_idx)
        if saved is None:
            return None
        best = max((r.consolidated for r in self.truth.real_rates(saved[0])), default=0.0)
        return saved[1] / best if best > 0 else 0.0
