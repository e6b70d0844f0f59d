"""The Ray rank host: one long-lived actor per node that starts and watches the ranks there.

Starting a Ray actor means starting a Python worker process (about a second of CPU on a small
machine), so an actor per rank bounds how fast gangs start. The job's command never runs inside
the actor anyway -- it runs under a guardian, a separate process tree
(:mod:`tessera.live.executors.contain`) -- so one warm actor per node can start, watch and stop
every rank placed there, run after run. :class:`RankHost` is that actor: named, detached,
pinned to its node, holding no resources itself (the run's placement group holds the GPUs; the
executor passes each rank the GPU ids Ray assigned to its bundle, see
:mod:`tessera.live.executors.ray.hosts`).

A rank is known by its key ``(job_id, run, rank)``. For each one the host

* logs it to ``<runs dir>/<job>/<run>/rank-<i>.log`` **on this node**, the service's runs dir
  passed with each start (:class:`~tessera.live.executors.logs.RankLogs`; no filesystem is
  shared with the service): the host creates the directories ``0700`` and the files ``0600``,
  opens the log as the host's user and hands the guardian the open file; the guardian keeps at
  most ``cap_bytes`` of the command's output (:mod:`~tessera.live.executors.logs`);
* starts the command **at most once** on this node, even across a restarted host: a claim file
  ``rank-<i>.claimed`` is created exclusively beside the rank's log before the guardian starts;
* gives it a clean environment (:func:`~tessera.live.executors.base.launch_env`), never the
  host's own, so nothing of the host -- or of an earlier job -- reaches it;
* writes an **exit record** to Ray's KV when the command ends
  (:mod:`tessera.live.executors.ray.records`), so a restarted service learns how it ended, and
  polls the rank as exited only once that record is written: the service learns of the end
  from a poll and then releases the run, and the record (with the log's tail) is what answers
  a log read between the host dropping the rank and the service saving the record;
* on :meth:`RankHost.forget`, kills whatever of the rank's tree is left (the guardian and every
  process recorded in the run's ``*.pids`` files), waits for the exit record, and drops it;
* sets the rank's GPU power limit and measures its energy where the service asks
  (:mod:`tessera.live.executors.ray.rank_power`): the limit is set before the command starts,
  restored when it ends (whatever ends it), and the energy and notes go into the exit record;
  a host restores, when it starts, any limit a dead host left on its node;
* on :meth:`RankHost.remove_expired`, removes the run directories on this node whose runs
  ended longer ago than the retention period, never one of a rank it still holds.

A job's process cannot change the host: it is a separate process with its own environment and
working directory, below a guardian that kills the tree when the command exits and whose relay
dies with the host (``ray.kill`` of the host ends every rank on the node, as a dead node would).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from tessera.live.executors import contain
from tessera.live.executors.base import (
    CHECKPOINTS_ROOT_VAR,
    LogChunk,
    launch_env,
    prepare_checkpoint_dir,
    read_log_file,
)
from tessera.live.executors.logs import RankLogs, open_log, private_run_dir, remove_expired
from tessera.live.executors.ray.rank_power import RankPower, leftover_key
from tessera.live.executors.ray.records import exit_key, exit_record, get, put, run_key

#: How often a rank's exit watcher looks whether the command has ended (s).
EXIT_POLL_S = 0.2
#: The most rank calls one host serves at once (starts, polls, stops, log reads); the host is
#: created with it as ``max_concurrency`` (a threaded actor).
HOST_CONCURRENCY = 64

RankKey = tuple[str, int, int]
"""``(job_id, run, rank)``: one rank of one run."""


def log_path(runs_dir: str | Path, job_id: str, run: int, rank: int) -> Path:
    """Where a rank's output goes on the node that runs it: the service's runs dir, the same
    path on every node."""
    return Path(runs_dir) / job_id / str(run) / f"rank-{rank}.log"


@dataclass
class _Rank:
    """One rank on this host: its guardian and what is known about how it ended."""

    log: Path
    proc: subprocess.Popen[bytes] | None = None
    start_ticks: int = 0
    failed: str = ""  # why the guardian could not start (the command never ran)
    stopped: bool = False
    recorded: threading.Event = field(default_factory=threading.Event)
    power: list[str] = field(default_factory=list)  # notes of the rank's power limit/energy
    energy_j: float | None = None
    measured: bool = False  # the service asked for power handling (limit and/or energy)

    def power_fields(self) -> dict[str, Any]:
        """What the exit record says of the rank's power (empty when none was asked)."""
        return {"power": list(self.power), "energy_j": self.energy_j} if self.measured else {}

    @property
    def status_path(self) -> str:
        return str(self.log.with_suffix(".status"))

    def ended(self) -> bool:
        return bool(self.failed) or self.proc is None or self.proc.poll() is not None

    def returncode(self) -> int:
        if self.proc is None or self.failed:
            return contain.EXEC_FAILED_RC
        rc = self.proc.poll()
        return contain.EXEC_FAILED_RC if rc is None else rc

    def outcome(self) -> tuple[str, bool]:
        if self.failed:
            return self.failed, False
        got = contain.read_status(self.status_path)
        return str(got.get("detail", "")), bool(got.get("timed_out"))


