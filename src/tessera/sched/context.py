"""What a decision round needs besides the snapshot, owned by the driver that calls it.

``decide()`` is a pure function of its inputs, and its inputs are explicit: the
:class:`~tessera.sched.snapshot.Snapshot` (what the cluster looks like now) and a
:class:`DecisionContext` (how to answer questions about it):

* **oracle** -- throughput answers; it caches them, and the cache belongs to whoever owns the
  context (one simulation run, one live service, one ``explain`` request);
* **rng** -- the only source of randomness, seeded by the driver;
* **solver** -- the LP solver instance allocation policies use (never a process-wide one);
* **layouts** -- the static node layout of the clusters the rounds see, built once.

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
    from tessera.sched.placement import Layout


@dataclass(slots=True)
class DecisionContext:
    """The decision core's explicit, driver-owned inputs (see the module docstring)."""

    oracle: ThroughputOracle
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    solver: LpSolver = field(default_factory=LpSolver)
    _layout: tuple[ClusterSpec, Layout] | None = None

    def layout(self, cluster: ClusterSpec) -> Layout:
        """The placement layout of ``cluster``, built once per cluster object."""
        from tessera.sched.placement import Layout

        held = self._layout
        if held is not None and held[0] is cluster:
            return held[1]
        lay = Layout.of(cluster.nodes)
        self._layout = (cluster, lay)
        return lay

    def fork(self, seed: int = 0) -> DecisionContext:
        """An independent context over a fresh oracle of the same table and cluster."""
        o = self.oracle
        twin = ThroughputOracle(o.table, o.cluster, agnostic=o.agnostic,
                                unprofiled_uniform=o.unprofiled_uniform,
                                split_large_gangs=o.split_large_gangs)
        return DecisionContext(twin, random.Random(seed))
