"""Synergy-TUNE as Synergy's simulator runs it: every gang's CPUs and memory chosen again at
every decision, oldest first.

Synergy (``simulator/resources/cluster.py`` ``_tune``, ``schedulers/fifo_synergy_new.py`` of
github.com/msr-fiddle/synergy; read, not copied) ends every job's lease each 300 s round and
allocates the whole cluster again from nothing, in the base policy's order (FIFO: arrival).
For each job:

1. its **demand** (the CPUs and memory per GPU at which it trains fastest), where it fits;
2. else its **fair share** -- the GPU-proportional share if its demand exceeds that share in
   CPUs *or* memory, else its demand (a language model asking 1 CPU keeps 1) -- and it runs
   at speed 1.0 (Synergy resets its speedup), never at a point in between;
3. else, when even the fair share is not free on a node, the gangs already served this round
   on that node give back: sorted by the nodes they span (fewest first), then CPUs per GPU,
   then memory per GPU (most first), each is reset *whole* to its own fair share (on all its
   nodes, speed 1.0) until the newcomer's fair share is free.

The order is arrival whatever the base policy (Synergy uses its policy's order; for FIFO,
the reproduced case, the two agree).

A new one-node gang goes where Synergy would put it: the node with the fewest free GPUs whose
free CPUs and memory hold its demand, else its fair share (:mod:`tessera.sched.resources.place`).
A running gang keeps its GPUs (Synergy re-packs GPUs each round too: the twin setting
``repack=round``, :mod:`tessera.sched.resources.repack`, does that);
the CPUs and memory of every gang that runs after the decision -- running and newly started
alike -- are dealt again by the rules above, at every decision instead of every 300 s. A
gang whose share changed keeps its GPUs and is re-timed in place
(:mod:`tessera.sim.host_retune`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobSpec
from tessera.model.resources import proportional_share
from tessera.perf.synergy_demand import synergy_sim_demand
from tessera.sched.core.snapshot import Placement, Snapshot
from tessera.sched.resources.place import gpus_free_after, repick
from tessera.sched.resources.speed import host_held, node_sizes

_EPS = 1e-9
Host = tuple[tuple[str, float, float], ...]


def demand_per_gpu(spec: JobSpec, prop_c: float, prop_m: float) -> tuple[float, float]:
    """A job's demand per GPU: Synergy's simulator demand for a job of its workload
    (:mod:`tessera.perf.synergy_demand`); else the least CPUs (then memory) at which its
    profile reaches its best speed; else its ``HostDemand``; else the proportional share."""
    sim = synergy_sim_demand(spec)
    if sim is not None:
        return sim
    sens = spec.sensitivity
    if sens is not None:
        top = max(p.speedup for p in sens.points)
        best = min((p for p in sens.points if p.speedup >= top - _EPS),
                   key=lambda p: (p.cpus_per_gpu, p.mem_gib_per_gpu))
        return best.cpus_per_gpu, best.mem_gib_per_gpu
    if spec.host is not None:
        return spec.host.per_gpu_amounts(spec.num_gpus)
    return prop_c, prop_m


def fair_per_gpu(spec: JobSpec, prop_c: float, prop_m: float) -> tuple[float, float]:
    """Synergy's fair share per GPU (its ``_make_fair_share``): the proportional share when the
    demand exceeds it in CPUs or memory, else the demand itself."""
    want_c, want_m = demand_per_gpu(spec, prop_c, prop_m)
    if want_c > prop_c + _EPS or want_m > prop_m + _EPS:
        return prop_c, prop_m
    return want_c, want_m


def _amounts(spec: JobSpec, p: Placement, sizes: Mapping[str, tuple[int, float, float]],
             fair: bool) -> Host:
    """``((node, cpus, mem), ...)`` of ``spec``'s demand (or fair share) on ``p``'s nodes; a
    demand over a whole server is capped at it (as Synergy caps it)."""
    out = []
    for node_id, g in p.gpus_by_node:
        ng, nc, nm = sizes[node_id]
        prop_c, prop_m = proportional_share(1, ng, nc, nm)
        per = fair_per_gpu if fair else demand_per_gpu
        c, m = per(spec, prop_c, prop_m)
        out.append((node_id, min(c * g, nc), min(m * g, nm)))
    return tuple(out)


def _fits(host: Host, free: Mapping[str, list[float]]) -> bool:
    return all(free[n][0] + _EPS >= c and free[n][1] + _EPS >= m for n, c, m in host)


def _fits_rule(spec: JobSpec, sizes: Mapping[str, tuple[int, float, float]],
               free: Mapping[str, list[float]], fair: bool) -> Callable[[Placement], bool]:
    """Whether ``spec``'s demand (or fair share) on a placement is free now."""
    def fits(q: Placement) -> bool:
        return _fits(_amounts(spec, q, sizes, fair), free)
    return fits


