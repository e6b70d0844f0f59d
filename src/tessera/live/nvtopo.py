"""A node's NVLink domains, read from ``nvidia-smi topo -m`` at start.

``nvidia-smi topo -m`` prints a matrix: one row and one column per GPU (then NICs, CPU and NUMA
affinity), each cell how two GPUs are connected: ``X`` (itself), ``NV#`` (a bonded set of #
NVLinks), or a PCIe path (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``). GPUs joined by NVLink,
directly or through other GPUs (a DGX-1's hybrid cube mesh joins eight GPUs although not every
pair), form one **NVLink island**; NCCL keeps a ring inside an island on NVLink.

A node whose GPUs form one island is one NVLink domain, named after the host (``node-a``). A
node whose GPUs form several islands (two quads joined over PCIe, as in Volcano #5751: 8 free
GPUs split across two domains) reports each island as its own domain (``node-a/nv0``,
``node-a/nv1``), so a gang of 8 is not promised NVLink it will not get. Rack-scale domains
(GB200 NVL72: servers joined by NVLink switches) cannot be seen from one server's matrix; the
cluster description names them (``nvlink_domain`` in the cluster YAML, see
:mod:`tessera.model.topology`).

On Ray a node carries its domains as custom resources, one unit per GPU:
``ray start --resources '{"nvlink_domain:node-a": 8}'``; :func:`ray_resources` gives that map and
``python -m tessera.live.nvtopo`` prints it for this host. The Ray executor adds
``nvlink_domain:<d>`` to the bundles of a gang that the scheduler put inside domain ``d``, so Ray
keeps it there (:mod:`tessera.live.executors.ray.launch`).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

__all__ = ["DOMAIN_RESOURCE_PREFIX", "NvTopology", "detect", "parse_topo_matrix",
           "ray_resources"]

DOMAIN_RESOURCE_PREFIX = "nvlink_domain:"
"""Prefix of the Ray custom resource that marks a node's GPUs of one NVLink domain."""

_GPU = re.compile(r"GPU(\d+)")
_NVLINK = re.compile(r"NV(\d+)")
_PCIE = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # (nvidia-smi underlines the header, even in a pipe)


@dataclass(frozen=True, slots=True)
class NvTopology:
    """One node's GPU interconnect as ``nvidia-smi topo -m`` shows it.

    Attributes:
        gpus: the GPU indices, in the matrix's order.
        nvlinks: ``(i, j, links)`` for each pair ``i < j`` joined by ``links`` NVLinks.
    """

    gpus: tuple[int, ...]
    nvlinks: tuple[tuple[int, int, int], ...]

    def islands(self) -> tuple[tuple[int, ...], ...]:
        """GPUs joined by NVLink (directly or through other GPUs), lowest index first; a GPU
        with no NVLink is an island of its own."""
        parent = {g: g for g in self.gpus}

        def root(g: int) -> int:
            while parent[g] != g:
                parent[g] = parent[parent[g]]
                g = parent[g]
            return g

        for i, j, _n in self.nvlinks:
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
        groups: dict[int, list[int]] = {}
        for g in self.gpus:
            groups.setdefault(root(g), []).append(g)
        return tuple(tuple(sorted(m)) for _r, m in sorted(groups.items()))

    def domains(self, host: str) -> dict[str, tuple[int, ...]]:
        """This node's NVLink domains, name -> GPUs: ``host`` when every GPU is in one island
        (even a single GPU), else ``host/nv0``, ``host/nv1``, ... per island."""
        islands = self.islands()
        if len(islands) == 1:
            return {host: islands[0]}
        return {f"{host}/nv{k}": isl for k, isl in enumerate(islands)}


def parse_topo_matrix(text: str) -> NvTopology:
    """Parse ``nvidia-smi topo -m`` output (see the module docstring).

    >>> t = parse_topo_matrix("\\tGPU0\\tGPU1\\tCPU Affinity\\nGPU0\\t X \\tNV12\\t0-63\\n"
    ...                       "GPU1\\tNV12\\t X \\t0-63\\n")
    >>> t.islands()
    ((0, 1),)

    Raises:
        ValueError: no GPU matrix in ``text``, a cell that is no known connection, or a matrix
            that is not symmetric.
    """
    header: list[int] | None = None
    rows: dict[int, list[str]] = {}
    for ln in _ANSI.sub("", text).splitlines():
        cells = ln.split()
        if not cells:
            continue
        if header is None:
            # (the header is the first indented line; its GPU columns come first)
            if ln[0].isspace() and _GPU.fullmatch(cells[0]):
                header = []
                for c in cells:
                    m = _GPU.fullmatch(c)
                    if m is None:
                        break
                    header.append(int(m.group(1)))
            continue
        m = _GPU.fullmatch(cells[0])
        if m is None or ln[0].isspace():
            if rows:
                break  # (the NIC rows or the legend: the GPU rows are over)
            continue
        rows[int(m.group(1))] = cells[1:1 + len(header)]
    if header is None or not rows:
        raise ValueError("no GPU matrix in the nvidia-smi topo -m output")
    if sorted(rows) != sorted(header):
        raise ValueError(f"GPU rows {sorted(rows)} do not match the columns {header}")
    links: dict[tuple[int, int], int] = {}
    for g, cells in rows.items():
        if len(cells) < len(header):
            raise ValueError(f"GPU{g}: {len(cells)} cells for {len(header)} GPUs")
        for other, cell in zip(header, cells, strict=False):
            if other == g:
                if cell != "X":
                    raise ValueError(f"GPU{g} to itself is {cell!r}, not X")
                continue
            nv = _NVLINK.fullmatch(cell)
            if nv is None and cell not in _PCIE:
                raise ValueError(f"GPU{g} to GPU{other}: unknown connection {cell!r}")
            n = int(nv.group(1)) if nv else 0
            key = (min(g, other), max(g, other))
            if key in links and links[key] != n:
                raise ValueError(f"GPU{key[0]} and GPU{key[1]} disagree: NV{links[key]} "
                                 f"and {cell!r}")
            links[key] = n
    return NvTopology(tuple(header), tuple((i, j, n) for (i, j), n in sorted(links.items())
                                           if n > 0))


def detect(timeout_s: float = 10.0) -> NvTopology | None:
    """This host's topology from ``nvidia-smi topo -m``; ``None`` when there is no
    ``nvidia-smi`` or it fails (a machine without NVIDIA GPUs or driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                             timeout=timeout_s, check=True).stdout
        return parse_topo_matrix(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def ray_resources(topology: NvTopology, host: str) -> dict[str, float]:
    """The custom resources a Ray node on ``host`` offers for its NVLink domains: one unit of
    ``nvlink_domain:<domain>`` per GPU."""
    return {f"{DOMAIN_RESOURCE_PREFIX}{d}": float(len(g))
            for d, g in topology.domains(host).items()}


def describe(topology: NvTopology | None, host: str) -> str:
    """One line for the service's start: the host's NVLink domains, or why there are none."""
    if topology is None:
        return f"{host}: no nvidia-smi topo -m (no NVIDIA driver): no NVLink domains reported"
    parts = [f"{d} (GPUs {','.join(map(str, g))})" for d, g in topology.domains(host).items()]
    return f"{host}: {len(topology.gpus)} GPUs in NVLink domains {'; '.join(parts)}"


def main() -> None:
    """Print this host's NVLink domains and the ``ray start --resources`` JSON for them."""
    host = socket.gethostname()
    topo = detect()
    print(describe(topo, host))
    if topo is not None:
        print(json.dumps(ray_resources(topo, host)))


if __name__ == "__main__":
    main()
