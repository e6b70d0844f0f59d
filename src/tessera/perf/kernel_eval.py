"""Leave-one-out errors of the kernels prior (``tessera speeds --prior kernels``).

The protocols and error measure are :mod:`tessera.perf.speed_eval`'s. The prediction of a job's
log rate on a target flavor is a blend

    w * kernels + (1 - w) * completion

of :class:`~tessera.perf.kernel_prior.KernelModel` (fitted on the reference job types) and the
matrix completion (:class:`~tessera.perf.estimate.SpeedEstimator`, today's estimator, whose
answer for a flavor no table covers is the peak-FP32 roofline). The roofline and ``w`` are
chosen by **cross-validation that never sees the held-out cell**:

* ``flavor`` protocol, job ``j`` and target flavor ``t`` held out: every other flavor ``t'`` is
  held out in turn as well (the completion refitted without ``j``, ``t`` and ``t'``), and the
  other job types' rates on ``t'`` are predicted from ``k`` observations on the
  remaining flavors; the (roofline, ``w``) with the lowest mean error there predicts ``t``;
* ``job-type`` protocol, job ``j`` held out: per target flavor, the other job types' rates on
  it are predicted from ``k`` observations on other flavors. The completion and the
  kernel models used there are fitted without ``j`` only, so both have seen the job types they
  are scored on (an optimistic score for both; refitting per scored job type would cost 70
  times as much).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import combinations

import numpy as np

from tessera.errors import SpecError
from tessera.perf.completion import DEFAULT_RANK, DEFAULT_REG, FloatArray
from tessera.perf.estimate import SpeedEstimator, table_matrix
from tessera.perf.job_work import table_work
from tessera.perf.kernel_prior import KernelModel, Roofline, all_rooflines, work_matrix
from tessera.perf.profiles import ThroughputTable
from tessera.perf.speed_eval import PROTOCOLS, FlavorError, summarize

#: Shares of the kernels prediction in the blend that cross-validation chooses from.
WEIGHTS = (0.0, 0.5, 1.0)

Cells = dict[str, list[tuple[float, str, str]]]


class _Table:
    """A table's log matrix and counts, with cached completions per left-out set."""

    def __init__(self, table: ThroughputTable, num_gpus: int, rank: int, reg: float) -> None:
        self.table, self.num_gpus, self.rank, self.reg = table, num_gpus, rank, reg
        self.job_types, self.flavors, self.logs = table_matrix(table, num_gpus)
        self.work = work_matrix(list(table_work(self.job_types).values()))
        self._fits: dict[tuple[str, tuple[str, ...]], SpeedEstimator] = {}

    def completion(self, job: str, hidden: Sequence[str]) -> SpeedEstimator:
        """The completion without ``job`` and the ``hidden`` flavors (roofline columns)."""
        key = (job, tuple(sorted(hidden)))
        if key not in self._fits:
            self._fits[key] = SpeedEstimator.from_table(
                self.table, num_gpus=self.num_gpus, rank=self.rank, reg=self.reg,
                without_job_types=[job], without_flavors=list(hidden),
                extra_flavors=list(hidden))
        return self._fits[key]

    def columns(self, est: SpeedEstimator) -> FloatArray:
        """The log matrix in ``est``'s column order."""
        index = [self.flavors.index(f) for f in est.flavors]
        cols: FloatArray = self.logs[:, index]
        return cols


