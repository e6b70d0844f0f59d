"""Estimating a job's speed on every flavor from a table's other job types and a few observations.

A job whose type is not in a throughput table (every job a real user writes) still has to be
placed by policies that compare flavors. :class:`SpeedEstimator` answers with

* a **prior**: the typical job of the table, from a log-space low-rank completion of its other
  job types (:mod:`tessera.perf.completion`, Gavel's way); for a flavor the table does not
  cover, the flavor's **roofline** speed relative to the covered ones (its peak FLOP/s from the
  catalog, :func:`tessera.perf.roofline.peak_flops_per_s`, measured against the table's
  flavors' mean);
* an **update** from observations: one observed rate fixes the job's scale (the whole row
  shifts by the observed log-ratio), two or more also fit its shape (which flavors it gains
  most from);
* when the job names its **model** and the table holds that model at other batch sizes
  (``ResNet-50 (batch size 64)`` for a ResNet-50 job at batch 48), the shape is the mean shape
  of the :data:`NEIGHBOURS` job types of that model whose completed rates are nearest the
  job's observations (Gavel matches a new job to its nearest reference job the same way),
  and the observations give the scale.

Rates are in the table's unit, steps per second at ``num_gpus`` GPUs (1 by default).
:class:`SpeedBook` does the update for thousands of jobs at once, every scheduling round.

Example::

    est = SpeedEstimator.from_table(default_throughputs())
    est.estimate({"K80": 2.1})   # {'K80': 2.1, 'P100': ..., 'V100-16GB': ...}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.completion import (
    DEFAULT_RANK,
    DEFAULT_REG,
    FloatArray,
    complete,
    fit_rows,
)
from tessera.perf.profiles import PROXY_FLAVORS, ThroughputTable
from tessera.perf.roofline import CHIP_TWINS, peak_flops_per_s

#: How many same-model job types give a job's shape (3 beat 1 on both bundled tables).
NEIGHBOURS = 3

#: Flavors whose table column is a copy of another's (answered by proxy or chip twin).
COPIED_FLAVORS: dict[str, str] = {**PROXY_FLAVORS, **CHIP_TWINS}


def table_matrix(table: ThroughputTable, num_gpus: int = 1
                 ) -> tuple[tuple[str, ...], tuple[str, ...], FloatArray]:
    """The table as ``(job_types, flavors, log_rates)`` for ``num_gpus``-GPU consolidated runs.

    Flavors that are copies of another flavor's measurements (A100-80GB of A100-40GB) are left
    out; a rate of zero (the job does not fit) is a missing cell (NaN), and job types with no
    rate at that size are left out.
    """
    flavors = tuple(f for f in table.flavors()
                    if not (f in COPIED_FLAVORS and COPIED_FLAVORS[f] in table.flavors()))
    rows: list[tuple[str, list[float]]] = []
    for job_type in table.job_types():
        row = [table.isolated.get((f, True), {}).get((job_type, num_gpus), 0.0) for f in flavors]
        if any(v > 0 for v in row):
            rows.append((job_type, [math.log(v) if v > 0 else math.nan for v in row]))
    return tuple(t for t, _ in rows), flavors, np.array([r for _, r in rows], dtype=np.float64)


def model_of(job_type: str) -> str:
    """The model of a job type: ``ResNet-50 (batch size 64)`` -> ``ResNet-50``."""
    return job_type.split(" (batch size ", 1)[0]


def roofline_log_speed(flavor: str) -> float:
    """Log of the flavor's peak FP32 FLOP/s: the roofline's speed for a flavor no table covers.

    ``tessera speeds`` measured FP32 peak, memory bandwidth, tensor-core peak and their
    geometric means as this feature (leave-one-flavor-out, both tables): FP32 peak has the
    lowest mean error.
    """
    return math.log(peak_flops_per_s(resolve_flavor(flavor), "cnn-fp32"))


def check_rate(flavor: str, rate: float) -> float:
    """``rate`` as a float, or :class:`SpecError` if it is not a positive finite number."""
    value = float(rate)
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"observed rate {rate!r} on {flavor}: a rate must be a positive, "
                        "finite number of steps per second")
    return value


class SpeedEstimator:
    """Per-flavor speed estimates for a job from a table's other job types (module docstring).

    Build with :meth:`from_table`. Columns are the table's flavors, then any ``extra_flavors``
    answered by the roofline.
    """

    def __init__(self, flavors: Sequence[str], col_bias: FloatArray, col_factors: FloatArray,
                 reg: float, roofline: Sequence[str] = (),
                 references: Mapping[str, FloatArray] | None = None) -> None:
        self.flavors: tuple[str, ...] = tuple(flavors)
        #: completed log rows of the reference job types, for :meth:`estimate`'s ``model``
        self.references: dict[str, FloatArray] = dict(references or {})
        self.col_bias = col_bias
        self.col_factors = col_factors
        self.reg = reg
        self.roofline: tuple[str, ...] = tuple(roofline)
        self._index = {f: i for i, f in enumerate(self.flavors)}

    @classmethod
    def from_table(cls, table: ThroughputTable, *, num_gpus: int = 1,
                   rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
                   extra_flavors: Iterable[str] = (), without_job_types: Iterable[str] = (),
                   without_flavors: Iterable[str] = ()) -> SpeedEstimator:
        """Complete ``table`` (less the job types and flavors named) and add roofline columns.

        ``without_*`` serve leave-one-out evaluation; ``extra_flavors`` are catalog flavors the
        table does not measure (named as :func:`resolve_flavor` accepts them).

        Raises:
            SpecError: a flavor named is not in the table, or nothing is left to complete.
        """
        job_types, flavors, logs = table_matrix(table, num_gpus)
        drop_f = {_short(f) for f in without_flavors}
        for f in drop_f:
            if f not in flavors:
                raise SpecError(f"flavor {f} is not in {table.source}; it has "
                                f"{', '.join(flavors)}")
        drop_t = set(without_job_types)
        keep_f = [i for i, f in enumerate(flavors) if f not in drop_f]
        keep_t = [i for i, t in enumerate(job_types) if t not in drop_t]
        sub = logs[np.ix_(keep_t, keep_f)]
        has: list[bool] = np.logical_not(np.isnan(sub).all(axis=1)).tolist()
        sub = sub[has]
        if sub.size == 0:
            raise SpecError(f"{table.source}: no job type left to estimate from")
        fit = complete(sub, rank=rank, reg=reg)
        filled = np.where(np.isnan(sub), fit.predict_log(), sub)
        types = [job_types[i] for i, h in zip(keep_t, has, strict=True) if h]
        names = [flavors[i] for i in keep_f]
        return cls(names, fit.col_bias, fit.col_factors, reg,
                   references=dict(zip(types, filled, strict=True))).with_roofline(extra_flavors)

    def with_roofline(self, flavors: Iterable[str]) -> SpeedEstimator:
        """This estimator plus roofline columns for ``flavors`` (the table's do not change).

        A new flavor's speed is its peak FLOP/s relative to the covered flavors', applied to
        their mean log rate; its shape is the typical job's (zero factors).
        """
        new = [s for s in dict.fromkeys(_short(f) for f in flavors) if s not in self._index]
        if not new:
            return self
        known = [f for f in self.flavors if f not in self.roofline]
        offset = float(np.mean([self.col_bias[self._index[f]] - roofline_log_speed(f)
                                for f in known]))
        bias = np.concatenate([self.col_bias, [offset + roofline_log_speed(f) for f in new]])
        factors = np.vstack([self.col_factors, np.zeros((len(new), self.col_factors.shape[1]))])
        refs = {t: np.concatenate([r, [offset + roofline_log_speed(f) + float(np.mean(
            r[:len(known)] - self.col_bias[:len(known)])) for f in new]])
            for t, r in self.references.items()}
        return SpeedEstimator([*self.flavors, *new], bias, factors, self.reg,
                              [*self.roofline, *new], refs)

    def column(self, flavor: str) -> int:
        """The column answering ``flavor`` (a copied flavor answers from its source).

        Raises:
            SpecError: no column answers it (name it in ``extra_flavors`` to use the roofline).
        """
        short = _short(flavor)
        if short not in self._index and COPIED_FLAVORS.get(short) in self._index:
            short = COPIED_FLAVORS[short]
        if short not in self._index:
            raise SpecError(f"flavor {short} is not in this speed estimator; it covers "
                            f"{', '.join(self.flavors)} (a flavor no table measures needs "
                            "extra_flavors, answered by the roofline)")
        return self._index[short]

    def prior(self) -> dict[str, float]:
        """The typical job's rate on every flavor (no observation)."""
        return self.estimate({})

    def estimate(self, observations: Mapping[str, float | Sequence[float]],
                 model: str | None = None) -> dict[str, float]:
        """Rates on every flavor given observed rates (one or several per flavor).

        ``model`` names the job's model (``ResNet-50``); when the table has job types of that
        model, their shapes are used (see the module docstring), otherwise it is ignored.

        Raises:
            SpecError: a flavor is not covered, or a rate is not positive and finite.
        """
        log_obs = np.zeros((1, len(self.flavors)))
        seen = np.zeros((1, len(self.flavors)), dtype=bool)
        for flavor, rates in observations.items():
            many = [rates] if isinstance(rates, (int, float)) else list(rates)
            col = self.column(flavor)
            logs = [math.log(check_rate(flavor, r)) for r in many]
            if logs:
                log_obs[0, col], seen[0, col] = sum(logs) / len(logs), True
        like = self.same_model(model) if model else []
        row = (self.log_row_like(log_obs[0], seen[0], like) if like
               else self.log_rows(log_obs, seen)[0])
        return {f: float(math.exp(row[i])) for i, f in enumerate(self.flavors)}

    def same_model(self, model: str) -> list[FloatArray]:
        """Completed log rows of the reference job types of ``model``."""
        return [r for t, r in self.references.items() if model_of(t) == model]

    def log_row_like(self, log_obs: FloatArray, observed: np.ndarray,
                     like: Sequence[FloatArray]) -> FloatArray:
        """One job's log row from the shapes of the ``like`` rows nearest its observations.

        Nearest means the smallest mean squared log difference on the observed flavors (the
        batch size nearest the job's, for one observation); with no observation, all of them.
        """
        seen = np.flatnonzero(observed)
        rows = np.array(like)
        if seen.size:
            dist = ((rows[:, seen] - log_obs[seen][None, :]) ** 2).mean(axis=1)
            rows = rows[np.argsort(dist, kind="stable")[:NEIGHBOURS]]
            shape = (rows - rows[:, seen].mean(axis=1, keepdims=True)).mean(axis=0)
            return np.asarray(shape + log_obs[seen].mean(), dtype=np.float64)
        return np.asarray(rows.mean(axis=0), dtype=np.float64)

    def log_rows(self, log_obs: FloatArray, observed: np.ndarray) -> FloatArray:
        """Batch form of :meth:`estimate`: ``(jobs, flavors)`` logs in, logs out."""
        return fit_rows(self.col_bias, self.col_factors, log_obs, observed, self.reg)


class SpeedBook:
    """Observed rates and current estimates of many jobs: the scheduler's per-round update.

    Each job's observations on a flavor are averaged in log space (a geometric mean), so a
    noisy report moves the estimate by its share only.
    """

    def __init__(self, estimator: SpeedEstimator, capacity: int = 64) -> None:
        self.estimator = estimator
        cols = len(estimator.flavors)
        self._jobs: dict[str, int] = {}
        self._sum = np.zeros((capacity, cols))
        self._count = np.zeros((capacity, cols))
        self._estimates = np.zeros((0, cols))

    def observe(self, job: str, flavor: str, rate: float) -> None:
        """Record that ``job`` ran at ``rate`` steps/s on ``flavor``.

        Raises:
            SpecError: the flavor is not covered, or the rate is not positive and finite.
        """
        col = self.estimator.column(flavor)
        value = math.log(check_rate(flavor, rate))
        row = self._row(job)
        self._sum[row, col] += value
        self._count[row, col] += 1

    def _row(self, job: str) -> int:
        row = self._jobs.get(job)
        if row is None:
            row = self._jobs[job] = len(self._jobs)
            if row >= self._sum.shape[0]:
                grow = np.zeros_like(self._sum)
                self._sum = np.vstack([self._sum, grow])
                self._count = np.vstack([self._count, grow])
        return row

    def update(self) -> FloatArray:
        """Recompute every job's estimates; returns ``(jobs, flavors)`` rates."""
        n = len(self._jobs)
        count = self._count[:n]
        seen = count > 0
        mean = np.divide(self._sum[:n], count, out=np.zeros_like(count), where=seen)
        self._estimates = np.exp(self.estimator.log_rows(mean, seen))
        return self._estimates

    def rate(self, job: str, flavor: str) -> float:
        """The latest estimate (from the last :meth:`update`; the prior for a job not seen)."""
        col = self.estimator.column(flavor)
        row = self._jobs.get(job)
        if row is None or row >= self._estimates.shape[0]:
            return float(math.exp(self.estimator.col_bias[col]))
        return float(self._estimates[row, col])


def _short(flavor: str) -> str:
    return resolve_flavor(flavor).short