def _order(snapshot: Snapshot, ids: set[JobId]) -> list[JobSpec]:
    """The gangs of ``ids`` oldest first (Synergy's FIFO order; the snapshot's order on ties)."""
    specs = [(j.spec.submit_time_s, k, j.spec) for k, j in enumerate(snapshot.jobs)
             if j.spec.job_id in ids]
    return [s for _t, _k, s in sorted(specs, key=lambda x: (x[0], x[1]))]


def tune_round(snapshot: Snapshot, placements: dict[JobId, Placement], cluster: ClusterSpec,
               new: frozenset[JobId] = frozenset(),
               movable: frozenset[JobId] = frozenset()) -> tuple[JobId, ...]:
    """Deal the CPUs and memory of every gang in ``placements`` again, by Synergy-TUNE's rules
    (module docstring), and write them into ``placements`` (a gang that already holds
    explicit amounts, unchanged, keeps its placement object).

    Where a gang goes, as Synergy re-places every job each round
    (:func:`~tessera.sched.resources.place.repick`): a one-node gang of ``new`` (the round
    starts it) goes to the node with the fewest free GPUs where its demand fits, else its
    fair share, else where the core put it; a one-node running gang of ``movable`` whose
    demand is not free on its node moves to a node where it is, if any. Returns the running
    gangs moved (the caller starts them anew: a move costs a checkpoint and a restore)."""
    sizes = node_sizes(cluster)
    free = {n: [c, m] for n, (_g, c, m) in sizes.items()}
    for n, c, m in snapshot.host_held:  # running CPU-only jobs (cpu_stage) keep theirs
        if n in free:
            free[n][0] -= c
            free[n][1] -= m
    given: dict[JobId, Host] = {}
    on_node: dict[str, list[JobSpec]] = {}
    order = _order(snapshot, set(placements))
    free_gpus = gpus_free_after(snapshot, placements) if new or movable else {}
    sw = _Swaps(snapshot, placements, movable, {s.job_id: s for s in order}) if new or movable \
        else None
    moved: list[JobId] = []
    for spec in order:
        jid = spec.job_id
        p = placements[jid]
        host = _amounts(spec, p, sizes, fair=False)
        if sw is not None and (jid in new or (jid in movable and not _fits(host, free))):
            demand = _fits_rule(spec, sizes, free, fair=False)
            q = repick(p, snapshot, free_gpus, demand)
            if q is None:  # no free GPU where its demand is: trade places (Synergy re-packs)
                q = sw.trade(spec, p, demand, given, sizes, moved, new)
            if q is None and jid in new:
                q = repick(p, snapshot, free_gpus, _fits_rule(spec, sizes, free, fair=True))
            if q is not None and q is not p:
                sw.moved(jid, p, q)
                p = placements[jid] = q
                host = _amounts(spec, p, sizes, fair=False)
                if jid not in new and jid not in moved:
                    moved.append(jid)
        if not _fits(host, free):
            host = _amounts(spec, p, sizes, fair=True)
            if not _fits(host, free):
                _reset_peers(host, free, on_node, given, placements, sizes)
        host = tuple((n, min(_round(c), free[n][0]), min(_round(m), free[n][1]))
                     for n, c, m in host)
        for n, c, m in host:
            free[n][0] -= c
            free[n][1] -= m
            on_node.setdefault(n, []).append(spec)
        given[spec.job_id] = host
    for spec in order:
        p = placements[spec.job_id]
        host = given[spec.job_id]
        if not p.host_by_node or tuple(host_held(spec, p, cluster)) != host:
            placements[spec.job_id] = replace(p, host_by_node=host)
    return tuple(moved)


