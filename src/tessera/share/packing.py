"""The planner: choose every service's segments and pack them onto the fewest MIG GPUs.

Two decisions interact. *Which* segments a service gets (how many 1g/2g/3g/4g/7g instances,
each at its best batch and process count) fixes how many slices of each kind are needed; *where*
they go is a cutting-stock problem over the legal MIG layouts. Because every legal layout is
contained in a maximal one, packing only needs the 14 maximal *patterns* (multisets of kinds;
13 on pre-R510 drivers): a GPU "uses pattern c" and may leave some of its slots empty.

Two planners share that view:

- :func:`plan_heuristic` (milliseconds for a thousand services): each service takes the
  cheapest cover of its rate in compute slices (an unbounded-knapsack DP), then a greedy picks,
  GPU after GPU, the pattern that covers the most remaining compute slices.
- :func:`plan_ilp`: the exact integer programme (HiGHS via :func:`scipy.optimize.milp`) with
  ``y[s,k]`` = segments of service ``s`` on kind ``k`` and ``x[c]`` = GPUs using pattern ``c``::

      min  sum_c x[c]
      s.t. sum_k T[s,k] * y[s,k] >= rate[s] / u       every service (u: max utilisation)
           sum_s y[s,k] <= sum_c a[k,c] * x[c]        every kind
           y, x integer >= 0,  sum_c x[c] <= heuristic GPUs

  HiGHS reports a dual bound, so every ILP plan comes with a proven lower bound (equal to the
  GPU count when optimal). The heuristic reports the slice bound of
  :func:`~tessera.share.segments.slice_lower_bound`.

Both then *materialise* the counts: every GPU gets the concrete placements of its pattern's
layout, and each placement one segment; empty slots are simply not created.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from tessera.errors import SpecError
from tessera.share.mig import BASE_KINDS, Layout, MigGpu, enumerate_layouts
from tessera.share.plan import GpuAssignment, Instance, SharePlan, gpu_assignment
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.segments import (
    SegmentOption,
    ServiceOptions,
    all_options,
    cheapest_cover,
    slice_lower_bound,
)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A maximal MIG multiset with one concrete layout that realises it."""

    layout: Layout
    counts: tuple[int, ...]  # per kind, aligned with ``BASE_KINDS``

    def count(self, kind: str) -> int:
        return self.counts[BASE_KINDS.index(kind)]


@cache
def _patterns(gpu: MigGpu, r510: bool) -> tuple[Pattern, ...]:
    seen: dict[tuple[int, ...], Pattern] = {}
    for lay in enumerate_layouts(gpu, BASE_KINDS, r510=r510):
        counts = tuple(lay.kinds().count(k) for k in BASE_KINDS)
        seen.setdefault(counts, Pattern(lay, counts))
    return tuple(seen.values())


def patterns(gpu: MigGpu, *, r510: bool = True) -> tuple[Pattern, ...]:
    """One pattern per maximal multiset of the basic kinds (14 on R510+, 13 before)."""
    return _patterns(gpu, r510)


def _compute_of(gpu: MigGpu) -> tuple[int, ...]:
    return tuple(gpu.profile(k).compute_slices for k in BASE_KINDS)


def greedy_patterns(gpu: MigGpu, demand: list[int], *, r510: bool = True) -> list[Pattern]:
    """Cover per-kind slot demand with patterns, GPU by GPU, most compute covered first."""
    rem = list(demand)
    comp = _compute_of(gpu)
    mem = tuple(gpu.profile(k).memory_slices for k in BASE_KINDS)
    pats = patterns(gpu, r510=r510)
    chosen: list[Pattern] = []
    while any(rem):
        best = max(
            pats,
            key=lambda p: (
                sum(min(a, r) * c for a, r, c in zip(p.counts, rem, comp, strict=True)),
                sum(min(a, r) * m for a, r, m in zip(p.counts, rem, mem, strict=True)),
                -sum(p.counts),
            ),
        )
        chosen.append(best)
        rem = [max(0, r - a) for r, a in zip(rem, best.counts, strict=True)]
    return chosen


