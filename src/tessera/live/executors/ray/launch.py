"""The Ray executor's launches: from ``launch`` to ``running``, never blocking the loop.

For run ``r`` of job ``j`` on ``g`` GPUs (the rest of the run's life is
:mod:`~tessera.live.executors.ray.executor`'s):

1. ``launch`` writes a run record to Ray's KV and creates a **placement group**
   ``tessera-pg:j:r``, one bundle ``{"GPU": n, <flavor mark>}`` per node of the placement
   (marks: :mod:`~tessera.live.executors.ray.cluster`), STRICT_PACK for jobs that require
   locality, else PACK, and returns at once. A CPU-only run (no GPUs) gets one bundle
   ``{"CPU": c, "memory": m}`` per node, with its node's ``tessera_node:<id>`` mark where the
   cluster offers node marks (:func:`run_bundles`), and one rank per node with no GPU visible.
2. ``status`` moves the launch on without blocking (:meth:`Launches._advance`), one step per
   call while the run is ``starting``: the group is placed → one **bundle slot** task per
   bundle learns its node and the GPU ids Ray reserved for it (and, on bundle 0's node, a free
   port for ``MASTER_PORT``; :mod:`~tessera.live.executors.ray.hosts`), on the *placer* thread,
   one launch at a time → on the *starter* thread, while the placer asks about the next launch,
   the ranks' nodes go into the run record and the warm **rank host** of each rank's node
   (:mod:`~tessera.live.executors.ray.worker`) is asked to start the rank's command with
   ``CUDA_VISIBLE_DEVICES`` = its GPU, logging to a file on that node → once every start call
   has returned, ``running``. A group that no alive node could ever hold is ``unplaceable`` at
   once, one still pending after ``place_timeout_s`` is ``unplaceable`` then; either way the
   group is removed and ``detail`` names what is missing.

:class:`Launches` is the part of :class:`~tessera.live.executors.ray.executor.RayExecutor` that does
this; the executor builds the state it names (threads, caches) in its constructor.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, get_placement_group, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tessera.live.executors.base import CHECKPOINTS_ROOT_VAR, LaunchSpec, RunStatus, rank_envs
from tessera.live.executors.logs import LogSettings, RankLogs
from tessera.live.executors.ray.cluster import (
    FlavorResource,
    flavor_resource,
    gang_bundles,
    unplaceable_reason,
)
from tessera.live.executors.ray.hosts import BundleSlot, HostPool, bundle_slot
from tessera.live.executors.ray.node_marks import (
    NODE_RESOURCE_PREFIX,
    cpu_bundle,
    offers_node_marks,
)
from tessera.live.executors.ray.polls import RankPolls
from tessera.live.executors.ray.records import get, keys, put, run_key
from tessera.live.where import describe

PLACE_TIMEOUT_S = 30.0
NODES_TTL_S = 2.0
#: How long the placer waits for a bundle's slot task (a pooled worker answers in ms).
SLOT_TIMEOUT_S = 60.0
#: How often launches' pending refs are asked of Ray (all at once).
READY_TTL_S = 0.02


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def pg_name(job_id: str, run: int) -> str:
    return f"tessera-pg:{job_id}:{run}"


@dataclass
class Launch:
    """A run between ``launch`` and ``running``: what has been asked of Ray so far."""

    spec: LaunchSpec
    pg: PlacementGroup
    ready: Any  # the group's readiness ref, asked for once
    bundles: list[dict[str, float]]
    since_s: float
    placing: Future[list[Any]] | None = None  # the placer's work: the ranks' start refs
    withdrawn: str = ""
    group: str = ""  # the group whose bundles the ranks use (the run's own, or its host's)


class Launches:
    """Launching runs on Ray (the module docstring); mixed into the Ray executor, whose
    constructor sets the attributes below and which provides ``_teardown`` and ``stop``."""

    kind: FlavorResource
    domain_of: Mapping[str, str]
    """node id -> its NVLink domain, for the nodes that name one (the bundles ask for it)."""
    runs_dir: Path
    logs: LogSettings
    place_timeout_s: float
    hosts: HostPool
    _groups_at_start: set[str]
    _nodes_of: dict[tuple[str, int], list[str]]
    _launching: dict[tuple[str, int], Launch]
    _placer: ThreadPoolExecutor
    _starter: ThreadPoolExecutor
    _nodes: list[dict[str, float]]
    _nodes_at_s: float
    _polls: RankPolls
    _ready: set[Any]
    _ready_at_s: float
    _users: dict[str, set[tuple[str, int]]]
    _users_lock: threading.Lock
    _teardown: Callable[..., None]
    stop: Callable[[str, int, float], bool]

    def launch(self, spec: LaunchSpec) -> None:
        """Ask Ray for the run's placement group and return (see the module docstring).

        Raises:
            ValueError: a run that shares GPUs whose host's group is gone.
        """
        key = (spec.job_id, spec.run)
        if key in self._launching:
            return
        pin = spec.placement.num_gpus == 0 and offers_node_marks(self._node_totals())
        bundles = run_bundles(spec, self.kind, self.domain_of, pin_cpu_only=pin)
        pg_name = self._group_for(spec)
        pg: PlacementGroup | None = None
        if pg_name in self._groups_at_start or spec.share_with is not None:
            with contextlib.suppress(ValueError):  # removed since
                pg = get_placement_group(pg_name)
            if pg is None and spec.share_with is not None:
                raise ValueError(f"the placement group {pg_name} of the run it shares GPUs "
                                 "with is gone")
        if pg is None:
            strategy = "STRICT_PACK" if spec.requires_locality else "PACK"
            pg = placement_group(bundles, strategy=strategy, name=pg_name, lifetime="detached")
        with self._users_lock:
            self._users.setdefault(pg_name, set()).add(key)
        self._launching[key] = Launch(spec, pg, pg.ready(), bundles, time.monotonic(),
                                       group=pg_name)

    def host_enforcement(self, job_id: str, run: int) -> str | None:
        """How the run's CPUs and memory are held: its bundles reserve them (Ray counts them
        against each node's ``CPU`` and ``memory``; it does not pin or cap the processes)."""
        ln = self._launching.get((job_id, run))
        if ln is None or not any("CPU" in b for b in ln.bundles):
            return None
        parts = ", ".join(f"{b['CPU']:g} CPUs + {b.get('memory', 0) / 2**30:g} GiB"
                          for b in ln.bundles)
        held = (f"host: reserved in the run's Ray placement-group bundles ({parts}); Ray "
                "neither pins CPUs nor caps memory")
        if ln.spec.placement.num_gpus > 0:
            return held
        return f"{held}; CPU-only: no GPUs visible (CUDA_VISIBLE_DEVICES empty), {_pin_note(ln)}"

    def _group_for(self, spec: LaunchSpec) -> str:
        """The group a run's ranks use: its own, or (sharing GPUs) the one its host uses."""
        if spec.share_with is None:
            return pg_name(spec.job_id, spec.run)
        host = spec.share_with
        with self._users_lock:
            for group, users in self._users.items():
                if host in users:
                    return group
        return pg_name(*host)

    def _load_group_users(self) -> None:
        """Which runs use which group, from the run records a previous service left."""
        for k in keys("run:"):
            job, run = k.split(":")[1:3]
            rec = get(k) or {}
            group = str(rec.get("group") or pg_name(job, int(run)))
            self._users.setdefault(group, set()).add((job, int(run)))

    def _advance(self, ln: Launch) -> RunStatus:
        """One non-blocking step of a launch; returns where it stands."""
        spec = ln.spec
        key = (spec.job_id, spec.run)
        if ln.placing is None:
            if not self._all_ready([ln.ready]):
                why = unplaceable_reason(ln.bundles, self._node_totals())
                if why is None and time.monotonic() - ln.since_s > self.place_timeout_s:
                    why = (f"placement group {describe(spec.placement)} not placed after "
                           f"{self.place_timeout_s:g} s: {ln.bundles} exceed what Ray has free")
                if why is not None:
                    self._launching.pop(key, None)
                    self._teardown(*key)
                    return RunStatus("unplaceable", detail=why)
                return RunStatus("starting", detail="waiting for the placement group")
            ln.placing = Future()
            self._placer.submit(self._place, ln, ln.placing)
        if not ln.placing.done():
            return RunStatus("starting", detail="placing the ranks")
        try:
            started = ln.placing.result()
        except Exception as e:  # a Ray error, a bundle without its GPUs: the run is lost
            self._launching.pop(key, None)
            self._teardown(*key)
            return RunStatus("lost", detail=f"could not place the ranks: {first_line(e)}")
        if not self._all_ready(started):
            return RunStatus("starting", detail="starting the ranks' commands")
        del self._launching[key]
        self._ready.difference_update([ln.ready, *started])
        try:
            ray.get(started)
        except ray.exceptions.RayError as e:
            self.stop(*key, 0.0)
            return RunStatus("lost", detail=f"a rank could not start: {first_line(e)}")
        self._polls.confirm(*key)  # started: a snapshot asked from now on tells the rest
        return RunStatus("running")

    def _all_ready(self, refs: list[Any]) -> bool:
        """Whether every ref in ``refs`` is ready. Ray is asked about the pending refs of all
        launches at once, at most every :data:`READY_TTL_S` (the service asks about each
        launch in turn; a ``ray.wait`` per launch cost a millisecond each on a busy machine)."""
        if all(r in self._ready for r in refs):
            return True
        now_s = time.monotonic()
        if now_s - self._ready_at_s >= READY_TTL_S:
            live = set(refs).union(*([ln.ready, *self._started(ln)]
                                     for ln in self._launching.values()))
            self._ready &= live  # forget refs of launches that ended meanwhile
            pending = list(live - self._ready)
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            self._ready.update(done)
            self._ready_at_s = now_s
        return all(r in self._ready for r in refs)

    @staticmethod
    def _started(ln: Launch) -> list[Any]:
        """The start refs of a launch the placer has finished (``[]`` otherwise)."""
        if ln.placing is None or not ln.placing.done() or ln.placing.exception() is not None:
            return []
        return ln.placing.result()

    def _place(self, ln: Launch, done: Future[list[Any]]) -> None:
        """On the placer thread: learn where the ranks go, then hand them to the starter
        thread, which records and starts them while the placer asks about the next launch;
        ``done`` gets the start calls' refs (or the error)."""
        try:
            slots = self._place_ranks(ln)
        except Exception as e:
            done.set_exception(e)
            return
        self._starter.submit(self._start_ranks, ln, slots, done)

    def _place_ranks(self, ln: Launch) -> list[BundleSlot]:
        """On the placer thread: each bundle's node and GPUs (:func:`bundle_slot`, one task per
        bundle holding exactly its resources).

        One launch at a time: the slot tasks then reuse one pooled Ray worker (a burst of them
        would make Ray start a worker process for each, the very cost the hosts avoid).
        """
        spec = ln.spec
        refs = []
        for bundle, (_node, count, flavor) in enumerate(spec.placement.parts()):
            res, share = flavor_resource(flavor, self.kind)
            asks = {res: share * count} if count > 0 else {}  # (CPU-only: the bundle's node)
            refs.append(bundle_slot.options(
                num_gpus=float(count), resources=asks,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    ln.pg, placement_group_bundle_index=bundle)).remote())
        slots: list[BundleSlot] = ray.get(refs, timeout=SLOT_TIMEOUT_S)
        return slots

    def _start_ranks(self, ln: Launch, slots: list[BundleSlot],
                     done: Future[list[Any]]) -> None:
        """On the starter thread: record each rank's node in the run record (before any rank
        starts, so a restarted service finds them), then ask each rank's host to start it;
        ``done`` gets the start calls' refs (or the error)."""
        try:
            done.set_result(self._record_and_start(ln, slots))
        except Exception as e:
            done.set_exception(e)

    def _record_and_start(self, ln: Launch, slots: list[BundleSlot]) -> list[Any]:
        spec = ln.spec
        nodes: list[str] = []
        gpus: list[str] = []
        for slot, (_node, count, _flavor) in zip(slots, spec.placement.parts(), strict=True):
            if len(slot.gpu_ids) != count:
                raise ValueError(f"bundle on node {slot.node_id} got GPUs {slot.gpu_ids}, "
                                 f"expected {count}")
            if count == 0:  # a CPU-only run: one rank on the bundle's node, no GPU visible
                nodes.append(slot.node_id)
                gpus.append("")
                continue
            nodes.extend([slot.node_id] * count)
            gpus.extend(slot.gpu_ids)
        put(run_key(spec.job_id, spec.run), {"world": len(nodes), "nodes": nodes,
                                             "group": ln.group})
        self._nodes_of[(spec.job_id, spec.run)] = nodes
        root = {CHECKPOINTS_ROOT_VAR: str(self.runs_dir.parent / "checkpoints")}
        envs = rank_envs(spec, slots[0].ip, slots[0].port)
        logs = RankLogs(str(self.runs_dir), self.logs.cap_bytes)
        return [self.hosts.host(node).start.remote(
                    (spec.job_id, spec.run, rank), list(spec.argv), {**env, **root}, gpu, logs,
                    spec.measure_power, spec.power_limit_w)
                for rank, (node, gpu, env) in enumerate(zip(nodes, gpus, envs, strict=True))]

    def _node_totals(self) -> list[dict[str, float]]:
        """Alive nodes' total resources, asked of Ray at most every :data:`NODES_TTL_S`."""
        now_s = time.monotonic()
        if now_s - self._nodes_at_s > NODES_TTL_S:
            self._nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
            self._nodes_at_s = now_s
        return self._nodes


