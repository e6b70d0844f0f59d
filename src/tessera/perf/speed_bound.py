"""How good ANY guess from one observation can be: hindsight bounds for ``tessera speeds --bound``.

:mod:`tessera.perf.speed_eval` scores the estimator when a job was observed once, at rate ``r``
on flavor ``G``, and its rate on flavor ``F`` is predicted. With one observation today's
estimator (and Habitat's per-pair view) is **scale-only**: it predicts ``c(G, F) * r`` with a
ratio ``c`` that is the same for every job (the completion's column biases give it). This
module asks what the *best* such ratio would score if it were chosen in hindsight, with every
held-out job's true rate on ``F`` known:

* ``scale``: one ratio per flavor pair ``(G, F)``;
* ``scale|model``: one ratio per ``(G, F, model)`` for a model the table holds at two or more
  batch sizes (the job names its model, ``--model-known``), one per ``(G, F)`` shared by the
  other job types (a model the table holds once cannot inform a job of that model);
* ``power`` and ``power|model``: a ratio that may depend on the job's observed rate as a power
  law, ``c * r**b`` per group (``b = 1`` is scale-only; a nearest-batch-size predictor such as
  the estimator's ``--model-known`` one is rate-dependent and can beat ``scale|model``). The
  exponent is searched on a grid (:data:`EXPONENTS`), so this bound holds up to the grid's
  step.

No predictor of the class can have a lower MAPE on the same cells, whatever it learns from,
so a bound above 10 % says one observation and a fixed ratio cannot meet the goal, and a
method that wants to must let the ratio depend on the job (its features, its rate). These are
hindsight figures, never predictions. The cells are :mod:`~tessera.perf.speed_eval`'s for
``k = 1``: every job type and every ordered pair of distinct flavors it was measured on, so
the flavor and job-type protocols share one bound (they differ in what a predictor knows, not
in the class's optimum).

The ratio minimising ``sum_j |c / x_j - 1|`` over the true ratios ``x_j = r_F / r_G`` is a
weighted median: ``sum_j |c - x_j| / x_j`` is convex and piecewise linear in ``c``, so the
optimum is the median of the ``x_j`` weighted by ``1 / x_j`` (:func:`best_ratio`).

>>> best_ratio([1.0, 2.0, 4.0])        # weights 1, 1/2, 1/4: the first covers half
1.0
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.perf.estimate import model_of, table_matrix
from tessera.perf.profiles import ThroughputTable

#: Exponents ``b`` the power class is searched over (``b = 1`` included: it holds the scale class).
EXPONENTS = np.round(np.arange(-1.0, 2.0 + 1e-9, 0.01), 2)

#: Group of the job types whose model the table holds only once (they share a ratio).
SHARED = ""


@dataclass(frozen=True, slots=True)
class FlavorBound:
    """Hindsight MAPE of the best scale-only predictors of one target flavor, one observation.

    Attributes:
        flavor: the flavor predicted.
        scale: MAPE in percent of the best ratio per ``(G, F)`` (module docstring).
        scale_model: the same with one ratio per ``(G, F, model)`` (model known).
        power, power_model: the same for the ``c * r**b`` class (module docstring).
        predictions: how many (job type, observed flavor) cells were scored.
        best_source: the observed flavor whose best ratio scores lowest on this flavor, and
            ``best_source_scale`` its MAPE in percent.
    """

    flavor: str
    scale: float
    scale_model: float
    power: float
    power_model: float
    predictions: int
    best_source: str
    best_source_scale: float


def best_ratio(ratios: Sequence[float]) -> float:
    """The ratio ``c`` minimising the mean of ``|c / x - 1|`` over ``ratios`` (module docstring).

    Raises:
        ValueError: no ratio, or one that is not positive and finite.
    """
    x = np.sort(np.asarray(ratios, dtype=np.float64))
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"ratios {list(ratios)!r}: one or more positive, finite numbers")
    weights = 1.0 / x
    cumulative = np.cumsum(weights)
    return float(x[int(np.searchsorted(cumulative, cumulative[-1] / 2))])


def _errors(src: list[float], tgt: list[float], power: bool) -> list[float]:
    """Each cell's error under its group's best predictor: log rates on the source ``src``
    and target ``tgt``; scale-only, or the best ``c * r**b`` over :data:`EXPONENTS`."""
    s, t = np.array(src), np.array(tgt)
    best: list[float] = []
    for b in EXPONENTS if power else (1.0,):
        x = np.exp(t - b * s)  # the target's rate over r**b: what c must match
        errs = np.abs(best_ratio(x.tolist()) / x - 1.0)
        if not best or errs.mean() < np.mean(best):
            best = errs.tolist()
    return best


def one_observation_bounds(table: ThroughputTable, num_gpus: int = 1) -> list[FlavorBound]:
    """One :class:`FlavorBound` per flavor of ``table`` (rates at ``num_gpus`` GPUs)."""
    job_types, flavors, logs = table_matrix(table, num_gpus)
    models = Counter(model_of(t) for t in job_types)
    group = [model_of(t) if models[model_of(t)] > 1 else SHARED for t in job_types]
    # (source, target, group) -> ([log rate on source], [log rate on target])
    cells: dict[tuple[int, int, str], tuple[list[float], list[float]]] = defaultdict(
        lambda: ([], []))
    for j in range(len(job_types)):
        measured = [f for f in range(len(flavors)) if not math.isnan(logs[j, f])]
        for g in measured:
            for f in measured:
                if f != g:
                    src, tgt = cells[(g, f, group[j])]
                    src.append(float(logs[j, g]))
                    tgt.append(float(logs[j, f]))
    out = []
    for f, flavor in enumerate(flavors):
        by_source: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        scale_model: list[float] = []
        power_model: list[float] = []
        for (g, target, _group), (src, tgt) in cells.items():
            if target != f:
                continue
            scale_model += _errors(src, tgt, power=False)
            power_model += _errors(src, tgt, power=True)
            by_source[g][0].extend(src)
            by_source[g][1].extend(tgt)
        if not by_source:
            continue
        per_source = {g: _errors(*st, power=False) for g, st in by_source.items()}
        scale = [e for errs in per_source.values() for e in errs]
        power = [e for st in by_source.values() for e in _errors(*st, power=True)]
        best = min(per_source, key=lambda g: float(np.mean(per_source[g])))
        out.append(FlavorBound(flavor, _pct(scale), _pct(scale_model), _pct(power),
                               _pct(power_model), len(scale), flavors[best],
                               _pct(per_source[best])))
    return out


def _pct(errors: list[float]) -> float:
    return 100 * float(np.mean(errors))
