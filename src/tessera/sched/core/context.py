"""What a decision round needs besides the snapshot, owned by the driver that calls it.

``decide()`` is a pure function of its inputs, and its inputs are explicit: the
:class:`~tessera.sched.core.snapshot.Snapshot` (what the cluster looks like now) and a
:class:`DecisionContext` (how to answer questions about it):

* **oracle** -- throughput answers; it caches them, and the cache belongs to whoever owns the
  context (one simulation run, one live service, one ``explain`` request);
* **rng** -- the only source of randomness, seeded by the driver;
* **solver** -- the LP solver instance allocation policies use (never a process-wide one);
* **layouts** -- the static node layout of the clusters the rounds see, built once;
* **stay_put** -- running gangs no upgrade can pay for during their current run
  (:class:`StayPut`), so an event round does not re-examine them;
* **caches** -- what each policy memoises between rounds (:class:`PolicyCaches`): a policy
  object holds its configuration only, so one policy object run by two drivers (or answered
  from by ``explain``'s fork) shares no state between them.

A driver builds one context and hands it to every round; :meth:`DecisionContext.fork` gives
an independent copy (``tessera explain`` answers on API threads with one, so it never touches
the service's own caches or random stream).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from tessera.sched.core.free_view import Layout
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.usage_history import UsageHistory

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tessera.model.cluster import ClusterSpec
    from tessera.model.jobs import JobId
    from tessera.sched.core.options import PlacementOptions
    from tessera.sched.core.snapshot import JobSplit, JobView, Placement


T = TypeVar("T")


class PolicyCaches:
    """The memo tables of the policies one driver runs, one table per ``(policy, name)``.

    A policy asks for its table through :meth:`PolicyContext.cache
    <tessera.sched.core.policy.PolicyContext.cache>` and keeps in it only what it could
    recompute from the snapshot, the oracle and its configuration (a cache, never a memory:
    what a policy must remember between rounds travels in ``Ranking.state``). So dropping a
    table changes speed, never an answer -- which is what :meth:`DecisionContext.fork` does.

    Example::

        caches = PolicyCaches()
        table = caches.get(policy, "pairs", dict)   # made on first use, then the same object
        assert caches.get(policy, "pairs", dict) is table
    """

    __slots__ = ("_tables",)

    def __init__(self) -> None:
        self._tables: dict[tuple[int, str], tuple[object, object]] = {}

    def get(self, owner: object, name: str, make: Callable[[], T]) -> T:
        """``owner``'s table ``name``, made by ``make()`` the first time it is asked for."""
        key = (id(owner), name)
        held = self._tables.get(key)
        if held is None:  # (the owner is kept with its table, so its id stays its own)
            held = self._tables[key] = (owner, make())
        return held[1]  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._tables)


class UnheldGangs(Protocol):
    """A driver that follows its running gangs between rounds (see :class:`StayPut`)."""

    def unheld(self, split: JobSplit, stay_put: StayPut) -> Sequence[JobView] | None:
        """A subset of ``split.running``, in its order, holding every job ``stay_put`` does
        not hold (:meth:`StayPut.holds`); ``None`` if the driver no longer describes
        ``split``."""


