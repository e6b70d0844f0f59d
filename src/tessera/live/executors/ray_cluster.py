"""Reaching a Ray cluster: flavor resources, token auth, the embedded head, placement diagnosis.

**Flavors as Ray resources.** Every rank asks for one ``GPU`` (so Ray sets
``CUDA_VISIBLE_DEVICES`` in its actor, and the rank's process inherits it) plus a marker of its
flavor, in one of two conventions (``tessera serve --ray-flavor-resource``):

* ``accelerator_type`` (default): the resource ``accelerator_type:<T>`` that Ray's own GPU
  detection publishes with value 1 on each GPU node. ``<T>`` is what Ray 2.60 derives from the
  ``nvidia-smi`` product name (:func:`ray_accelerator_type`): ``Tesla V100-SXM2-16GB`` → ``V100``,
  ``NVIDIA A100-SXM4-80GB`` → ``A100``, ``Tesla T4`` → ``T4``, ``NVIDIA H100 80GB HBM3`` →
  ``H100``. A rank asks for 0.001 of it (as ``@ray.remote(accelerator_type=…)`` does), so any
  number of ranks share the node's single unit. Flavors that differ only in memory (V100-16GB
  and V100-32GB) map to one type; such clusters need the other convention.
* ``gpu_flavor``: a custom resource ``gpu_flavor:<short name>`` counting that flavor's GPUs,
  for clusters whose nodes label themselves (``ray start --resources '{"gpu_flavor:T4": 4}'``).

**Token auth.** Ray 2.60 turns token authentication on whenever ``~/.ray/auth_token`` (or
``RAY_AUTH_TOKEN``) exists where ``ray start --head`` runs. A service on another host, or under
another user, must hold the same token: ``--ray-token-file PATH`` points Ray at it
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``). :func:`connect` checks that something
listens at the address before Ray retries for twenty seconds, and turns every failure into one
:class:`~tessera.errors.SpecError` line.

**The embedded cluster** is not ``ray.init()`` inside the service (that cluster dies with the
service and takes every run with it) but a ``ray start --head`` process of its own, with its own
ports and a temp dir derived from the state dir (:class:`EmbeddedHead`). It outlives a stopped
or killed service, so a restart re-attaches and adopts the runs exactly as with ``--ray-address``.
It is locked down (token auth with a token only the service holds, loopback sockets only, no
Ray client server, no job API) and stopped by its session, not its command lines.
An external cluster that lets in clients without a token is refused
(:func:`check_authenticated`) unless the admin says otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Literal

from tessera.errors import SpecError
from tessera.live.executors import contain
from tessera.live.executors.base import free_port, free_ports
from tessera.live.layout import write_private
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor, resolve_flavor

log = logging.getLogger("tessera.live")

FlavorResource = Literal["accelerator_type", "gpu_flavor"]
ACCELERATOR_SHARE = 0.001
"""What one rank asks of ``accelerator_type:<T>`` (a node offers 1 unit, whatever its GPUs)."""
CONNECT_PROBE_S = 5.0
HEAD_START_TIMEOUT_S = 120.0
HEAD_START_RETRIES = 1
"""Starts tried again after a failure Ray itself calls transient (a loaded machine)."""
TRANSIENT_START_FAILURES = ("timed out during startup",
                            "same port is not used by multiple components")
"""Words of Ray's last log line that mark a start worth trying again (on fresh ports): its
raylet or GCS did not come up in Ray's own wait, which a busy machine causes (seen once in CI
on 2 cores), or a port chosen free was taken by another process before Ray bound it (seen once
in the ray test set)."""

# Ray 2.60's rule (ray/_private/accelerators/nvidia_gpu.py): after the vendor word, an optional
# run of upper-case words, then the first upper-case token containing a digit.
_RAY_GPU_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def ray_accelerator_type(flavor: GpuFlavor) -> str:
    """The ``accelerator_type`` Ray 2.60 detects on a GPU of ``flavor``.

    The flavor's canonical name is the ``nvidia.com/gpu.product`` label, the product name with
    hyphens for spaces; Ray reads the product name, so the rule runs on it with spaces back.
    """
    product = flavor.name.replace("-", " ")
    m = _RAY_GPU_NAME.match(product)
    if m and len(m.group(1)) > 1:
        return m.group(1).replace(" ", "-")
    return re.sub(r"^NVIDIA\s+", "", product).strip().replace(" ", "-")


def flavor_resource(flavor_short: str, kind: FlavorResource) -> tuple[str, float]:
    """The resource key that marks a GPU of ``flavor_short`` and what one rank asks of it."""
    if kind == "gpu_flavor":
        return f"gpu_flavor:{flavor_short}", 1.0
    return f"accelerator_type:{ray_accelerator_type(resolve_flavor(flavor_short))}", \
        ACCELERATOR_SHARE


def pretend_resources(cluster: ClusterSpec, kind: FlavorResource) -> dict[str, float]:
    """Custom resources of an embedded node that pretends to hold ``cluster``'s GPUs."""
    out: dict[str, float] = {}
    for f, n in cluster.gpus_by_flavor().items():
        key, _share = flavor_resource(f.short, kind)
        out[key] = float(n) if kind == "gpu_flavor" else 1.0
    return out


