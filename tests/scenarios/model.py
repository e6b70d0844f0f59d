"""The scenario case format: one YAML file per case, parsed into typed values.

A case is a snapshot of a cluster under a tenancy (Kueue's objects in Tessera's words: queues
with per-flavor quotas, cohorts with parents, preemption rules, fair sharing), the jobs that run
and the jobs that wait, and what the decision must do: which waiting jobs start and on which
flavor, and exactly which running jobs are preempted. ``tests/scenarios/README.md`` documents
every key; this module is the one place that reads them, and refuses an unknown key or a bad
value with the file and the key named, so a typo never silently drops an expectation.

The tenancy is built straight into the decision core's own objects
(:class:`~tessera.sched.core.tenancy.Tenancy`, checked with ``Tenancy.check``), so a case
exercises exactly what a service would load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.sched.core.quotas import (
    Cohort,
    FlavorFungibility,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinQueue,
)
from tessera.sched.core.tenancy import FairPreemption, FairSharing, Tenancy

CASES_DIR = Path(__file__).parent / "cases"
"""Where the case files live: ``kueue/`` (translated Kueue tests), ``threads/`` (the issue's
threads)."""


class CaseError(ValueError):
    """A case file that does not follow the format (names the file and the key)."""


@dataclass(frozen=True, slots=True)
class NodePool:
    """``nodes`` servers of ``gpus_per_node`` GPUs of one flavor."""

    flavor: GpuFlavor
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds GPUs when the case starts.

    Attributes:
        name: job id.
        queue: the queue it was admitted in.
        flavor: the flavor its GPUs are of (the runner picks the nodes, first fit).
        gpus: gang size.
        priority: Kueue priority (larger = more important).
        start_s: when its current run started (most recently started = first victim among
            equals).
        submit_s: when it was submitted (Kueue's creation time; ``LowerOrNewerEqualPriority``
            compares it); defaults to ``start_s``.
    """

    name: str
    queue: str
    flavor: GpuFlavor
    gpus: int
    priority: int = 0
    start_s: float = 0.0
    submit_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting for admission.

    Attributes:
        name: job id.
        queue: its queue.
        gpus: gang size.
        priority: Kueue priority.
        submit_s: when it was submitted (queue order among equals).
        flavors: flavors the job itself accepts (empty: whatever its queue lists).
    """

    name: str
    queue: str
    gpus: int
    priority: int = 0
    submit_s: float = 0.0
    flavors: tuple[GpuFlavor, ...] = ()


@dataclass(frozen=True, slots=True)
class Expect:
    """What the decision must do.

    Attributes:
        admitted: waiting jobs that start, each with its flavor (``None``: any flavor); every
            other waiting job must stay pending.
        preempted: the exact set of running jobs stopped.
        preempted_order: when given, the order ``Decision.preempted`` lists them in.
        pending_kind: for jobs left waiting, the reason kind the decision gives
            (``quota``, ``capacity`` ...), where the case pins it.
        rounds: decide this many times, applying each decision (started jobs run, preempted
            jobs wait again) and advancing the clock by ``round_step_s``; the expectations
            above are about the first round, and every later round must change nothing
            (no start, no preemption): a stable state, never a loop.
        round_step_s: the clock step between rounds.
        deterministic: also decide with the running and waiting jobs listed in other orders
            and require the same decision.
    """

    admitted: Mapping[str, GpuFlavor | None]
    preempted: frozenset[str]
    preempted_order: tuple[str, ...] | None = None
    pending_kind: Mapping[str, str] = field(default_factory=dict)
    rounds: int = 1
    round_step_s: float = 60.0
    deterministic: bool = False


@dataclass(frozen=True, slots=True)
class Case:
    """One scenario, as read from its file.

    Attributes:
        name: the case's id: the file's stem (pytest ids).
        source: where it comes from: a Kueue test (``preemption_test.go TestPreemption/...``)
            or an issue thread (``kueue#10131``).
        translation: how Kueue's quantities became GPUs, when they did not map one to one.
        reason: where Tessera decides otherwise than Kueue on purpose, why (the expectation is
            then Tessera's, and says so).
        now_s: the decision's clock.
        cluster: the node pools.
        tenancy: the checked tenancy.
        running / pending: the jobs.
        expect: the outcome.
    """

    name: str
    source: str
    translation: str
    reason: str
    now_s: float
    cluster: tuple[NodePool, ...]
    tenancy: Tenancy
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    expect: Expect
    path: Path


class _Reader:
    """Reads one mapping, naming the file and key path in every error, and refusing keys it
    was not asked for."""

    def __init__(self, path: Path, where: str, data: object) -> None:
        if not isinstance(data, dict):
            raise CaseError(f"{path.name}: {where or 'the file'} must be a mapping")
        self.path, self.where, self.data = path, where, data
        self.seen: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def err(self, key: str, msg: str) -> CaseError:
        return CaseError(f"{self.path.name}: {self._key(key)}: {msg}")

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                raise self.err(key, "is required")
            return default
        return self.data[key]

    def sub(self, key: str, *, required: bool = False) -> _Reader:
        return _Reader(self.path, self._key(key), self.get(key, {}, required=required))

    def items(self, key: str) -> list[_Reader]:
        raw = self.get(key, [])
        if not isinstance(raw, list):
            raise self.err(key, "must be a list")
        return [_Reader(self.path, f"{self._key(key)}[{i}]", x) for i, x in enumerate(raw)]

    def int_(self, key: str, default: int | None = None, *, required: bool = False,
             ) -> int | None:
        v = self.get(key, default, required=required)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise self.err(key, f"must be a whole number, got {v!r}")
        return v

    def float_(self, key: str, default: float | None = None) -> float | None:
        v = self.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise self.err(key, f"must be a number, got {v!r}")
        return None if v is None else float(v)

    def str_(self, key: str, default: str | None = None, *, required: bool = False,
             ) -> str | None:
        v = self.get(key, default, required=required)
        if v is not None and not isinstance(v, str):
            raise self.err(key, f"must be text, got {v!r}")
        return v

    def flavor(self, key: str, *, required: bool = True) -> GpuFlavor:
        name = self.str_(key, required=required)
        try:
            return resolve_flavor(name)
        except Exception as e:  # UnknownFlavorError names the known ones
            raise self.err(key, str(e)) from None

    def enum(self, key: str, kind: type[Any], default: Any) -> Any:
        v = self.get(key)
        if v is None:
            return default
        try:
            return kind(v)
        except ValueError:
            known = ", ".join(m.value for m in kind)
            raise self.err(key, f"{v!r} is not one of {known}") from None

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self.err(extra[0], "unknown key")


def _flavor_quotas(r: _Reader) -> dict[GpuFlavor, FlavorQuota]:
    out: dict[GpuFlavor, FlavorQuota] = {}
    for name in r.data:
        q = r.sub(name)
        f = _resolve(r, name)
        out[f] = FlavorQuota(q.int_("nominal", required=True),
                             q.int_("borrowing_limit"), q.int_("lending_limit"))
        q.done()
    return out


def _resolve(r: _Reader, name: str) -> GpuFlavor:
    try:
        return resolve_flavor(name)
    except Exception as e:
        raise r.err(name, str(e)) from None


def _queue(r: _Reader) -> QueueQuota:
    name = r.str_("name", required=True)
    assert name is not None
    p = r.sub("preemption")
    preemption = QueuePreemption(
        p.enum("reclaim_within_cohort", ReclaimWithinCohort, ReclaimWithinCohort.NEVER),
        p.enum("within_queue", WithinQueue, WithinQueue.NEVER))
    p.done()
    fz = r.sub("fungibility")
    fungibility = FlavorFungibility(
        fz.enum("when_can_borrow", WhenCanBorrow, WhenCanBorrow.MAY_STOP_SEARCH),
        fz.enum("when_can_preempt", WhenCanPreempt, WhenCanPreempt.TRY_NEXT_FLAVOR))
    fz.done()
    weight = r.float_("weight", 1.0)
    cohort = r.str_("cohort")
    min_admitted_s = r.float_("min_admitted_s")
    if "flavors" in r.data:
        q = QueueQuota.per_flavor(name, _flavor_quotas(r.sub("flavors")), weight=weight or 0.0,
                                  cohort=cohort, preemption=preemption,
                                  fungibility=fungibility, min_admitted_s=min_admitted_s)
    else:
        q = QueueQuota(name, r.int_("nominal", required=True),
                       r.int_("borrowing_limit"), weight or 0.0, cohort,
                       r.int_("lending_limit"), {}, preemption, fungibility, min_admitted_s)
    r.done()
    return q


def _cohort(r: _Reader) -> Cohort:
    name = r.str_("name", required=True)
    assert name is not None
    flavors = _flavor_quotas(r.sub("flavors")) if "flavors" in r.data else {}
    c = Cohort(name, r.str_("parent"), flavors, None, r.float_("weight", 1.0) or 0.0)
    r.done()
    return c


def _tenancy(r: _Reader, cluster: tuple[NodePool, ...]) -> Tenancy:
    fs = r.sub("fair_sharing")
    strategies = fs.get("strategies")
    fair = FairSharing(
        bool(fs.get("enabled", False)),
        tuple(FairPreemption(s) for s in strategies) if strategies else FairSharing().strategies,
        fs.float_("usage_half_life_s"))
    fs.done()
    queues = [_queue(q) for q in r.items("queues")]
    cohorts = [_cohort(c) for c in r.items("cohorts")]
    r.done()
    t = Tenancy({q.name: q for q in queues}, {c.name: c for c in cohorts}, fair)
    try:
        t.check(p.flavor for p in cluster)
    except Exception as e:
        raise CaseError(f"{r.path.name}: tenancy: {e}") from None
    return t


def _expect(r: _Reader) -> Expect:
    admitted_raw = r.get("admitted", {})
    if not isinstance(admitted_raw, dict):
        raise r.err("admitted", "must map job names to a flavor (or ~ for any flavor)")
    adm = r.sub("admitted")
    admitted = {str(k): (None if v is None else _resolve(adm, str(v)))
                for k, v in admitted_raw.items()}
    adm.seen.update(admitted_raw)
    preempted = r.get("preempted", [])
    order = r.get("preempted_order")
    kinds = r.get("pending_kind", {})
    e = Expect(admitted, frozenset(str(x) for x in preempted),
               None if order is None else tuple(str(x) for x in order),
               {str(k): str(v) for k, v in kinds.items()},
               r.int_("rounds", 1) or 1, r.float_("round_step_s", 60.0) or 60.0,
               bool(r.get("deterministic", False)))
    r.done()
    if e.preempted_order is not None and frozenset(e.preempted_order) != e.preempted:
        raise r.err("preempted_order", "must list exactly the preempted jobs")
    return e


def load_case(path: Path) -> Case:
    """Read and check one case file."""
    r = _Reader(path, "", yaml.safe_load(path.read_text()))
    pools = []
    for p in r.items("cluster"):
        pools.append(NodePool(p.flavor("flavor"), p.int_("nodes", 1) or 1,
                              p.int_("gpus_per_node", required=True) or 0))
        p.done()
    tenancy = _tenancy(r.sub("tenancy", required=True), tuple(pools))
    running = []
    for j in r.items("running"):
        start = j.float_("start_s", 0.0) or 0.0
        running.append(RunningJob(j.str_("name", required=True) or "",
                                  j.str_("queue", required=True) or "", j.flavor("flavor"),
                                  j.int_("gpus", required=True) or 0, j.int_("priority", 0) or 0,
                                  start, j.float_("submit_s", start) or 0.0))
        j.done()
    pending = []
    for j in r.items("pending"):
        fl = j.get("flavors", [])
        pending.append(PendingJob(j.str_("name", required=True) or "",
                                  j.str_("queue", required=True) or "",
                                  j.int_("gpus", required=True) or 0, j.int_("priority", 0) or 0,
                                  j.float_("submit_s", 0.0) or 0.0,
                                  tuple(_resolve(j, str(f)) for f in fl)))
        j.done()
    case = Case(path.stem, r.str_("source", required=True) or "",
                r.str_("translation", "") or "", r.str_("reason", "") or "",
                r.float_("now_s", 1000.0) or 0.0, tuple(pools), tenancy, tuple(running),
                tuple(pending), _expect(r.sub("expect", required=True)), path)
    r.done()
    names = [j.name for j in case.running] + [j.name for j in case.pending]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CaseError(f"{path.name}: job name {sorted(dup)[0]!r} is used twice")
    unknown = (set(case.expect.admitted) | case.expect.preempted) - set(names)
    if unknown:
        raise CaseError(f"{path.name}: expect names job {sorted(unknown)[0]!r}, which the case "
                        f"does not have")
    return case


def case_files(kind: str) -> list[Path]:
    """The case files under ``cases/<kind>/``, sorted."""
    return sorted((CASES_DIR / kind).glob("*.yaml"))
