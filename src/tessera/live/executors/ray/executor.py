"""The Ray executor: one placement group per gang, its ranks started by warm per-node hosts.

For run ``r`` of job ``j`` on ``g`` GPUs:

1. ``launch`` creates the run's **placement group** (one bundle per node of the placement) and
   returns at once;
2. ``status`` moves the launch on one non-blocking step per call -- the group placed, each
   bundle's node and GPUs learnt, the ranks started by their nodes' warm hosts -- until the
   run is ``running`` (or ``unplaceable``, or ``lost``): :mod:`~tessera.live.executors.ray.launch`.
3. Each rank's host writes an **exit record** (status, stop flag, the tail of its log) to Ray's
   KV when the command ends, so the status of a run that ended while the service was down --
   or whose host died afterwards -- is read from the cluster, not from the service's memory.
4. ``stop`` sends SIGTERM and SIGKILL after the grace period; ``release`` (called once the
   service's store holds the run's end) has the hosts kill what is left of the ranks, then, in
   the background, removes the placement group, keeps the exit records in the service's runs
   directory and prunes them from the KV; ``read_log`` asks the rank's host for its log (the
   exit record's tail once the rank is forgotten), so no shared filesystem is needed.

A running run's state comes from snapshots of every host's ranks, asked for every
``POLL_TTL_S`` and never waited for by the scheduling loop (:mod:`~tessera.live.executors.ray.
polls`, which also says why a snapshot asked before a rank started must not judge it).

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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import (
    get_placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
)

from tessera.live.executors.base import (
    LogChunk,
    RunStatus,
)
from tessera.live.executors.gpu_sharing import Mechanism, mechanism
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings, remove_expired
from tessera.live.executors.ray.cluster import (
    FlavorResource,
    connect,
    node_hosts,
    pretend_resources,
    shared_accelerator_types,
    use_token_file,
)
from tessera.live.executors.ray.head import EmbeddedHead
from tessera.live.executors.ray.hosts import HostPool
from tessera.live.executors.ray.launch import (
    PLACE_TIMEOUT_S,
    SLOT_TIMEOUT_S,
    Launch,
    Launches,
    pg_name,
)
from tessera.live.executors.ray.polls import RankPolls
from tessera.live.executors.ray.power_reports import gather
from tessera.live.executors.ray.records import (
    NAMESPACE,
    exit_key,
    get,
    keys,
    log_from_record,
    prune,
    run_key,
    save_exit,
    saved_exit,
    status_from_records,
)
from tessera.live.executors.ray.worker import RankKey
from tessera.live.run_power_ray import RunPowerReport
from tessera.model.cluster import ClusterSpec

#: How long a release waits for a host to kill what is left of a rank and report its exit.
FORGET_TIMEOUT_S = 15.0
#: How old a snapshot of the hosts' ranks may be when a run's status is asked.
POLL_TTL_S = 0.2
log = logging.getLogger("tessera.live")


@ray.remote(num_cpus=0, max_calls=0)
def _node_mechanism() -> Mechanism:
    """On a node: how two runs would share its GPUs (MPS or time-slicing)."""
    return mechanism()


class RayExecutor(Launches):
    """Runs gangs on a Ray cluster: an existing one at ``address``, else the embedded head.

    ``address``: ``HOST:PORT`` of a running head, or ``None`` for the embedded head of
    ``state_dir`` (default ``runs_dir``'s parent), which pretends to hold ``cluster``'s GPUs.
    ``flavor_resource``: how a rank asks for its flavor (:mod:`.cluster`).
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
        self.domain_of = {n.node_id: n.nvlink_domain for n in cluster.nodes
                          if n.nvlink_domain is not None}
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
        self.hosts = HostPool(str(runs_dir.parent / "ray-power"))
        self.hosts.warm()
        # Groups a previous service left (a relaunch after a restart reuses its group); any
        # other launch makes a new one without asking Ray for it by name first.
        self._groups_at_start = {str(g.get("name", "")) for g in
                                 ray.util.placement_group_table().values()
                                 if g.get("state") != "REMOVED"}
        self._nodes_of: dict[tuple[str, int], list[str]] = {}  # run → node of each rank
        self._launching: dict[tuple[str, int], Launch] = {}
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
        self._power_reports: list[RunPowerReport] = []  # filled by the release threads
        self._load_group_users()

    # -- launching ----------------------------------------------------------------------------

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism:
        """How a run joining ``host``'s GPUs shares them: asked on the host's first node."""
        if not self._find(*host):  # the service launches a partner only once its host runs
            return Mechanism("time-slicing")
        node = self._nodes_of[host][0]
        ref = _node_mechanism.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        got: Mechanism = ray.get(ref, timeout=SLOT_TIMEOUT_S)
        return got

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
            if (rec := records.get(rank) or get(exit_key(job_id, run, rank))) is not None:
                save_exit(self.runs_dir, job_id, run, rank, rec)
        gather(job_id, run, world, records, self._power_reports)  # for the service's loop
        prune(job_id, run, world)
        self._nodes_of.pop((job_id, run), None)  # a log read meanwhile cached it from the KV

    def power_reports(self) -> list[RunPowerReport]:
        """The runs released since the last call: their ranks' energy and power notes."""
        return [self._power_reports.pop(0) for _ in range(len(self._power_reports))]

    def _leave_group(self, job_id: str, run: int) -> None:
        """The run no longer uses its group; the last run to leave a group removes it."""
        with self._users_lock:
            group = next((g for g, u in self._users.items() if (job_id, run) in u),
                         pg_name(job_id, run))
            users = self._users.get(group, set())
            users.discard((job_id, run))
            if users:
                return  # a run sharing its GPUs still runs on them
            self._users.pop(group, None)
        with contextlib.suppress(ValueError):
            remove_placement_group(get_placement_group(group))

    def host_capacity(self) -> dict[str, tuple[float, float]]:
        """Each alive Ray node's CPUs and memory, as ``ray.nodes()`` reports them."""
        return node_hosts(ray.nodes())

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
