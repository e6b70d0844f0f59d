"""Network topology of a cluster: NVLink domains and switch paths, and the tables that give them.

A :class:`~tessera.model.nodes.Node` may belong to an **NVLink domain** (GPUs of several servers
joined by NVLink/NVSwitch, such as a GB200 NVL72 rack: they talk at NVLink speed across servers)
and sits under a **switch path**, nearest switch first: ToR, aggregation, core (the Lingjun
table's ``ASW, PSW, DSW``). Gang placement prefers the smallest of these domains that holds a gang
(:mod:`tessera.sched.core.domains`); the communication model charges traffic that leaves a domain
at the slower link (:mod:`tessera.perf.comm`).

A **topology table** is a CSV file with a header naming, per host, some of ``host`` (or ``ip``,
the Lingjun name), ``nvlink_domain``, ``ASW``/``tor``, ``PSW``/``aggregation`` and
``DSW``/``core``. :func:`apply_topology` puts it onto a cluster's nodes by node id; a row naming
a host that is not in the cluster is an error (a typo would otherwise silently leave a node
without its domain).

The ``lingjun-847`` preset (:func:`lingjun_nodes`) is built from the bundled Lingjun table
(Apache-2.0, see ``data/clusters/NOTICE.txt``): 847 hosts under 3 aggregation switches and one
core switch. The table names no GPUs (its README documents only the switches; the per-worker GPU
counts are in ``worker.csv``, which is not bundled), so every host is modelled as an 8-GPU
A100-80GB server with NVLink inside (the Crux paper's hosts are 8-GPU NVLink servers), 96 CPU
cores and 1 TiB of memory. A ToR is keyed by ``PSW/ASW``: the README warns that ASW labels recur
under different PSWs, and a switch path has one parent per level, so 119 ToRs of 2 to 8 hosts.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.nodes import Node, make_nodes

__all__ = ["HostTopology", "apply_topology", "lingjun_nodes", "read_topology_table"]

#: Accepted column names per field, first match wins (case-insensitive).
_COLUMNS: dict[str, tuple[str, ...]] = {
    "host": ("host", "node", "node_id", "ip"),
    "nvlink_domain": ("nvlink_domain", "nvlink"),
    "tor": ("asw", "tor"),
    "aggregation": ("psw", "aggregation"),
    "core": ("dsw", "core"),
}

HostTopology = tuple[str | None, tuple[str, ...]]
"""A host's ``(nvlink_domain, switch_path)``."""


def read_topology_table(text: str, source: str = "topology table") -> dict[str, HostTopology]:
    """Parse a topology table (CSV text) into ``{host: (nvlink_domain, switch_path)}``.

    The ToR is keyed by its aggregation switch too (``P10/S14``) when both are given, because
    ToR labels may recur under different aggregation switches (they do in the Lingjun table).

    >>> t = read_topology_table("ip,DSW,PSW,ASW\\nh1,G6,P10,S14\\n")
    >>> t["h1"]
    (None, ('P10/S14', 'P10', 'G6'))

    Raises:
        SpecError: no host column, a duplicate or empty host, or a host with no topology.
    """
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise SpecError(f"{source}: empty")
    header = [h.strip().lower() for h in rows[0]]
    col: dict[str, int] = {}
    for field, names in _COLUMNS.items():
        for name in names:
            if name in header:
                col[field] = header.index(name)
                break
    if "host" not in col:
        raise SpecError(f"{source}: no host column (one of {', '.join(_COLUMNS['host'])})")
    if len(col) == 1:
        raise SpecError(f"{source}: no nvlink_domain, ASW/tor, PSW/aggregation or DSW/core column")
    out: dict[str, HostTopology] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) < len(header):
            raise SpecError(f"{source}, line {line}: {len(row)} fields, header has {len(header)}")

        def cell(field: str, row: list[str] = row) -> str:
            return row[col[field]].strip() if field in col else ""

        host = cell("host")
        if not host:
            raise SpecError(f"{source}, line {line}: empty host")
        if host in out:
            raise SpecError(f"{source}, line {line}: host {host!r} listed twice")
        agg = cell("aggregation")
        tor = cell("tor")
        if tor and agg:
            tor = f"{agg}/{tor}"
        path = tuple(s for s in (tor, agg, cell("core")) if s)
        out[host] = (cell("nvlink_domain") or None, path)
    return out


def apply_topology(
    nodes: Sequence[Node], table: Mapping[str, HostTopology], source: str = "topology table"
) -> tuple[Node, ...]:
    """``nodes`` with the NVLink domain and switch path the table gives each (by node id).

    A node the table does not list keeps what it had. A node that gets a ToR and had no rack of
    its own (the default ``<prefix>-rackN``) is not moved: ``rack`` stays as described.

    Raises:
        SpecError: when the table names hosts that are not nodes of the cluster (the first few
            are listed).
    """
    ids = {n.node_id for n in nodes}
    unknown = [h for h in table if h not in ids]
    if unknown:
        shown = ", ".join(repr(h) for h in unknown[:3])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise SpecError(f"{source} names {len(unknown)} host(s) not in the cluster: {shown}{more}")
    out = []
    for n in nodes:
        hit = table.get(n.node_id)
        if hit is None:
            out.append(n)
        else:
            domain, path = hit
            out.append(replace(n, nvlink_domain=domain or n.nvlink_domain,
                               switch_path=path or n.switch_path))
    return tuple(out)


def load_topology_file(path: str | Path) -> dict[str, HostTopology]:
    """Read a topology table from a CSV file (see :func:`read_topology_table`)."""
    p = Path(path)
    if not p.exists():
        raise SpecError(f"topology table {str(p)!r} does not exist")
    return read_topology_table(p.read_text(), source=str(p))


def lingjun_nodes() -> tuple[Node, ...]:
    """The ``lingjun-847`` preset's nodes (see the module docstring for what is assumed)."""
    text = resources.files("tessera.data").joinpath("clusters", "lingjun_topo.csv").read_text()
    table = read_topology_table(text, source="lingjun_topo.csv")
    flavor = resolve_flavor("A100-80GB")
    nodes: list[Node] = []
    for i, (host, (_domain, path)) in enumerate(table.items()):
        (node,) = make_nodes(flavor, 1, 8, prefix=f"lj-{host[:12]}", start=i, cpu_cores=96,
                             mem_gib=1024.0, rack=path[0])
        nodes.append(replace(node, node_id=f"lj-{host[:12]}", switch_path=path))
    return tuple(nodes)
