"""A job held for a fast board does not block the queue behind it (issue 34, part 3a).

``--power-fast-boards`` (:mod:`~tessera.sched.core.power_displace`) holds a start that the
round placed on a far slower board, so a fast board a running job frees soon can take it.
The budget stage runs after placement, so the slow GPUs the held job was given stay idle
until the next event: every job behind it that could have used them waits too. In the goal
run where the rule hurt most (3 jobs/h FIFO, seed 2; ``docs/energy.md``, "Why seed 2 lost")
the jobs that were not held lost +2,507 h of JCT to the holds, almost all of it queueing.

The fix: when a round holds jobs for fast boards, the round is decided again without them
(the policy ranks and places the rest, the budget stage keeps the budget) with the rule off
in that second pass, so a job behind takes the free slow GPUs now or is capped, instead of
being held for a fast board the first pass already promised. The held jobs keep their
reasons. Holding only removes starts and the second pass keeps the budget on its own
placements, so the budget still holds at every event. The second pass runs only in rounds
that hold a job for a fast board, and costs a second decision there (``docs/energy.md``: at
2,048 jobs 2.4-3.6× the plain decision with the rule, against ≤ 2× for the default). The
decision returned is the second pass's, policy memory included: a policy that keeps state
per job it ranks (LAS keeps the previous state whole) does not update the held jobs' that
round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

from tessera.model.jobs import JobId
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.reasons import PendingReason, PowerHeld
from tessera.sched.core.snapshot import Snapshot

__all__ = ["fast_held", "refill"]


class _Round(Protocol):
    """What :func:`refill` reads of a decision: a dataclass with reasons for waiting jobs."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def pending(self) -> Mapping[JobId, PendingReason]: ...


R = TypeVar("R", bound=_Round)


def fast_held(pending: Mapping[JobId, PendingReason]) -> frozenset[JobId]:
    """The jobs of ``pending`` that wait for a faster board (``--power-fast-boards``)."""
    return frozenset(jid for jid, why in pending.items()
                     if isinstance(why.detail, PowerHeld) and why.detail.for_fast_board)


def refill(snapshot: Snapshot, d: R, opts: PlacementOptions,
           redecide: Callable[[Snapshot, PlacementOptions], R]) -> R:
    """``d``, or -- when it holds jobs for fast boards -- the round decided again by
    ``redecide`` over ``snapshot`` without them and with the rule off, the held jobs
    pending with their reasons (see the module docstring)."""
    held = fast_held(d.pending)
    if not held or opts.power_budget is None:
        return d
    view = snapshot.with_jobs(tuple(j for j in snapshot.jobs if j.spec.job_id not in held))
    again = redecide(view, replace(opts, power_budget=replace(opts.power_budget,
                                                              wait_for_fast=False)))
    return replace(again, pending={**again.pending, **{j: d.pending[j] for j in held}})