def shared_accelerator_types(cluster: ClusterSpec) -> list[str]:
    """Accelerator types that stand for more than one of the cluster's flavors."""
    seen: dict[str, set[str]] = {}
    for f in cluster.gpus_by_flavor():
        seen.setdefault(ray_accelerator_type(f), set()).add(f.short)
    return [f"{t} ({', '.join(sorted(s))})" for t, s in sorted(seen.items()) if len(s) > 1]


def unplaceable_reason(bundles: list[dict[str, float]],
                       node_totals: Iterable[Mapping[str, float]]) -> str | None:
    """Why no alive node could ever hold one of ``bundles`` (``None``: each fits somewhere).

    ``node_totals`` are the nodes' *total* resources (``ray.nodes()[i]["Resources"]``): a bundle
    that fits a node's totals may wait for others to finish, but one that fits none never runs.
    """
    nodes = list(node_totals)
    for b in bundles:
        if any(all(n.get(k, 0.0) >= v for k, v in b.items()) for n in nodes):
            continue
        gpus = int(b.get("GPU", 0))
        marks = [k for k in b if k != "GPU"]
        offered = [k for k in marks if any(n.get(k, 0.0) > 0 for n in nodes)]
        if len(offered) < len(marks):
            missing = ", ".join(k for k in marks if k not in offered)
            return f"no Ray node offers {missing} ({gpus} GPUs in one bundle)"
        most = max((int(n.get("GPU", 0)) for n in nodes if all(n.get(k, 0) > 0 for k in marks)),
                   default=0)
        return (f"no Ray node with {', '.join(marks)} has {gpus} GPUs for one bundle "
                f"(the largest has {most})")
    return None


def use_token_file(path: Path | None) -> None:
    """Make this process present the token in ``path`` to Ray (before ``ray.init``)."""
    if path is None:
        return
    if not path.is_file():
        raise SpecError(f"--ray-token-file {path}: no such file")
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    _reread_ray_config()


