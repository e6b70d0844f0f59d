"""The policy interface, and how a policy is named (``name[-agnostic][:option=value]...``).

A policy's only job is **ordering**: given the snapshot, it returns a :class:`Ranking`, a list of
``(job, flavor)`` candidates from most to least deserving. The core walks that list and places
gangs (all-or-nothing, consolidated when possible, never over-allocating), so every policy gets
the same placement, preemption and reason logic for free.

Two shapes of policy fit this:

* **ordering policies** (FIFO, SJF, SRTF, Tiresias LAS, our ``hetero_srpt``) sort jobs and list
  each job's flavors fastest first;
* **allocation policies** (Gavel's max-min fairness, finish-time fairness, min-makespan) solve
  for time shares ``X[job, flavor]`` and let Gavel's round mechanism turn shares into a ranking
  (the job furthest behind its share goes first).

Every policy name has an ``-agnostic`` twin: the same policy fed an oracle that hides the speed
differences between flavors, which is what Gavel's un-suffixed baselines do.

A policy's options (its ``Config``) can ride on its name: ``hetero_pack:short_first=0.1`` is
``hetero_pack`` with ``short_first`` set, and ``-p hetero_pack,hetero_pack:min_gain=0.05`` runs
both side by side, each labelled by its spec. Values are JSON where they parse as JSON
(numbers, ``true``, lists such as ``prior_minutes=[[0.8,30,1000],[0.2,1000,10000]]``), else
text; the policy's ``Config`` checks them (``tessera policies NAME`` lists them).
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.context import PolicyCaches
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Snapshot

if TYPE_CHECKING:
    from tessera.sched.elastic.sizes import ElasticSize

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may read.

    Attributes:
        snapshot: the cluster and its active jobs.
        oracle: how fast each job runs on each flavor.
        rng: a seeded RNG (the only randomness a policy may use).
        solver: the LP solver the allocation policies must use. The core passes the decision
            context's solver (one per driver, reused round after round, never shared between
            drivers); ``None`` means "make a fresh solver for this call" (tests, one-off calls).
        caches: where the policy keeps its memo tables between rounds
            (:class:`~tessera.sched.core.context.PolicyCaches`, owned by the driver's decision
            context); ``None`` means "no memory": every :meth:`cache` call gets a fresh table.
    """

    snapshot: Snapshot
    oracle: ThroughputOracle
    rng: random.Random
    solver: LpSolver | None = None
    caches: PolicyCaches | None = None

    def cache(self, owner: object, name: str, make: Callable[[], T]) -> T:
        """``owner``'s memo table ``name`` (a policy passes itself): the driver's, made by
        ``make()`` on first use, or a fresh one when the context has no caches."""
        if self.caches is None:
            return make()
        return self.caches.get(owner, name, make)

    def lp(self) -> LpSolver:
        """The solver to use: :attr:`solver`, or a fresh one when none was given."""
        if self.solver is not None:
            return self.solver
        return LpSolver()


@dataclass(frozen=True, slots=True)
class Ranking:
    """A policy's answer.

    Attributes:
        candidates: ``(job_id, flavor)`` pairs, most deserving first. A job may appear with
            several flavors; the first that fits wins.
        state: the policy's memory for the next round (returned to it in the next snapshot).
        notes: per-job explanations (e.g. the job's target share per flavor).
        wakeup_s: the next time the policy wants to be asked again even if nothing happens
            (e.g. a Tiresias job crossing a queue threshold); ``None`` for no wish.
        fallbacks: every time the policy did not get the answer it asked for and used another
            one, in words (``"max-min fairness LP: ECOS returned no solution; solved with HiGHS
            IPM instead"``). Never silent: the driver copies these into the run's notes.
        colocate: for a policy that packs, ``{partner: host}``: run ``partner`` on the GPUs
            the core gives ``host`` (space sharing; :mod:`tessera.sched.packing.pairs` checks the
            pair and gives the reasons). Partners are not listed in ``candidates``.
        sizes: for an *elastic allocation* (Pollux, Sia), the GPU count and global batch the
            policy chose for each job it lists (:class:`~tessera.sched.elastic.sizes.ElasticSize`);
            the core places that job's gang at that count instead of ``spec.num_gpus`` and
            records the batch in ``Placement.global_batch_samples``. Empty for every other
            policy (jobs are placed at their own size, as always).
    """

    candidates: tuple[tuple[JobId, GpuFlavor], ...]
    state: Any = None
    notes: Mapping[JobId, str] = field(default_factory=dict)
    wakeup_s: float | None = None
    fallbacks: tuple[str, ...] = ()
    colocate: Mapping[JobId, JobId] = field(default_factory=dict)
    sizes: Mapping[JobId, ElasticSize] = field(default_factory=dict)


