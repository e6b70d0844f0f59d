"""Devices for the planners: a process-wide cost model, device lists and their servers.

* :func:`default_cost_model` is the cost model over the bundled profiles, shared by the
  planners (its fits are cached inside);
* :func:`parse_devices` reads a command-line device list ``A100:2,V100:4,T4:2``;
* :func:`nodes_for` lays a flavor → count mapping out on servers (one flavor per server,
  ``gpus_per_node`` GPUs each, the catalog's default links).

These sit below every planner (:mod:`tessera.plan.hybrid`, :mod:`tessera.plan.api`), so a
planner can use them without importing the entry points; :mod:`tessera.plan.api` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.errors import SpecError
from tessera.model.cluster import Link, Node, make_nodes
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.steptime import CostModel

_DEFAULT_COST_MODEL: CostModel | None = None


def default_cost_model() -> CostModel:
    """A process-wide cost model over the bundled profiles (fits are cached inside)."""
    global _DEFAULT_COST_MODEL
    if _DEFAULT_COST_MODEL is None:
        _DEFAULT_COST_MODEL = CostModel()
    return _DEFAULT_COST_MODEL


def parse_devices(text: str) -> dict[GpuFlavor, int]:
    """Parse ``flavor:count[,flavor:count…]``; repeated flavors add up.

    Raises:
        SpecError: an entry is not ``flavor:count`` or the count is not a positive integer.
        UnknownFlavorError: a flavor name is not in the catalog.

    >>> {f.short: n for f, n in parse_devices("a100:2, T4:1").items()}
    {'A100-80GB': 2, 'T4': 1}
    """
    out: dict[GpuFlavor, int] = {}
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise SpecError(f"device list {text!r}: expected flavor:count[,flavor:count...]")
    for part in parts:
        name, sep, cnt = part.partition(":")
        if not sep or not name.strip():
            raise SpecError(f"device list {text!r}: expected flavor:count, got {part!r}")
        try:
            n = int(cnt)
        except ValueError:
            raise SpecError(f"device list {text!r}: count {cnt!r} is not an integer") from None
        if n <= 0:
            raise SpecError(f"device list {text!r}: count for {name.strip()!r} must be positive")
        f = resolve_flavor(name)
        out[f] = out.get(f, 0) + n
    return out


def nodes_for(devices_by_flavor: Mapping[GpuFlavor, int], gpus_per_node: int = 8,
              links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None) -> tuple[Node, ...]:
    """Servers holding the given GPUs: per flavor, full ``gpus_per_node`` boxes then the rest.

    ``links`` gives a flavor's servers their (within-server, between-server) links instead of
    the catalog's defaults (NVLink or PCIe inside, InfiniBand between).
    """
    if gpus_per_node < 1:
        raise SpecError("gpus_per_node must be at least 1")
    nodes: list[Node] = []
    for f, n in devices_by_flavor.items():
        intra, inter = (links or {}).get(f, (None, None))
        full, rest = divmod(n, gpus_per_node)
        nodes += make_nodes(f, full, gpus_per_node, intra_link=intra, inter_link=inter)
        if rest:
            nodes += make_nodes(f, 1, rest, start=full, intra_link=intra, inter_link=inter)
    return tuple(nodes)
