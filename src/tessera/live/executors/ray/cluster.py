"""Reaching a Ray cluster: flavor resources, token auth, placement diagnosis.

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

**CPU-only bundles** and the node marks that hold them to their node are
:mod:`~tessera.live.executors.ray.node_marks`.

**Token auth.** Ray 2.60 turns token authentication on whenever ``~/.ray/auth_token`` (or
``RAY_AUTH_TOKEN``) exists where ``ray start --head`` runs. A service on another host, or under
another user, must hold the same token: ``--ray-token-file PATH`` points Ray at it
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``). :func:`connect` checks that something
listens at the address before Ray retries for twenty seconds, and turns every failure into one
:class:`~tessera.errors.SpecError` line.

**The embedded cluster** (a ``ray start --head`` of the service's own) is
:mod:`~tessera.live.executors.ray.head`.
An external cluster that lets in clients without a token is refused
(:func:`check_authenticated`) unless the admin says otherwise.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from tessera.errors import SpecError
from tessera.live.executors.ray.node_marks import cpu_only_short
from tessera.live.nvtopo import DOMAIN_RESOURCE_PREFIX
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor

log = logging.getLogger("tessera.live")

FlavorResource = Literal["accelerator_type", "gpu_flavor"]
ACCELERATOR_SHARE = 0.001
"""What one rank asks of ``accelerator_type:<T>`` (a node offers 1 unit, whatever its GPUs)."""
CONNECT_PROBE_S = 5.0

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


def flavor_resource(flavor: GpuFlavor, kind: FlavorResource) -> tuple[str, float]:
    """The resource key that marks a GPU of ``flavor`` and what one rank asks of it."""
    if kind == "gpu_flavor":
        return f"gpu_flavor:{flavor.short}", 1.0
    return f"accelerator_type:{ray_accelerator_type(flavor)}", ACCELERATOR_SHARE


def pretend_resources(cluster: ClusterSpec, kind: FlavorResource) -> dict[str, float]:
    """Custom resources of an embedded node that pretends to hold ``cluster``'s GPUs (and
    their NVLink domains, one ``nvlink_domain:<d>`` unit per GPU)."""
    out: dict[str, float] = {}
    for f, n in cluster.gpus_by_flavor().items():
        key, _share = flavor_resource(f, kind)
        out[key] = float(n) if kind == "gpu_flavor" else 1.0
    for d, n in domain_gpus(cluster).items():
        out[f"{DOMAIN_RESOURCE_PREFIX}{d}"] = float(n)
    return out


def domain_gpus(cluster: ClusterSpec) -> dict[str, int]:
    """GPUs per NVLink domain of ``cluster`` (empty when no node names one)."""
    out: dict[str, int] = {}
    for n in cluster.nodes:
        if n.nvlink_domain is not None:
            out[n.nvlink_domain] = out.get(n.nvlink_domain, 0) + n.gpus
    return out


def gang_bundles(parts: Iterable[tuple[str, int, GpuFlavor]], kind: FlavorResource,
                 domain_of: Mapping[str, str]) -> list[dict[str, float]]:
    """A run's placement-group bundles: one per node of its placement, with the node's GPUs,
    its flavor's marker and, when the node is in an NVLink domain, ``nvlink_domain:<d>`` per
    GPU -- so Ray puts the bundle on a node of that domain (the node offers the resource,
    :mod:`tessera.live.nvtopo`), and a gang the scheduler kept inside one domain stays there.
    """
    bundles: list[dict[str, float]] = []
    for node, count, flavor in parts:
        res, share = flavor_resource(flavor, kind)
        bundle = {"GPU": float(count), res: share * count}
        domain = domain_of.get(node)
        if domain is not None:
            bundle[f"{DOMAIN_RESOURCE_PREFIX}{domain}"] = float(count)
        bundles.append(bundle)
    return bundles


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
        marks = [k for k in b if k not in ("GPU", *_HOST)]
        if gpus == 0:
            return cpu_only_short(b, marks, nodes)
        host_why = _host_short(b, marks, nodes)
        if host_why is not None:
            return host_why
        offered = [k for k in marks if any(n.get(k, 0.0) > 0 for n in nodes)]
        if len(offered) < len(marks):
            missing = ", ".join(k for k in marks if k not in offered)
            return f"no Ray node offers {missing} ({gpus} GPUs in one bundle)"
        most = max((int(n.get("GPU", 0)) for n in nodes if all(n.get(k, 0) > 0 for k in marks)),
                   default=0)
        return (f"no Ray node with {', '.join(marks)} has {gpus} GPUs for one bundle "
                f"(the largest has {most})")
    return None


_HOST = ("CPU", "memory")


def _host_short(b: Mapping[str, float], marks: list[str],
                nodes: list[Mapping[str, float]]) -> str | None:
    """Why a bundle asking CPUs or memory fits no node that has its GPUs and marks (``None``
    when its GPUs and marks are what no node has, or it asks no host resources)."""
    if not any(k in b for k in _HOST):
        return None
    gpu_ok = [n for n in nodes
              if n.get("GPU", 0.0) >= b.get("GPU", 0.0) and all(n.get(k, 0.0) >= b[k]
                                                                 for k in marks)]
    if not gpu_ok:
        return None
    cpus, mem = b.get("CPU", 0.0), b.get("memory", 0.0) / 2**30
    most_cpus = max(n.get("CPU", 0.0) for n in gpu_ok)
    most_mem = max(n.get("memory", 0.0) for n in gpu_ok) / 2**30
    return (f"no Ray node with its {int(b.get('GPU', 0))} GPUs has {cpus:g} CPUs and "
            f"{mem:g} GiB of memory for one bundle (the largest has {most_cpus:g} CPUs, "
            f"{most_mem:g} GiB)")


def node_hosts(nodes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """What each alive Ray node reports at start: ``{node: (CPUs, memory GiB)}`` from
    ``ray.nodes()`` (its ``Resources``' ``CPU`` and ``memory``, bytes)."""
    out: dict[str, tuple[float, float]] = {}
    for n in nodes:
        if not n.get("Alive"):
            continue
        res = n.get("Resources") or {}
        name = str(n.get("NodeManagerAddress") or n.get("NodeID") or len(out))
        out[name] = (float(res.get("CPU", 0.0)), float(res.get("memory", 0.0)) / 2**30)
    return out


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
    # lazy: Ray costs ~250 ms, and this module is imported at every tessera start (plugin.py)
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

    ``loopback``: the embedded head (:class:`~.head.EmbeddedHead`), whose node address is
    127.0.0.1; otherwise the cluster is first asked whether it lets in a client without a
    token (:func:`check_authenticated`), and refused if so unless ``allow_unauthenticated``.

    Ray's C++ client logs a warning per retry straight to file descriptor 2 (twenty lines for a
    refused token); they are held back while connecting and only their gist is reported.
    """
    # lazy: Ray costs ~250 ms, and this module is imported at every tessera start (plugin.py)
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