@ray.remote(num_cpus=0, max_restarts=0)
class RankHost:
    """Starts, watches and stops the ranks Ray placed on this node (module docstring)."""

    def __init__(self, power_root: str = "") -> None:
        self._ranks: dict[RankKey, _Rank] = {}
        self._lock = threading.Lock()
        self._dirs = threading.Lock()  # creating a run's directory vs. removing expired ones
        self._node = ray.get_runtime_context().get_node_id()
        self._power = RankPower(power_root, self._node)
        self._power_lock = threading.Lock()
        # A host that died took its ranks with it: every restore record left is a leftover.
        for key, notes in self._power.recover().items():
            put(leftover_key(*key), {"power": notes})

    def keys(self) -> list[RankKey]:
        """The ranks this host holds (running, or ended and not yet forgotten)."""
        with self._lock:
            return list(self._ranks)

    def start(self, key: RankKey, argv: list[str], env: dict[str, str],
              visible_devices: str, logs: RankLogs, measure_power: bool = False,
              power_limit_w: float | None = None) -> int:
        """Start the rank's command once; returns the guardian's pid (``-1``: it could not
        start, :meth:`outcome` says why). ``visible_devices`` is the rank's
        ``CUDA_VISIBLE_DEVICES``: the GPU Ray assigned to it within the run's bundle; ``logs``
        where its log goes on this node and how big it may grow; ``measure_power``: measure
        the rank's energy and set ``power_limit_w`` (W per GPU, ``None``: none) on its GPUs
        for its life (:mod:`~tessera.live.executors.ray.rank_power`)."""
        job_id, run, rank = key
        with self._lock:
            known = self._ranks.get(key)
            if known is not None:
                return known.proc.pid if known.proc is not None else -1
            r = self._ranks[key] = _Rank(log_path(logs.runs_dir, job_id, run, rank))
        threading.Thread(target=self._watch, args=(key, r), daemon=True).start()
        try:
            with self._dirs:
                private_run_dir(Path(logs.runs_dir), job_id, run)
        except OSError as e:
            r.failed = f"cannot create the run's log directory on this node: {e}"
            return -1
        contain.sweep([str(d) for d in r.log.parent.parent.glob("*")
                       if d.name.isdigit() and int(d.name) < run])
        try:
            claim = os.open(r.log.with_suffix(".claimed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                            0o600)
        except FileExistsError:
            r.failed = "lost: this rank was started on this node before (by an earlier host)"
            return -1
        os.close(claim)
        if measure_power:
            with self._power_lock:
                r.power = self._power.begin(key, visible_devices, power_limit_w,
                                            self._node[:12])
                r.measured = True
        try:
            full_env, user = launch_env(env, visible_devices)
            prepare_checkpoint_dir(env.get("TESSERA_CHECKPOINT_DIR", ""), user,
                                   Path(env.get(CHECKPOINTS_ROOT_VAR, "/nonexistent")))
            out = open_log(r.log)
            try:
                r.proc = contain.start_guardian({
                    "argv": argv, "env": full_env, "user": user,
                    "max_runtime_s": env.get("TESSERA_MAX_RUNTIME_S"),
                    "grace_s": env.get("TESSERA_GRACE_S", "10"), "status": r.status_path,
                    "record": str(r.log.with_suffix(".pids")),
                    "log_cap_bytes": logs.cap_bytes}, out)
            finally:
                os.close(out)
        except (OSError, ValueError, KeyError) as e:
            r.failed = contain.exec_failure(e)
            return -1
        r.start_ticks = contain.start_time(r.proc.pid) or 0
        return r.proc.pid

    def _watch(self, key: RankKey, r: _Rank) -> None:
        """Write the rank's exit record once its command ends (the guardian reports how)."""
        while r.proc is None and not r.failed:  # start() is still starting it
            time.sleep(EXIT_POLL_S / 10)
        while not r.ended():
            time.sleep(EXIT_POLL_S)
        try:
            detail, timed_out = r.outcome()
            if r.measured:  # the limit goes back before the end is told to anyone
                with self._power_lock:
                    r.energy_j, notes = self._power.end(key)
                r.power = [*r.power, *notes]
            put(exit_key(*key), {**exit_record(r.returncode(), r.stopped, str(r.log), detail,
                                               timed_out), **r.power_fields()})
        finally:  # the end is told (poll) only now, so the record outlives the rank's release
            r.recorded.set()

    def _get(self, key: RankKey) -> _Rank | None:
        with self._lock:
            return self._ranks.get(key)

    def poll(self, key: RankKey) -> tuple[str, int | None, bool]:
        """``(state, status, stopped)``: ``absent`` (not held here), ``running`` or
        ``exited``."""
        r = self._get(key)
        if r is None or (r.proc is None and not r.failed):
            return "absent", None, False
        if not r.ended() or not r.recorded.is_set():  # its exit record is not written yet
            return "running", None, False
        return "exited", r.returncode(), r.stopped

    def poll_all(self) -> dict[RankKey, tuple[str, int | None, bool]]:
        """:meth:`poll` of every rank held here, in one call."""
        return {key: self.poll(key) for key in self.keys()}

    def outcome(self, key: RankKey) -> tuple[str, bool]:
        """Why the command ended, as its guardian saw it: ``(detail, timed_out)``; ``detail``
        is ``exec failed: ...`` for a command that could not start, ``exceeded
        max_runtime_s=...`` for one stopped at its limit, else empty."""
        r = self._get(key)
        return ("", False) if r is None else r.outcome()

    def stop(self, key: RankKey, grace_s: float) -> None:
        """SIGTERM the rank's whole tree (through its guardian); kill it after ``grace_s``."""
        r = self._get(key)
        if r is None or r.proc is None or r.proc.poll() is not None:
            return
        r.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(r.proc.pid, signal.SIGTERM)
        threading.Timer(grace_s, self._kill, args=(r,)).start()

    @staticmethod
    def _kill(r: _Rank) -> None:
        if r.proc is not None and r.proc.poll() is None:
            contain.kill_and_wait({r.proc.pid: r.start_ticks})
            r.proc.poll()

    def forget(self, key: RankKey, record_wait_s: float = 5.0) -> dict[str, Any] | None:
        """Kill what is left of the rank (its guardian, and every process the run's records
        on this node list), wait for its exit record, and drop it; returns the rank's exit
        record (``None`` when this host does not hold the rank)."""
        with self._lock:
            r = self._ranks.pop(key, None)
        if r is None:
            return None
        self._kill(r)
        contain.sweep([str(r.log.parent)])
        r.recorded.wait(record_wait_s)
        detail, timed_out = r.outcome()
        return {**exit_record(r.returncode(), r.stopped, str(r.log), detail, timed_out),
                **r.power_fields()}

    def remove_expired(self, runs_dir: str, retention_s: float, now_s: float) -> int:
        """Remove the run directories under ``runs_dir`` on this node whose runs ended more
        than ``retention_s`` before ``now_s``, except those of ranks this host holds (running,
        or ended and not yet forgotten) and of runs the service has not released yet (their run
        record is still in the KV: a work root shared by several nodes holds other nodes'
        running ranks too); returns how many were removed."""
        def held(job_id: str, run: int) -> bool:  # here, or (a shared work root) elsewhere
            with self._lock:
                if any(k[0] == job_id and k[1] == run for k in self._ranks):
                    return True
            return get(run_key(job_id, run)) is not None  # pruned only once released

        with self._dirs:
            return len(remove_expired(Path(runs_dir), retention_s, now_s, held))

    def read_log(self, key: RankKey, offset: int, limit: int) -> LogChunk | None:
        """Up to ``limit`` bytes of the rank's log from ``offset`` (``None``: not held)."""
        r = self._get(key)
        return None if r is None else read_log_file(str(r.log), offset, limit)