def present_token_if_any() -> bool:
    """Turn token auth on for this process when a token is at hand; returns whether it is on.

    ``ray start --head`` turns token auth on whenever it finds a token, but
    ``ray.init(address=...)`` never does (only ``address="auto"`` does): without this, a
    service gets ``InvalidAuthToken`` from a head started with Ray 2.60's defaults.
    ``RAY_AUTH_MODE`` set by the user is respected as it is.
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.lower() == "token"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if not os.environ.get("RAY_AUTH_TOKEN") and not os.path.isfile(path):
        return False
    os.environ["RAY_AUTH_MODE"] = "token"
    _reread_ray_config()
    return True


def _reread_ray_config() -> None:
    """Ray caches ``RAY_AUTH_*`` in its config and the token in a loader; reread both after
    changing them (as Ray's own ``_enable_token_auth`` does), so a process that connected to
    one cluster can present another's token."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def probe(address: str, timeout_s: float = CONNECT_PROBE_S) -> None:
    """Raise :class:`SpecError` unless a TCP server answers at ``host:port``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError(f"--ray-address {address!r} is not HOST:PORT (the head's GCS port, "
                        "6379 unless `ray start --head --port` said otherwise)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except OSError as e:
        raise SpecError(f"cannot connect to Ray at {address}: {e.strerror or e}; is "
                        "`ray start --head` running there?") from None


def connect(address: str, namespace: str, *, loopback: bool = False,
            allow_unauthenticated: bool = False) -> None:
    """``ray.init`` against a running cluster, or one clear :class:`SpecError`.

    ``loopback``: the embedded head (:class:`EmbeddedHead`), whose node address is 127.0.0.1;
    otherwise the cluster is first asked whether it lets in a client without a token
    (:func:`check_authenticated`), and refused if so unless ``allow_unauthenticated``.

    Ray's C++ client logs a warning per retry straight to file descriptor 2 (twenty lines for a
    refused token); they are held back while connecting and only their gist is reported.
    """
    import ray
    from ray._private import ray_constants

    probe(address)
    if not loopback:
        check_authenticated(address, allow_unauthenticated)
    if not present_token_if_any():
        _reread_ray_config()
    multi_node = ray_constants.ENABLE_RAY_CLUSTER
    if loopback:  # else Ray swaps 127.0.0.1 for the host's address, where nothing listens
        ray_constants.ENABLE_RAY_CLUSTER = False
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            ray.init(address=address, namespace=namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
            return
        except Exception as e:  # ConnectionError, RuntimeError, AuthenticationError
            ray.shutdown()
            error = e
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = multi_node
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        said = held.read().decode(errors="replace") + str(error)
    if "InvalidAuthToken" in said or "Unauthenticated" in said:
        why = ("the head refused this process's auth token (pass --ray-token-file with the "
               "head's ~/.ray/auth_token, or set RAY_AUTH_TOKEN)")
    else:
        first = str(error).strip().splitlines()[0] if str(error).strip() else \
            type(error).__name__
        why = f"{first} (if the head uses token auth, pass --ray-token-file)"
    raise SpecError(f"cannot connect to Ray at {address}: {why}")


AUTH_PROBE_TIMEOUT_S = 30.0
_AUTH_PROBE = (
    "import sys\n"
    "from ray._raylet import GcsClient\n"
    "try:\n"
    "    GcsClient(address=sys.argv[1]).internal_kv_keys(b'', None, timeout=10)\n"
    "except Exception as e:\n"
    "    print('refused', type(e).__name__, e)\n"
    "else:\n"
    "    print('open')\n")


def accepts_anyone(address: str) -> bool | None:
    """Whether the Ray cluster at ``address`` answers a client that presents no token.

    Asked from a fresh process with ``RAY_AUTH_MODE=disabled`` (so this process's Ray config is
    untouched), through the GCS's internal key-value store, which every driver reads first.
    ``None``: no clear answer within :data:`AUTH_PROBE_TIMEOUT_S`.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    env["RAY_AUTH_MODE"] = "disabled"
    try:
        r = subprocess.run([sys.executable, "-c", _AUTH_PROBE, address], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=AUTH_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    said = r.stdout.strip()
    if said == "open":
        return True
    if "InvalidAuthToken" in said or "Authentication" in said or "Unauthenticated" in said:
        return False
    return None


def check_authenticated(address: str, allow: bool) -> None:
    """Refuse (or, with ``allow``, warn loudly about) a Ray cluster anyone can drive.

    A cluster without token authentication runs whatever a client sends, as the user its nodes
    run as, for any process that reaches its GCS port: every job of every tenant, every other
    user of the host, every host on its network.

    Raises:
        SpecError: the cluster accepts a client without a token and ``allow`` is false.
    """
    open_to_all = accepts_anyone(address)
    if open_to_all is None:
        log.warning("could not tell whether the Ray cluster at %s requires a token; make sure "
                    "it runs with RAY_AUTH_MODE=token (docs/security.md)", address)
        return
    if not open_to_all:
        return
    what = (f"the Ray cluster at {address} accepts clients without a token: any process that "
            "reaches it (a job, another local user, another host) can run code on it as its "
            "nodes' user")
    if not allow:
        raise SpecError(f"refusing {what}; start every node with RAY_AUTH_MODE=token and pass "
                        "--ray-token-file (docs/security.md), or pass "
                        "--ray-allow-unauthenticated to accept that")
    log.warning("SECURITY: %s (--ray-allow-unauthenticated); see docs/security.md", what)
    print(f"WARNING: {what}", file=sys.stderr, flush=True)


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