class PolicyConfig(BaseModel):
    """Base for a policy's options; unknown options are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy(ABC):
    """Base class: subclasses set the class attributes and implement :meth:`rank`."""

    #: Whether running jobs may be stopped to make room for higher-ranked ones.
    preemptive: ClassVar[bool] = False
    #: Default simulation mode: round-based (Gavel's 360 s rounds) or event-driven.
    round_based: ClassVar[bool] = False
    #: Whether the policy may put two jobs on the same GPUs (``Ranking.colocate``).
    packs: ClassVar[bool] = False
    #: Whether it sizes elastic jobs (``Ranking.sizes``); the simulator then runs them at
    #: goodput and charges each resize its model's restart time (:mod:`tessera.sim.elastic`).
    elastic: ClassVar[bool] = False
    Config: ClassVar[type[PolicyConfig]] = PolicyConfig
    #: What the policy reads that a real scheduler cannot know, in words (``""``: nothing):
    #: e.g. each job's true remaining time, which the simulator takes from the trace. Results
    #: mark such a policy as an *oracle* (:mod:`tessera.report.policies`): its numbers are a
    #: bound to compare against, not an outcome a deployment could get.
    oracle: ClassVar[str] = ""
    #: Synergy's CPU/memory allocation run after the GPUs are placed
    #: (``proportional``/``greedy``/``tune``/``opt``, :mod:`tessera.sched.resources.allocate`),
    #: set from the spec's ``resources=`` option; ``None``: GPUs only, as every policy was.
    host_mode: Literal["proportional", "greedy", "tune", "opt"] | None = None
    #: ``round``: Synergy's twin -- every decision deals every gang's GPUs, CPUs and memory
    #: again from an empty cluster (:mod:`tessera.sched.resources.repack`); ``none``: running
    #: gangs keep their GPUs. Set from the spec's ``repack=`` option (needs ``resources=``).
    host_repack: Literal["none", "round"] = "none"

    def __init__(
        self, config: PolicyConfig | None = None, agnostic: bool = False, name: str = ""
    ) -> None:
        self.config = config or self.Config()
        self.agnostic = agnostic
        self.name = name or type(self).__name__.lower()
        #: the options given in the policy's spec, as written there (``:min_gain=0.05``)
        self.spec_options = ""

    @property
    def display_name(self) -> str:
        """The policy as it was asked for: name, ``-agnostic``, options (labels results)."""
        return self.name + ("-agnostic" if self.agnostic else "") + self.spec_options

    @abstractmethod
    def rank(self, ctx: PolicyContext) -> Ranking:
        """Order the active jobs of ``ctx.snapshot`` (pending and running)."""


AGNOSTIC_SUFFIX = "-agnostic"


OPTION_SEPARATOR = ":"
_OPTION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def parse_policy_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``name[-agnostic][:option=value]...`` into the name and its options.

    Raises:
        SpecError: an option that is not ``key=value``, or one given twice.
    """
    name, *parts = _split_outside_brackets(spec.strip(), OPTION_SEPARATOR)
    options: dict[str, Any] = {}
    for part in parts:
        m = _OPTION.fullmatch(part.strip())
        if m is None:
            raise SpecError(f"policy {spec!r}: options are written name:key=value[:key=value], "
                            f"got {part!r}")
        key, text = m.groups()
        if key in options:
            raise SpecError(f"policy {spec!r}: option {key!r} given twice")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return name.strip(), options


def split_policies(text: str) -> list[str]:
    """The policy specs of a comma-separated list; commas inside brackets (a list-valued
    option) do not separate."""
    return [s.strip() for s in _split_outside_brackets(text, ",") if s.strip()]


def _split_outside_brackets(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c in "[{(") - (c in "]})")
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
