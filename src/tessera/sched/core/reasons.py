"""Why a job waits: the explain phase of a round, as reasons a person can act on.

Every active job a round leaves waiting carries a :class:`PendingReason`: a
:class:`PendingKind` (ordered from the worst outlook to the best, after Kueue's fit modes) and
a typed detail with the numbers behind it. The message is built only when shown, so a round
with a long queue pays nothing for words nobody reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.model.nodes import Node
from tessera.sched.core.free_view import BlockInfo
from tessera.sched.core.host_quota import HostQuotaHeld
from tessera.sched.core.host_reasons import CpuShort, HostShort, host_shortage
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView

_NONE_FREE = BlockInfo(0, 0)


class PendingKind(enum.IntEnum):
    """Why a job waits, from worst to best outlook (after Kueue's ordered fit modes)."""

    NO_FIT = 0
    """It can never run here (rejected)."""
    QUOTA = 1
    """Its queue is at quota (fair-share delay)."""
    CAPACITY = 2
    """Not enough free GPUs of an allowed flavor: higher-ranked jobs hold them."""
    FRAGMENTATION = 3
    """Enough GPUs are free, but not with the locality the gang needs."""
    CARBON = 4
    """It has slack and a carbon-aware stage holds it for a cleaner hour
    (:mod:`tessera.sched.core.carbon_stage`)."""


@dataclass(frozen=True, slots=True)
class CannotRun:
    """No allowed flavor of this cluster can run the job."""

    why: str


@dataclass(frozen=True, slots=True)
class QuotaHeld:
    """The job's queue would exceed its nominal quota plus its borrowing limit (one-number
    quotas), or, under a tenancy, the quota of every flavor it may use is taken: ``flavor``
    names the quota (``None``: GPUs of any flavor), ``borrowable_gpus`` what the queue could
    still borrow now, ``cohort_idle_gpus`` the quota of its cohort tree nobody uses."""

    queue: str
    used_gpus: int
    nominal_gpus: int
    borrowing_limit_gpus: int | None
    """``None``: unlimited borrowing."""
    needs_gpus: int
    flavor: GpuFlavor | None = None
    borrowable_gpus: int | None = None
    """Set under a tenancy (then ``borrowing_limit_gpus`` is not used)."""
    cohort: str | None = None
    cohort_idle_gpus: int | None = None


@dataclass(frozen=True, slots=True)
class NoCapacity:
    """Not enough free GPUs of the job's flavors; higher-ranked jobs hold them."""

    needs_gpus: int
    flavors: tuple[GpuFlavor, ...]
    free_gpus_by_flavor: tuple[tuple[GpuFlavor, int], ...]
    rank: int
    """The job's position in the policy's ranking (1 = first; 0 = not ranked)."""


@dataclass(frozen=True, slots=True)
class Fragmented:
    """Enough GPUs of a flavor are free, but no node holds the gang in one block."""

    needs_gpus: int
    flavor: GpuFlavor
    free_gpus: int
    largest_block_gpus: int


@dataclass(frozen=True, slots=True)
class MixNoPlan:
    """Not enough free GPUs of any one flavor, and the free mixed gang fits no 3-D plan."""

    needs_gpus: int
    why: str
    """The planner's message for the free mix (see ``mixed.placement.mixed_no_plan``)."""
    rank: int


@dataclass(frozen=True, slots=True)
class PowerHeld:
    """The GPUs are free, but starting the job would take the cluster over its power budget
    (:mod:`tessera.sched.core.power_budget`) even with every running job at its lowest limit."""

    needs_gpus: int
    budget_w: float
    power_w: float
    """Cluster power after the round, in watts."""
    for_fast_board: bool = False
    """Held by ``--power-fast-boards``: it waits for a far faster board a running job frees
    soon rather than start on a slow one (:mod:`tessera.sched.core.power_displace`)."""


@dataclass(frozen=True, slots=True)
class CarbonHeld:
    """Held (or suspended) for a cleaner hour: the grid is at ``intensity_g_per_kwh`` now."""

    mode: str
    intensity_g_per_kwh: float


Detail = (CannotRun | QuotaHeld | NoCapacity | Fragmented | MixNoPlan | PowerHeld | HostShort
          | CarbonHeld | CpuShort | HostQuotaHeld)


@dataclass(frozen=True, slots=True)
class PendingReason:
    """A reason a person can act on; the message is built only when shown."""

    kind: PendingKind
    detail: Detail | None = None

    def __str__(self) -> str:
        d = self.detail
        if isinstance(d, QuotaHeld) and d.borrowable_gpus is not None:
            which = f" for {d.flavor.short}" if d.flavor is not None else ""
            tree = (f", cohort {d.cohort!r} has {d.cohort_idle_gpus} idle"
                    if d.cohort is not None else "")
            return (f"queue {d.queue!r} at quota{which}: uses {d.used_gpus} of "
                    f"{d.nominal_gpus} (+{d.borrowable_gpus} borrowable){tree}; "
                    f"needs {d.needs_gpus}")
        if isinstance(d, QuotaHeld):
            borrow = "∞" if d.borrowing_limit_gpus is None else d.borrowing_limit_gpus
            return (f"queue {d.queue!r} at quota: uses {d.used_gpus} of {d.nominal_gpus} GPUs "
                    f"(+{borrow} borrowable); needs {d.needs_gpus}")
        if isinstance(d, Fragmented):
            return (f"needs {d.needs_gpus}×{d.flavor} together; {d.free_gpus} are free but the "
                    f"largest free block on one node is {d.largest_block_gpus}")
        if isinstance(d, NoCapacity):
            free = ", ".join(f"{f} {n}" for f, n in d.free_gpus_by_flavor) or "none"
            which = "/".join(f.short for f in d.flavors) or "any flavor"
            return (f"needs {d.needs_gpus} GPUs of {which}; "
                    f"free now: {free}; ranked #{d.rank} by the policy")
        if isinstance(d, CannotRun | HostShort | CpuShort | HostQuotaHeld):
            return d.why if isinstance(d, CannotRun) else str(d)
        if isinstance(d, MixNoPlan):
            return (f"needs {d.needs_gpus} GPUs of one flavor (none has them free) or a mix the "
                    f"planner can use; {d.why}; ranked #{d.rank} by the policy")
        if isinstance(d, PowerHeld) and d.for_fast_board:
            return (f"needs {d.needs_gpus} GPUs: the cluster is at its {d.budget_w / 1e3:.1f} "
                    "kW power budget, so it waits for a far faster board a running job frees "
                    "soon rather than start on a slow one (--power-fast-boards)")
        if isinstance(d, PowerHeld):
            return (f"needs {d.needs_gpus} GPUs but the cluster draws {d.power_w / 1e3:.1f} kW "
                    f"of its {d.budget_w / 1e3:.1f} kW power budget with every job capped")
        if isinstance(d, CarbonHeld):
            return (f"held by carbon shifting ({d.mode}) for a cleaner hour: the grid is at "
                    f"{d.intensity_g_per_kwh:.0f} gCO2/kWh now")
        return "cannot run on this cluster"


def pending_reasons(
    jobs: list[JobView], candidates: tuple[tuple[JobId, GpuFlavor], ...], oracle: ThroughputOracle,
    free: FreeGpus, needs_locality: dict[JobId, bool],
    mix_no_plan: dict[JobId, str] | None = None,
) -> dict[JobId, PendingReason]:
    """A reason for every job in ``jobs`` (all of them left waiting), given the policy's
    ranking ``candidates``, the GPUs left free, whether each job needs one node now, and —
    for 3-D jobs whose free mixed gang fits no plan — the planner's message."""
    rank_pos: dict[JobId, int] = {}
    for jid, _fl in candidates:
        rank_pos.setdefault(jid, len(rank_pos) + 1)
    infos = {f: free.info(f) for f in free.flavors()}
    reasons = {
        j.spec.job_id: _reason(j, oracle, infos, rank_pos.get(j.spec.job_id, 0),
                               needs_locality[j.spec.job_id])
        for j in jobs
    }
    for jid, why in (mix_no_plan or {}).items():
        if reasons[jid].kind is PendingKind.CAPACITY:
            held = reasons[jid].detail
            assert isinstance(held, NoCapacity)
            reasons[jid] = PendingReason(PendingKind.CAPACITY,
                                         MixNoPlan(held.needs_gpus, why, held.rank))
    if free._host is not None:  # (GPUs free, but no node can feed them: CPUs or memory)
        _host_reasons(jobs, reasons, oracle, free, needs_locality, infos)
    return reasons


def _host_reasons(
    jobs: list[JobView], reasons: dict[JobId, PendingReason], oracle: ThroughputOracle,
    free: FreeGpus, needs_locality: dict[JobId, bool], infos: dict[GpuFlavor, BlockInfo],
) -> None:
    """Replace a waiting job's capacity reason by :func:`host_shortage`'s where there is one.

    Nothing changes the free counts while the round explains, so the answer depends only on
    the job's flavors, GPUs, locality and demand: it is asked once per such combination.
    A job asking more GPUs than any flavor has free is skipped at once (no shortage of CPUs
    or memory can be what keeps it)."""
    most_free = max((i.total_free for i in infos.values()), default=0)
    seen: dict[tuple[GpuFlavor, ...], tuple[Node, float, float]] = {}
    asked: dict[tuple[object, ...], HostShort | None] = {}
    for j in jobs:
        spec = j.spec
        if spec.num_gpus > most_free:
            continue
        jid = spec.job_id
        detail = reasons[jid].detail
        if isinstance(detail, NoCapacity):
            flavors = detail.flavors  # (the job's real rates' flavors, as below)
        elif isinstance(detail, Fragmented):
            flavors = tuple(r.flavor for r in oracle.real_rates(spec))
        else:
            continue
        local = needs_locality[jid]
        key = (flavors, spec.num_gpus, local, spec.host)
        if key in asked:
            short = asked[key]
        else:
            short = asked[key] = host_shortage(j, flavors, free, local, infos, seen)
        if short is not None:
            reasons[jid] = PendingReason(PendingKind.CAPACITY, short)


def _reason(
    j: JobView, oracle: ThroughputOracle, infos: dict[GpuFlavor, BlockInfo], pos: int, local: bool
) -> PendingReason:
    rates = oracle.real_rates(j.spec)
    if not rates:
        why = oracle.cannot_run_reason(j.spec) or "no allowed flavor can run this job"
        return PendingReason(PendingKind.NO_FIT, CannotRun(why))
    g = j.spec.num_gpus
    flavors = tuple(r.flavor for r in rates)
    if local:
        for fl in flavors:
            info = infos.get(fl, _NONE_FREE)
            if info.total_free >= g > info.largest_block:
                return PendingReason(PendingKind.FRAGMENTATION,
                                     Fragmented(g, fl, info.total_free, info.largest_block))
    free_now = tuple((fl, infos.get(fl, _NONE_FREE).total_free) for fl in flavors)
    return PendingReason(PendingKind.CAPACITY, NoCapacity(g, flavors, free_now, pos))
