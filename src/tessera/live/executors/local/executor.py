"""The local executor: every run is a runner process (``../runner.py``) and its ranks, no Ray.

Each run gets a directory ``<runs_dir>/<job_id>/<run>/`` holding what a restarted service needs
to know, in files written atomically:

* ``launch.json`` -- what to run (written by the service before the runner starts);
* ``marker`` -- the runner's pid, created with ``link`` so only one runner ever claims a run;
* ``ranks.json`` -- the pids of the ranks' guardians (tests kill one to simulate a worker
  crash); ``rank-<i>.status`` -- what each guardian saw its command do;
* ``runner.pids``, ``rank-<i>.pids`` -- every process of the run (pid and start time), recorded
  as the runner and the guardians see them (:mod:`~tessera.live.executors.contain`);
* ``exit.json`` -- the exit status, written by the runner when the last rank ended;
* ``rank-<i>.log`` -- the rank's output, at most ``logs.cap_bytes`` of it.

The tree is private and bounded (:mod:`~tessera.live.executors.logs`): directories ``0700``,
files ``0600`` from their first byte, and :meth:`LocalExecutor.remove_expired` removes a
finished run's directory ``logs.retention_s`` after it ended (the service calls it now and
then); a run whose runner is alive, or that this process is starting, is never touched.

**No attempt starts beside an earlier one.** Before it starts run ``n`` of a job, ``launch``
kills every recorded process of the job's runs ``1..n-1`` that is still alive, with its
descendants, and waits until they are gone (:func:`~tessera.live.executors.contain.sweep`).
The guardians already kill their trees when a runner dies; the sweep covers a guardian that
was itself killed, and works from the files alone, so it holds across service restarts.

**Users.** With ``run_as``, the runner and the guardians stay with the service's user (root)
and only the command runs as that user. The default checkpoint directory
(``<state>/checkpoints/<job id>``) is created by the service and given to that user; a
``checkpoint_dir`` the job names elsewhere is created by the job's user itself, so a job can
never make root create or hand over a directory of its choosing. The run directory stays the
service's: logs are opened by the runner and handed to the ranks as open files, and the
control files (marker, exit status) cannot be forged by the job.

**Shared GPUs.** A run that joins another run's GPUs (``LaunchSpec.share_with``, a packing
policy's co-location) gets, rank by rank, the ``CUDA_VISIBLE_DEVICES`` that run's ranks got
(read from its ``launch.json``), so both use the same devices; how they share them (MPS or
time-slicing) is :func:`~tessera.live.executors.gpu_sharing.mechanism`'s answer for this machine.

So ``status`` is read from the files, not from the service's memory: exit file → exited;
marker whose pid is alive and is our runner → running; marker without a live runner and
without an exit file → lost; no marker → absent (or still starting, if this process just
spawned it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tessera.live.executors import contain, host_limits
from tessera.live.executors.base import (
    Executor,
    LaunchSpec,
    LogChunk,
    RunStatus,
    base_env,
    free_port,
    launch_env,
    prepare_checkpoint_dir,
    rank_envs,
    read_log_file,
)
from tessera.live.executors.gpu_sharing import Mechanism, mechanism
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings, private_run_dir, remove_expired
from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin, ExecutorSite
from tessera.live.nvtopo import NvTopology, describe, detect

#: The runner script: beside ``contain.py``, which it imports as a sibling (run with ``-S``).
RUNNER = Path(__file__).parents[1] / "runner.py"
#: How long ``launch`` waits for an earlier run's killed processes to disappear.
SWEEP_TIMEOUT_S = 5.0


class LocalExecutor:
    """Runs jobs as local subprocesses; see the module docstring."""

    name = "local"
    #: Two runs may share GPUs: a co-located run gets its host run's devices.
    shares_gpus = True

    def __init__(self, runs_dir: Path, grace_s: float = 10.0,
                 checkpoints_dir: Path | None = None, logs: LogSettings = DEFAULT_LOGS,
                 cgroup_root: str = host_limits.CGROUP_ROOT,
                 own_cgroup: str = host_limits.PROC_SELF_CGROUP) -> None:
        self.runs_dir = runs_dir
        self.grace_s = grace_s
        self.logs = logs
        self.checkpoints_dir = checkpoints_dir or runs_dir.parent / "checkpoints"
        self._children: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        # Where the runs' cgroups go (cgroup v2 only; see host_limits.cgroup_v2_base): the
        # hierarchy's mount and the file naming the service's cgroup, injectable for tests.
        self.cgroup_root = cgroup_root
        self.own_cgroup = own_cgroup
        # The host's NVLink domains (``nvidia-smi topo -m``), reported once at start.
        self.nvlink: NvTopology | None = detect()
        logging.getLogger("tessera.live").info(
            "NVLink: %s", describe(self.nvlink, socket.gethostname()))
        self.recover_cgroups()

    def run_dir(self, job_id: str, run: int) -> Path:
        return self.runs_dir / job_id / str(run)

    def launch(self, spec: LaunchSpec) -> None:
        """Start the run unless some runner already claimed it (idempotent).

        Raises:
            RuntimeError: processes of an earlier run of the job survived being killed.
        """
        d = private_run_dir(self.runs_dir, spec.job_id, spec.run)
        if (d / "marker").exists() or (d / "exit.json").exists():
            return
        earlier = [str(p) for p in d.parent.iterdir() if p.name.isdigit() and
                   int(p.name) < spec.run]
        left = contain.sweep(earlier, SWEEP_TIMEOUT_S)
        if left:
            raise RuntimeError(f"processes {sorted(left)} of an earlier run of {spec.job_id} "
                               f"are still alive {SWEEP_TIMEOUT_S:g} s after SIGKILL")
        ranks = [launch_env(e, spec.visible_devices)[0]
                 for e in rank_envs(replace(spec, grace_s=self.grace_s), "127.0.0.1",
                                    free_port())]
        if spec.share_with is not None:
            _same_devices(ranks, self.run_dir(*spec.share_with))
        launch = {"argv": list(spec.argv), "grace_s": self.grace_s, "ranks": ranks,
                  "user": spec.run_as, "max_runtime_s": spec.max_runtime_s,
                  "log_cap_bytes": self.logs.cap_bytes,
                  **self._host_limits(spec, len(ranks))}
        tmp = d / "launch.json.tmp"
        tmp.unlink(missing_ok=True)
        with os.fdopen(contain.private_file(str(tmp)), "w") as f:
            f.write(json.dumps(launch))
        tmp.replace(d / "launch.json")
        prepare_checkpoint_dir(spec.checkpoint_dir, spec.run_as, self.checkpoints_dir)
        append = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        with os.fdopen(contain.private_file(str(d / "runner.log"), append), "ab") as log:
            self._children[(spec.job_id, spec.run)] = subprocess.Popen(
                [sys.executable, "-S", str(RUNNER), str(d)], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=base_env())

    def _host_limits(self, spec: LaunchSpec, ranks: int) -> dict[str, object]:
        """The run's CPU ids and memory per rank, and the line for its events (empty when it
        holds no host resources). Every node of a local run is this machine, so its amounts
        are summed; the CPU ids are the executor's choice (:func:`host_limits.choose_cpus`):
        free ones first, avoiding the CPUs of the runs still going."""
        if not spec.host_by_node:
            return {}
        cpus = sum(c for _n, c, _m in spec.host_by_node)
        mem_gib = sum(m for _n, _c, m in spec.host_by_node)
        ids = host_limits.choose_cpus(cpus, host_limits.allowed_cpus(), self._busy_cpus())
        base = host_limits.cgroup_v2_base(self.cgroup_root, self.own_cgroup)
        how = "cgroup" if base is not None else "affinity"
        cgroup = f"{base}/{spec.job_id}-{spec.run}" if base is not None else None
        limits = host_limits.rank_limits(ids, mem_gib, ranks, how, cgroup)
        return {"host": limits, "host_note": host_limits.describe(limits, cpus, mem_gib)}

    def _busy_cpus(self) -> set[int]:
        """The CPU ids pinned by runs that have not exited (read from their launch records,
        so a restarted service sees them too)."""
        busy: set[int] = set()
        for launch in self.runs_dir.glob("*/*/launch.json"):
            if (launch.parent / "exit.json").exists():
                continue
            with contextlib.suppress(OSError, ValueError):
                for lim in json.loads(launch.read_text()).get("host") or ():
                    busy.update(int(c) for c in lim.get("cpus", ()))
        return busy

    def host_capacity(self) -> dict[str, tuple[float, float]]:
        """This machine's CPUs (those the service may run on, ``os.sched_getaffinity``) and
        memory (``/proc/meminfo``): every run of the local executor shares them."""
        return {"local": (float(len(host_limits.allowed_cpus())), host_limits.host_memory_gib())}

    def host_enforcement(self, job_id: str, run: int) -> str | None:
        """How the run's CPUs and memory are enforced (its launch record's line)."""
        try:
            note = json.loads((self.run_dir(job_id, run) / "launch.json").read_text()).get(
                "host_note")
        except (OSError, ValueError):
            return None
        return str(note) if note else None

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism:
        """How a run joining ``host``'s GPUs shares them (every run is on this machine)."""
        return mechanism()

    def status(self, job_id: str, run: int) -> RunStatus:
        d = self.run_dir(job_id, run)
        child = self._children.get((job_id, run))
        child_alive = child is not None and child.poll() is None
        done = _read_exit(d)
        if done is not None:
            self._forget(job_id, run)
            return done
        pid = _marker_pid(d)
        if pid is not None and _is_runner(pid, d):
            return RunStatus("running")
        done = _read_exit(d)  # it may have finished between the two looks
        if done is not None:
            self._forget(job_id, run)
            return done
        if pid is not None:
            return RunStatus("lost", detail=f"runner {pid} vanished without an exit status")
        if child_alive:
            return RunStatus("running", detail="starting")
        if child is not None:
            log = (d / "runner.log").read_text(errors="replace")[-300:] if d.exists() else ""
            return RunStatus("lost", detail=f"runner failed to start: {log.strip()}")
        return RunStatus("absent")

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        """SIGTERM the runner; it forwards to the ranks and kills them after its grace.

        Returns ``False`` while a runner this process spawned has not claimed its run yet
        (its signal handler may not be installed): the caller asks again later.
        """
        d = self.run_dir(job_id, run)
        pid = _marker_pid(d)
        if pid is not None and _is_runner(pid, d):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            return True
        child = self._children.get((job_id, run))
        return pid is not None or child is None or child.poll() is not None

    def release(self, job_id: str, run: int) -> None:
        self._forget(job_id, run)

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> LogChunk | None:
        """The rank's log file in the run directory."""
        return read_log_file(str(self.run_dir(job_id, run) / f"rank-{rank}.log"), offset,
                             limit_bytes)

    def remove_expired(self, now_s: float) -> int:
        """Remove the directories of runs that ended more than ``logs.retention_s`` before
        ``now_s`` (never one whose runner is alive or that this process is starting), and the
        cgroups of ended runs; returns how many run directories."""
        self.recover_cgroups()
        return len(remove_expired(self.runs_dir, self.logs.retention_s, now_s, self._running))

    def _running(self, job_id: str, run: int) -> bool:
        """Whether the run may still have processes: no exit record, and its runner alive
        or being started by this process."""
        d = self.run_dir(job_id, run)
        if (d / "exit.json").exists():
            return False
        child = self._children.get((job_id, run))
        pid = _marker_pid(d)
        return (child is not None and child.poll() is None) or \
            (pid is not None and _is_runner(pid, d))

    def remove_cgroups(self, job_id: str, run: int) -> list[str]:
        """Remove the rank cgroups of an ended run whose processes are all gone (each rank's
        guardian made one, :func:`host_limits.enter_cgroup`); returns those still left (a
        process in them). Called when the run is seen exited; a run's cgroup left then (the
        kernel still counting a process) is taken by :meth:`recover_cgroups` later."""
        base = host_limits.cgroup_v2_base(self.cgroup_root, self.own_cgroup)
        if base is None or self._running(job_id, run):
            return []
        try:
            launch = json.loads((self.run_dir(job_id, run) / "launch.json").read_text())
        except (OSError, ValueError):
            return []
        return [c for c in host_limits.cgroups_of(launch)
                if not host_limits.remove_cgroup(c, base)]

    def recover_cgroups(self) -> list[str]:
        """Remove every rank cgroup under the service's (``<job>-<run>-<rank>``) whose run is
        not running and whose processes are all gone: those a crash or a restart left behind,
        and those :meth:`remove_cgroups` found still busy. Called at start and with
        :meth:`remove_expired`; returns the paths removed. A cgroup of a run that is starting
        or running is never touched (its guardian may be between making and joining it)."""
        base = host_limits.cgroup_v2_base(self.cgroup_root, self.own_cgroup)
        if base is None or not os.path.isdir(base):
            return []
        removed: list[str] = []
        with os.scandir(base) as entries:
            names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        for name in names:
            parts = name.rsplit("-", 2)
            if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
                continue  # (not a rank cgroup of this executor's naming)
            if self._running(parts[0], int(parts[1])):
                continue
            path = os.path.join(base, name)
            if host_limits.remove_cgroup(path, base):
                removed.append(path)
        if removed:
            logging.getLogger("tessera.live").info(
                "removed %d cgroup(s) of ended runs under %s", len(removed), base)
        return removed

    def close(self) -> None:
        """Forget the runners (they keep running; a restarted service adopts them)."""
        for p in self._children.values():
            p.poll()
        self._children.clear()

    def _forget(self, job_id: str, run: int) -> None:
        """The run ended (or was released): stop tracking its runner, and remove its rank
        cgroups whose processes are gone."""
        self.remove_cgroups(job_id, run)
        child = self._children.pop((job_id, run), None)
        if child is not None:
            try:
                child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self._children[(job_id, run)] = child


