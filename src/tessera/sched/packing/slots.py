"""Solo and pair slots: which jobs run alone, which share a GPU, and on which flavor.

A round of a packing policy has two questions after *who runs* is settled: on which flavor
each job runs, and which jobs share their GPUs with a partner. Answered one after the other --
flavors first, then pairs greedily, best pair first -- each choice closes doors the next would
have wanted: the V100 a job was given alone is the V100 two others could have shared, and the
best pair of the moment takes a host that a later, slightly worse pair needed more. This module
answers both at once, as one small integer programme a round.

**Groups, not jobs.** Jobs alike for the programme -- the same speeds alone and in every pair,
the same gang size, the same place now -- form a :class:`SlotGroup`; the programme counts how
many members of each group take each kind of slot. A round has as many groups as job kinds (a
few dozen on Gavel's traces, whatever the number of jobs), so the programme's size does not
grow with the queue: ``hetero_pack`` decides 512 active jobs in well under a second, where
Gavel's packed LP, with a variable per pair of jobs, takes ~43 s.

**The programme.** Variables: ``solo[g, f]``, members of group ``g`` alone on flavor ``f``,
and ``pair[o]``, instances of pair option ``o`` (a member of one group with a member of another,
or two of one group, on one flavor). Each member takes at most one slot and at least ``must`` of
a group's members take one (the jobs the round runs anyway keep running: packing never stops a
job); each flavor's GPUs hold at most its capacity, a pair's gang counted once. Maximise the sum
of the slots' values -- what each member does there, in the caller's units (``hetero_pack``:
speed over the job's best speed alone, less a restart where the slot moves a running job).

**Not only the LP relaxation.** Pairs make the problem a matching: its LP relaxation can have
fractional vertices (three jobs that pair well with each other take half a pair each), so the
counts are integers. The relaxation is solved first: when its optimal vertex is whole -- three
rounds in four on a Gavel-like trace at 3 jobs/h -- it is the programme's optimum too (the
relaxation's value bounds every whole plan). Otherwise HiGHS solves the integer programme by
branch and bound: exact, ~30 ms at the ~700 columns of such a round, against ~2 ms for the
relaxation. Solving the relaxation first took a 400-job run from 78 to 64 s of CPU with the
same result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from tessera.model.gpus import GpuFlavor
from tessera.sched.core.lp import LpModel, LpSolver

_WHOLE = 1e-7
"""How far from a whole number a relaxed count may be and still be taken as whole."""


@dataclass(frozen=True, slots=True)
class SlotGroup:
    """Jobs the slot programme cannot tell apart.

    Attributes:
        gpus: each member's gang size (a pair shares one gang of this size).
        members: how many jobs the group holds.
        must: how many of them must take a slot (``0 <= must <= members``).
        solo: ``{flavor: value}`` of one member alone on that flavor; a flavor missing here is
            one the members may not use alone, nor in a pair.
    """

    gpus: int
    members: int
    must: int
    solo: Mapping[GpuFlavor, float]

    def __post_init__(self) -> None:
        if not 0 <= self.must <= self.members:
            raise ValueError(f"a group of {self.members} cannot have {self.must} that must run")
        if self.gpus < 1:
            raise ValueError(f"a gang has at least one GPU, not {self.gpus}")


@dataclass(frozen=True, slots=True)
class PairOption:
    """One member of group ``first`` sharing a gang of ``flavor`` GPUs with one of group
    ``second`` (``first == second``: two members of one group), worth ``value`` for both."""

    first: int
    second: int
    flavor: GpuFlavor
    value: float


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """The programme's answer.

    Attributes:
        solo: ``{(group, flavor): members alone there}`` (zero counts left out).
        pairs: ``{index into the options: instances}`` (zero counts left out).
        value: the objective reached.
    """

    solo: Mapping[tuple[int, GpuFlavor], int]
    pairs: Mapping[int, int]
    value: float


def plan_slots(
    groups: Sequence[SlotGroup], options: Sequence[PairOption],
    capacity: Mapping[GpuFlavor, int], solver: LpSolver,
) -> SlotPlan | str:
    """Solve the slot programme (see the module docstring).

    Args:
        groups: the jobs, grouped.
        options: the pairs that may form (each names groups of one gang size and a flavor both
            may use).
        capacity: GPUs of each flavor free for these jobs.
        solver: the decision context's solver.

    Returns:
        The plan, or HiGHS' words when it found none (``"infeasible"`` when the groups' ``must``
        cannot all be placed in ``capacity``).

    Raises:
        ValueError: an option names a group that does not exist or pairs gangs of two sizes.
    """
    prog = _programme(groups, options, capacity)
    flavors, cols, cost = prog.flavors, prog.cols, prog.cost
    n = len(cols)
    if n == 0:
        if any(grp.must for grp in groups):
            return "infeasible"
        return SlotPlan({}, {}, 0.0)
    a_matrix = sp.csc_matrix((prog.coef, (prog.rows, prog.at)),
                             shape=(len(groups) + len(flavors), n))
    row_lower = np.array([float(grp.must) for grp in groups] + [-np.inf] * len(flavors))
    row_upper = np.array([float(grp.members) for grp in groups]
                         + [float(capacity[f]) for f in flavors])
    relaxed = LpModel(cost=np.array(cost), a=a_matrix, row_lower=row_lower,
                      row_upper=row_upper, col_lower=np.zeros(n), col_upper=np.array(prog.upper),
                      maximize=True)
    out = solver.attempt(relaxed)
    if out.x is None:
        return out.status
    counts = np.rint(out.x)
    if np.abs(out.x - counts).max() > _WHOLE:
        out = solver.attempt(replace(relaxed, integer=np.ones(n, dtype=bool)))
        if out.x is None:
            return out.status
        counts = np.rint(out.x)
    counts = counts.astype(int)
    solo: dict[tuple[int, GpuFlavor], int] = {}
    pairs: dict[int, int] = {}
    for key, k in zip(cols, counts.tolist(), strict=True):
        if k > 0:
            if isinstance(key, int):
                pairs[key] = k
            else:
                solo[key] = k
    return SlotPlan(solo, pairs, float(np.dot(cost, counts)))


@dataclass(slots=True)
class _Programme:
    """The slot programme's columns, one per solo slot kind ``(group, flavor)`` and per pair
    option (its index), with their values, upper bounds and matrix entries."""

    flavors: list[GpuFlavor]
    cols: list[tuple[int, GpuFlavor] | int] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    at: list[int] = field(default_factory=list)
    coef: list[float] = field(default_factory=list)

    def column(self, key: tuple[int, GpuFlavor] | int, value: float, bound: float,
               entries: list[tuple[int, float]]) -> None:
        for r, c in entries:
            self.rows.append(r)
            self.at.append(len(self.cols))
            self.coef.append(c)
        self.cols.append(key)
        self.cost.append(value)
        self.upper.append(bound)


def _programme(
    groups: Sequence[SlotGroup], options: Sequence[PairOption],
    capacity: Mapping[GpuFlavor, int],
) -> _Programme:
    """The columns of the programme: one row per group (how many of its members take a
    slot), then one per flavor (its GPUs). Raises ``ValueError`` as :func:`plan_slots`."""
    prog = _Programme(sorted(capacity, key=lambda f: f.short))
    frow = {f: len(groups) + i for i, f in enumerate(prog.flavors)}
    column = prog.column
    for g, grp in enumerate(groups):
        for f, value in sorted(grp.solo.items(), key=lambda fv: fv[0].short):
            if f in frow and grp.gpus <= capacity[f]:
                column((g, f), value, float(grp.members), [(g, 1.0), (frow[f], float(grp.gpus))])
    for i, o in enumerate(options):
        if not (0 <= o.first < len(groups) and 0 <= o.second < len(groups)):
            raise ValueError(f"pair option {o} names a group out of range")
        a, b = groups[o.first], groups[o.second]
        if a.gpus != b.gpus:
            raise ValueError(f"pair option {o} pairs gangs of {a.gpus} and {b.gpus} GPUs")
        if o.flavor not in frow or a.gpus > capacity[o.flavor]:
            continue
        if o.first == o.second:
            column(i, o.value, float(a.members // 2),
                   [(o.first, 2.0), (frow[o.flavor], float(a.gpus))])
        else:
            column(i, o.value, float(min(a.members, b.members)),
                   [(o.first, 1.0), (o.second, 1.0), (frow[o.flavor], float(a.gpus))])
    return prog
