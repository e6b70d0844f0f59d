"""What ``hetero_srpt`` knows of flavors: which a job can use at what speed, what each costs it
this round, and the completion-rate matching LP that assigns them (see
:mod:`tessera.sched.policies.hetero_srpt`, ideas 1 and 2)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from tessera.model.cluster import ClusterSpec, Node
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.sched.core.free_view import Layout as _PlacementLayout
from tessera.sched.core.lp import INF, LpModel, LpSolver, SolverError, solve_lp
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import JobView, Snapshot

Usable = tuple[tuple[tuple[GpuFlavor, float], ...], float, float]
"""A job's usable flavors with their rates, its best rate and ``gpus ** gang_exponent``."""


@dataclass(slots=True)
class NodeRates:
    """What a round needs of the up nodes, computed once per cluster and set of down nodes
    (a round used to walk every node twice), plus each job kind's usable rates."""

    cluster: ClusterSpec
    down: frozenset[str]
    cap: dict[GpuFlavor, int]
    """GPUs per flavor."""
    node_max: dict[GpuFlavor, int]
    """The largest node of each flavor."""
    by_flavor: dict[GpuFlavor, tuple[str, ...]]
    nodes: tuple[Node, ...]
    placement: _PlacementLayout
    """The up nodes' layout for :class:`FreeGpus` (each round's placement replay)."""
    oracle: ThroughputOracle | None = None
    rates: dict[tuple[object, ...], Usable] = field(default_factory=dict)
    by_job: dict[JobId, tuple[JobSpec, Usable]] = field(default_factory=dict)
    """Each job's usable rates, noted with its spec (a job is looked up by id, not by key)."""

    @classmethod
    def of(cls, snap: Snapshot) -> NodeRates:
        cap: dict[GpuFlavor, int] = {}
        node_max: dict[GpuFlavor, int] = {}
        by_flavor: dict[GpuFlavor, list[str]] = {}
        nodes = snap.up_nodes()
        for n in nodes:
            f = n.flavor
            cap[f] = cap.get(f, 0) + n.gpus
            node_max[f] = max(node_max.get(f, 0), n.gpus)
            by_flavor.setdefault(f, []).append(n.node_id)
        return cls(snap.cluster, snap.down_nodes, cap, node_max,
                   {f: tuple(ns) for f, ns in by_flavor.items()}, nodes,
                   _PlacementLayout.of(nodes))

    def rates_for(
        self, oracle: ThroughputOracle
    ) -> dict[tuple[object, ...], Usable]:
        """The usable-rates cache, valid for ``oracle`` (one per simulation in practice)."""
        if self.oracle is not oracle:
            self.oracle = oracle
            self.rates = {}
            self.by_job = {}
        return self.rates

    def usable(self, ctx: PolicyContext, spec: JobSpec, gang_exponent: float) -> Usable:
        """The flavors with room for the gang by count, at its consolidated speed if it fits
        on one node of the flavor, else its spread speed."""
        g = spec.num_gpus
        cap = self.cap
        rates: dict[GpuFlavor, float] = {}
        for r in ctx.oracle.rates(spec):
            if r.flavor not in cap or g > cap[r.flavor]:
                continue
            rate = r.consolidated if g <= self.node_max[r.flavor] else r.spread
            if rate > 0:
                rates[r.flavor] = rate
        top = max(rates.values()) if rates else 0.0
        return tuple(rates.items()), top, g ** gang_exponent

    def usable_of(self, ctx: PolicyContext, spec: JobSpec, gang_exponent: float) -> Usable:
        """:meth:`usable` for ``spec``, memoised per job (while its spec object is the same)
        and per job kind (:func:`~tessera.sched.core.oracle.rate_key`); call
        :meth:`rates_for` with the round's oracle first."""
        if ctx.oracle.per_job_rates:  # (learned speeds: every job its own, changing rates)
            return self.usable(ctx, spec, gang_exponent)
        jid = spec.job_id
        hit = self.by_job.get(jid)
        if hit is not None and hit[0] is spec:
            return hit[1]
        key = ctx.oracle.key(spec)
        kept = self.rates.get(key)
        if kept is None:
            kept = self.rates[key] = self.usable(ctx, spec, gang_exponent)
        self.by_job[jid] = (spec, kept)
        return kept