def _same_devices(ranks: list[dict[str, str]], host_dir: Path) -> None:
    """Give each rank the ``CUDA_VISIBLE_DEVICES`` of the host run's rank of the same index.

    Raises:
        RuntimeError: the host run has no launch record, or fewer ranks.
    """
    try:
        host = json.loads((host_dir / "launch.json").read_text())["ranks"]
    except FileNotFoundError:
        raise RuntimeError(f"the run it shares GPUs with has no launch record in {host_dir}") \
            from None
    if len(host) != len(ranks):
        raise RuntimeError(f"the run it shares GPUs with has {len(host)} ranks, this one "
                           f"{len(ranks)}")
    for env, mate in zip(ranks, host, strict=True):
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if "CUDA_VISIBLE_DEVICES" in mate:
            env["CUDA_VISIBLE_DEVICES"] = mate["CUDA_VISIBLE_DEVICES"]


def _read_exit(d: Path) -> RunStatus | None:
    try:
        data = json.loads((d / "exit.json").read_text())
    except FileNotFoundError:
        return None
    ranks = data.get("ranks", [])
    rc = int(data["rc"])
    bad = [i for i, c in enumerate(ranks) if c == rc != 0]
    detail = data.get("detail") or (f"rank {bad[0]} exited with {rc}" if bad else "")
    return RunStatus("exited", rc, bool(data["stopped"]), detail, bool(data.get("timed_out")))


def _marker_pid(d: Path) -> int | None:
    try:
        return int((d / "marker").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _is_runner(pid: int, d: Path) -> bool:
    """True when ``pid`` is alive (not a zombie) and is the runner of run directory ``d``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and str(d).encode() in cmdline


class LocalOptions(BaseModel):
    """The local executor's options: none (its runs' directories come from the layout)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@EXECUTORS.register("local", "Subprocesses on this machine (no Ray).")
class LocalPlugin(ExecutorPlugin[LocalOptions]):
    """``--executor local``: :class:`LocalExecutor`."""

    options_model = LocalOptions
    shares_gpus = LocalExecutor.shares_gpus

    def build(self, options: LocalOptions, site: ExecutorSite) -> Executor:
        return LocalExecutor(site.runs_dir, grace_s=site.grace_s,
                             checkpoints_dir=site.checkpoints_dir, logs=site.logs)
