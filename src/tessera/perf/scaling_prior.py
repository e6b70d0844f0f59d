"""A gang's scaling before it has run: the table's other job types at that size, as a prior.

Under learned speeds a gang's rate on a flavor is guessed from per-GPU rates: the prior row
(:class:`tessera.perf.estimate.SpeedEstimator`, 1-GPU runs) or its bootstrap profiles (1-GPU
runs too). Times the gang's size, that over-estimates every gang that scales sub-linearly --
most of them: on Gavel's table a 4-GPU gang of the typical job type keeps well under 100 %
of four 1-GPU runs' steps. :class:`ScalingPrior` supplies the missing factor, the
*per-GPU efficiency* of a ``g``-GPU consolidated gang on a flavor,

    eff(f, g) = rate(g GPUs of f) / (g · rate(1 GPU of f)),

as the geometric mean over the table's other job types measured at that size on that flavor
(those of the job's own model when the table has some, Gavel's nearest-reference idea; the
job's own type is always left out, as the estimator leaves it out). With no such job type the
factor is 1 (the old guess). Once the gang has run on a flavor its own measured scaling
replaces this prior (:meth:`tessera.sched.core.learned.LearnedOracle.observed`).
"""

from __future__ import annotations

import math

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor
from tessera.perf.estimate import model_of
from tessera.perf.profiles import ThroughputTable


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
            logs = self._log_effs(same, flavor, num_gpus) or self._log_effs(others, flavor,
                                                                           num_gpus)
            hit = math.exp(sum(logs) / len(logs)) if logs else 1.0
            self._cache[key] = hit
        return hit

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
