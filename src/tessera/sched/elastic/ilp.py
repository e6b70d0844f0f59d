"""The integer program every elastic allocation policy here solves: one configuration per job.

Sia, Pollux (as re-implemented here) and ``goodput_srpt`` all pick, for each job ``j``, at most
one configuration ``c`` (a flavor and a GPU count, :class:`~tessera.sched.elastic.goodput.Config`)
so as to maximise a sum of per-(job, configuration) values under each flavor's GPU capacity::

    max  Σ_jc v[j,c] · x[j,c]
    s.t. Σ_c x[j,c] ≤ 1                       (one configuration per job, or none)
         Σ_jc gpus[c] · x[j,c] ≤ cap[f]        for each flavor f (over its configurations)
         x[j,c] = 1                            for pinned pairs (a job mid-restart keeps its GPUs)
         x ∈ {0, 1}

The policies differ only in ``v`` (Sia: ``λ_n − (normalised goodput)^p``; Pollux: the change of
its power-mean fitness; ours: completion rate). It is a multiple-choice knapsack with one
capacity row per flavor, solved exactly two ways:

* **dynamic programming** over the free GPUs per flavor when their product is small (up to
  :data:`DP_MAX_STATES` states, e.g. the 64-GPU ``sia-64``: 25 × 25 × 17): one vectorised pass
  per job, ``best[c] = max(best[c], best[c − gpus(k)] + v[j,k])`` over the job's options, then
  the choices are read back from full capacity. Exact, and ~50× faster than branch and bound
  on these small problems, where HiGHS spends most of its time proving optimality;
* **HiGHS' branch and bound** (through SciPy's ``milp``) on bigger clusters; should it stop
  without a solution, a greedy pass (best value per GPU first) answers instead and says so.

Ties go to the job's first option in ``values`` order (DP) or wherever HiGHS lands; both
answers are optimal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from tessera.model.gpus import GpuFlavor
from tessera.sched.elastic.goodput import Config

DP_MAX_STATES = 200_000
"""Largest product of (free GPUs + 1) over flavors solved by dynamic programming."""


@dataclass(frozen=True, slots=True)
class Choices:
    """The solver's answer.

    Attributes:
        picked: job index -> configuration index, for every job given a configuration.
        objective: the value of the answer.
        fallback: why the greedy pass answered instead of HiGHS; empty when HiGHS did.
    """

    picked: Mapping[int, int]
    objective: float
    fallback: str = ""


def choose_configs(
    values: Sequence[Sequence[tuple[int, float]]],
    configs: Sequence[Config],
    capacity: Mapping[GpuFlavor, int],
    pinned: Mapping[int, int] | None = None,
    mip_rel_gap: float = 1e-4,
    time_limit_s: float = 10.0,
) -> Choices:
    """Solve the program above.

    Args:
        values: for each job, ``(configuration index, value)`` of every configuration it may
            take (missing ones are forbidden).
        configs: the configurations, indexed as in ``values``.
        capacity: GPUs of each flavor free for these jobs.
        pinned: job index -> configuration it must keep.
        mip_rel_gap: HiGHS' relative optimality gap.
        time_limit_s: HiGHS' time limit.
    """
    pinned = pinned or {}
    values = [_undominated(row, configs, pinned.get(j)) for j, row in enumerate(values)]
    flavors = sorted(capacity, key=lambda f: f.short)
    if math.prod(capacity[f] + 1 for f in flavors) <= DP_MAX_STATES:
        return _dp(values, configs, _binding(values, configs, capacity, pinned), pinned)
    cols_job: list[int] = []
    cols_cfg: list[int] = []
    cost: list[float] = []
    for j, row in enumerate(values):
        for c, v in row:
            cols_job.append(j)
            cols_cfg.append(c)
            cost.append(v)
    n = len(cost)
    if n == 0:
        return Choices({}, 0.0)
    f_index = {f: i for i, f in enumerate(flavors)}
    job_rows = np.asarray(cols_job)
    cfg = np.asarray(cols_cfg)
    gpus = np.asarray([configs[c].num_gpus for c in cols_cfg], dtype=float)
    f_rows = np.asarray([len(values) + f_index[configs[c].flavor] for c in cols_cfg])
    cols = np.arange(n)
    a = sp.csr_array(
        (np.concatenate([np.ones(n), gpus]),
         (np.concatenate([job_rows, f_rows]), np.concatenate([cols, cols]))),
        shape=(len(values) + len(flavors), n))
    upper = np.concatenate([np.ones(len(values)), [float(capacity[f]) for f in flavors]])
    lower_x = np.zeros(n)
    for k in range(n):
        if pinned.get(cols_job[k]) == cols_cfg[k]:
            lower_x[k] = 1.0
    res = milp(-np.asarray(cost), integrality=np.ones(n),
               bounds=Bounds(lower_x, np.ones(n)),
               constraints=LinearConstraint(a, -np.inf, upper),
               options={"mip_rel_gap": mip_rel_gap, "time_limit": time_limit_s, "disp": False})
    if res.x is not None and res.status in (0, 1):
        chosen = np.flatnonzero(res.x > 0.5)
        picked = {int(job_rows[k]): int(cfg[k]) for k in chosen}
        return Choices(picked, float(sum(cost[k] for k in chosen)))
    why = f"elastic allocation MIP: HiGHS stopped ({res.message}); greedy answer instead"
    return _greedy(values, configs, capacity, pinned, why)


def _greedy(values: Sequence[Sequence[tuple[int, float]]], configs: Sequence[Config],
            capacity: Mapping[GpuFlavor, int], pinned: Mapping[int, int], why: str) -> Choices:
    """Pinned pairs first, then the best value per GPU that still fits, one per job."""
    left = dict(capacity)
    picked: dict[int, int] = {}
    for j, c in pinned.items():
        picked[j] = c
        left[configs[c].flavor] -= configs[c].num_gpus
    pairs = sorted(((v / configs[c].num_gpus, v, j, c) for j, row in enumerate(values)
                    for c, v in row if v > 0), key=lambda t: (-t[0], -t[1], t[2], t[3]))
    for _per, _v, j, c in pairs:
        fl, g = configs[c].flavor, configs[c].num_gpus
        if j not in picked and left.get(fl, 0) >= g:
            picked[j] = c
            left[fl] -= g
    total = sum(v for j, row in enumerate(values) for c, v in row if picked.get(j) == c)
    return Choices(picked, total, why)


def _dp(values: Sequence[Sequence[tuple[int, float]]], configs: Sequence[Config],
        capacity: Mapping[GpuFlavor, int], pinned: Mapping[int, int]) -> Choices:
    """Exact multiple-choice knapsack by dynamic programming over free GPUs (module doc).

    ``tables[j][s]`` is the best value of jobs ``0..j-1`` within free GPUs ``s`` (one axis per
    flavor); :func:`_step` makes each table from the one before. No choices are recorded on
    the way: reading the answer back, :func:`_pick` replays one job's step at the one state
    that matters, with the same arithmetic, so it lands on the same option (the first strict
    improvement: ties keep no configuration, then the earliest option).
    """
    flavors = sorted(capacity, key=lambda f: f.short)
    axis = {f: i for i, f in enumerate(flavors)}
    shape = tuple(capacity[f] + 1 for f in flavors)
    tables = [np.zeros(shape)]
    buf = np.empty(math.prod(shape))
    usable = [[(k, axis[configs[c].flavor], configs[c].num_gpus, v)
               for k, (c, v) in enumerate(row)
               if pinned.get(j, c) == c and configs[c].flavor in axis
               and configs[c].num_gpus <= capacity[configs[c].flavor]]
              for j, row in enumerate(values)]
    for j, opts in enumerate(usable):
        tables.append(_step(tables[-1], opts, j in pinned, buf))
    at = [capacity[f] for f in flavors]
    total = float(tables[-1][tuple(at)])
    if not math.isfinite(total):
        return _greedy(values, configs, capacity, pinned,
                       "elastic allocation: pinned jobs no longer fit; greedy answer instead")
    picked: dict[int, int] = {}
    for j in range(len(values) - 1, -1, -1):
        k = _pick(tables[j], usable[j], at, j in pinned)
        if k >= 0:
            c = values[j][k][0]
            picked[j] = c
            at[axis[configs[c].flavor]] -= configs[c].num_gpus
    return Choices(picked, total)


def _step(best: np.ndarray, opts: Sequence[tuple[int, int, int, float]], must: bool,
          buf: np.ndarray) -> np.ndarray:
    """One job's table from ``best``, the table before it: ``new[s] = max(best[s],
    best[s − g·e_f] + v)`` over the job's options ``(g GPUs of flavor axis f, value v)``
    (``best[s]`` left out if the job ``must`` take one).

    An option is a shift of the whole table along its flavor's axis, and NumPy shifts along
    the *outermost* axis of a C-ordered array fastest: both operands are then one contiguous
    block (on ``sia-64``'s 17 × 25 × 25 table, 4–5× faster than along an inner axis). So the
    options are taken axis by axis, each with the tables laid out so that axis is outermost
    (the axis ``best`` already has outermost first, then one copy of each table per other
    axis); the answer is returned as a view in the flavors' order, whatever its layout. The
    candidates, and so every value, are those of the plain per-option loop, bit for bit (a
    maximum does not depend on the order it is taken in).
    """
    by_axis: dict[int, list[tuple[int, float]]] = {}
    for _k, ax, g, v in opts:
        by_axis.setdefault(ax, []).append((g, v))
    new = np.full_like(best, -np.inf) if must else best.copy(order="K")
    dims = list(range(best.ndim))
    size = best.size
    for ax in sorted(by_axis, key=lambda a: -best.strides[a]):
        out = [ax, *dims[:ax], *dims[ax + 1:]]
        src = np.ascontiguousarray(best.transpose(out)).reshape(-1)
        moved = np.ascontiguousarray(new.transpose(out))
        dst = moved.reshape(-1)
        stride = size // best.shape[ax]
        for g, v in by_axis[ax]:
            k = g * stride
            cand = buf[:size - k]
            np.add(src[:size - k], v, out=cand)
            np.maximum(dst[k:], cand, out=dst[k:])
        new = moved.transpose(np.argsort(out))
    return new


def _pick(best: np.ndarray, opts: Sequence[tuple[int, int, int, float]], at: list[int],
          must: bool) -> int:
    """The option a job's step chose at state ``at`` given the table before it (-1: none)."""
    cur = -math.inf if must else float(best[tuple(at)])
    pick = -1
    for k, ax, g, v in opts:
        if at[ax] >= g:
            src = list(at)
            src[ax] -= g
            cand = best[tuple(src)] + v
            if cand > cur:
                cur, pick = cand, k
    return pick


def _binding(values: Sequence[Sequence[tuple[int, float]]], configs: Sequence[Config],
             capacity: Mapping[GpuFlavor, int], pinned: Mapping[int, int]) -> dict[GpuFlavor, int]:
    """Each flavor's capacity cut to the most GPUs of it the jobs could take together (their
    largest option on it, or their pinned one): free GPUs beyond that can never be used, so the
    dynamic programme over the smaller table gives the same answer, ties included."""
    demand = dict.fromkeys(capacity, 0)
    for j, row in enumerate(values):
        most: dict[GpuFlavor, int] = {}
        for c, _v in row:
            if pinned.get(j, c) == c and configs[c].flavor in demand:
                most[configs[c].flavor] = max(most.get(configs[c].flavor, 0), configs[c].num_gpus)
        for f, g in most.items():
            demand[f] += g
    return {f: min(capacity[f], demand[f]) for f in capacity}


def _undominated(row: Sequence[tuple[int, float]], configs: Sequence[Config],
                 keep: int | None) -> list[tuple[int, float]]:
    """``row`` without the options some option of the same flavor beats with no more GPUs (an
    optimum never needs them; ``keep``, a pinned option, always stays), in the row's order."""
    best: dict[GpuFlavor, list[tuple[int, float]]] = {}
    for c, v in sorted(row, key=lambda cv: (configs[cv[0]].num_gpus, -cv[1])):
        ladder = best.setdefault(configs[c].flavor, [])
        if not ladder or v > ladder[-1][1]:
            ladder.append((c, v))
    kept = {c for ladder in best.values() for c, _v in ladder}
    return [(c, v) for c, v in row if c in kept or c == keep]
