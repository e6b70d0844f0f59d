"""The Ray executor: one placement group per gang, its ranks started by warm per-node hosts.

For run ``r`` of job ``j`` on ``g`` GPUs:

1. ``launch`` writes a run record to Ray's KV and creates a **placement group**
   ``tessera-pg:j:r``, one bundle ``{"GPU": n, <flavor mark>}`` per node of the placement
   (marks: :mod:`~tessera.live.executors.ray_cluster`), STRICT_PACK for jobs that require
   locality, else PACK, and returns at once.
2. ``status`` moves the launch on without blocking, one step per call while the run is
   ``starting``: the group is placed → one **bundle slot** task per bundle learns its node and
   the GPU ids Ray reserved for it (and, on bundle 0's node, a free port for ``MASTER_PORT``;
   :mod:`~tessera.live.executors.ray_hosts`), on the *placer* thread, one launch at a time →
   on the *starter* thread, while the placer asks about the next launch, the ranks' nodes go
   into the run record and the warm **rank host** of each rank's node
   (:mod:`~tessera.live.executors.ray_worker`) is asked to start the rank's command with
   ``CUDA_VISIBLE_DEVICES`` = its GPU, logging to a file on that node → once every start call
   has returned, ``running``. A group that no alive node could ever hold is ``unplaceable`` at
   once, one still pending after ``place_timeout_s`` is ``unplaceable`` then; either way the
   group is removed and ``detail`` names what is missing.
3. Each rank's host writes an **exit record** (status, stop flag, the tail of its log) to Ray's
   KV when the command ends, so the status of a run that ended while the service was down --
   or whose host died afterwards -- is read from the cluster, not from the service's memory.
4. ``stop`` sends SIGTERM and SIGKILL after the grace period; ``release`` (called once the
   service's store holds the run's end) has the hosts kill what is left of the ranks, then, in
   the background, removes the placement group, keeps the exit records in the service's runs
   directory and prunes them from the KV; ``read_log`` asks the rank's host for its log (the
   exit record's tail once the rank is forgotten), so no shared filesystem is needed.

A running run's state comes from snapshots of every host's ranks, asked for every
``POLL_TTL_S`` and never waited for by the scheduling loop (:mod:`~tessera.live.executors.
ray_polls`, which also says why a snapshot asked before a rank started must not judge it).

Every name is derived from ``(job, run)``, so ``launch`` is idempotent: after a restart it finds
what exists and creates only what is missing; a rank starts at most once on its node (the
host's claim file), and the bundle, hence the node, of a rank is fixed by the named group.
**Shared GPUs** (a packing policy's co-location, ``LaunchSpec.share_with``): a run that joins
another run's GPUs makes no group of its own; its bundle slots run in the bundles of the group
that holds those GPUs (the host run's, or the group the host itself rides), so Ray hands it the
same node and the same GPU ids, and Ray's books hold the GPUs once. A group is removed only
when the last run using it is released: a host that ends before its partner leaves its group
to the partner. (Fractional ``num_gpus`` bundles were not used: Ray packs fractions best-fit,
so two ranks of one job would land on one GPU, and a host that already holds whole GPUs could
not be joined without restarting it.)

**Logs** stay on the rank's node, in the service's runs dir there (the same path on every
node; the executor passes it with each start and the node's host creates it, private, with no
shared filesystem): ``<runs dir>/<job>/<run>/rank-<i>.log``, capped at ``logs.cap_bytes``.
:meth:`RayExecutor.remove_expired` has every node's host remove the run directories it keeps
past ``logs.retention_s``, and removes the saved exit records here
(:mod:`~tessera.live.executors.logs`).

No Ray worker process is started per rank: the hosts and the bundle-slot workers are reused,
which is what lets gangs start at tens per second on a small machine (``benchmarks/
bench_ray_launch.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from tessera.live.executors.base import (
    CHECKPOINTS_ROOT_VAR,
    LaunchSpec,
    LogChunk,
    RunStatus,
    rank_envs,
)
from tessera.live.executors.gpu_sharing import Mechanism, mechanism
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings, RankLogs, remove_expired
from tessera.live.executors.ray_cluster import (
    FlavorResource,
    connect,
    flavor_resource,
    pretend_resources,
    shared_accelerator_types,
    unplaceable_reason,
    use_token_file,
)
from tessera.live.executors.ray_head import EmbeddedHead
from tessera.live.executors.ray_hosts import BundleSlot, HostPool, bundle_slot
from tessera.live.executors.ray_polls import RankPolls
from tessera.live.executors.ray_records import (
    NAMESPACE,
    exit_key,
    get,
    keys,
    log_from_record,
    prune,
    put,
    run_key,
    save_exit,
    saved_exit,
    status_from_records,
)
from tessera.live.executors.ray_worker import RankKey
from tessera.live.where import describe
from tessera.model.cluster import ClusterSpec

PLACE_TIMEOUT_S = 30.0
NODES_TTL_S = 2.0
#: How long a release waits for a host to kill what is left of a rank and report its exit.
FORGET_TIMEOUT_S = 15.0
#: How long the placer waits for a bundle's slot task (a pooled worker answers in ms).
SLOT_TIMEOUT_S = 60.0
#: How often launches' pending refs are asked of Ray (all at once).
READY_TTL_S = 0.02
#: How old a snapshot of the hosts' ranks may be when a run's status is asked.
POLL_TTL_S = 0.2
log = logging.getLogger("tessera.live")


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _pg_name(job_id: str, run: int) -> str:
    return f"tessera-pg:{job_id}:{run}"


@ray.remote(num_cpus=0, max_calls=0)
def _node_mechanism() -> Mechanism:
    """On a node: how two runs would share its GPUs (MPS or time-slicing)."""
    return mechanism()


@dataclass
class _Launch:
    """A run between ``launch`` and ``running``: what has been asked of Ray so far."""

    spec: LaunchSpec
    pg: PlacementGroup
    ready: Any  # the group's readiness ref, asked for once
    bundles: list[dict[str, float]]
    since_s: float
    placing: Future[list[Any]] | None = None  # the placer's work: the ranks' start refs
    withdrawn: str = ""
    group: str = ""  # the group whose bundles the ranks use (the run's own, or its host's)


class RayExecutor:
    """Runs gangs on a Ray cluster: an existing one at ``address``, else the embedded head.

    ``address``: ``HOST:PORT`` of a running head, or ``None`` for the embedded head of
    ``state_dir`` (default ``runs_dir``'s parent), which pretends to hold ``cluster``'s GPUs.
    ``flavor_resource``: how a rank asks for its flavor (:mod:`ray_cluster`).
    """

    name = "ray"
    #: Two runs may share GPUs: a co-located run uses its host's placement group.
    shares_gpus = True

    def __init__(self, cluster: ClusterSpec, address: str | None, runs_dir: Path,
                 grace_s: float = 10.0, num_cpus: int = 2,
                 flavor_resource: FlavorResource = "accelerator_type",
                 state_dir: Path | None = None,
                 place_timeout_s: float = PLACE_TIMEOUT_S,
                 logs: LogSettings = DEFAULT_LOGS) -> None:
        self.runs_dir = runs_dir
        self.grace_s = grace_s
        self.logs = logs
        self.kind: FlavorResource = flavor_resource
        self.place_timeout_s = place_timeout_s
        self.head: EmbeddedHead | None = None
        if flavor_resource == "accelerator_type" and (shared := shared_accelerator_types(cluster)):
            log.warning("accelerator types shared by several flavors: %s; Ray cannot tell "
                        "them apart (use --ray-flavor-resource gpu_flavor)", "; ".join(shared))
        if not ray.is_initialized():
            if address is None:
                self.head = EmbeddedHead(state_dir or runs_dir.parent)
                address = self.head.ensure(num_cpus, cluster.total_gpus,
                                           pretend_resources(cluster, flavor_resource))
                use_token_file(self.head.token_file)  # the token only the service holds
                connect(address, NAMESPACE, loopback=True)
            else:
                connect(address, NAMESPACE)
        self.address = address
        self.runs_lost_with_cluster = self.head is not None and self.head.restarted
        # Ray builds its serialization context (importing pydantic's v1 shim) on first use;
        # two threads doing that at once fail with KeyError('pydantic.v1'): build it here,
        # before the placer and release threads exist.
        ray.put(None)
        self.hosts = HostPool()
        self.hosts.warm()
        # Groups a previous service left (a relaunch after a restart reuses its group); any
        # other launch makes a new one without asking Ray for it by name first.
        self._groups_at_start = {str(g.get("name", "")) for g in
                                 ray.util.placement_group_table().values()
                                 if g.get("state") != "REMOVED"}
        self._nodes_of: dict[tuple[str, int], list[str]] = {}  # run → node of each rank
        self._launching: dict[tuple[str, int], _Launch] = {}
        self._placer = ThreadPoolExecutor(1, thread_name_prefix="tessera-ray-place")
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="tessera-ray-start")
        self._releasing = ThreadPoolExecutor(4, thread_name_prefix="tessera-ray-release")
        self._nodes: list[dict[str, float]] = []
        self._nodes_at_s = float("-inf")
        self._polls = RankPolls(lambda node: self.hosts.host(node).poll_all.remote(),
                                self.hosts.forget_host, POLL_TTL_S)
        self._ready: set[Any] = set()  # refs of launches known to be ready
        self._ready_at_s = float("-inf")
        self._users: dict[str, set[tuple[str, int]]] = {}  # group → runs using it
        self._users_lock = threading.Lock()
        self._load_group_users()

    # -- launching ----------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        """Ask Ray for the run's placement group and return (see the module docstring).

        Raises:
            ValueError: a run that shares GPUs whose host's group is gone.
        """
        key = (spec.job_id, spec.run)
        if key in self._launching:
            return
        bundles: list[dict[str, float]] = []
        for _node, count, flavor in spec.placement.parts():
            res, share = flavor_resource(flavor, self.kind)
            bundles.append({"GPU": float(count), res: share * count})
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
        self._launching[key] = _Launch(spec, pg, pg.ready(), bundles, time.monotonic(),
                                       group=pg_name)

    def _group_for(self, spec: LaunchSpec) -> str:
        """The group a run's ranks use: its own, or (sharing GPUs) the one its host uses."""
        if spec.share_with is None:
            return _pg_name(spec.job_id, spec.run)
        host = spec.share_with
        with self._users_lock:
            for group, users in self._users.items():
                if host in users:
                    return group
        return _pg_name(*host)

    def _load_group_users(self) -> None:
        """Which runs use which group, from the run records a previous service left."""
        for k in keys("run:"):
            job, run = k.split(":")[1:3]
            rec = get(k) or {}
            group = str(rec.get("group") or _pg_name(job, int(run)))
            self._users.setdefault(group, set()).add((job, int(run)))

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism:
        """How a run joining ``host``'s GPUs shares them: asked on the host's first node."""
        if not self._find(*host):  # the service launches a partner only once its host runs
            return Mechanism("time-slicing")
        node = self._nodes_of[host][0]
        ref = _node_mechanism.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        got: Mechanism = ray.get(ref, timeout=SLOT_TIMEOUT_S)
        return got

    def _advance(self, ln: _Launch) -> RunStatus:
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
            return RunStatus("lost", detail=f"could not place the ranks: {_first_line(e)}")
        if not self._all_ready(started):
            return RunStatus("starting", detail="starting the ranks' commands")
        del self._launching[key]
        self._ready.difference_update([ln.ready, *started])
        try:
            ray.get(started)
        except ray.exceptions.RayError as e:
            self.stop(*key, 0.0)
            return RunStatus("lost", detail=f"a rank could not start: {_first_line(e)}")
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
    def _started(ln: _Launch) -> list[Any]:
        """The start refs of a launch the placer has finished (``[]`` otherwise)."""
        if ln.placing is None or not ln.placing.done() or ln.placing.exception() is not None:
            return []
        return ln.placing.result()

    def _place(self, ln: _Launch, done: Future[list[Any]]) -> None:
        """On the placer thread: learn where the ranks go, then hand them to the starter
        thread, which records and starts them while the placer asks about the next launch;
        ``done`` gets the start calls' refs (or the error)."""
        try:
            slots = self._place_ranks(ln)
        except Exception as e:
            done.set_exception(e)
            return
        self._starter.submit(self._start_ranks, ln, slots, done)

    def _place_ranks(self, ln: _Launch) -> list[BundleSlot]:
        """On the placer thread: each bundle's node and GPUs (:func:`bundle_slot`, one task per
        bundle holding exactly its resources).

        One launch at a time: the slot tasks then reuse one pooled Ray worker (a burst of them
        would make Ray start a worker process for each, the very cost the hosts avoid).
        """
        spec = ln.spec
        refs = []
        for bundle, (_node, count, flavor) in enumerate(spec.placement.parts()):
            res, share = flavor_resource(flavor, self.kind)
            refs.append(bundle_slot.options(
                num_gpus=float(count), resources={res: share * count},
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    ln.pg, placement_group_bundle_index=bundle)).remote())
        slots: list[BundleSlot] = ray.get(refs, timeout=SLOT_TIMEOUT_S)
        return slots

    def _start_ranks(self, ln: _Launch, slots: list[BundleSlot],
                     done: Future[list[Any]]) -> None:
        """On the starter thread: record each rank's node in the run record (before any rank
        starts, so a restarted service finds them), then ask each rank's host to start it;
        ``done`` gets the start calls' refs (or the error)."""
        try:
            done.set_result(self._record_and_start(ln, slots))
        except Exception as e:
            done.set_exception(e)

    def _record_and_start(self, ln: _Launch, slots: list[BundleSlot]) -> list[Any]:
        spec = ln.spec
        nodes: list[str] = []
        gpus: list[str] = []
        for slot, (_node, count, _flavor) in zip(slots, spec.placement.parts(), strict=True):
            if len(slot.gpu_ids) != count:
                raise ValueError(f"bundle on node {slot.node_id} got GPUs {slot.gpu_ids}, "
                                 f"expected {count}")
            nodes.extend([slot.node_id] * count)
            gpus.extend(slot.gpu_ids)
        put(run_key(spec.job_id, spec.run), {"world": len(nodes), "nodes": nodes,
                                             "group": ln.group})
        self._nodes_of[(spec.job_id, spec.run)] = nodes
        root = {CHECKPOINTS_ROOT_VAR: str(self.runs_dir.parent / "checkpoints")}
        envs = rank_envs(spec, slots[0].ip, slots[0].port)
        logs = RankLogs(str(self.runs_dir), self.logs.cap_bytes)
        return [self.hosts.host(node).start.remote(
                    (spec.job_id, spec.run, rank), list(spec.argv), {**env, **root}, gpu, logs)
                for rank, (node, gpu, env) in enumerate(zip(nodes, gpus, envs, strict=True))]

    def _node_totals(self) -> list[dict[str, float]]:
        """Alive nodes' total resources, asked of Ray at most every :data:`NODES_TTL_S`."""
        now_s = time.monotonic()
        if now_s - self._nodes_at_s > NODES_TTL_S:
            self._nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
            self._nodes_at_s = now_s
        return self._nodes

    # -- observing -----------------------------------------------------------------------------

    def _find(self, job_id: str, run: int) -> list[tuple[str, RankKey]]:
        """Each rank's node and key, from memory or the run record (``[]``: not started)."""
        nodes = self._nodes_of.get((job_id, run))
        if nodes is None:
            rec = get(run_key(job_id, run))
            nodes = [str(n) for n in rec.get("nodes", [])] if rec else []
            if nodes:
                self._nodes_of[(job_id, run)] = nodes
        return [(n, (job_id, run, r)) for r, n in enumerate(nodes)]

    def status(self, job_id: str, run: int) -> RunStatus:
        ln = self._launching.get((job_id, run))
        if ln is not None:
            if ln.withdrawn:
                del self._launching[(job_id, run)]
                return RunStatus("exited", None, True, ln.withdrawn)
            return self._advance(ln)
        ranks = self._find(job_id, run)
        if not ranks:
            return status_from_records(job_id, run) or RunStatus("absent")
        try:
            # The placer thread adds runs to ``_nodes_of``: copy its values in one C call
            # (under the GIL) before walking them, or the walk can see the dict change size.
            polls = self._polls.polls(ranks, {n for ns in tuple(self._nodes_of.values())
                                              for n in ns})
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            recorded = status_from_records(job_id, run)
            if recorded is not None:
                return recorded
            self.stop(job_id, run, 0.0)
            return RunStatus("lost", detail=f"rank host died: {type(e).__name__}")
        if any(state == "absent" for state, _rc, _s in polls):
            return status_from_records(job_id, run) or RunStatus("absent")
        failed = [(i, rc) for i, (state, rc, _s) in enumerate(polls) if state == "exited" and rc]
        stopped = any(s for _st, _rc, s in polls)
        if failed and not stopped:
            self.stop(job_id, run, self.grace_s)  # the gang fails together
            i, rc = failed[0]
            detail = f"rank {i} exited with {rc}"
            why, timed_out = "", False
            with contextlib.suppress(ray.exceptions.RayError):  # its guardian's verdict
                node, k = ranks[i]
                why, timed_out = ray.get(self.hosts.host(node).outcome.remote(k), timeout=10)
            return RunStatus("exited", rc, False, f"{detail}: {why}" if why else detail,
                             timed_out)
        if all(state == "exited" for state, _rc, _s in polls):
            rc = next((r for _st, r, _s in polls if r), 0) or 0
            return RunStatus("exited", rc, stopped)
        return RunStatus("running")

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> LogChunk | None:
        """From the rank's host while it holds the rank, else from its exit record's tail (in
        the KV, or in the runs directory once pruned)."""
        ranks = self._find(job_id, run)
        if rank < len(ranks):
            node, k = ranks[rank]
            with contextlib.suppress(ray.exceptions.RayError):
                got = ray.get(self.hosts.host(node).read_log.remote(k, offset, limit_bytes),
                              timeout=10)
                if got is not None:
                    return got
        rec = get(exit_key(job_id, run, rank)) or saved_exit(self.runs_dir, job_id, run, rank)
        return log_from_record(rec, offset, limit_bytes)

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        ln = self._launching.get((job_id, run))
        if ln is not None and ln.placing is None:  # nothing runs yet: withdraw the launch
            self._teardown(job_id, run)
            ln.withdrawn = "stopped before it started"
            return True
        if ln is not None:  # commands are being started: stop them once they run
            return False
        for node, k in self._find(job_id, run):
            with contextlib.suppress(ray.exceptions.RayActorError):
                self.hosts.host(node).stop.remote(k, grace_s)
        return True

    def release(self, job_id: str, run: int) -> None:
        """Free the run (the service's store already holds its end): its ranks are killed and
        forgotten by their hosts, its group removed, its KV records saved and pruned."""
        ln = self._launching.pop((job_id, run), None)
        self._teardown(job_id, run, prune_records=True,
                       placing=ln.placing if ln is not None else None)

    def _teardown(self, job_id: str, run: int, prune_records: bool = False,
                  placing: Future[list[Any]] | None = None) -> None:
        """Ask the hosts to forget the run's ranks; the rest happens in the background. A run
        the placer is still placing is torn down once that is done (on the thread that ends it),
        so a rank it starts meanwhile is never missed."""
        def send() -> None:
            ranks = self._find(job_id, run)
            self._nodes_of.pop((job_id, run), None)
            self._polls.forget(job_id, run)
            forgets = []
            for node, k in ranks:
                with contextlib.suppress(ray.exceptions.RayActorError):
                    forgets.append((k[2], self.hosts.host(node).forget.remote(k)))
            self._releasing.submit(self._finish_teardown, job_id, run, forgets, prune_records)

        if placing is not None:
            placing.add_done_callback(lambda _done: send())  # at once if it is done
        else:
            send()

    def _finish_teardown(self, job_id: str, run: int, forgets: list[tuple[int, Any]],
                         prune_records: bool) -> None:
        """Once the hosts report the ranks gone: remove the group (so no GPU is offered again
        while a process of the run lives), then keep and prune the exit records."""
        records: dict[int, dict[str, Any]] = {}
        for rank, ref in forgets:
            with contextlib.suppress(ray.exceptions.RayError):
                if (rec := ray.get(ref, timeout=FORGET_TIMEOUT_S)) is not None:
                    records[rank] = rec
        self._leave_group(job_id, run)
        if not prune_records:
            return
        meta = get(run_key(job_id, run))
        world = int(meta["world"]) if meta else len(forgets)
        for rank in range(world):
            rec = records.get(rank) or get(exit_key(job_id, run, rank))
            if rec is not None:
                save_exit(self.runs_dir, job_id, run, rank, rec)
        prune(job_id, run, world)

    def _leave_group(self, job_id: str, run: int) -> None:
        """The run no longer uses its group; the last run to leave a group removes it."""
        with self._users_lock:
            group = next((g for g, u in self._users.items() if (job_id, run) in u),
                         _pg_name(job_id, run))
            users = self._users.get(group, set())
            users.discard((job_id, run))
            if users:
                return  # a run sharing its GPUs still runs on them
            self._users.pop(group, None)
        with contextlib.suppress(ValueError):
            remove_placement_group(get_placement_group(group))

    def remove_expired(self, now_s: float) -> int:
        """Have every alive node's host remove its run directories older than
        ``logs.retention_s`` (in the background: nothing is waited for), and remove here the
        directories that hold only saved exit records of released runs; returns how many were
        removed here."""
        for node in ray.nodes():
            if node.get("Alive"):
                with contextlib.suppress(ray.exceptions.RayError):
                    self.hosts.host(str(node["NodeID"])).remove_expired.remote(
                        str(self.runs_dir), self.logs.retention_s, now_s)

        def busy(job_id: str, run: int) -> bool:
            key = (job_id, run)
            return key in self._launching or key in self._nodes_of or \
                get(run_key(job_id, run)) is not None

        def only_records(run_dir: Path) -> bool:  # a dir with rank logs is its host's to remove
            return all(p.name.endswith(".exit.json") for p in run_dir.iterdir())

        return len(remove_expired(self.runs_dir, self.logs.retention_s, now_s, busy,
                                  only_records))

    def release_unheld(self, holding: set[tuple[str, int]]) -> int:
        """Release every run this cluster still keeps (a placement group, KV records) that the
        service's store no longer holds: what a service killed between recording a run's end
        and releasing it left behind. Called once at start (:mod:`~tessera.live.reconcile`);
        returns how many runs were released.
        """
        names = [n for n in self._groups_at_start if n.startswith("tessera-pg:")]
        runs = {(job, int(run)) for job, run in (n.split(":")[1:3] for n in names)}
        runs |= {(job, int(run)) for job, run in (k.split(":")[1:3] for k in keys("run:"))}
        left = sorted(runs - holding)
        for job_id, run in left:
            self.release(job_id, run)
        return len(left)

    def close(self) -> None:
        """Disconnect; running ranks keep going on their hosts and are adopted on the next
        start. The embedded head stops too when no host holds a rank, else it keeps the runs."""
        self._placer.shutdown(wait=True)
        self._starter.shutdown(wait=True)
        self._releasing.shutdown(wait=True)
        self._nodes_of.clear()
        held = self.hosts.held() if ray.is_initialized() else []
        ray.shutdown()
        if self.head is None:
            return
        if held:
            log.info("embedded Ray at %s keeps %d rank(s) running; the next `tessera serve` "
                     "on this state dir adopts them", self.address, len(held))
        else:
            self.head.stop()