def evaluate_kernels(table: ThroughputTable, protocol: str, k: int, *, num_gpus: int = 1,
                     rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
                     choices: Counter[tuple[str, str, float]] | None = None
                     ) -> list[FlavorError]:
    """Leave-one-out errors of the kernels prior, one row per flavor (module docstring).

    ``choices``, when given, counts what cross-validation chose per prediction:
    ``(target flavor, roofline as bound/peak/overhead, kernels weight)``.

    Raises:
        SpecError: an unknown protocol, ``k`` too large, or a job type with no counted work.
    """
    if protocol not in PROTOCOLS:
        raise SpecError(f"protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
    tab = _Table(table, num_gpus, rank, reg)
    most = len(tab.flavors) - 1 - (protocol == "flavor")
    if not 0 <= k <= most:
        raise SpecError(f"k={k}: {table.source} has {len(tab.flavors)} flavors, so k can be 0 "
                        f"to {most} for the {protocol} protocol")
    errs: Cells = defaultdict(list)
    rooflines = all_rooflines()
    for j, job in enumerate(tab.job_types):
        others = np.array([i != j for i in range(len(tab.job_types))])
        if protocol == "job-type":
            est = tab.completion(job, [])
            logs = tab.columns(est)
            models = [KernelModel(r, est.flavors, tab.work[others], logs[others])
                      for r in rooflines]
            for t in range(len(est.flavors)):
                if math.isnan(logs[j, t]):
                    continue
                score = _score(est, models, tab.work[others], logs[others], [t], k)
                _predict(errs, job, est, models, score, tab.work[j], logs[j], t, k, choices)
            continue
        for target in tab.flavors:
            if math.isnan(tab.logs[j, tab.flavors.index(target)]):
                continue
            est = tab.completion(job, [target])
            logs = tab.columns(est)
            t = est.flavors.index(target)
            ref = logs.copy()
            ref[:, t] = math.nan
            models = [KernelModel(r, est.flavors, tab.work[others], ref[others])
                      for r in rooflines]
            score = _inner_flavor_score(tab, job, target, others, rooflines, k)
            _predict(errs, job, est, models, score, tab.work[j], logs[j], t, k, choices)
    flavors = [f for f in tab.flavors if errs[f]]
    return [summarize(protocol, f, k, errs[f]) for f in flavors]


def _inner_flavor_score(tab: _Table, job: str, target: str, others: np.ndarray,
                        rooflines: list[Roofline], k: int) -> FloatArray:
    """Mean error per (roofline, weight) predicting each other flavor as if never measured."""
    total = np.zeros((len(rooflines), len(WEIGHTS)))
    count = 0
    for inner in tab.flavors:
        if inner == target:
            continue
        est = tab.completion(job, [target, inner])
        logs = tab.columns(est)[others]
        t = est.flavors.index(inner)
        drop = [est.flavors.index(target), t]
        ref = logs.copy()
        ref[:, drop] = math.nan
        models = [KernelModel(r, est.flavors, tab.work[others], ref) for r in rooflines]
        seen_logs = logs.copy()
        seen_logs[:, est.flavors.index(target)] = math.nan
        s, n = _score_sum(est, models, tab.work[others], seen_logs, [t], k)
        total += s
        count += n
    return total / max(count, 1)


def _score(est: SpeedEstimator, models: list[KernelModel], work: FloatArray, logs: FloatArray,
           targets: list[int], k: int) -> FloatArray:
    s, n = _score_sum(est, models, work, logs, targets, k)
    return s / max(n, 1)


def _score_sum(est: SpeedEstimator, models: list[KernelModel], work: FloatArray,
               logs: FloatArray, targets: list[int], k: int) -> tuple[FloatArray, int]:
    """Summed errors per (model, weight) over the rows, targets and choices of ``k`` sources."""
    total = np.zeros((len(models), len(WEIGHTS)))
    count = 0
    weights = np.array(WEIGHTS)
    for t in targets:
        sources = [c for c in range(logs.shape[1]) if c != t]
        for chosen in combinations(sources, k):
            cols = [t, *chosen]
            ok = ~np.isnan(logs[:, cols]).any(axis=1)
            if not ok.any():
                continue
            seen = np.zeros((int(ok.sum()), logs.shape[1]), dtype=bool)
            seen[:, list(chosen)] = True
            obs = np.where(seen, logs[ok], 0.0)
            comp = est.log_rows(obs, seen)[:, t]
            truth = logs[ok, t]
            for m, model in enumerate(models):
                kern = model.predict_log(work[ok], obs, seen)[:, t]
                pred = weights[:, None] * kern[None, :] + (1 - weights[:, None]) * comp[None, :]
                total[m] += np.abs(pred - truth[None, :]).sum(axis=1)
            count += int(ok.sum())
    return total, count


def _predict(errs: Cells, job: str, est: SpeedEstimator, models: list[KernelModel],
             score: FloatArray, work: FloatArray, row: FloatArray, t: int, k: int,
             choices: Counter[tuple[str, str, float]] | None) -> None:
    """Predict ``row[t]`` from every choice of ``k`` other measured cells with the best blend."""
    m, w = np.unravel_index(int(np.argmin(score)), score.shape)
    weight = WEIGHTS[int(w)]
    if choices is not None:
        r = models[int(m)].roofline
        choices[(est.flavors[t], f"{r.bound}/{r.peak}/{r.overhead_s * 1e6:g}us", weight)] += 1
    measured = [i for i in range(len(row)) if i != t and not math.isnan(row[i])]
    for chosen in combinations(measured, k):
        seen = np.zeros((1, len(row)), dtype=bool)
        seen[0, list(chosen)] = True
        obs = np.where(seen, row[None, :], 0.0)
        comp = est.log_rows(obs, seen)[0, t]
        kern = models[int(m)].predict_log(work[None, :], obs, seen)[0, t]
        pred = weight * kern + (1 - weight) * comp
        source = est.flavors[chosen[0]] if k == 1 else ""
        errs[est.flavors[t]].append((abs(math.exp(pred - row[t]) - 1.0), job, source))
