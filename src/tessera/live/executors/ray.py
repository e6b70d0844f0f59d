"""The Ray executor: one placement group per gang, one named detached actor per rank.

For run ``r`` of job ``j`` on ``g`` GPUs of flavor ``F``:

1. a **placement group** ``tessera-pg:j:r`` reserves one bundle per node of the placement,
   ``{"gpu_flavor:F": count}``; STRICT_PACK when the job requires locality, else PACK (Ray may
   then spread the bundles). On a machine without GPUs the embedded Ray cluster is started
   with these custom resources per flavor, so a laptop pretends to be a mixed cluster; on a
   real cluster, nodes advertise them with ``ray start --resources``.
2. ``g`` **actors** ``tessera:j:r:<rank>`` (detached, so they outlive the service) each take one
   GPU of their bundle and run the job's command as a subprocess with the rendezvous
   environment; rank 0's node address and a free port on it are the ``MASTER_ADDR/PORT``.
3. ``status`` polls the actors: a non-zero exit or a dead actor is a failure; ``stop`` sends
   SIGTERM and SIGKILL after the grace period; ``release`` kills the actors and removes the
   placement group.

Every name is derived from ``(job, run)``, so ``launch`` is idempotent: after a restart it
finds the placement group and actors that exist and only creates what is missing, and an actor
starts its command at most once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import (
    get_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tessera.live.executors import contain
from tessera.live.executors.base import (
    LaunchSpec,
    RunStatus,
    free_port,
    launch_env,
    prepare_checkpoint_dir,
    rank_envs,
)
from tessera.model.cluster import ClusterSpec

NAMESPACE = "tessera"
READY_TIMEOUT_S = 15.0


def flavor_resource(flavor: str) -> str:
    """The Ray custom resource that counts GPUs of ``flavor``."""
    return f"gpu_flavor:{flavor}"


def flavor_resources(cluster: ClusterSpec) -> dict[str, float]:
    """Declared resources for an embedded Ray cluster that pretends to hold ``cluster``."""
    return {flavor_resource(f.short): float(n) for f, n in cluster.gpus_by_flavor().items()}


@ray.remote(num_cpus=0, max_restarts=0)
class RankWorker:
    """One rank: runs the command once, contained, reports its exit, forwards stop signals.

    The command runs under a guardian (:mod:`~tessera.live.executors.contain`), exactly as under
    the local runner: its whole process tree stays below the guardian, the guardian kills the
    tree when this actor's process dies (even by SIGKILL, e.g. ``ray.kill``), when the command
    ends, or when the run exceeds ``TESSERA_MAX_RUNTIME_S``; its pids are recorded next to the
    rank's log. Before starting, the actor kills what earlier runs of the job left on this node
    (their records), so no attempt starts beside an earlier one. The environment is
    :func:`~tessera.live.executors.base.launch_env` of what the executor passes: a clean base,
    never the Ray worker's own environment; ``TESSERA_RUN_AS`` names the user to run as.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_ticks = 0
        self.status_path = ""
        self.failed = ""  # why the guardian itself could not start
        self.port: int | None = None
        self.stopped = False

    def rendezvous(self) -> tuple[str, int]:
        if self.port is None:
            self.port = free_port("0.0.0.0")
        return ray.util.get_node_ip_address(), self.port

    def start(self, argv: list[str], env: dict[str, str], log_path: str) -> int:
        """Start the command once (later calls return the same pid); ``-1``: it could not."""
        if self.proc is not None or self.failed:
            return self.proc.pid if self.proc is not None else -1
        full_env, user = launch_env(env)
        log = Path(log_path)
        run_dir, rank = log.parent, env.get("RANK", "0")
        self.status_path = str(run_dir / f"rank-{rank}.status")
        run = int(env.get("TESSERA_RUN", "1"))
        contain.sweep([str(d) for d in run_dir.parent.glob("*")
                       if d.name.isdigit() and int(d.name) < run])
        try:
            prepare_checkpoint_dir(env.get("TESSERA_CHECKPOINT_DIR", ""), user,
                                   run_dir.parent.parent.parent / "checkpoints")
            with open(log, "ab") as out:
                self.proc = contain.start_guardian({
                    "argv": argv, "env": full_env, "user": user,
                    "max_runtime_s": env.get("TESSERA_MAX_RUNTIME_S"),
                    "grace_s": env.get("TESSERA_GRACE_S", "10"), "status": self.status_path,
                    "record": str(run_dir / f"rank-{rank}.pids")}, out.fileno())
        except (OSError, ValueError, KeyError) as e:
            self.failed = contain.exec_failure(e)
            return -1
        self.start_ticks = contain.start_time(self.proc.pid) or 0
        return self.proc.pid

    def poll(self) -> tuple[str, int | None, bool]:
        if self.failed:
            return "exited", contain.EXEC_FAILED_RC, False
        if self.proc is None:
            return "absent", None, False
        rc = self.proc.poll()
        return ("running", None, False) if rc is None else ("exited", rc, self.stopped)

    def outcome(self) -> tuple[str, bool]:
        """Why the command ended, as its guardian saw it: ``(detail, timed_out)``; ``detail``
        is ``exec failed: ...`` for a command that could not start, ``exceeded
        max_runtime_s=...`` for one stopped at its limit, else empty."""
        if self.failed:
            return self.failed, False
        got = contain.read_status(self.status_path) if self.status_path else {}
        return str(got.get("detail", "")), bool(got.get("timed_out"))

    def stop(self, grace_s: float) -> None:
        """SIGTERM the whole tree (through the guardian); kill it after ``grace_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        threading.Timer(grace_s, self.kill).start()

    def kill(self) -> None:
        """Kill the guardian and every process of the command; return once they are gone."""
        if self.proc is not None and self.proc.poll() is None:
            contain.kill_and_wait({self.proc.pid: self.start_ticks})
            self.proc.poll()


def _actor_name(job_id: str, run: int, rank: int) -> str:
    return f"tessera:{job_id}:{run}:{rank}"


class RayExecutor:
    """Runs gangs on a Ray cluster (embedded, or an existing one at ``address``)."""

    name = "ray"

    def __init__(self, cluster: ClusterSpec, address: str | None, runs_dir: Path,
                 grace_s: float = 10.0, num_cpus: int = 2) -> None:
        self.runs_dir = runs_dir
        self.grace_s = grace_s
        if not ray.is_initialized():
            if address:
                ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, num_gpus=0, resources=flavor_resources(cluster),
                         namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
        self._actors: dict[tuple[str, int], list[Any]] = {}

    def launch(self, spec: LaunchSpec) -> None:
        keys = [flavor_resource(f) for _n, _c, f in spec.placement.parts()]
        pg_name = f"tessera-pg:{spec.job_id}:{spec.run}"
        try:
            pg = get_placement_group(pg_name)
        except ValueError:
            bundles = [{key: float(c)} for key, (_n, c) in
                       zip(keys, spec.placement.gpus_by_node, strict=True)]
            strategy = "STRICT_PACK" if spec.requires_locality else "PACK"
            pg = placement_group(bundles, strategy=strategy, name=pg_name, lifetime="detached")
        ready, _ = ray.wait([pg.ready()], timeout=READY_TIMEOUT_S)
        if not ready:
            remove_placement_group(pg)
            raise RuntimeError(f"placement group for {spec.placement.describe()} not ready "
                               f"after {READY_TIMEOUT_S:g} s "
                               f"(Ray lacks {', '.join(sorted(set(keys)))}?)")
        actors = []
        rank = 0
        for bundle, (_node, count) in enumerate(spec.placement.gpus_by_node):
            for _ in range(count):
                actors.append(RankWorker.options(  # type: ignore[attr-defined]
                    name=_actor_name(spec.job_id, spec.run, rank), namespace=NAMESPACE,
                    lifetime="detached", get_if_exists=True, resources={keys[bundle]: 1.0},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=bundle)).remote())
                rank += 1
        ip, port = ray.get(actors[0].rendezvous.remote())
        run_dir = self.runs_dir / spec.job_id / str(spec.run)
        run_dir.mkdir(parents=True, exist_ok=True)
        Path(spec.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        envs = rank_envs(spec, ip, port)
        ray.get([a.start.remote(list(spec.argv), env, str(run_dir / f"rank-{i}.log"))
                 for i, (a, env) in enumerate(zip(actors, envs, strict=True))])
        self._actors[(spec.job_id, spec.run)] = actors

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
        actors = self._find(job_id, run)
        if not actors:
            return RunStatus("absent")
        try:
            polls = ray.get([a.poll.remote() for a in actors], timeout=10)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            self.stop(job_id, run, 0.0)
            return RunStatus("lost", detail=f"worker actor died: {type(e).__name__}")
        if any(state == "absent" for state, _rc, _s in polls):
            return RunStatus("absent")
        failed = [(i, rc) for i, (state, rc, _s) in enumerate(polls) if state == "exited" and rc]
        stopped = any(s for _st, _rc, s in polls)
        if failed and not stopped:
            self.stop(job_id, run, self.grace_s)  # the gang fails together
            i, rc = failed[0]
            return RunStatus("exited", rc, False, f"rank {i} exited with {rc}")
        if all(state == "exited" for state, _rc, _s in polls):
            rc = next((r for _st, r, _s in polls if r), 0) or 0
            return RunStatus("exited", rc, stopped)
        return RunStatus("running")

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        for a in self._find(job_id, run):
            with contextlib.suppress(ray.exceptions.RayActorError):
                a.stop.remote(grace_s)
        return True

    def release(self, job_id: str, run: int) -> None:
        for a in self._find(job_id, run):
            with contextlib.suppress(Exception):
                ray.get(a.kill.remote(), timeout=5)
            with contextlib.suppress(Exception):
                ray.kill(a)
        self._actors.pop((job_id, run), None)
        with contextlib.suppress(ValueError):
            remove_placement_group(get_placement_group(f"tessera-pg:{job_id}:{run}"))

    def close(self) -> None:
        """Disconnect; detached actors keep running and are adopted on the next start."""
        self._actors.clear()
        ray.shutdown()
