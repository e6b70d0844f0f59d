"""Synergy-OPT: the CPUs and memory of many gangs chosen together by one LP.

Synergy's OPT (Mohan et al., OSDI'22, section 4.2) is an upper bound: with the GPUs placed,
give every job a *mix* of its profiled (CPU, memory) points so that the summed speed of all
jobs is as large as possible while no server gives more CPUs or memory than it has. The LP
here, one round's worth:

* a column ``λ[j, k] ∈ [0, 1]`` for each gang ``j`` and each point ``k`` of its profile
  (CPUs and memory per GPU, speedup); every profile holds its proportional point, so
  giving every gang its proportional share is always feasible on whole nodes;
* ``Σ_k λ[j, k] = 1`` for every gang (one row each);
* for every node ``n`` and for CPUs and memory alike: ``Σ_j Σ_k λ[j, k] · g[j, n] · amount[k]
  ≤ free[n]`` (``g[j, n]``: the gang's GPUs on ``n``);
* maximise ``Σ_j Σ_k λ[j, k] · speedup[k]`` (less a tie-breaking ``1e-4`` per node's worth of
  CPUs or memory taken, so that among equally fast points the smallest wins).

Its optimum is fractional (a job "holds" 7.5 CPUs); :func:`opt_hosts` rounds each gang *down*
to the fastest measured point within its fractional CPUs and memory, so the rounded
allocation always fits and its speed is at most the LP's -- the LP value stays the bound.
A job without a sensitivity has one point: its demand (or proportional share) at speed 1.
HiGHS solves it through :mod:`tessera.sched.core.lp`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.model.jobs import JobId, JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.lp import LpModel, LpSolver, solve_lp
from tessera.sched.core.snapshot import Placement
from tessera.sched.resources.speed import best_point_within

Sizes = Mapping[str, tuple[int, float, float]]
#: Cost of a node's whole CPUs (or memory) in speedup units: small enough never to trade
#: speed for it, large enough that among equally fast points the LP takes the smallest (else
#: it would hand out memory nobody trains faster with, and starve the next gang).
_TIE = 1e-4


@dataclass(frozen=True, slots=True)
class OptLp:
    """The LP of one round and how its columns map back to gangs.

    Attributes:
        model: the LP (HiGHS form).
        cols: for each column, ``(gang index, cpus per GPU, mem per GPU)``.
    """

    model: LpModel
    cols: tuple[tuple[int, float, float], ...]

    @property
    def size(self) -> tuple[int, int, int]:
        """``(rows, columns, non-zeros)``."""
        a = self.model.a
        return int(a.shape[0]), int(a.shape[1]), int(a.nnz)


def _points(spec: JobSpec, prop: tuple[float, float]) -> list[tuple[float, float, float]]:
    """``(cpus, mem, speedup)`` per GPU a gang may take."""
    pts: list[tuple[float, float, float]] = []
    if spec.sensitivity is not None:
        pts += [(p.cpus_per_gpu, p.mem_gib_per_gpu, p.speedup) for p in spec.sensitivity.points]
    elif spec.host is not None:
        c, m = spec.host.per_gpu_amounts(spec.num_gpus)
        pts.append((c, m, 1.0))
    else:
        pts.append((prop[0], prop[1], 1.0))
    return pts


def build_opt_lp(gangs: Sequence[tuple[JobSpec, Placement]], free: Mapping[str, Sequence[float]],
                 sizes: Sizes) -> OptLp:
    """The LP of the module docstring for ``gangs`` on nodes with ``free`` (cpus, mem)."""
    node_row: dict[str, int] = {}
    for _s, p in gangs:
        for node_id, _g in p.gpus_by_node:
            node_row.setdefault(node_id, len(gangs) + 2 * len(node_row))
    n_rows = len(gangs) + 2 * len(node_row)
    rows: list[int] = []
    colidx: list[int] = []
    vals: list[float] = []
    cost: list[float] = []
    cols: list[tuple[int, float, float]] = []
    for j, (spec, p) in enumerate(gangs):
        first = p.gpus_by_node[0][0]
        ng, nc, nm = sizes[first]
        for c, m, s in _points(spec, proportional_share(1, ng, nc, nm)):
            k = len(cols)
            cols.append((j, c, m))
            cost.append(s - _TIE * (c / nc + m / nm))  # equal speed: the smaller point
            rows.append(j)
            colidx.append(k)
            vals.append(1.0)
            for node_id, g in p.gpus_by_node:
                r = node_row[node_id]
                if c > 0:
                    rows.append(r)
                    colidx.append(k)
                    vals.append(c * g)
                if m > 0:
                    rows.append(r + 1)
                    colidx.append(k)
                    vals.append(m * g)
    upper = np.empty(n_rows)
    lower = np.full(n_rows, -np.inf)
    upper[: len(gangs)] = 1.0
    lower[: len(gangs)] = 1.0
    for node_id, r in node_row.items():
        upper[r] = max(float(free[node_id][0]), 0.0)
        upper[r + 1] = max(float(free[node_id][1]), 0.0)
    a = sp.csr_array((vals, (rows, colidx)), shape=(n_rows, len(cols)))
    model = LpModel(cost=np.asarray(cost), a=a, row_lower=lower, row_upper=upper,
                    col_lower=np.zeros(len(cols)), col_upper=np.ones(len(cols)),
                    maximize=True)
    return OptLp(model, tuple(cols))


def opt_hosts(gangs: Sequence[tuple[JobSpec, Placement]], free: Mapping[str, Sequence[float]],
              sizes: Sizes, solver: LpSolver | None = None,
              ) -> dict[JobId, tuple[tuple[str, float, float], ...]]:
    """Each gang's ``host_by_node`` from the LP, rounded down to measured points."""
    if not gangs:
        return {}
    lp = build_opt_lp(gangs, free, sizes)
    x = solve_lp(lp.model, "Synergy-OPT LP", solver=solver)
    frac = np.zeros((len(gangs), 2))
    for (j, c, m), v in zip(lp.cols, x, strict=True):
        frac[j, 0] += v * c
        frac[j, 1] += v * m
    out: dict[JobId, tuple[tuple[str, float, float], ...]] = {}
    for j, (spec, p) in enumerate(gangs):
        c, m = float(frac[j, 0]), float(frac[j, 1])
        if spec.sensitivity is not None:
            pt = best_point_within(spec.sensitivity, c + 1e-7, m + 1e-7)
            if pt is not None:
                c, m = pt.cpus_per_gpu, pt.mem_gib_per_gpu
        out[spec.job_id] = tuple((node_id, round(c * g, 6), round(m * g, 6))
                                 for node_id, g in p.gpus_by_node)
    return out