def flavor_costs(
    rates: tuple[tuple[GpuFlavor, float], ...], tau_top: float, cur: GpuFlavor | None,
    restart_s: float
) -> tuple[dict[GpuFlavor, float], float, list[GpuFlavor], bool]:
    """A job's cost (seconds to finish) on each usable flavor, ``tau_top / rate`` plus
    ``restart_s`` off the flavor it runs on (``cur``), evaluated left to right as
    ``(tau * top) / rate``: the cost table, the cheapest cost, the flavors cheapest first
    (stable), and whether the first of them is the cheapest in the table's order (not so only
    if a cost is nan)."""
    if len(rates) == 1:
        f, rate = rates[0]
        best = tau_top / rate + (0.0 if f == cur else restart_s)
        return {f: best}, best, [f], True
    if len(rates) == 2:
        # (the general case's min and stable sort, spelled out for two flavors: the second
        # goes first only when strictly cheaper)
        (f0, r0), (f1, r1) = rates
        c0 = tau_top / r0 + (0.0 if f0 == cur else restart_s)
        c1 = tau_top / r1 + (0.0 if f1 == cur else restart_s)
        if c1 < c0:
            return {f0: c0, f1: c1}, c1, [f1, f0], True
        return {f0: c0, f1: c1}, c0, [f0, f1], True
    cost = {f: tau_top / rate + (0.0 if f == cur else restart_s) for f, rate in rates}
    order = sorted(cost, key=cost.__getitem__)
    return cost, min(cost.values()), order, order[0] == min(cost, key=cost.__getitem__)


def match_flavors(
    selected: list[tuple[JobView, dict[GpuFlavor, float], list[GpuFlavor]]],
    cap: dict[GpuFlavor, int],
    solver: LpSolver,
) -> tuple[list[tuple[JobView, dict[GpuFlavor, float], list[GpuFlavor]]], tuple[str, ...]]:
    """Reorder each selected job's flavors by a completion-rate matching LP; returns the
    selection and, when the LP failed and the greedy order was kept, why."""
    if all(order[0] == min(cost, key=cost.__getitem__) for _j, cost, order in selected):
        return selected, ()
    flavors = list(cap)
    col = {f: i for i, f in enumerate(flavors)}
    rows, cols, vals = [], [], []
    for m, (_j, cost, _o) in enumerate(selected):
        for f, c in cost.items():
            rows.append(m)
            cols.append(col[f])
            vals.append(1.0 / max(c, 1e-9))
    n = len(rows)
    r = np.array(rows)
    cc = np.array(cols)
    g = np.array([float(s[0].spec.num_gpus) for s in selected])
    var = np.arange(n)
    mcount = len(selected)
    a = sp.vstack([
        sp.csr_matrix((np.ones(n), (r, var)), shape=(mcount, n)),
        sp.csr_matrix((g[r], (cc, var)), shape=(len(flavors), n)),
    ]).tocsc()
    lo = np.concatenate([np.ones(mcount), np.full(len(flavors), -INF)])
    hi = np.concatenate([np.ones(mcount), np.array([float(cap[f]) for f in flavors])])
    try:
        x = solve_lp(LpModel(np.array(vals), a, lo, hi, np.zeros(n), np.ones(n),
                             maximize=True), what="hetero_srpt matching LP", solver=solver)
    except SolverError as e:
        return selected, (f"{e}; kept the greedy flavor order",)
    share: list[dict[GpuFlavor, float]] = [{} for _ in selected]
    for k in range(n):
        share[rows[k]][flavors[cols[k]]] = x[k]
    out = []
    for m, (j, cost, order) in enumerate(selected):
        sh = share[m]
        out.append((j, cost, sorted(order, key=lambda f: (-round(sh.get(f, 0.0), 6), cost[f]))))
    return out, ()