class StayPut:
    """Running gangs that no move to faster GPUs can pay for before their run ends.

    :func:`~tessera.sched.core.strategies.upgrade` moves a running gang when, after the migration
    cost, it finishes ``upgrade_min_gain`` sooner. With ``L`` steps left, current rate ``c``
    and target rate ``b`` that reads ``L · ((1 - gain)/c - 1/b) > migration_cost_s``: the
    left side only shrinks while the gang runs (``L`` falls, the rates are fixed for a
    placement), so a gang that fails it once fails it until it stops -- as does one with no
    faster flavor at all. Remembering those gangs (by the placement object of their run)
    skips them in later rounds with the same answer; a gang that only lacked free GPUs is
    never remembered, as GPUs may free up. A new run is a new placement, so the memory
    never outlives the run it describes. It is valid for one oracle view and one pair of
    migration settings, and forgets everything when either changes.

    Most running gangs are remembered, so finding the few that are not is a walk over every
    running gang -- at every event. A driver that follows its running gangs between rounds
    may offer to say which of them can still be unremembered (:meth:`narrow`, a
    :class:`UnheldGangs`); a round then asks it and looks at those alone (:meth:`unsettled`).
    The offer holds for one split of the jobs (the snapshot's
    :class:`~tessera.sched.core.snapshot.JobSplit`); a round over any other split, or one the
    driver can no longer answer for, walks every running gang.
    """

    __slots__ = ("_by_job", "_hint", "_terms", "generation")

    def __init__(self) -> None:
        self._by_job: dict[JobId, Placement] = {}
        self._terms: tuple[ThroughputOracle, float, float] | None = None
        self._hint: tuple[JobSplit, UnheldGangs] | None = None
        self.generation = 0
        """Bumped whenever the memory forgets (a driver's hint is valid for one generation)."""

    def under(self, oracle: ThroughputOracle, opts: PlacementOptions,
              live_jobs: int) -> dict[JobId, Placement]:
        """The remembered gangs for this oracle and these settings (``job -> placement``).

        ``live_jobs`` (the jobs in the round) bounds the memory: finished jobs' entries are
        dropped once they outnumber the live ones.
        """
        held = self._terms
        if (held is None or held[0] is not oracle or held[1] != opts.migration_cost_s
                or held[2] != opts.upgrade_min_gain):
            self._forget()
            self._terms = (oracle, opts.migration_cost_s, opts.upgrade_min_gain)
        elif len(self._by_job) > 2 * live_jobs + 1024:
            self._forget()
        return self._by_job

    def _forget(self) -> None:
        self._by_job = {}
        self.generation += 1

    def holds(self, view: JobView) -> bool:
        """Whether ``view``'s run is remembered (a job without a placement counts as held:
        there is nothing to move)."""
        return self._by_job.get(view.spec.job_id) is view.placement

    def unheld_of(self, views: Mapping[int, JobView]) -> dict[int, JobView]:
        """``views`` less the jobs the memory holds (:meth:`holds`, in one pass: a driver
        filters its open gangs at every event)."""
        never = self._by_job
        return {i: v for i, v in views.items() if never.get(v.spec.job_id) is not v.placement}

    def narrow(self, split: JobSplit, source: UnheldGangs) -> None:
        """A driver's offer for the next round over ``split``: ``source`` can tell which of
        its running jobs the memory may not hold."""
        self._hint = (split, source)

    def unsettled(self, split: JobSplit) -> list[JobView]:
        """The running jobs of ``split`` the memory does not hold, in order (from the
        driver's offer when it answers for this split, else walking them all)."""
        hint = self._hint
        jobs: Sequence[JobView] | None = None
        if hint is not None and hint[0] is split:
            jobs = hint[1].unheld(split, self)
        if jobs is None:
            jobs = split.running
        never = self._by_job
        return [j for j in jobs if never.get(j.spec.job_id) is not j.placement]


@dataclass(slots=True)
class DecisionContext:
    """The decision core's explicit, driver-owned inputs (see the module docstring)."""

    oracle: ThroughputOracle
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    solver: LpSolver = field(default_factory=LpSolver)
    _layout: tuple[ClusterSpec, Layout] | None = None
    stay_put: StayPut = field(default_factory=StayPut)
    caches: PolicyCaches = field(default_factory=PolicyCaches)
    usage: UsageHistory = field(default_factory=UsageHistory)
    """Each queue's decayed GPU usage, for admission fair sharing with a half-life
    (:mod:`tessera.sched.core.usage_history`); kept between rounds like the caches."""

    def layout(self, cluster: ClusterSpec) -> Layout:
        """The placement layout of ``cluster``, built once per cluster object."""
        held = self._layout
        if held is not None and held[0] is cluster:
            return held[1]
        lay = Layout.of(cluster.nodes)
        self._layout = (cluster, lay)
        return lay

    def fork(self, seed: int = 0) -> DecisionContext:
        """An independent context over a fresh oracle of the same table and cluster.

        The twin starts with empty policy caches (:class:`PolicyCaches`) and shares only
        the 3-D plan cache (:attr:`ThroughputOracle.plans`): plans are
        pure functions of their key, take up to seconds to search, and an answer given
        from a fork should quote the plan the service itself launches with.
        """
        o = self.oracle
        twin = ThroughputOracle(o.table, o.cluster, agnostic=o.agnostic,
                                unprofiled_uniform=o.unprofiled_uniform,
                                split_large_gangs=o.split_large_gangs, plans=o.plans)
        return DecisionContext(twin, random.Random(seed))
