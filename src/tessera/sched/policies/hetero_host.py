"""``hetero_host`` ("ours", issue 33 part 4): the GPU type, the CPUs and the memory of each gang
chosen together.

It is :mod:`hetero_srpt` (shortest remaining work per GPU first, flavors matched by the gain
in completion rate, whole nodes for gangs; oracle remaining work) with one change: every rate
it reads is the job's *predicted* speed on that flavor -- the flavor's GPU rate times the
speedup its Synergy profile gets from the CPUs and memory that flavor's servers can give it
this round (:mod:`tessera.sched.resources.joint`) -- and its gangs' CPUs and memory are then
chosen by Synergy-TUNE on the nodes they land on (``resources=tune`` by default; any mode may be
named). So an image model that the V100 servers cannot feed goes to the CPU-rich servers
even where another type's GPUs are as fast, and its remaining time is read at the speed it
will actually train at.

The predicted speeds move with the free CPUs, so they are recomputed every round (per job
kind and profile: a few dozen per round), not cached across rounds as ``hetero_srpt`` caches
GPU rates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tessera.model.jobs import JobId, JobSpec
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import Placement
from tessera.sched.policies.hetero_flavors import NodeRates, Usable
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sched.resources.joint import FreeView, flavor_host_speedup
from tessera.sched.resources.speed import host_speedup


@dataclass(slots=True)
class _JointRates(NodeRates):
    """``NodeRates`` whose usable rates are predicted speeds for this round's free CPUs."""

    view: FreeView | None = None
    memo: dict[tuple[object, ...], Usable] = field(default_factory=dict)
    #: the running gangs' placements: a running gang is read on its own type at what it holds
    running: dict[JobId, Placement] = field(default_factory=dict)

    def usable_of(self, ctx: PolicyContext, spec: JobSpec, gang_exponent: float) -> Usable:
        """The GPU rates of :meth:`NodeRates.usable`, each times the job's host speedup on
        that flavor (memoised for the round per job kind and profile). A running gang on
        its own type is read at the better of what it holds and what a newcomer would get:
        the free CPUs exclude its own, and reading them alone would move it for nothing."""
        here = self.running.get(spec.job_id)
        key = (ctx.oracle.key(spec), id(spec.sensitivity), spec.job_id if here else None)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        rates, top, g_pow = self.usable(ctx, spec, gang_exponent)
        if spec.sensitivity is not None and rates and self.view is not None:
            view = self.view
            own = here.sole_flavor if here is not None else None
            held = host_speedup(spec, here, self.cluster) if here is not None else 0.0
            rates = tuple((f, r * max(flavor_host_speedup(spec, f, view),
                                      held if f is own else 0.0)) for f, r in rates)
            top = max(r for _f, r in rates)
        self.memo[key] = (rates, top, g_pow)
        return self.memo[key]


class HeteroHost(HeteroSrpt):
    """See the module docstring."""

    host_mode: Literal["proportional", "greedy", "tune", "opt"] | None = "tune"

    def _nodes_of(self, ctx: PolicyContext) -> NodeRates:
        """``hetero_srpt``'s static node layout (cached), wrapped for this round's CPUs."""
        base = super()._nodes_of(ctx)
        running = {j.spec.job_id: j.placement for j in ctx.snapshot.split().running
                   if j.placement is not None}
        return _JointRates(base.cluster, base.down, base.cap, base.node_max, base.by_flavor,
                           base.nodes, base.placement, view=FreeView(ctx.snapshot),
                           running=running)