def materialise(
    gpu: MigGpu, chosen: Iterable[Pattern], segments: Iterable[SegmentOption]
) -> tuple[GpuAssignment, ...]:
    """Put segments into the slots of the chosen patterns, in order; skip empty GPUs."""
    queues: dict[str, list[SegmentOption]] = {k: [] for k in BASE_KINDS}
    for s in segments:
        queues[s.kind].append(s)
    for q in queues.values():
        q.reverse()  # pop() from the end keeps input order
    out = []
    for pat in chosen:
        insts = [
            Instance(pl.start, queues[pl.kind].pop())
            for pl in pat.layout.placements
            if queues[pl.kind]
        ]
        if insts:
            out.append(gpu_assignment(gpu, insts))
    left = sum(len(q) for q in queues.values())
    if left:
        raise AssertionError(f"{left} segments did not fit the chosen patterns")
    return tuple(out)


def kind_demand(segments: Iterable[SegmentOption]) -> list[int]:
    kinds = [s.kind for s in segments]
    return [kinds.count(k) for k in BASE_KINDS]


def _check_kinds(options: tuple[ServiceOptions, ...]) -> None:
    for so in options:
        for o in so.options:
            if o.kind not in BASE_KINDS:
                raise SpecError(f"{so.service.name}: profile kind {o.kind} is not plannable")


def plan_heuristic(
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule,
    *,
    r510: bool = True,
) -> SharePlan:
    """Cheapest cover per service, then greedy pattern packing; slice lower bound."""
    t0 = time.perf_counter()
    options = all_options(services, table, gpu, rule)
    _check_kinds(options)
    segs = [o for so in options for o in cheapest_cover(so)]
    chosen = greedy_patterns(gpu, kind_demand(segs), r510=r510)
    gpus = materialise(gpu, chosen, segs)
    bound = slice_lower_bound(options)
    return SharePlan(
        gpu.gpu, "heuristic", gpus, bound, bound == len(gpus), time.perf_counter() - t0,
        services, rule,
    )


@dataclass(frozen=True, slots=True)
class IlpOutcome:
    """What the solver reported, for benchmarks and ``--json``."""

    gpus: int
    dual_bound: float
    optimal: bool
    variables: int
    solve_s: float


def _trim(options: tuple[ServiceOptions, ...], counts: np.ndarray) -> list[SegmentOption]:
    """Expand solver counts into segments, dropping any segment the rate does not need."""
    segs: list[SegmentOption] = []
    col = 0
    for so in options:
        mine: list[SegmentOption] = []
        for o in so.options:
            mine.extend([o] * round(float(counts[col])))
            col += 1
        mine.sort(key=lambda o: o.throughput_rps)
        cap = sum(o.throughput_rps for o in mine)
        keep = []
        for o in mine:
            if cap - o.throughput_rps >= so.required_rps * (1 - 1e-9):
                cap -= o.throughput_rps
            else:
                keep.append(o)
        segs.extend(sorted(keep, key=lambda o: -o.compute_slices))
    return segs


