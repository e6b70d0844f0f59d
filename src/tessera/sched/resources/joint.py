"""Choosing a gang's GPU type together with its CPUs and memory (issue 33, part 4: "ours").

Synergy (OSDI'22) sizes CPUs and memory but sees one GPU type; Gavel and Sia choose GPU types
but count GPUs only. On a cluster whose server types differ in CPUs per GPU -- V100 servers
with 24 cores for 8 GPUs (3 per GPU) beside A100 servers with 128 (16 per GPU) -- the two
choices are one: an image model that needs 9 CPUs per GPU trains 2.4x faster on a server that
can feed it, whatever its GPU, while a language model needing 1 CPU gains nothing from the
cores and should leave them to others.

The rule, all of it here (pure: a snapshot and the oracle's rates in, numbers out):

* a gang's **host speedup on a node** is its profile read at the CPUs and memory per GPU
  Synergy-TUNE would give it there (:func:`node_host_speedup`): its demand where the node has it
  free, else what is free, never below the node's proportional share (TUNE takes that back from
  gangs holding more), never above the node's size;
* its **predicted speed on a flavor** is the flavor's rate for the job times the best host
  speedup among that flavor's nodes with room for the gang's GPUs; when none has room now
  (or the gang is larger than a node), the best over all of them as if empty -- what it gets
  when one frees up; a gang larger than a node at a whole node's share -- :func:`predicted_speeds`;
* ``hetero_host`` (:mod:`tessera.sched.policies.hetero_host`) runs ``hetero_srpt``'s rules --
  shortest remaining work per GPU first, flavors matched by the gain in completion rate --
  on these predicted speeds instead of the GPU rates alone, every round, so the state of the
  CPUs counts: an image model whose V100 servers have no spare cores is worth more on the
  CPU-rich A100 servers than its GPU rate says, and a language model that needs one CPU is
  not (``tests/resources/test_joint.py``).

The CPUs and memory themselves are then chosen by TUNE (:mod:`~tessera.sched.resources.allocate`)
on the nodes the core placed the gang on: the core books them and never over-commits
(``model/host_need.py``, ``sched/core/host_free.py``).
"""

from __future__ import annotations

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Snapshot
from tessera.sched.resources.allocate import free_host, ideal_per_gpu
from tessera.sched.resources.speed import node_map

_EPS = 1e-9


def node_host_speedup(spec: JobSpec, gpus: int, node_gpus: int, node_cpus: float,
                      node_mem_gib: float, free_cpus: float, free_mem_gib: float) -> float:
    """The speedup ``spec``'s profile gives a gang of ``gpus`` GPUs on one node, at the CPUs
    and memory per GPU Synergy-TUNE would hand it there (see the module docstring); 1.0 for a
    job without a profile."""
    sens = spec.sensitivity
    if sens is None or gpus <= 0:
        return 1.0
    prop_c, prop_m = proportional_share(1, node_gpus, node_cpus, node_mem_gib)
    want_c, want_m = ideal_per_gpu(spec, prop_c, prop_m)
    c = min(want_c, max(free_cpus / gpus, prop_c), node_cpus / gpus)
    m = min(want_m, max(free_mem_gib / gpus, prop_m), node_mem_gib / gpus)
    return sens.speedup_at(max(c, 0.0), max(m, 0.0))


class FreeView:
    """Each up node's free GPUs, CPUs and memory in a snapshot, by flavor (built once a round).

    Attributes:
        by_flavor: ``flavor -> [(node_id, free_gpus, node_gpus, cpus, mem_gib, free_cpus,
            free_mem_gib), ...]``.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        nodes = node_map(snapshot.cluster)
        used: dict[str, int] = {}
        for j in snapshot.split().running:
            if j.placement is not None:
                for node_id, g in j.placement.gpus_by_node:
                    used[node_id] = used.get(node_id, 0) + g
        host = free_host(snapshot)
        #: :func:`flavor_host_speedup`'s answers this round
        self.memo: dict[tuple[int, int, GpuFlavor], float] = {}
        self.by_flavor: dict[GpuFlavor, list[tuple[str, int, int, float, float, float,
                                                   float]]] = {}
        for node_id, n in nodes.items():
            if node_id in snapshot.down_nodes:
                continue
            fc, fm = host[node_id]
            self.by_flavor.setdefault(n.flavor, []).append(
                (node_id, n.gpus - used.get(node_id, 0), n.gpus, float(n.cpu_cores),
                 float(n.mem_gib), fc, fm))


def flavor_host_speedup(spec: JobSpec, flavor: GpuFlavor, view: FreeView) -> float:
    """The best host speedup ``spec`` can expect on ``flavor``'s nodes: among those with room
    for its gang now, else among all of them as if empty (what it gets when one frees up; a
    gang larger than a node fills whole nodes). See the module docstring.

    Memoised in ``view`` per (profile, gang size, flavor): jobs of one model share a profile."""
    key = (id(spec.sensitivity), spec.num_gpus, flavor)
    hit = view.memo.get(key)
    if hit is not None:
        return hit
    rows = view.by_flavor.get(flavor, [])
    g = spec.num_gpus
    value = 1.0
    if rows and spec.sensitivity is not None:
        fitting = [r for r in rows if r[1] >= g and r[2] >= g]
        if fitting:
            value = max(node_host_speedup(spec, g, ng, c, m, fc, fm)
                        for ng, c, m, fc, fm in {r[2:] for r in fitting})
        else:
            value = max(node_host_speedup(spec, min(g, ng), ng, c, m, c, m)
                        for ng, c, m in {r[2:5] for r in rows})
    view.memo[key] = value
    return value


def predicted_speeds(spec: JobSpec, oracle: ThroughputOracle,
                     view: FreeView) -> dict[GpuFlavor, float]:
    """``flavor -> steps/s`` ``spec`` is predicted to train at there: the flavor's rate for it
    times the host speedup it can get on that flavor's servers. Flavors it cannot run on are
    left out."""
    out: dict[GpuFlavor, float] = {}
    for r in oracle.rates(spec):
        if r.consolidated > 0:
            out[r.flavor] = r.consolidated * flavor_host_speedup(spec, r.flavor, view)
    return out