class _Swaps:
    """Trades of GPUs between a gang whose demand finds no free GPU and a younger running gang
    that loses nothing at its fair share (a language model on 1 CPU): the first takes the
    second's GPUs on a node where its demand is free, the second takes the first's. This is
    how Synergy's every-round re-packing ends (the CPU-hungry job where the CPUs are, the
    insensitive one anywhere), done only where it gains, each trade two moves."""

    def __init__(self, snapshot: Snapshot, placements: dict[JobId, Placement],
                 movable: frozenset[JobId], specs: Mapping[JobId, JobSpec]) -> None:
        self.snapshot, self.placements, self.movable, self.specs = (
            snapshot, placements, movable, specs)
        self.by_node: dict[str, list[JobId]] = {}
        for jid, p in placements.items():
            if p.consolidated and not p.is_mixed:
                self.by_node.setdefault(p.gpus_by_node[0][0], []).append(jid)
        self.traded: set[JobId] = set()

    def moved(self, jid: JobId, old: Placement, new: Placement) -> None:
        """Keep the per-node index right after ``jid`` went from ``old`` to ``new``."""
        if old.consolidated and not old.is_mixed:
            self.by_node.get(old.gpus_by_node[0][0], []).remove(jid)
        if new.consolidated and not new.is_mixed:
            self.by_node.setdefault(new.gpus_by_node[0][0], []).append(jid)

    def trade(self, spec: JobSpec, p: Placement, fits: Callable[[Placement], bool],
              given: Mapping[JobId, Host], sizes: Mapping[str, tuple[int, float, float]],
              moved: list[JobId], new: frozenset[JobId]) -> Placement | None:
        """``spec``'s placement on the node (layout order) where a trade works, the partner
        moved onto ``p``'s GPUs (and listed in ``moved``); ``None`` when none does."""
        if (not p.consolidated or p.is_mixed or spec.job_id in self.traded
                or _amounts(spec, p, sizes, fair=True) == _amounts(spec, p, sizes, fair=False)):
            return None  # (a gang that loses nothing at its share gains nothing by a trade)
        (here, g), = p.gpus_by_node
        for node in self.snapshot.up_nodes():
            there = node.node_id
            if there == here or node.flavor != p.flavor:
                continue
            q = replace(p, gpus_by_node=((there, g),), host_by_node=())
            if not fits(q):
                continue
            for yid in self.by_node.get(there, ()):
                yp = self.placements[yid]
                if (yid in given or yid not in self.movable or yid in self.traded
                        or yid in new or yp.num_gpus != g):
                    continue
                ys = self.specs[yid]
                if _amounts(ys, yp, sizes, fair=True) != _amounts(ys, yp, sizes, fair=False):
                    continue  # it would lose speed at its share
                yq = replace(yp, gpus_by_node=((here, g),), host_by_node=())
                self.moved(yid, yp, yq)
                self.placements[yid] = yq
                self.traded.update((yid, spec.job_id))
                moved.append(yid)
                return q
        return None


def _reset_peers(need: Host, free: dict[str, list[float]], on_node: Mapping[str, list[JobSpec]],
                 given: dict[JobId, Host], placements: Mapping[JobId, Placement],
                 sizes: Mapping[str, tuple[int, float, float]]) -> None:
    """Synergy's peer adjustment: on each node where ``need`` is not free, reset the gangs
    served there (those on fewest nodes first, then most CPUs per GPU, then memory per GPU;
    the older on a tie) to their fair share, whole, until it is."""
    for node_id, need_c, need_m in need:
        f = free[node_id]
        peers = []
        for k, o in enumerate(on_node.get(node_id, [])):
            g = sum(x for _n, x in placements[o.job_id].gpus_by_node)
            held_c = sum(c for _n, c, _m in given[o.job_id])
            held_m = sum(m for _n, _c, m in given[o.job_id])
            nodes = len(placements[o.job_id].gpus_by_node)
            peers.append((nodes, -held_c / g, -held_m / g, k, o))
        for *_key, o in sorted(peers, key=lambda x: (x[0], x[1], x[2], x[3])):
            if f[0] + _EPS >= need_c and f[1] + _EPS >= need_m:
                break
            fair = _amounts(o, placements[o.job_id], sizes, fair=True)
            old = {n: (c, m) for n, c, m in given[o.job_id]}
            new = []
            for n, c, m in fair:
                oc, om = old[n]
                c, m = min(c, oc), min(m, om)  # (a reset never takes more than it held)
                free[n][0] += oc - c
                free[n][1] += om - m
                new.append((n, _round(c), _round(m)))
            given[o.job_id] = tuple(new)


def _round(x: float) -> float:
    """Drop float dust (3.0000000001 CPUs) so books add up exactly. Clamp to what is free
    *after* rounding: 510.9609375 GiB free rounds up to 510.960938, more than the node has."""
    r = round(x, 6)
    return 0.0 if abs(r) < 1e-9 else r
