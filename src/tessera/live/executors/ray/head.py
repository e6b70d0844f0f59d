"""The embedded Ray cluster: a ``ray start --head`` of the service's own (:class:`EmbeddedHead`).

It is not ``ray.init()`` inside the service (that cluster dies with the service and takes every
run with it) but a ``ray start --head`` process of its own, with its own ports and a temp dir
derived from the state dir. It outlives a stopped or killed service, so a restart re-attaches
and adopts the runs exactly as with ``--ray-address``. It is locked down (token auth with a
token only the service holds, loopback sockets only, no Ray client server, no job API) and
stopped by its session, not its command lines (:func:`cluster_pids`, :func:`stop_pids`).
Connecting to it is :mod:`~tessera.live.executors.ray.cluster`'s :func:`connect`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Collection, Iterable
from pathlib import Path

from tessera.errors import SpecError
from tessera.live.executors import contain
from tessera.live.executors.base import free_port, free_ports
from tessera.live.executors.ray.cluster import CONNECT_PROBE_S, probe
from tessera.live.layout import write_private

log = logging.getLogger("tessera.live")

HEAD_START_TIMEOUT_S = 120.0
HEAD_START_RETRIES = 1
"""Starts tried again after a failure Ray itself calls transient (a loaded machine)."""
TRANSIENT_START_FAILURES = ("timed out during startup",
                            "same port is not used by multiple components")
"""Words of Ray's last log line that mark a start worth trying again (on fresh ports): its
raylet or GCS did not come up in Ray's own wait, which a busy machine causes (seen once in CI
on 2 cores), or a port chosen free was taken by another process before Ray bound it (seen once
in the ray test set)."""


class EmbeddedHead:
    """A ``ray start --head`` of the service's own, locked down, found again through the state
    dir.

    **Who can drive it.** Only a process that holds its token: the head starts with Ray's token
    authentication on (``RAY_AUTH_MODE=token``) and a token the service generated into
    ``<state>/ray-auth-token`` (0600, in the 0700 state dir), which the service presents through
    :func:`use_token_file`. Every listening socket is on 127.0.0.1 (Ray resolves the node's
    address as on a single-host cluster, :data:`HEAD_ENV`), the Ray client server and the
    dashboard (with its job API) are not started, and the dashboard agent runs without its HTTP
    and gRPC servers (:data:`HEAD_LAUNCHER`). What still listens (GCS, raylet, runtime-env
    agent) refuses a caller without the token; the agent's Prometheus endpoint answers anyone on
    the host with the node's resource figures (Ray cannot turn it off from ``ray start``).

    **Where it lives.** Ray's temp dir (``ray_current_cluster``, the session's port files,
    sockets and logs) is ``/tmp/tessera-ray-<hash>/r``: Ray makes it 0777 itself, so it sits in
    a parent that is the service user's alone (0700); socket paths stay under 108 bytes.

    **Stopping it.** ``ray start`` runs in a session of its own; every process of the head
    stays in that session whatever it is called (the Ray client server of older heads, workers
    renamed ``ray::…``, orphans re-parented to PID 1). ``<state>/ray-head.json`` records the
    address, the temp dir and the session id; :meth:`stop` ends that session's processes (each
    checked to carry the head's marker in its environment, so a session id the kernel handed
    out again is never hit) and anything naming the temp dir, never another Ray on the machine.
    """

    def __init__(self, state_dir: Path) -> None:
        self.record = state_dir / "ray-head.json"
        self.token_file = state_dir / "ray-auth-token"
        self.restarted = False  # set by ensure: a head was remembered but had to start anew
        digest = hashlib.sha1(str(state_dir.resolve()).encode()).hexdigest()[:10]
        # Ray's unix sockets live under the temp dir; keep the path short (108-byte limit).
        self.root = Path("/tmp") / f"tessera-ray-{digest}"
        self.temp_dir = self.root / "r"

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.record.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def address(self) -> str | None:
        address = self._read().get("address")
        return None if address is None else str(address)

    def session(self) -> int | None:
        """The session id of the head's processes (``None``: not recorded)."""
        sid = self._read().get("session")
        return sid if isinstance(sid, int) else None

    def ensure(self, num_cpus: int, num_gpus: int, resources: dict[str, float]) -> str:
        """The head's address, starting it first when none answers.

        A head remembered from a Tessera that started it without token authentication is
        stopped and started anew (its runs are lost, as with a dead head), never adopted.
        """
        self._ensure_token()
        known = self.address()
        if known is not None:
            answers = self._answers(known)
            if answers and self._read().get("auth") == "token":
                return known
            if not answers and self._pids():  # alive but silent: never kill its runs
                raise SpecError(f"the embedded Ray head at {known} ({self.temp_dir}) runs but "
                                "does not answer; try again, or stop its processes first")
            if answers:
                log.warning("the embedded Ray head at %s was started without token "
                            "authentication; stopping it and starting a locked-down one",
                            known)
            self.stop()
            self.restarted = True
        elif self._pids():
            # Processes of this state dir's head without a record: a start that failed before
            # the record existed (an older Tessera wrote it last). Nothing was launched on it.
            self.stop()
        for attempt in range(1 + HEAD_START_RETRIES):
            address, rc, last = self._start(num_cpus, num_gpus, resources)
            if rc == 0:
                return address
            self.stop()
            if not any(word in last for word in TRANSIENT_START_FAILURES):
                break
            log.warning("embedded Ray head did not start (attempt %d: %s); trying again",
                        attempt + 1, last)
        raise SpecError(f"could not start the embedded Ray head (exit {rc}): {last}")

    def _ensure_token(self) -> None:
        """Generate the head's token once; refuse one that others could read."""
        if not self.token_file.exists() and not self.token_file.is_symlink():
            write_private(self.token_file, secrets.token_hex(32))
        st = self.token_file.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise SpecError(f"refusing to start: {self.token_file} must be a plain file of "
                            f"uid {os.geteuid()} with mode 0600; run: chmod 600 "
                            f"{self.token_file} (or delete it to make a new token)")

    def _private_root(self) -> None:
        """``/tmp/tessera-ray-<hash>``: a directory of the service user's, mode 0700."""
        with contextlib.suppress(FileExistsError):
            self.root.mkdir(mode=0o700)
        st = self.root.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise SpecError(f"refusing to start the embedded Ray head: {self.root} is not a "
                            f"directory of uid {os.geteuid()}; remove it")
        if stat.S_IMODE(st.st_mode) != 0o700:
            self.root.chmod(0o700)  # ours: a directory of an older Tessera (Ray made it 0777)

    def _start(self, num_cpus: int, num_gpus: int, resources: dict[str, float]
               ) -> tuple[str, int, str]:
        """One ``ray start --head`` on a fresh port: ``(address, exit code, the log's last
        line)``. The caller stops what a failed start left."""
        port = free_port()
        address = f"127.0.0.1:{port}"
        argv = [sys.executable, "-c", HEAD_LAUNCHER, "start",
                "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus),
                "--resources", json.dumps(resources), "--temp-dir", str(self.temp_dir),
                "--include-dashboard", "false", "--disable-usage-stats", "--no-monitor",
                *head_port_flags(head=False, avoid=(port,))]
        self._private_root()
        self.temp_dir.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
        env.update(HEAD_ENV, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file),
                   **{HEAD_MARK_VAR: str(self.temp_dir)})
        # The record first: a head is never running without one, so a failed start can always
        # be found and stopped (by this call, or by the next service on this state dir).
        self._write_record(address, None)
        try:
            with open(self.root / "ray-start.log", "ab") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        env=env)
                self._write_record(address, proc.pid)  # its pid is the session's id
                rc = proc.wait(timeout=HEAD_START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        tail = (self.root / "ray-start.log").read_text(errors="replace")[-400:].strip()
        return address, rc, tail.splitlines()[-1] if tail else ""

    def _write_record(self, address: str, session: int | None) -> None:
        """``ray-head.json``, owner-only (it sits in the private state dir), atomically."""
        write_private(self.record, json.dumps({
            "address": address, "temp_dir": str(self.temp_dir), "session": session,
            "auth": "token"}))

    @staticmethod
    def _answers(address: str, tries: int = 3) -> bool:
        """Whether the head answers, asked patiently (a busy machine is not a dead head)."""
        for i in range(tries):
            try:
                probe(address, timeout_s=CONNECT_PROBE_S)
                return True
            except SpecError:
                if i + 1 < tries:
                    time.sleep(1.0)
        return False

    def _pids(self) -> list[int]:
        """Every live process of this head (the recorded temp dir's, or this layout's)."""
        marker = str(self._read().get("temp_dir") or self.temp_dir)
        sessions = [s] if (s := self.session()) is not None else []
        return cluster_pids(marker, sessions)

    def stop(self, grace_s: float = 5.0) -> int:
        """End every process of this head; returns how many were signalled.

        Swept again until none is left (at most three rounds): a process a dying raylet
        started meanwhile is caught by its session too.
        """
        total = 0
        for _ in range(3):
            pids = self._pids()
            if not pids:
                break
            stop_pids(pids, grace_s)
            total += len(pids)
        self.record.unlink(missing_ok=True)
        return total


HEAD_MARK_VAR = "TESSERA_RAY_HEAD"
"""Set (to the head's temp dir) in the environment of ``ray start`` and so of every process of
the head: :func:`cluster_pids` takes a process of the head's session only if it carries it."""

HEAD_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray 2.60 replaces a node address of 127.0.0.1 by the host's outward address (and then binds
its GCS, raylet and agents to every interface) unless multi-node clusters are off, which is what
this says (``ray_constants.ENABLE_RAY_CLUSTER``): every socket of the head is then on
127.0.0.1. The driver does the same in :func:`connect` (``loopback``)."""

HEAD_LAUNCHER = (
    "import ray._private.utils as utils, ray.scripts.scripts as scripts\n"
    "off = lambda: ImportError('turned off by tessera')\n"
    "scripts.get_ray_client_dependency_error = off\n"
    "utils.get_dashboard_dependency_error = off\n"
    "scripts.main()\n")
"""``ray start`` with two components off that Ray 2.60 has no flag for. The Ray client server
(``ray://``, started whenever grpc is importable, and a port of 0 is refused) is skipped when
Ray believes its client extras are missing; the dashboard agent runs ``--minimal`` (no HTTP
server, hence no ``/api/job_agent/jobs/``, and no gRPC server) and the dashboard head loads no
job or state API when Ray believes its dashboard extras are missing. Both beliefs are what
these two patched functions say; ``tests/live/test_ray_hardening.py`` checks the result (every
socket of the head) so a Ray upgrade that changes them fails there."""


def head_port_flags(head: bool = True, avoid: Collection[int] = ()) -> list[str]:
    """Free ports, all different and none in ``avoid`` (the node's own port), for the
    per-node services whose defaults collide between two nodes on one machine (the Ray client
    server runs on heads only)."""
    flags = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--runtime-env-agent-port", "--metrics-export-port"]
    if head:
        flags.insert(0, "--ray-client-server-port")
    ports = [p for p in free_ports(len(flags) + len(avoid)) if p not in avoid]
    return [a for flag, port in zip(flags, ports, strict=False) for a in (flag, str(port))]


def cluster_pids(marker: str, sessions: Iterable[int] = ()) -> list[int]:
    """Processes of the Ray cluster whose temp dir is ``marker``, and their descendants.

    A process belongs to it when its command line names ``marker`` (Ray's own daemons do), or
    when it is in one of ``sessions`` (the session ids of the ``ray start`` processes) and its
    environment says ``TESSERA_RAY_HEAD=<marker>`` (:data:`HEAD_MARK_VAR`): that finds the
    head's processes whatever their command line, and never a process of a session whose id
    the kernel gave out again after the head's ended.
    """
    wanted = set(sessions)
    mark_var = f"{HEAD_MARK_VAR}={marker}".encode()
    roots: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        pid = int(d.name)
        try:
            named = marker.encode() in (d / "cmdline").read_bytes()
            if not named and wanted and _session_of(pid) in wanted:
                named = mark_var in (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        start = contain.start_time(pid) if named else None
        if start is not None:
            roots[pid] = start
    return sorted({**roots, **contain.below(roots)})


def _session_of(pid: int) -> int | None:
    """The session id of ``pid`` (field 6 of ``/proc/<pid>/stat``), ``None`` if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return int(raw.rsplit(")", 1)[1].split()[3])


def stop_pids(pids: list[int], grace_s: float) -> None:
    """SIGTERM ``pids``, then kill the ones alive after ``grace_s`` with what they started
    (through :mod:`contain`, so a pid reused meanwhile is never hit)."""
    procs = {p: s for p in pids if (s := contain.start_time(p)) is not None}
    for pid, start in procs.items():
        contain.send(pid, start, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(contain.start_time(p) == s
                                              for p, s in procs.items()):
        time.sleep(0.1)
    contain.kill_and_wait({p: s for p, s in procs.items() if contain.start_time(p) == s})
