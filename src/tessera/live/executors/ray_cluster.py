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
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from tessera.errors import SpecError
from tessera.live.executors import contain
from tessera.live.executors.base import free_port
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
TRANSIENT_START_FAILURES = ("timed out during startup",)
"""Words of Ray's last log line that mark a start worth trying again: its raylet or GCS did not
come up in Ray's own wait, which a busy machine causes (seen once in CI on 2 cores)."""

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


def connect(address: str, namespace: str) -> None:
    """``ray.init`` against a running cluster, or one clear :class:`SpecError`.

    Ray's C++ client logs a warning per retry straight to file descriptor 2 (twenty lines for a
    refused token); they are held back while connecting and only their gist is reported.
    """
    import ray

    probe(address)
    if not present_token_if_any():
        _reread_ray_config()
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


class EmbeddedHead:
    """A ``ray start --head`` of the service's own, found again through the state dir.

    ``<state>/ray-head.json`` remembers its address and temp dir; :meth:`ensure` reuses a head
    that still answers and starts one otherwise; :meth:`stop` ends exactly that head's
    processes (by the temp dir in their command lines, and their children), never another
    Ray on the machine.
    """

    def __init__(self, state_dir: Path) -> None:
        self.record = state_dir / "ray-head.json"
        self.restarted = False  # set by ensure: a head was remembered but had to start anew
        digest = hashlib.sha1(str(state_dir.resolve()).encode()).hexdigest()[:10]
        # Ray's unix sockets live under the temp dir; keep the path short (108-byte limit).
        self.temp_dir = Path("/tmp") / f"tessera-ray-{digest}"

    def address(self) -> str | None:
        try:
            return str(json.loads(self.record.read_text())["address"])
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def ensure(self, num_cpus: int, num_gpus: int, resources: dict[str, float]) -> str:
        """The head's address, starting it first when none answers."""
        known = self.address()
        if known is not None:
            if self._answers(known):
                return known
            if cluster_pids(str(self.temp_dir)):  # alive but silent: never kill its runs
                raise SpecError(f"the embedded Ray head at {known} ({self.temp_dir}) runs but "
                                "does not answer; try again, or stop its processes first")
            self.stop()
            self.restarted = True
        elif cluster_pids(str(self.temp_dir)):
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

    def _start(self, num_cpus: int, num_gpus: int, resources: dict[str, float]
               ) -> tuple[str, int, str]:
        """One ``ray start --head`` on a fresh port: ``(address, exit code, the log's last
        line)``. The caller stops what a failed start left."""
        port = free_port()
        address = f"127.0.0.1:{port}"
        argv = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start",
                "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus),
                "--resources", json.dumps(resources), "--temp-dir", str(self.temp_dir),
                "--include-dashboard", "false", "--disable-usage-stats",
                *head_port_flags()]
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        # The record first: a head is never running without one, so a failed start can always
        # be found and stopped (by this call, or by the next service on this state dir).
        self._write_record(address)
        try:
            with open(self.temp_dir / "ray-start.log", "ab") as out:
                rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     timeout=HEAD_START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        tail = (self.temp_dir / "ray-start.log").read_text(errors="replace")[-400:].strip()
        return address, rc, tail.splitlines()[-1] if tail else ""

    def _write_record(self, address: str) -> None:
        """``ray-head.json``, owner-only (it sits in the private state dir), atomically."""
        write_private(self.record,
                      json.dumps({"address": address, "temp_dir": str(self.temp_dir)}))

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

    def stop(self, grace_s: float = 5.0) -> int:
        """End this head's processes; returns how many were signalled."""
        pids = cluster_pids(str(self.temp_dir))
        stop_pids(pids, grace_s)
        self.record.unlink(missing_ok=True)
        return len(pids)


def head_port_flags(head: bool = True) -> list[str]:
    """Free ports for the per-node services whose defaults collide between two nodes on one
    machine (the Ray client server runs on heads only)."""
    client = ["--ray-client-server-port", str(free_port())] if head else []
    return [*client, "--dashboard-agent-listen-port", str(free_port()),
            "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()),
            "--metrics-export-port", str(free_port())]


def cluster_pids(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (a Ray temp dir), and their descendants."""
    roots: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            named = marker.encode() in (d / "cmdline").read_bytes()
        except OSError:
            continue
        start = contain.start_time(int(d.name)) if named else None
        if start is not None:
            roots[int(d.name)] = start
    return sorted({**roots, **contain.below(roots)})


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
