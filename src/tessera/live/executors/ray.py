"""The Ray executor: one placement group per gang, one named detached actor per rank.

For run ``r`` of job ``j`` on ``g`` GPUs:

1. ``launch`` writes a run record to Ray's KV and creates a **placement group**
   ``tessera-pg:j:r``, one bundle ``{"GPU": n, <flavor mark>}`` per node of the placement
   (marks: :mod:`~tessera.live.executors.ray_cluster`), STRICT_PACK for jobs that require
   locality, else PACK, and returns at once.
2. ``status`` moves the launch on without blocking, one step per call while the run is
   ``starting``: the group is placed → ``g`` **actors** ``tessera:j:r:<rank>`` (detached, one
   ``GPU`` each, so Ray sets ``CUDA_VISIBLE_DEVICES`` and the rank's process inherits it) →
   rank 0's node address and a free port on it become ``MASTER_ADDR/PORT`` → every rank starts
   its command, logging to a file on its own node → ``running``. A group that no alive node
   could ever hold is ``unplaceable`` at once, one still pending after ``place_timeout_s`` is
   ``unplaceable`` then; either way the group is removed and ``detail`` names what is missing.
3. Each actor writes an **exit record** (status, stop flag, the tail of its log) to Ray's KV
   when its command ends, so the status of a run that ended while the service was down -- or
   whose actor died afterwards -- is read from the cluster, not from the service's memory.
4. ``stop`` sends SIGTERM and SIGKILL after the grace period; ``release`` kills the actors and
   removes the placement group; ``read_log`` asks the rank's actor for its log (the exit
   record's tail once the actor is gone), so no shared filesystem is needed.

Every name is derived from ``(job, run)``, so ``launch`` is idempotent: after a restart it finds
what exists and creates only what is missing; an actor starts its command at most once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tessera.live.executors.base import (
    CHECKPOINTS_ROOT_VAR,
    LaunchSpec,
    LogChunk,
    RunStatus,
    rank_envs,
)
from tessera.live.executors.ray_cluster import (
    EmbeddedHead,
    FlavorResource,
    connect,
    flavor_resource,
    pretend_resources,
    shared_accelerator_types,
    unplaceable_reason,
)
from tessera.live.executors.ray_records import (
    NAMESPACE,
    exit_key,
    log_from_record,
    put,
    run_key,
    status_from_records,
)
from tessera.live.executors.ray_worker import RankWorker
from tessera.model.cluster import ClusterSpec

PLACE_TIMEOUT_S = 30.0
NODES_TTL_S = 2.0
log = logging.getLogger("tessera.live")


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _actor_name(job_id: str, run: int, rank: int) -> str:
    return f"tessera:{job_id}:{run}:{rank}"


@dataclass
class _Launch:
    """A run between ``launch`` and ``running``: what has been asked of Ray so far."""

    spec: LaunchSpec
    pg: PlacementGroup
    bundles: list[dict[str, float]]
    since_s: float
    actors: list[Any] = field(default_factory=list)
    rendezvous: Any = None
    started: list[Any] = field(default_factory=list)
    withdrawn: str = ""


class RayExecutor:
    """Runs gangs on a Ray cluster: an existing one at ``address``, else the embedded head.

    ``address``: ``HOST:PORT`` of a running head, or ``None`` for the embedded head of
    ``state_dir`` (default ``runs_dir``'s parent), which pretends to hold ``cluster``'s GPUs.
    ``flavor_resource``: how a rank asks for its flavor (:mod:`ray_cluster`).
    """

    name = "ray"

    def __init__(self, cluster: ClusterSpec, address: str | None, runs_dir: Path,
                 grace_s: float = 10.0, num_cpus: int = 2,
                 flavor_resource: FlavorResource = "accelerator_type",
                 state_dir: Path | None = None,
                 place_timeout_s: float = PLACE_TIMEOUT_S) -> None:
        self.runs_dir = runs_dir
        self.grace_s = grace_s
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
            connect(address, NAMESPACE)
        self.address = address
        self.runs_lost_with_cluster = self.head is not None and self.head.restarted
        self._actors: dict[tuple[str, int], list[Any]] = {}
        self._launching: dict[tuple[str, int], _Launch] = {}
        self._nodes: list[dict[str, float]] = []
        self._nodes_at_s = float("-inf")

    # -- launching ----------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        """Ask Ray for the run's placement group and return (see the module docstring)."""
        key = (spec.job_id, spec.run)
        if key in self._launching:
            return
        bundles: list[dict[str, float]] = []
        for _node, count, flavor in spec.placement.parts():
            res, share = flavor_resource(flavor, self.kind)
            bundles.append({"GPU": float(count), res: share * count})
        put(run_key(*key), {"world": spec.placement.num_gpus})
        pg_name = f"tessera-pg:{spec.job_id}:{spec.run}"
        try:
            pg = get_placement_group(pg_name)
        except ValueError:
            strategy = "STRICT_PACK" if spec.requires_locality else "PACK"
            pg = placement_group(bundles, strategy=strategy, name=pg_name, lifetime="detached")
        self._launching[key] = _Launch(spec, pg, bundles, time.monotonic())

    def _advance(self, ln: _Launch) -> RunStatus:
        """One non-blocking step of a launch; returns where it stands."""
        spec = ln.spec
        key = (spec.job_id, spec.run)
        if not ln.actors:
            ready, _ = ray.wait([ln.pg.ready()], timeout=0)
            if not ready:
                why = unplaceable_reason(ln.bundles, self._node_totals())
                if why is None and time.monotonic() - ln.since_s > self.place_timeout_s:
                    why = (f"placement group {spec.placement.describe()} not placed after "
                           f"{self.place_timeout_s:g} s: {ln.bundles} exceed what Ray has free")
                if why is not None:
                    self.release(*key)
                    return RunStatus("unplaceable", detail=why)
                return RunStatus("starting", detail="waiting for the placement group")
            ln.actors = self._create_actors(ln)
            ln.rendezvous = ln.actors[0].rendezvous.remote()
        if not ln.started:
            ready, _ = ray.wait([ln.rendezvous], timeout=0)
            if not ready:
                return RunStatus("starting", detail="starting the rank actors")
            try:
                ip, port = ray.get(ln.rendezvous)
            except ray.exceptions.RayError as e:
                self.release(*key)
                return RunStatus("lost", detail=f"rank 0's actor failed: {_first_line(e)}")
            root = {CHECKPOINTS_ROOT_VAR: str(self.runs_dir.parent / "checkpoints")}
            for rank, (actor, env) in enumerate(zip(ln.actors, rank_envs(spec, ip, port),
                                                    strict=True)):
                path = actor.prepare_log.remote(spec.job_id, spec.run, rank)
                ln.started.append(actor.start.remote(list(spec.argv), {**env, **root}, path))
                actor.watch.remote(exit_key(spec.job_id, spec.run, rank))
        ready, _ = ray.wait(ln.started, num_returns=len(ln.started), timeout=0)
        if len(ready) < len(ln.started):
            return RunStatus("starting", detail="starting the ranks' commands")
        del self._launching[key]
        self._actors[key] = ln.actors
        try:
            ray.get(ln.started)
        except ray.exceptions.RayError as e:
            self.stop(*key, 0.0)
            return RunStatus("lost", detail=f"a rank could not start: {_first_line(e)}")
        return RunStatus("running")

    def _node_totals(self) -> list[dict[str, float]]:
        """Alive nodes' total resources, asked of Ray at most every :data:`NODES_TTL_S`."""
        now_s = time.monotonic()
        if now_s - self._nodes_at_s > NODES_TTL_S:
            self._nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
            self._nodes_at_s = now_s
        return self._nodes

    def _create_actors(self, ln: _Launch) -> list[Any]:
        actors = []
        rank = 0
        for bundle, (_node, count, flavor) in enumerate(ln.spec.placement.parts()):
            res, share = flavor_resource(flavor, self.kind)
            for _ in range(count):
                actors.append(RankWorker.options(  # type: ignore[attr-defined]
                    name=_actor_name(ln.spec.job_id, ln.spec.run, rank), namespace=NAMESPACE,
                    lifetime="detached", get_if_exists=True, num_gpus=1,
                    resources={res: share},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        ln.pg, placement_group_bundle_index=bundle)).remote())
                rank += 1
        return actors

    # -- observing -----------------------------------------------------------------------------

    def _find(self, job_id: str, run: int) -> list[Any]:
        known = self._actors.get((job_id, run))
        if known is not None:
            return known
        found: list[Any] = []
        while True:
            try:
                found.append(ray.get_actor(_actor_name(job_id, run, len(found)), NAMESPACE))
            except ValueError:
                break
        if found:
            self._actors[(job_id, run)] = found
        return found

    def status(self, job_id: str, run: int) -> RunStatus:
        ln = self._launching.get((job_id, run))
        if ln is not None:
            if ln.withdrawn:
                del self._launching[(job_id, run)]
                return RunStatus("exited", None, True, ln.withdrawn)
            return self._advance(ln)
        actors = self._find(job_id, run)
        if not actors:
            return status_from_records(job_id, run) or RunStatus("absent")
        try:
            polls = ray.get([a.poll.remote() for a in actors], timeout=10)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            recorded = status_from_records(job_id, run)
            if recorded is not None:
                return recorded
            self.stop(job_id, run, 0.0)
            return RunStatus("lost", detail=f"worker actor died: {type(e).__name__}")
        if any(state == "absent" for state, _rc, _s in polls):
            return RunStatus("absent")
        failed = [(i, rc) for i, (state, rc, _s) in enumerate(polls) if state == "exited" and rc]
        stopped = any(s for _st, _rc, s in polls)
        if failed and not stopped:
            self.stop(job_id, run, self.grace_s)  # the gang fails together
            i, rc = failed[0]
            detail = f"rank {i} exited with {rc}"
            why, timed_out = "", False
            with contextlib.suppress(ray.exceptions.RayError):  # its guardian's verdict
                why, timed_out = ray.get(actors[i].outcome.remote(), timeout=10)
            return RunStatus("exited", rc, False, f"{detail}: {why}" if why else detail,
                             timed_out)
        if all(state == "exited" for state, _rc, _s in polls):
            rc = next((r for _st, r, _s in polls if r), 0) or 0
            return RunStatus("exited", rc, stopped)
        return RunStatus("running")

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> LogChunk | None:
        """From the rank's actor while it lives, else from its exit record's tail."""
        actors = self._find(job_id, run)
        if rank < len(actors):
            with contextlib.suppress(ray.exceptions.RayError):
                got = ray.get(actors[rank].read_log.remote(offset, limit_bytes), timeout=10)
                if got is not None:
                    return got
        return log_from_record(job_id, run, rank, offset, limit_bytes)

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        ln = self._launching.get((job_id, run))
        if ln is not None and not ln.started:  # nothing runs yet: withdraw the launch
            self._teardown(job_id, run)
            ln.withdrawn = "stopped before it started"
            self._launching[(job_id, run)] = ln
            return True
        if ln is not None:  # commands are being started: stop them once they run
            return False
        for a in self._find(job_id, run):
            with contextlib.suppress(ray.exceptions.RayActorError):
                a.stop.remote(grace_s)
        return True

    def release(self, job_id: str, run: int) -> None:
        self._launching.pop((job_id, run), None)
        self._teardown(job_id, run)

    def _teardown(self, job_id: str, run: int) -> None:
        for a in self._find(job_id, run):
            with contextlib.suppress(Exception):
                ray.get(a.kill.remote(), timeout=5)
            with contextlib.suppress(Exception):
                ray.kill(a)
        self._actors.pop((job_id, run), None)
        with contextlib.suppress(ValueError):
            remove_placement_group(get_placement_group(f"tessera-pg:{job_id}:{run}"))

    def close(self) -> None:
        """Disconnect; detached actors keep running and are adopted on the next start. The
        embedded head stops too when no rank actor is left on it, else it keeps the runs."""
        self._actors.clear()
        alive = [n for n in ray.util.list_named_actors() if n.startswith("tessera:")] \
            if ray.is_initialized() else []
        ray.shutdown()
        if self.head is None:
            return
        if alive:
            log.info("embedded Ray at %s keeps %d rank actor(s) running; the next "
                     "`tessera serve` on this state dir adopts them", self.address, len(alive))
        else:
            self.head.stop()
