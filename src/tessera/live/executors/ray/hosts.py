"""Where a run's ranks go on Ray: the GPUs of each placement-group bundle, and the rank hosts.

**Bundle slots.** A run's placement group reserves its GPUs (one bundle per node of the
placement, with the flavor's resource: :mod:`~tessera.live.executors.ray.cluster`). To learn
which GPUs Ray gave a bundle, and on which node, the executor runs one tiny task *inside* that
bundle asking for all of its GPUs and flavor resource: Ray leases it exactly the bundle's GPUs
and sets ``CUDA_VISIBLE_DEVICES`` for it as it would for an actor there, and the task returns
them (:func:`bundle_slot`). The bundle keeps its GPUs reserved after the task returns, so
the ids stay the run's until its group is removed; rank ``i`` of the bundle gets id ``i``. The
task runs on a pooled Ray worker (``max_calls=0``: Ray would otherwise retire a worker after
each GPU task), so it costs milliseconds, not a process start. On the node of bundle 0 the
task also picks the rendezvous port (``MASTER_PORT``).

**Rank hosts.** Each node has one warm :class:`~tessera.live.executors.ray.worker.RankHost`,
named ``tessera-host:<node id>``, detached and pinned to the node (:class:`HostPool`). It
holds no resources; it starts, watches and stops the ranks placed there. A host that died (its
node restarted, or it was killed) is created again on the next use.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tessera.live.executors.base import free_port
from tessera.live.executors.ray.records import NAMESPACE
from tessera.live.executors.ray.worker import HOST_CONCURRENCY, RankHost, RankKey

HOST_PREFIX = "tessera-host:"
log = logging.getLogger("tessera.live")


@dataclass(frozen=True, slots=True)
class BundleSlot:
    """What Ray gave one bundle of a run's placement group.

    Attributes:
        node_id: the Ray node holding the bundle.
        ip: that node's address (rank 0's is ``MASTER_ADDR``).
        gpu_ids: the bundle's GPUs as ``CUDA_VISIBLE_DEVICES`` names them, one per rank.
        port: a port free on that node when asked (used as ``MASTER_PORT`` for bundle 0).
    """

    node_id: str
    ip: str
    gpu_ids: tuple[str, ...]
    port: int


@ray.remote(num_cpus=0, max_calls=0)
def bundle_slot() -> BundleSlot:
    """Run inside a bundle, holding all of its GPUs: where the bundle is and which GPUs."""
    ctx = ray.get_runtime_context()
    return BundleSlot(ctx.get_node_id(), ray.util.get_node_ip_address(),
                      tuple(str(g) for g in ctx.get_accelerator_ids().get("GPU", [])),
                      free_port("0.0.0.0"))


def host_name(node_id: str) -> str:
    return HOST_PREFIX + node_id


class HostPool:
    """The rank host of each node, created on first use (or :meth:`warm`) and kept.

    ``power_root``: where each node's host keeps its ranks' power restore records (the
    service's ``<state>/ray-power`` path, the same on every node; ``""``: none, see
    :mod:`~tessera.live.executors.ray.rank_power`)."""

    def __init__(self, power_root: str = "") -> None:
        self._hosts: dict[str, Any] = {}
        self.power_root = power_root

    def warm(self) -> None:
        """Create the host of every alive node now, in the background (creating an actor
        returns at once; its worker process starts meanwhile)."""
        for node in ray.nodes():
            if node.get("Alive"):
                self.host(str(node["NodeID"]))

    def host(self, node_id: str) -> Any:
        """The node's host: the known handle, the named actor, or a new one."""
        known = self._hosts.get(node_id)
        if known is None:
            known = RankHost.options(  # type: ignore[attr-defined]
                name=host_name(node_id), namespace=NAMESPACE, lifetime="detached",
                get_if_exists=True, max_concurrency=HOST_CONCURRENCY,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(self.power_root)
            self._hosts[node_id] = known
        return known

    def forget_host(self, node_id: str) -> None:
        """Drop a host that failed a call (dead): the next :meth:`host` finds or makes one."""
        self._hosts.pop(node_id, None)

    def held(self, timeout_s: float = 10.0) -> list[RankKey]:
        """Every rank some host still holds (asked of every named host; a host that does not
        answer counts as holding nothing)."""
        names = [n for n in ray.util.list_named_actors() if n.startswith(HOST_PREFIX)]
        out: list[RankKey] = []
        for name in names:
            with contextlib.suppress(ValueError, ray.exceptions.RayError):
                handle = ray.get_actor(name, namespace=NAMESPACE)
                keys: list[RankKey] = ray.get(handle.keys.remote(), timeout=timeout_s)
                out.extend(keys)
        return out