def solve_ilp(
    options: tuple[ServiceOptions, ...],
    gpu: MigGpu,
    *,
    upper_bound: int | None = None,
    time_limit_s: float = 60.0,
    r510: bool = True,
    relax: bool = False,
) -> tuple[list[SegmentOption], list[Pattern], IlpOutcome]:
    """Solve the count ILP (or its LP relaxation when ``relax``); see the module docstring."""
    t0 = time.perf_counter()
    pats = patterns(gpu, r510=r510)
    ny = sum(len(so.options) for so in options)
    nx = len(pats)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lb: list[float] = []
    ub: list[float] = []
    y_hi: list[float] = []
    col = 0
    for r, so in enumerate(options):
        for o in so.options:
            rows.append(r)
            cols.append(col)
            vals.append(o.throughput_rps)
            y_hi.append(math.ceil(so.required_rps / o.throughput_rps))
            kind_row = len(options) + BASE_KINDS.index(o.kind)
            rows.append(kind_row)
            cols.append(col)
            vals.append(1.0)
            col += 1
        lb.append(so.required_rps)
        ub.append(np.inf)
    for k_i, kind in enumerate(BASE_KINDS):
        for c_i, p in enumerate(pats):
            if p.count(kind):
                rows.append(len(options) + k_i)
                cols.append(ny + c_i)
                vals.append(-float(p.count(kind)))
        lb.append(-np.inf)
        ub.append(0.0)
    n_rows = len(options) + len(BASE_KINDS)
    if upper_bound is not None:
        rows.extend([n_rows] * nx)
        cols.extend(range(ny, ny + nx))
        vals.extend([1.0] * nx)
        lb.append(0.0)
        ub.append(float(upper_bound))
        n_rows += 1
    a = coo_matrix((vals, (rows, cols)), shape=(n_rows, ny + nx)).tocsr()
    cost = np.concatenate([np.zeros(ny), np.ones(nx)])
    x_hi = upper_bound if upper_bound is not None else np.inf
    res = milp(
        cost,
        constraints=LinearConstraint(a, lb, ub),
        integrality=np.zeros(ny + nx) if relax else np.ones(ny + nx),
        bounds=Bounds(np.zeros(ny + nx), np.array(y_hi + [x_hi] * nx, dtype=float)),
        options={"time_limit": time_limit_s, "disp": False},
    )
    elapsed = time.perf_counter() - t0
    if res.x is None:
        raise SpecError(f"the solver found no plan within {time_limit_s:g} s ({res.message})")
    if relax:
        return [], [], IlpOutcome(0, float(res.fun), res.status == 0, ny + nx, elapsed)
    counts = np.round(res.x).astype(int)
    chosen = [p for c_i, p in enumerate(pats) for _ in range(int(counts[ny + c_i]))]
    dual = getattr(res, "mip_dual_bound", None)
    dual_bound = float(res.fun) if res.status == 0 or dual is None else float(dual)
    outcome = IlpOutcome(len(chosen), dual_bound, res.status == 0, ny + nx, elapsed)
    return _trim(options, res.x), chosen, outcome


def plan_ilp(
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule,
    *,
    time_limit_s: float = 60.0,
    r510: bool = True,
) -> SharePlan:
    """The exact plan (or the best found within ``time_limit_s``) with the solver's bound."""
    t0 = time.perf_counter()
    start = plan_heuristic(services, table, gpu, rule, r510=r510)
    options = all_options(services, table, gpu, rule)
    segs, chosen, out = solve_ilp(
        options, gpu, upper_bound=start.gpus_used, time_limit_s=time_limit_s, r510=r510
    )
    gpus = materialise(gpu, chosen, segs)
    bound = max(start.lower_bound, math.ceil(out.dual_bound - 1e-6))
    if len(gpus) > start.gpus_used:  # cannot happen with the upper-bound row; keep the better
        return start
    return SharePlan(
        gpu.gpu, "ilp", gpus, bound, out.optimal or bound == len(gpus),
        time.perf_counter() - t0, services, rule,
    )


def lp_lower_bound(
    services: tuple[Service, ...], table: ProfileTable, gpu: MigGpu, rule: BatchingRule
) -> int:
    """Ceiling of the LP relaxation of the exact programme: a valid, tighter lower bound."""
    options = all_options(services, table, gpu, rule)
    _, _, out = solve_ilp(options, gpu, relax=True)
    return max(slice_lower_bound(options), math.ceil(out.dual_bound - 1e-6))


def plan_services(
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule,
    *,
    method: str = "auto",
    time_limit_s: float = 60.0,
    r510: bool = True,
) -> SharePlan:
    """Plan with ``heuristic``, ``ilp``, or ``auto`` (the ILP up to 300 services)."""
    if not services:
        raise SpecError("no services to plan")
    if table.gpu != gpu.gpu:
        raise SpecError(f"the profile table is for {table.gpu}, not {gpu.gpu}: profile first")
    if method == "heuristic" or (method == "auto" and len(services) > 300):
        return plan_heuristic(services, table, gpu, rule, r510=r510)
    if method in ("ilp", "auto"):
        return plan_ilp(services, table, gpu, rule, time_limit_s=time_limit_s, r510=r510)
    raise SpecError(f"unknown planning method {method!r}: use auto, heuristic or ilp")
