"""Clusters: servers ("nodes") holding GPUs of one flavor, grouped in racks.

A cluster is described three ways, all producing the same :class:`ClusterSpec`:

* a **preset** name (``gavel-108``, ``philly``, ``pai-2020``, ``modern-mixed``, ``sia-64``);
* a **compact** string for the command line, ``v100:12,p100:12,k80:12`` (flavor:GPU count),
  split into servers of ``gpus_per_server`` GPUs each;
* a **YAML** file listing node groups::

      nodes:
        - {flavor: A100-80GB, count: 2, gpus: 8, cpu_cores: 128, mem_gib: 1024, rack: r1}
        - {flavor: T4, count: 4, gpus: 4, rack: r2, inter_link: ethernet}
        - {flavor: B200, count: 18, gpus: 4, nvlink_domain: nvl72-a, switch_path: [tor1, agg1]}
        - {flavor: H100, count: 48, gpus: 8, nodes_per_nvlink_domain: 4}   # 12 domains
      topology: hosts.csv     # optional: per-host domains and switches (model.topology)

A node may belong to an NVLink domain (servers whose GPUs talk over NVLink) and a switch path
(ToR, aggregation, core; nearest first); see :mod:`tessera.model.topology`, which also reads the
topology tables and builds the ``lingjun-847`` preset from the Alibaba Lingjun switch table.

Each node also records how its GPUs talk to each other (``intra_link``: NVLink or PCIe) and to
other nodes (``inter_link``: InfiniBand or Ethernet); the communication model in ``perf`` reads
those. Nodes and links are defined in :mod:`tessera.model.nodes` and re-exported here, so
``from tessera.model.cluster import Node, make_nodes`` keeps working.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor, resolve_flavor, resolve_flavors
from tessera.model.nodes import (
    DEFAULT_LINK_BW_GBPS,
    DEFAULT_LINK_LATENCY_US,
    Link,
    LinkKind,
    Node,
    make_nodes,
)
from tessera.model.topology import apply_topology, lingjun_nodes, load_topology_file

__all__ = [
    "DEFAULT_LINK_BW_GBPS", "DEFAULT_LINK_LATENCY_US", "PRESETS", "ClusterSpec", "Link",
    "LinkKind", "Node", "load_cluster", "load_cluster_yaml", "make_nodes", "parse_compact",
]


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """An immutable inventory of nodes; the decision core never mutates it."""

    name: str
    nodes: tuple[Node, ...]
    _by_flavor: dict[GpuFlavor, int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _max_node: dict[GpuFlavor | None, int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _max_domain: list[int] = field(
        default_factory=list, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not self.nodes:
            raise SpecError(f"cluster {self.name!r} has no nodes")
        ids = Counter(n.node_id for n in self.nodes)
        dup = [i for i, c in ids.items() if c > 1]
        if dup:
            raise SpecError(f"cluster {self.name!r}: duplicate node ids {dup[:5]}")
        # Derived once, at construction; the cluster never changes afterwards.
        for n in self.nodes:
            self._by_flavor[n.flavor] = self._by_flavor.get(n.flavor, 0) + n.gpus
            for key in (None, n.flavor):
                self._max_node[key] = max(self._max_node.get(key, 0), n.gpus)
        domain_gpus: Counter[str] = Counter()
        for n in self.nodes:
            if n.nvlink_domain is not None:
                domain_gpus[n.nvlink_domain] += n.gpus
        self._max_domain.append(max(domain_gpus.values(), default=0))
        self._max_domain.append(int(any(n.switch_path for n in self.nodes) or bool(domain_gpus)))

    @property
    def has_domains(self) -> bool:
        """Whether any node names an NVLink domain or a switch path (else gangs are placed by
        node and rack only, on the fast path)."""
        return bool(self._max_domain[1])

    def max_gpus_per_domain(self) -> int:
        """The most GPUs of one NVLink domain (0 when no node names one)."""
        return self._max_domain[0]

    def max_gpus_local(self) -> int:
        """The largest gang whose GPUs can all talk at NVLink speed: one node, or one NVLink
        domain. A gang up to this size waits for locality (``locality_wait_s``)."""
        return max(self.max_gpus_per_node(), self._max_domain[0])

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def gpus_by_flavor(self) -> dict[GpuFlavor, int]:
        """GPU count per flavor, in the order flavors first appear."""
        return dict(self._by_flavor)

    def flavors(self) -> tuple[GpuFlavor, ...]:
        return tuple(self._by_flavor)

    def max_gpus_per_node(self, flavor: GpuFlavor | None = None) -> int:
        """The most GPUs on one node (of ``flavor``, or of any flavor); 0 if none."""
        return self._max_node.get(flavor, 0)

    def describe(self) -> str:
        """One line such as ``gavel-108: 36×V100-16GB, 36×P100, 36×K80 (108 GPUs, 108 nodes)``."""
        parts = ", ".join(f"{c}×{f.short}" for f, c in self.gpus_by_flavor().items())
        return f"{self.name}: {parts} ({self.total_gpus} GPUs, {len(self.nodes)} nodes)"

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


# ---------------------------------------------------------------------------------------------
# Compact form and YAML


def parse_compact(text: str, gpus_per_server: int = 1, name: str | None = None) -> ClusterSpec:
    """Parse ``flavor:count[,flavor:count...]`` into a cluster of ``gpus_per_server``-GPU nodes.

    A flavor whose count is not a multiple of ``gpus_per_server`` gets one smaller server for
    the rest (the planner's ``nodes_for`` lays devices out the same way).

    >>> parse_compact("v100:4,k80:2", gpus_per_server=2).describe()
    'v100:4,k80:2: 4×V100-16GB, 2×K80 (6 GPUs, 3 nodes)'
    >>> parse_compact("v100:12", gpus_per_server=8).describe()
    'v100:12: 12×V100-16GB (12 GPUs, 2 nodes)'
    """
    if gpus_per_server < 1:
        raise SpecError("--gpus-per-server must be at least 1")
    nodes: list[Node] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        fl, sep, cnt = part.partition(":")
        if not sep:
            raise SpecError(f"cluster {text!r}: expected flavor:count, got {part!r}")
        try:
            count = int(cnt)
        except ValueError:
            raise SpecError(f"cluster {text!r}: GPU count {cnt!r} is not an integer") from None
        if count <= 0:
            raise SpecError(f"cluster {text!r}: GPU count for {fl!r} must be positive")
        f = resolve_flavor(fl)
        full, rest = divmod(count, gpus_per_server)
        nodes += make_nodes(f, full, gpus_per_server)
        if rest:
            nodes += make_nodes(f, 1, rest, start=full)
    return ClusterSpec(name or text, tuple(nodes))


class _NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    flavor: str
    count: int = Field(1, ge=1)
    gpus: int = Field(..., ge=0)
    cpu_cores: int | None = Field(None, ge=1)
    mem_gib: float | None = Field(None, gt=0)
    rack: str | None = None
    prefix: str | None = None
    intra_link: LinkKind | None = None
    inter_link: LinkKind | None = None
    inter_bw_gbps: float | None = Field(None, gt=0)
    nvlink_domain: str | None = Field(None, min_length=1)
    nodes_per_nvlink_domain: int | None = Field(None, ge=1)
    switch_path: list[str] | None = Field(None, max_length=3)


class _ClusterFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    nodes: list[_NodeGroup] = Field(..., min_length=1)
    topology: str | None = None


def load_cluster_yaml(path: str | Path) -> ClusterSpec:
    """Read a cluster YAML file (see the module docstring); unknown keys are errors."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"{p}: not valid YAML: {e}") from None
    try:
        spec = _ClusterFile.model_validate(raw)
    except ValidationError as e:
        raise SpecError(f"{p}: {_first_error(e)}") from None
    nodes: list[Node] = []
    counters: Counter[str] = Counter()
    for g in spec.nodes:
        f = resolve_flavor(g.flavor)
        pfx = g.prefix or f.short.lower()
        if g.nvlink_domain is not None and g.nodes_per_nvlink_domain is not None:
            raise SpecError(f"{p}: node group {pfx}: give nvlink_domain or "
                            "nodes_per_nvlink_domain, not both")
        if g.switch_path is not None and not all(s.strip() for s in g.switch_path):
            raise SpecError(f"{p}: node group {pfx}: switch_path has an empty switch name")
        group = make_nodes(
            f, g.count, g.gpus, prefix=pfx, start=counters[pfx], cpu_cores=g.cpu_cores,
            mem_gib=g.mem_gib, rack=g.rack,
            intra_link=Link.of(g.intra_link) if g.intra_link else None,
            inter_link=Link.of(g.inter_link, g.inter_bw_gbps) if g.inter_link else None,
        )
        per = g.nodes_per_nvlink_domain
        nodes += [
            replace(n, nvlink_domain=g.nvlink_domain if per is None
                    else f"{pfx}-nvl{(counters[pfx] + i) // per}",
                    switch_path=tuple(g.switch_path or ()))
            for i, n in enumerate(group)
        ]
        counters[pfx] += g.count
    if spec.topology is not None:
        table_path = Path(spec.topology)
        if not table_path.is_absolute():
            table_path = p.parent / table_path
        nodes = list(apply_topology(nodes, load_topology_file(table_path), str(table_path)))
    return ClusterSpec(spec.name or p.stem, tuple(nodes))


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    return f"field {loc!r}: {err['msg']}"


# ---------------------------------------------------------------------------------------------
# Presets


def _data_file(name: str) -> str:
    return resources.files("tessera.data").joinpath("clusters", name).read_text()


def _philly() -> ClusterSpec:
    """Philly's raw machine list: 321 × 2-GPU (12 GB) + 231 × 8-GPU (24 GB) servers.

    The trace does not name GPU models. The 12 GB GPUs are modelled as K80 (12 GB per GPU) and
    the 24 GB GPUs as P40 (24 GB); ``perf`` answers P40 questions from P100 measurements and
    says so.
    """
    nodes: list[Node] = []
    rows = csv.reader(_data_file("philly_cluster_machine_list.csv").splitlines()[1:])
    for i, row in enumerate(rows):
        if not row:
            continue
        mid, gpus, mem = row[0].strip(), int(row[1]), row[2].strip().upper()
        flavor = resolve_flavor("K80" if mem.startswith("12") else "P40")
        nodes += make_nodes(flavor, 1, gpus, prefix=f"philly-{mid}", rack=f"rack{i // 16}")
    return ClusterSpec("philly", tuple(_rename(nodes)))


def _rename(nodes: list[Node]) -> list[Node]:
    return [replace(n, node_id=n.node_id.rsplit("-", 1)[0]) for n in nodes]


_PAI_FLAVOR = {"MISC": "K80", "P100": "P100", "T4": "T4", "V100": "V100", "V100M32": "V100-32GB"}


def _pai_2020() -> ClusterSpec:
    """Alibaba PAI (July–Aug 2020) GPU machines: 1,814 servers, 6,742 GPUs.

    ``MISC`` machines held older GPUs (K40m, K80, M60); they are modelled as K80.
    CPU-only machines are left out.
    """
    nodes: list[Node] = []
    for i, row in enumerate(csv.reader(_data_file("pai_machine_spec.csv").splitlines())):
        if not row or int(row[4]) == 0:
            continue
        mid, gtype, cpu, mem, gpus = row[0], row[1], int(row[2]), float(row[3]), int(row[4])
        f = resolve_flavor(_PAI_FLAVOR[gtype])
        nodes += make_nodes(
            f, 1, gpus, prefix=f"pai-{mid[:10]}-{i}", cpu_cores=cpu, mem_gib=mem,
            rack=f"{gtype.lower()}-rack{i // 32}",
        )
    return ClusterSpec("pai-2020", tuple(_rename(nodes)))


def _gavel_108() -> ClusterSpec:
    """Gavel's simulated cluster: 36 V100 + 36 P100 + 36 K80, one GPU per server."""
    return parse_compact("v100:36,p100:36,k80:36", 1, name="gavel-108")


#: The flavors of the built-in server types below (names resolved once, here).
_A100_40GB, _V100, _T4, _RTX_2080TI = resolve_flavors(("A100-40GB", "V100", "T4", "RTX-2080Ti"))


def _modern_mixed() -> ClusterSpec:
    """A modern mixed cluster (64 GPUs) built from three of the server types Sia profiled: 2
    DGX-A100 (8×A100-40GB), 3 Azure ND40rs_v2 (8×V100), 6 AWS g4dn.12xlarge (4×T4, Ethernet
    between servers). Not the cluster Sia evaluates on (that is ``sia-64``, with RTX 2080 Ti
    servers where this one has V100s)."""
    nodes = (
        make_nodes(_A100_40GB, 2, 8, rack="dgx", cpu_cores=128, mem_gib=1024)
        + make_nodes(_V100, 3, 8, rack="azure", cpu_cores=40, mem_gib=672)
        + make_nodes(_T4, 6, 4, rack="aws", cpu_cores=48, mem_gib=192,
                     inter_link=Link.of(LinkKind.ETHERNET, 6.25))
    )
    return ClusterSpec("modern-mixed", tuple(nodes))


def _sia_64() -> ClusterSpec:
    """Sia's simulated heterogeneous cluster (SOSP'23, 64 GPUs): 6 T4 servers × 4 GPUs
    (g4dn.12xlarge), 3 RTX 2080 Ti servers × 8, 2 DGX-A100 × 8 (A100-40GB). The T4 and A100
    servers are described as in ``modern-mixed``; Sia gives no host specification for its RTX
    servers, so they get the catalog defaults (PCIe inside, InfiniBand between)."""
    nodes = (
        make_nodes(_T4, 6, 4, rack="aws", cpu_cores=48, mem_gib=192,
                   inter_link=Link.of(LinkKind.ETHERNET, 6.25))
        + make_nodes(_RTX_2080TI, 3, 8, rack="rtx")
        + make_nodes(_A100_40GB, 2, 8, rack="dgx", cpu_cores=128, mem_gib=1024)
    )
    return ClusterSpec("sia-64", tuple(nodes))


def _lingjun_847() -> ClusterSpec:
    """Alibaba Lingjun's 847 hosts under their real ToR/aggregation/core switches, each
    modelled as 8 × A100-80GB (the table names no GPUs; see :mod:`tessera.model.topology`)."""
    return ClusterSpec("lingjun-847", lingjun_nodes())


def _synergy_128() -> ClusterSpec:
    """Synergy's simulated cluster (OSDI'22, section 5; its ``configs/default_cluster.ini``):
    16 servers of 8 V100s, each with 24 CPU cores and 500 GB of host memory -- 3 CPUs and
    62.5 GB per GPU, the GPU-proportional share its profiles are normalised to."""
    return ClusterSpec("synergy-128", tuple(make_nodes(_V100, 16, 8, rack="synergy",
                                                       cpu_cores=24, mem_gib=500)))


def _synergy_mixed() -> ClusterSpec:
    """Issue 33 part 4's mixed cluster (128 GPUs): 12 of Synergy's V100 servers (8 GPUs, 24
    CPUs, 500 GB: 3 CPUs per GPU) beside 4 DGX-A100-like servers (8 × A100-40GB, 128 CPUs,
    1 TiB: 16 CPUs per GPU) -- server types whose CPU:GPU ratios differ by 5×."""
    return ClusterSpec("synergy-mixed", tuple(
        make_nodes(_V100, 12, 8, rack="v100", cpu_cores=24, mem_gib=500)
        + make_nodes(_A100_40GB, 4, 8, rack="a100", cpu_cores=128, mem_gib=1024)))


PRESETS = {
    "gavel-108": _gavel_108,
    "philly": _philly,
    "pai-2020": _pai_2020,
    "modern-mixed": _modern_mixed,
    "sia-64": _sia_64,
    "lingjun-847": _lingjun_847,
    "synergy-128": _synergy_128,
    "synergy-mixed": _synergy_mixed,
}


def load_cluster(text: str, gpus_per_server: int = 1) -> ClusterSpec:
    """Resolve a preset name, a YAML path or a compact string into a cluster.

    Raises:
        SpecError: when the text is none of these, or what it names is malformed.
    """
    if text in PRESETS:
        return PRESETS[text]()
    if text.endswith((".yaml", ".yml")):
        if not Path(text).exists():
            raise SpecError(f"cluster file {text!r} does not exist")
        return load_cluster_yaml(text)
    if ":" in text:
        return parse_compact(text, gpus_per_server)
    raise SpecError(
        f"cluster {text!r} is not a preset ({', '.join(PRESETS)}), a YAML file, "
        "or a compact flavor:count list"
    )
