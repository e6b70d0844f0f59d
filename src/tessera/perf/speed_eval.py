"""How good :class:`~tessera.perf.estimate.SpeedEstimator`'s guesses are: leave-one-out errors.

Two protocols, each for ``k`` observations of the job (``k = 0``: the prior alone):

* **leave one job type out** (``job-type``): the job type's row is removed from the table, the
  estimator completes the others, the job is observed on ``k`` of its measured flavors (every
  choice of ``k``), and its rate on each other measured flavor is predicted. This is a new job
  on a cluster whose flavors the table knows.
* **leave one flavor out** (``flavor``): the flavor's column is removed as well (no job type
  was ever measured on it, as for a GPU no table covers), so the estimator answers it from the
  roofline; the job is observed on ``k`` of its other flavors. This is Habitat's question:
  one GPU's speed from another's measurement.

The error of one prediction is ``|predicted - measured| / measured``; a flavor's MAPE is the
mean over every job type and choice of observed flavors, its worst case the maximum. Cells where
the job did not fit (a rate of zero) are neither observed nor predicted. Every number is
deterministic: the completion is seeded and every choice of observed flavors is enumerated.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from tessera.errors import SpecError
from tessera.perf.completion import DEFAULT_RANK, DEFAULT_REG
from tessera.perf.estimate import SpeedEstimator, model_of, table_matrix
from tessera.perf.profiles import ThroughputTable

PROTOCOLS = ("job-type", "flavor")


@dataclass(frozen=True, slots=True)
class FlavorError:
    """Prediction error on one target flavor.

    Attributes:
        protocol: ``job-type`` or ``flavor`` (see the module docstring).
        flavor: the flavor predicted.
        k: observations of the job (on other flavors).
        mape: mean absolute percentage error, in percent.
        worst: the largest error, in percent; ``worst_job``: whose it was.
        predictions: how many (job type, choice of observed flavors) predictions.
        best_source: for ``k = 1``, the observed flavor whose observation predicted this flavor
            best (chosen in hindsight, so an optimistic figure), and ``best_source_mape``.
    """

    protocol: str
    flavor: str
    k: int
    mape: float
    worst: float
    worst_job: str
    predictions: int
    best_source: str = ""
    best_source_mape: float = math.nan


def evaluate(table: ThroughputTable, protocol: str, k: int, *, use_model: bool = False,
             num_gpus: int = 1, rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG
             ) -> list[FlavorError]:
    """Leave-one-out errors of ``protocol`` with ``k`` observations, one row per flavor.

    ``use_model``: the job names its model, and the table's other job types of that model
    (other batch sizes) give its shape (:meth:`SpeedEstimator.estimate`'s ``model``).

    Raises:
        SpecError: an unknown protocol, or ``k`` too large for the table's flavors.
    """
    if protocol not in PROTOCOLS:
        raise SpecError(f"protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
    job_types, flavors, logs = table_matrix(table, num_gpus)
    most = len(flavors) - 1 - (protocol == "flavor")
    if not 0 <= k <= most:
        raise SpecError(f"k={k}: {table.source} has {len(flavors)} flavors, so k can be 0 to "
                        f"{most} for the {protocol} protocol")
    errs: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for j, job in enumerate(job_types):
        model = model_of(job) if use_model else None
        if protocol == "job-type":
            est = SpeedEstimator.from_table(table, num_gpus=num_gpus, rank=rank, reg=reg,
                                            without_job_types=[job])
            _predict(errs, job, logs[j], est, k, None, model)
            continue
        for target in range(len(flavors)):
            if math.isnan(logs[j, target]):
                continue
            est = SpeedEstimator.from_table(
                table, num_gpus=num_gpus, rank=rank, reg=reg, without_job_types=[job],
                without_flavors=[flavors[target]], extra_flavors=[flavors[target]])
            keep = [i for i in range(len(flavors)) if i != target]
            row = np.append(logs[j, keep], logs[j, target])
            _predict(errs, job, row, est, k, len(keep), model)
    return [summarize(protocol, f, k, errs[f]) for f in flavors if errs[f]]


def _predict(errs: dict[str, list[tuple[float, str, str]]], job: str, row: np.ndarray,
             est: SpeedEstimator, k: int, only_target: int | None, model: str | None) -> None:
    """Observe ``row`` on every choice of ``k`` measured cells and score the other cells."""
    measured = [i for i in range(len(row)) if not math.isnan(row[i]) and i != only_target]
    for chosen in combinations(measured, k):
        seen = np.zeros((1, len(row)), dtype=bool)
        seen[0, list(chosen)] = True
        log_obs = np.where(seen, row[None, :], 0.0)
        like = est.same_model(model) if model else []
        pred = (est.log_row_like(log_obs[0], seen[0], like) if like
                else est.log_rows(log_obs, seen)[0])
        targets = [only_target] if only_target is not None else [
            i for i in range(len(row)) if i not in chosen and not math.isnan(row[i])]
        for t in targets:
            if math.isnan(row[t]):
                continue
            error = abs(math.exp(pred[t] - row[t]) - 1.0)
            source = est.flavors[chosen[0]] if k == 1 else ""
            errs[est.flavors[t]].append((error, job, source))


def summarize(protocol: str, flavor: str, k: int, cells: list[tuple[float, str, str]]
              ) -> FlavorError:
    """One flavor's row from its ``(error, job type, observed flavor)`` cells."""
    worst = max(cells)
    best, best_mape = "", math.nan
    if k == 1:
        by_source: dict[str, list[float]] = defaultdict(list)
        for e, _job, src in cells:
            by_source[src].append(e)
        best, errors = min(by_source.items(), key=lambda kv: float(np.mean(kv[1])))
        best_mape = 100 * float(np.mean(errors))
    return FlavorError(protocol, flavor, k, 100 * float(np.mean([c[0] for c in cells])),
                       100 * worst[0], worst[1], len(cells), best, best_mape)

