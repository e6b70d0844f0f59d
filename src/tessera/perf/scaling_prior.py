"""A gang's scaling before it has run: the table's other job types at that size, as a prior.

Under learned speeds a gang's rate on a flavor is guessed from per-GPU rates: the prior row
(:class:`tessera.perf.estimate.SpeedEstimator`, 1-GPU runs) or its bootstrap profiles (1-GPU
runs too). Times the gang's size, that over-estimates every gang that scales sub-linearly --
most of them: on Gavel's table a 4-GPU gang of the typical job type keeps well under 100 %
of four 1-GPU runs' steps. :class:`ScalingPrior` supplies the missing factor, the
*per-GPU efficiency* of a ``g``-GPU consolidated gang on a flavor,

    eff(f, g) = rate(g GPUs of f) / (g · rate(1 GPU of f)),

as the geometric mean over the table's other job types measured at that size on that flavor
(those of the job's own model when the table has some, Gavel's nearest-reference idea, and
of those the :data:`NEAREST_BATCH` nearest the job's batch size in log distance when the job
types name batch sizes: a gang's scaling follows its per-GPU batch; the job's own type is
always left out, as the estimator leaves it out). With no such job type the
factor is 1 (the old guess). Once the gang has run on a flavor its own measured scaling
replaces this prior (:meth:`tessera.sched.core.learned.LearnedOracle.observed`).
"""

from __future__ import annotations

import math
import re

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor
from tessera.perf.estimate import NEIGHBOURS, model_of
from tessera.perf.profiles import ThroughputTable

#: How many same-model job types, nearest in batch size, give a gang's scaling prior (the
#: estimator's :data:`~tessera.perf.estimate.NEIGHBOURS`; 1 and 2 were measured too, see
#: docs/scheduler.md "Learned speeds": kept at the existing constant, not tuned on the runs).
NEAREST_BATCH = NEIGHBOURS

_BATCH = re.compile(r"\(batch size (\d+)\)$")


def batch_size_of(job_type: str) -> int | None:
    """The batch size a job type names: ``ResNet-50 (batch size 64)`` -> 64, else ``None``."""
    m = _BATCH.search(job_type)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


class ScalingPrior:
    """Per-GPU efficiency of a gang by (job type left out, flavor, size), from a table.

    Args:
        table: the throughput table the prior is read from (consolidated runs).
    """

    def __init__(self, table: ThroughputTable) -> None:
        self.table = table
        self._types = table.job_types()
        self._sizes = {t: frozenset(table.scale_factors(t)) for t in self._types}
        self._cache: dict[tuple[str, str, int], float] = {}

    def efficiency(self, job_type: str, flavor: GpuFlavor, num_gpus: int) -> float:
        """``eff(flavor, num_gpus)`` from the table's job types other than ``job_type`` (the
        module docstring); 1.0 for one GPU or where no other job type was measured there.

        Raises:
            ValueError: ``num_gpus`` is not a positive GPU count.
        """
        if num_gpus < 1:
            raise ValueError(f"gang of {num_gpus} GPUs: must be >= 1")
        if num_gpus == 1:
            return 1.0
        key = (job_type, flavor.short, num_gpus)
        hit = self._cache.get(key)
        if hit is None:
            model = model_of(job_type)
            others = [t for t in self._types if t != job_type and num_gpus in self._sizes[t]]
            same = [t for t in others if model_of(t) == model]
            logs = (self._nearest_batch(job_type, same, flavor, num_gpus)
                    or self._log_effs(others, flavor, num_gpus))
            hit = math.exp(sum(logs) / len(logs)) if logs else 1.0
            self._cache[key] = hit
        return hit

    def _nearest_batch(self, job_type: str, same: list[str], flavor: GpuFlavor,
                       num_gpus: int) -> list[float]:
        """log eff of the same-model job types measured there, only the
        :data:`NEAREST_BATCH` nearest ``job_type``'s batch size (log distance) when the job
        types name batch sizes: a gang's scaling follows its per-GPU batch (Sia's
        DeepSpeech2 on 12 RTX 2080 Ti keeps 44 % per GPU at batch 10, 89 % at batch 57)."""
        batch = batch_size_of(job_type)
        measured = [(t, e) for t in same for e in self._log_effs([t], flavor, num_gpus)]
        if batch is None:
            return [e for _t, e in measured]
        known = [(abs(math.log(b / batch)), e) for t, e in measured
                 if (b := batch_size_of(t)) is not None]
        if not known:
            return [e for _t, e in measured]
        known.sort(key=lambda x: x[0])
        return [e for _d, e in known[:NEAREST_BATCH]]

    def _log_effs(self, types: list[str], flavor: GpuFlavor, num_gpus: int) -> list[float]:
        """log eff of each of ``types`` measured at 1 and ``num_gpus`` GPUs of ``flavor``."""
        out = []
        for t in types:
            try:
                one = self.table.throughput(t, flavor, 1)
                gang = self.table.throughput(t, flavor, num_gpus)
            except NoProfileError:
                continue
            if one > 0 and gang > 0:
                out.append(math.log(gang / (num_gpus * one)))
        return out
