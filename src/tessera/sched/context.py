"""What a decision round needs besides the snapshot, owned by the driver that calls it.

``decide()`` is a pure function of its inputs, and its inputs are explicit: the
:class:`~tessera.sched.snapshot.Snapshot` (what the cluster looks like now) and a
:class:`DecisionContext` (how to answer questions about it):

* **oracle** -- throughput answers; it caches them, and the cache belongs to whoever owns the
  context (one simulation run, one live service, one ``explain`` request);
* **rng** -- the only source of randomness, seeded by the driver;
* **solver** -- the LP solver instance allocation policies use (never a process-wide one);
* **layouts** -- the static node layout of the clusters the rounds see, built once;
* **stay_put** -- running gangs no upgrade can pay for during their current run
  (:class:`StayPut`), so an event round does not re-examine them.

A driver builds one context and hands it to every round; :meth:`DecisionContext.fork` gives
an independent copy (``tessera explain`` answers on API threads with one, so it never touches
the service's own caches or random stream).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tessera.sched.lp import LpSolver
from tessera.sched.oracle import ThroughputOracle

if TYPE_CHECKING:
    from tessera.model.cluster import ClusterSpec
    from tessera.model.jobs import JobId
    from tessera.sched.options import PlacementOptions
    from tessera.sched.placement import Layout
    from tessera.sched.snapshot import Placement


class StayPut:
    """Running gangs that no move to faster GPUs can pay for before their run ends.

    :func:`~tessera.sched.strategies.upgrade` moves a running gang when, after the migration
    cost, it finishes ``upgrade_min_gain`` sooner. With ``L`` steps left, current rate ``c``
    and target rate ``b`` that reads ``L · ((1 - gain)/c - 1/b) > migration_cost_s``: the
    left side only shrinks while the gang runs (``L`` falls, the rates are fixed for a
    placement), so a gang that fails it once fails it until it stops -- as does one with no
    faster flavor at all. Remembering those gangs (by the placement object of their run)
    skips them in later rounds with the same answer; a gang that only lacked free GPUs is
    never remembered, as GPUs may free up. A new run is a new placement, so the memory
    never outlives the run it describes. It is valid for one oracle view and one pair of
    migration settings, and forgets everything when either changes.
    """

    __slots__ = ("_by_job", "_terms")

    def __init__(self) -> None:
        self._by_job: dict[JobId, Placement] = {}
        self._terms: tuple[ThroughputOracle, float, float] | None = None

    def under(self, oracle: ThroughputOracle, opts: PlacementOptions,
              live_jobs: int) -> dict[JobId, Placement]:
        """The remembered gangs for this oracle and these settings (``job -> placement``).

        ``live_jobs`` (the jobs in the round) bounds the memory: finished jobs' entries are
        dropped once they outnumber the live ones.
        """
        held = self._terms
        if (held is None or held[0] is not oracle or held[1] != opts.migration_cost_s
                or held[2] != opts.upgrade_min_gain):
            self._by_job = {}
            self._terms = (oracle, opts.migration_cost_s, opts.upgrade_min_gain)
        elif len(self._by_job) > 2 * live_jobs + 1024:
            self._by_job = {}
        return self._by_job


@dataclass(slots=True)
class DecisionContext:
    """The decision core's explicit, driver-owned inputs (see the module docstring)."""

    oracle: ThroughputOracle
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    solver: LpSolver = field(default_factory=LpSolver)
    _layout: tuple[ClusterSpec, Layout] | None = None
    stay_put: StayPut = field(default_factory=StayPut)

    def layout(self, cluster: ClusterSpec) -> Layout:
        """The placement layout of ``cluster``, built once per cluster object."""
        held = self._layout
        if held is not None and held[0] is cluster:
            return held[1]
        from tessera.sched.placement import Layout  # (deferred, as before: only on a miss)

        lay = Layout.of(cluster.nodes)
        self._layout = (cluster, lay)
        return lay

    def fork(self, seed: int = 0) -> DecisionContext:
        """An independent context over a fresh oracle of the same table and cluster.

        The twin shares only the 3-D plan cache (:attr:`ThroughputOracle.plans`): plans are
        pure functions of their key, take up to seconds to search, and an answer given
        from a fork should quote the plan the service itself launches with.
        """
        o = self.oracle
        twin = ThroughputOracle(o.table, o.cluster, agnostic=o.agnostic,
                                unprofiled_uniform=o.unprofiled_uniform,
                                split_large_gangs=o.split_large_gangs, plans=o.plans)
        return DecisionContext(twin, random.Random(seed))