def run_bundles(spec: LaunchSpec, kind: FlavorResource,
                domain_of: Mapping[str, str] | None = None, *,
                pin_cpu_only: bool = False) -> list[dict[str, float]]:
    """A run's placement-group bundles, one per node of its placement: the node's GPUs, the
    flavor's resource mark and its NVLink domain's resource (:func:`gang_bundles`), and --
    when the run holds host resources (``LaunchSpec.host_by_node``) -- its ``CPU`` count and
    ``memory`` in bytes on that node, so Ray books them as the decision core did.

    A CPU-only run (no GPUs in its placement) gets :func:`~.node_marks.cpu_bundle` per node: its
    CPUs and memory, no ``GPU``, flavor or domain key, and with ``pin_cpu_only`` its node's
    mark (``tessera_node:<id>``, asked when the cluster offers node marks).

    Raises:
        ValueError: a CPU-only run whose ``host_by_node`` does not name each of its nodes.
    """
    host = {n: (c, m) for n, c, m in spec.host_by_node}
    parts = spec.placement.parts()
    if spec.placement.num_gpus == 0:
        missing = [n for n, _c, _f in parts if n not in host]
        if missing:
            raise ValueError(f"CPU-only run {spec.job_id}:{spec.run} holds no CPUs on node "
                             f"{missing[0]} (host_by_node names {sorted(host)})")
        return [cpu_bundle(n, *host[n], pin=pin_cpu_only) for n, _c, _f in parts]
    bundles = gang_bundles(parts, kind, domain_of or {})
    for (node, _count, _flavor), b in zip(parts, bundles, strict=True):
        if node in host:
            cpus, mem_gib = host[node]
            b["CPU"] = float(cpus)
            if mem_gib > 0:
                b["memory"] = float(int(mem_gib * 2**30))
    return bundles


def _pin_note(ln: Launch) -> str:
    """Where a CPU-only run's bundles may go: the node marks they ask, or anywhere."""
    marks = sorted({k for b in ln.bundles for k in b if k.startswith(NODE_RESOURCE_PREFIX)})
    if marks:
        return f"held to the Ray node that offers {', '.join(marks)}"
    return ("not held to one Ray node (no Ray node offers tessera_node:<id> marks; Ray runs "
            "it on any node with its CPUs)")
