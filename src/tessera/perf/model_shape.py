"""A new job type's 1-GPU prior from its model's *measured* job types, at its batch size.

:class:`tessera.perf.estimate.SpeedEstimator` shapes the prior of a job whose model the table
knows (``ResNet-50`` at a batch size the table lacks) by the mean of that model's *completed*
rows, over all batch sizes. Both hurt on Sia's table:

* a completed row is partly the completion's own guess: Sia measures DeepSpeech2 at batch
  sizes 81-240 on A100 only, so half of DeepSpeech2's rows carry the rank-1 fit's
  typical-job T4 and RTX 2080 Ti cells (the A100 well ahead), while every DeepSpeech2 batch
  size measured on both runs 1.24-1.43x *faster* on an RTX 2080 Ti;
* a model's rates are far from one shape over its batch sizes: CIFAR-10 runs ~28 steps/s on
  an A100 from batch 32 to 91, then halves every ~2.5x in batch, while a T4 slows from the
  start (A100/T4 1.2x at batch 32, 3.8x at 257).

:func:`measured_prior` reads the other job types of the model, measured cells only:

* a flavor measured at a batch size below the job's and one above: the log rate linear in
  log batch between the nearest two (an interpolation);
* a flavor measured on one side only: an interpolated flavor's value times the ratio of the
  two at the nearest batch size that measured both;
* neither, or job types without batch sizes: a two-way additive fit in logs over the
  measured cells, ``log y[t, f] = s[t] + h[f] (+ k[f] · log batch[t])`` (:func:`_fit`).

Leave-one-job-type-out on Sia's table, the flavors of ``sia-64`` (T4, RTX 2080 Ti, A100),
mean |log error| of the 1-GPU prior 0.396 -> 0.086 and the pairwise order of flavors right
for 152 of 155 pairs (was 134); with one observation fixing the row's scale, 0.154 -> 0.093
(order 454 of 463, was 418); docs/scheduler.md "Learned speeds".
"""

from __future__ import annotations

import math

import numpy as np

from tessera.perf.estimate import model_of, table_matrix
from tessera.perf.profiles import ThroughputTable
from tessera.perf.scaling_prior import batch_size_of

#: Alternating-means sweeps of the additive fit (it converges in a few on Sia's tables; the
#: fit is exact when every job type measured every flavor of the model).
SWEEPS = 50


def measured_prior(table: ThroughputTable, job_type: str, num_gpus: int = 1,
                   by_batch: bool = True) -> dict[str, float]:
    """1-GPU rates by flavor short name for ``job_type`` from the *other* job types of its
    model, their measured cells only (module docstring); ``{}`` when the table has no other
    job type of that model, or none measured on two flavors. With ``by_batch`` (and batch
    sizes named by every such job type) the job's batch size is interpolated (module
    docstring); without, the additive fit's mean job type answers."""
    model = model_of(job_type)
    types, flavors, logs = table_matrix(table, num_gpus)
    rows = [i for i, t in enumerate(types) if t != job_type and model_of(t) == model]
    if not rows:
        return {}
    sub = np.asarray(logs)[rows]
    mask = np.isfinite(sub)
    if not (mask.sum(axis=1) >= 2).any():
        return {}  # (job types seen on one flavor each fix no shape)
    cols = np.flatnonzero(mask.any(axis=0))
    sub, mask = sub[:, cols], mask[:, cols]
    kept = [types[i] for i in rows]
    batches = [batch_size_of(t) for t in kept]
    own = batch_size_of(job_type)
    x = None
    if by_batch and own is not None and all(b is not None for b in batches):
        x = np.log(np.array(batches, dtype=np.float64)) - math.log(own)  # (own batch: 0)
    base, shape = _fit(np.where(mask, sub, 0.0), mask, x)
    fitted = {flavors[c]: base + float(h) for c, h in zip(cols, shape, strict=True)}
    if x is not None:
        fitted = _interpolate(sub, mask, x, [flavors[c] for c in cols], fitted)
    return {f: math.exp(v) for f, v in fitted.items()}


def _interpolate(logs: np.ndarray, mask: np.ndarray, x: np.ndarray, names: list[str],
                 fitted: dict[str, float]) -> dict[str, float]:
    """Log rates at ``x = 0`` (the job's own log batch size, ``x`` the others' relative to
    it) by interpolation where the job's batch size lies between two measured ones.

    * a flavor measured at a smaller and a larger batch size: linear in log batch between
      the nearest two (rate against batch size is far from one line over a model's whole
      range: Sia's CIFAR-10 runs ~28 steps/s on an A100 from batch 32 to 91, then halves
      every ~2.5x);
    * another flavor: an interpolated flavor's value times the ratio of the two at the
      nearest batch size that measured both (mean in logs over the interpolated flavors);
    * neither (the job's batch size beyond every flavor's range): ``fitted``.
    """
    out: dict[str, float] = {}
    for f, name in enumerate(names):
        m = mask[:, f]
        below = [(xv, y) for xv, y in zip(x[m], logs[m, f], strict=True) if xv <= 0]
        above = [(xv, y) for xv, y in zip(x[m], logs[m, f], strict=True) if xv >= 0]
        if below and above:
            (x0, y0), (x1, y1) = max(below), min(above)
            out[name] = y0 if x1 == x0 else y0 + (y1 - y0) * (0 - x0) / (x1 - x0)
    if not out:
        return fitted
    done = [names.index(n) for n in out]
    for f, name in enumerate(names):
        if name in out:
            continue
        gaps = []
        for g in done:
            both = np.flatnonzero(mask[:, f] & mask[:, g])
            if both.size:
                t = both[np.argmin(np.abs(x[both]))]
                gaps.append(out[names[g]] + logs[t, f] - logs[t, g])
        out[name] = sum(gaps) / len(gaps) if gaps else fitted[name]
    return out


def _fit(y: np.ndarray, mask: np.ndarray, x: np.ndarray | None) -> tuple[float, np.ndarray]:
    """Alternating least squares of ``y[t, f] = s[t] + h[f] (+ k[f] · x[t])`` over ``mask``;
    returns the scale and shape at ``x = 0`` (the job's own batch size): ``s`` itself fitted
    as ``a + b · x[t]`` there, and ``h``. A flavor measured at fewer than 3 batch sizes gets
    no slope (``k = 0``)."""
    n_t, n_f = y.shape
    shape = np.zeros(n_f)
    slope = np.zeros(n_f)
    scale = np.zeros(n_t)
    xs = np.zeros(n_t) if x is None else x
    for _ in range(SWEEPS):
        fitted = shape[None, :] + slope[None, :] * xs[:, None]
        scale = np.where(mask, y - fitted, 0.0).sum(axis=1) / mask.sum(axis=1)
        for f in range(n_f):
            m = mask[:, f]
            r = y[m, f] - scale[m]
            if x is not None and len(np.unique(xs[m])) >= 3:
                slope[f], shape[f] = np.polyfit(xs[m], r, 1)
            else:
                shape[f] = float(r.mean())
    if x is None or len(np.unique(xs)) < 3:
        return float(scale.mean()), shape
    _slope, a = np.polyfit(xs, scale, 1)
    return float(a), shape
