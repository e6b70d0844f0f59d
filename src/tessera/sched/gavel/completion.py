"""Gavel's completion-time policies, ``min_total_duration`` and ``allox``, as compat twins.

Both run inside Gavel's round mechanism (:mod:`tessera.sched.gavel.compat_mechanism`); only
the shares differ.

* **``min_total_duration``** (Gavel's ``min_total_duration_perf``,
  ``MinTotalDurationPolicyWithPerf``): the smallest horizon ``T`` by which every active job
  could finish -- each job's throughput under the shares at least ``R_i / T`` -- found by
  bisection between 100 s and 10⁶ s (widened ×10 while nothing is feasible), stopping when the
  bracket is within 5 %. The shares are the *feasibility point* the solver returned at the
  smallest feasible ``T`` tried, not an optimum: with ECOS a central point of the feasible set.
  That is why it differs from Tessera's ``min_makespan`` (the LP optimum, a vertex) once
  arrivals make the horizon matter. **``-agnostic``** = Gavel's ``min_total_duration``: every
  type credited with the job's V100 throughput.
* **``allox``** (``AlloXPolicy``, α = 1): a min-cost assignment (Hungarian method, SciPy's
  ``linear_sum_assignment``) of the unassigned jobs to free GPUs, the cost of job ``i`` as the
  ``k``-th last on a GPU being ``k · R_i / T_i(type) + waited_i``; each GPU gets the job it
  would run first, and an assigned job keeps its GPU type until it completes. One-GPU jobs only
  (Gavel asserts it; here a multi-GPU job gets a zero share -- it runs only on GPUs left over
  -- and the run's notes say so). Gavel has no agnostic AlloX; ours credits every type with the V100
  throughput.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.lp import INF, LpModel, SolverError
from tessera.sched.core.snapshot import JobView
from tessera.sched.gavel import AlloxMemory, Backend, ShareProblem
from tessera.sched.gavel.compat_mechanism import GavelCompatPolicy, gavel_type

#: Gavel's bisection bracket (seconds) and stopping ratio.
MIN_T_S, MAX_T_S, BRACKET_RATIO = 100.0, 1e6, 1.05
#: We stop widening the bracket here (Gavel would loop forever: a job that runs nowhere).
GIVE_UP_T_S = 1e15


def _v100_everywhere(p: ShareProblem) -> np.ndarray:
    """Gavel's agnostic throughputs: the job's V100 throughput on every type."""
    names = [gavel_type(f) for f in p.flavors]
    ref = names.index("v100") if "v100" in names else int(np.argmax(p.tput.sum(axis=0)))
    return np.repeat(p.tput[:, ref:ref + 1], len(p.flavors), axis=1)


def _feasible(p: ShareProblem, tput: np.ndarray, need: np.ndarray, backend: Backend
              ) -> np.ndarray | None:
    """Shares under the base constraints giving each job at least ``need`` steps/s, or
    ``None`` when there are none (Gavel's ``cvxprob.status != "optimal"``)."""
    if backend.method == "ecos":
        import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

        x = cp.Variable(p.shape)
        sfa = np.repeat(p.scale[:, None], p.shape[1], axis=1)
        cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= p.capacity,
                cp.sum(x, axis=1) <= 1, cp.sum(cp.multiply(tput, x), axis=1) >= need]
        prob = cp.Problem(cp.Maximize(1), cons)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prob.solve(solver="ECOS")
        except cp.error.SolverError:
            return None
        if prob.status != "optimal" or x.value is None:
            return None
        return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
    m, n = p.shape
    var = np.arange(m * n)
    rows = var // n
    cols = var % n
    job_rows = sp.csr_matrix((np.ones(m * n), (rows, var)), shape=(m, m * n))
    cap_rows = sp.csr_matrix((p.scale[rows], (cols, var)), shape=(n, m * n))
    speed_rows = sp.csr_matrix((-tput[rows, cols], (rows, var)), shape=(m, m * n))
    mat = sp.vstack([job_rows, cap_rows, speed_rows]).tocsc()
    upper = np.concatenate([np.ones(m), p.capacity, -need])
    try:
        sol = backend.lp.solve(
            LpModel(np.zeros(m * n), mat, np.full(mat.shape[0], -INF), upper,
                    np.zeros(m * n), np.full(m * n, INF), maximize=False),
            what="Gavel min-total-duration feasibility LP", method=backend.lp_method)
    except SolverError:
        return None
    return np.clip(np.asarray(sol).reshape(m, n), 0.0, 1.0)


