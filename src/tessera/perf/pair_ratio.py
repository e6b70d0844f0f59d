"""One observation, one ratio: predicting a job's rate on flavor F from its rate on flavor G.

With one observation the question is which ratio ``r_F / r_G`` to apply to the job's observed
rate ``r_G``. Today's estimator (:mod:`tessera.perf.estimate`) applies the completion's column
biases: one ratio per flavor pair, the same for every job. This module tries ratios learned
from the table's *other* job types (never the held-out one), as ``tessera speeds --prior``
variants, each for ``k = 1`` (:data:`VARIANTS`):

* ``mean-log``: the geometric mean of the other job types' ratios (a direct, pairwise twin of
  the completion's bias difference);
* ``median-log``: their median (robust to a model whose ratio is far off, as ncf's on Sia's
  V100);
* ``mape``: the ratio minimising their mean absolute percentage error, the weighted median of
  :func:`tessera.perf.speed_bound.best_ratio` (the bound's ratio, learned on the others);
* ``near-rate``: ``mape`` over the :data:`NEIGHBOURS` job types whose rate on ``G`` is nearest
  the job's (rate-dependent: a fast job on G is like the other fast jobs on G);
* ``near-work``: ``mape`` over the job types nearest in what a step computes (log FLOPs and log
  bytes per step, :mod:`tessera.perf.job_work`, standardised over the references);
* ``auto``: per flavor pair, the variant above with the lowest leave-one-out MAPE over the
  reference job types (each reference predicted from the others; the held-out job is in
  neither role), ``near-work`` only where the table's work was counted.

Protocols are :mod:`tessera.perf.speed_eval`'s. In the ``flavor`` protocol no job type was
measured on ``F``, so the ratio goes through each covered flavor ``F'`` other than ``F``: the
variant's ratio ``G -> F'`` (none when ``F' = G``) times the roofline's ``F' -> F`` (peak FP32
FLOP/s, as the estimator's roofline columns), the log-mean over every ``F'``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from tessera.errors import SpecError
from tessera.perf.completion import FloatArray
from tessera.perf.estimate import roofline_log_speed, table_matrix
from tessera.perf.profiles import ThroughputTable
from tessera.perf.speed_bound import best_ratio
from tessera.perf.speed_eval import PROTOCOLS, FlavorError, summarize

#: The single rules; :data:`VARIANTS` adds ``auto``, which chooses among them per flavor pair.
RULES = ("mean-log", "median-log", "mape", "near-rate", "near-work")
VARIANTS = (*RULES, "auto")

#: Job types the ``near-*`` variants learn a ratio from (the estimator's NEIGHBOURS, not tuned).
NEIGHBOURS = 3


def _log_ratio(variant: str, src: FloatArray, tgt: FloatArray, dist: FloatArray) -> float:
    """The variant's log ratio from the references' log rates on G (``src``) and F (``tgt``).

    ``dist`` ranks the references for the ``near-*`` variants (ignored by the others).
    """
    diff = tgt - src
    if variant == "mean-log":
        return float(diff.mean())
    if variant == "median-log":
        return float(np.median(diff))
    if variant.startswith("near-"):
        diff = diff[np.argsort(dist, kind="stable")[:NEIGHBOURS]]
    return math.log(best_ratio(np.exp(diff).tolist()))


def evaluate_pairs(table: ThroughputTable, protocol: str, variant: str, *,
                   num_gpus: int = 1) -> list[FlavorError]:
    """Leave-one-out errors of ``variant`` with one observation, one row per flavor.

    Raises:
        SpecError: an unknown protocol or variant, or ``near-work`` for a table whose job
            types were never counted.
    """
    if protocol not in PROTOCOLS:
        raise SpecError(f"protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
    if variant not in VARIANTS:
        raise SpecError(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
    job_types, flavors, logs = table_matrix(table, num_gpus)
    features = _features(job_types) if variant in ("near-work", "auto") else None
    if variant == "near-work" and features is None:
        raise SpecError(f"variant near-work: {table.source} has job types with no counted "
                        "work (tools/count_job_work.py counts them); auto does without")
    roof = np.array([roofline_log_speed(f) for f in flavors])
    errs: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for j, job in enumerate(job_types):
        refs = np.array([i != j for i in range(len(job_types))])
        cache: dict[tuple[int, int], float | None] = {}

        def ratio(g: int, f: int, j: int = j, refs: np.ndarray = refs,
                  cache: dict[tuple[int, int], float | None] = cache) -> float | None:
            if (g, f) not in cache:
                ok = np.flatnonzero(refs & ~np.isnan(logs[:, g]) & ~np.isnan(logs[:, f]))
                rule = variant if variant != "auto" else _choose(logs, features, ok, g, f)
                cache[(g, f)] = (_rule_ratio(rule, logs, features, ok, j, g, f) if ok.size
                                 else None)
            return cache[(g, f)]

        measured = [f for f in range(len(flavors)) if not math.isnan(logs[j, f])]
        for f in measured:
            for g in measured:
                if g == f:
                    continue
                step = (ratio(g, f) if protocol == "job-type"
                        else _through_others(ratio, g, f, roof))
                if step is None:
                    continue
                error = abs(math.exp(logs[j, g] + step - logs[j, f]) - 1.0)
                errs[flavors[f]].append((error, job, flavors[g]))
    return [summarize(protocol, f, 1, errs[f]) for f in flavors if errs[f]]


def _rule_ratio(rule: str, logs: FloatArray, features: FloatArray | None, refs: np.ndarray,
                j: int, g: int, f: int) -> float:
    """``rule``'s log ratio G -> F for job ``j`` learned from the ``refs`` rows."""
    if rule == "near-work" and features is not None:
        dist = np.abs(features[refs] - features[j]).sum(axis=1)
    else:
        dist = np.abs(logs[refs, g] - logs[j, g])
    return _log_ratio(rule, logs[refs, g], logs[refs, f], dist)


def _choose(logs: FloatArray, features: FloatArray | None, refs: np.ndarray, g: int, f: int
            ) -> str:
    """The rule with the lowest leave-one-out MAPE over the ``refs`` rows for G -> F."""
    rules = [r for r in RULES if r != "near-work" or features is not None]
    if refs.size < 2:
        return "mean-log"
    score = []
    for rule in rules:
        errors = [abs(math.exp(logs[i, g] + _rule_ratio(rule, logs, features, refs[refs != i],
                                                         i, g, f) - logs[i, f]) - 1.0)
                  for i in refs]
        score.append(float(np.mean(errors)))
    return rules[int(np.argmin(score))]


def _through_others(ratio: Callable[[int, int], float | None], g: int, f: int,
                    roof: FloatArray) -> float | None:
    """Log ratio G -> F with F unmeasured: through every other flavor F' (module docstring)."""
    steps = []
    for other in range(len(roof)):
        if other == f:
            continue
        first = 0.0 if other == g else ratio(g, other)
        if first is not None:
            steps.append(first + float(roof[f] - roof[other]))
    return float(np.mean(steps)) if steps else None


def _features(job_types: tuple[str, ...]) -> FloatArray | None:
    """``(jobs, 2)`` standardised log FLOPs and log bytes per step; None if never counted."""
    from tessera.perf.job_work import table_work  # lazy: only near-work and auto read counts

    try:
        work = table_work(job_types)
    except SpecError:
        return None
    raw = np.log(np.array([[work[t].flops, work[t].bytes] for t in job_types]))
    out: FloatArray = (raw - raw.mean(axis=0)) / np.maximum(raw.std(axis=0), 1e-9)
    return out