class GavelMinTotalDuration(GavelCompatPolicy):
    """``min_total_duration_perf`` (aware) and ``min_total_duration`` (agnostic)."""

    oracle = "each job's true remaining work, taken from the trace"

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        if not p.jobs:
            return np.zeros(p.shape), memory, ()
        tput = _v100_everywhere(p) if self.agnostic else p.tput
        remaining = np.array([j.remaining_steps for j in views], dtype=float)
        lo, hi, top = MIN_T_S, MAX_T_S, MAX_T_S
        found: np.ndarray | None = None
        while found is None:
            while BRACKET_RATIO * lo < hi:
                t = (lo + hi) / 2.0
                x = _feasible(p, tput, remaining / t, backend)
                if x is not None:
                    found, hi = x, t
                else:
                    lo = t
            if found is None and top >= GIVE_UP_T_S:
                x_iso = (p.capacity[None, :] / len(p.jobs)) / p.scale[:, None]
                x_iso = x_iso / np.maximum(x_iso.sum(axis=1), 1.0)[:, None]
                return x_iso, memory, (
                    "Gavel min-total-duration: no horizon up to 1e15 s is feasible (a job "
                    "runs nowhere; Gavel would loop forever); used the isolated share",)
            hi, lo, top = top * 10.0, top, top * 10.0
        return found, memory, ()


class GavelAllox(GavelCompatPolicy):
    """``allox`` (``AlloXPolicy`` with α = 1)."""

    uses_solver = False
    oracle = "each job's true remaining time, taken from the trace"

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        if any(s != 1 for s in p.scale):  # Gavel asserts; those jobs get a zero share
            keep = np.flatnonzero(p.scale == 1)
            x_one, memory, _ = self.allocate(p.take(keep), [views[int(i)] for i in keep], now_s,
                                             memory, backend)
            x = np.zeros(p.shape)
            x[keep] = x_one
            return x, memory, (
                f"allox schedules one-GPU jobs only (Gavel's AlloX asserts it): "
                f"{len(p.jobs) - len(keep)} multi-GPU job(s) get a zero share (they run only on "
                f"GPUs left over, like any zero-share job in Gavel's rounds)",)
        prev = memory.previous if isinstance(memory, AlloxMemory) else {}
        tput = _v100_everywhere(p) if self.agnostic else p.tput
        types = p.flavors  # Gavel's sorted worker types
        row = {jid: i for i, jid in enumerate(p.jobs)}
        waited = {j.job_id: now_s - j.spec.submit_time_s for j in views}
        remaining = {j.job_id: j.remaining_steps for j in views}
        unassigned: list[JobId] = []
        assigned: list[JobId] = []
        for jid in p.jobs:
            if jid in prev and sum(prev[jid][f] for f in types) == 1.0:
                assigned.append(jid)
            else:
                unassigned.append(jid)
        gpu_type: list[GpuFlavor] = []
        for k, f in enumerate(types):
            free = int(p.capacity[k]) - sum(1 for jid in assigned if prev[jid][f] == 1.0)
            gpu_type.extend([f] * max(free, 0))
        n = len(gpu_type)
        unassigned.sort(key=lambda jid: -waited[jid])
        chosen = unassigned[:max(len(unassigned), n)]
        m = len(chosen)
        allocation = {jid: {f: 0.0 for f in types} for jid in p.jobs}
        for jid in p.jobs:
            if jid in prev:
                allocation[jid] = dict(prev[jid])
        if m and n:
            k_of = {f: k for k, f in enumerate(types)}
            base = np.zeros((m, n))
            for i, jid in enumerate(chosen):
                for w, f in enumerate(gpu_type):
                    speed = float(tput[row[jid], k_of[f]]) or 1e-10
                    base[i, w] = remaining[jid] / speed
            cost = np.concatenate([base * (k + 1) for k in range(m)], axis=1)
            delay = np.array([waited[jid] for jid in chosen])[:, None]
            rows, cols = linear_sum_assignment(cost + delay)
            per_gpu: dict[int, list[tuple[JobId, int]]] = {w: [] for w in range(n)}
            for r, c in zip(rows, cols, strict=True):
                per_gpu[int(c) % n].append((chosen[r], int(c) // n))
            for w in range(n):
                queue = per_gpu[w]
                if queue:
                    first = sorted(((jid, len(queue) - 1 - k) for jid, k in queue),
                                   key=lambda e: e[1])[0][0]
                    allocation[first][gpu_type[w]] = 1.0
        x = np.array([[allocation[jid][f] for f in types] for jid in p.jobs],
                     dtype=float).reshape(p.shape)
        return x, AlloxMemory({jid: dict(a) for jid, a in allocation.items()}), ()
