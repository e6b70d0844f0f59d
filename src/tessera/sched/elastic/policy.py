"""What the elastic allocation policies (Sia, Pollux, ``goodput_srpt``) share.

Each of them, every round: lists the configurations the up servers offer
(:class:`ConfigSet`), values each job's possible configurations in its own way, solves the
one-configuration-per-job program (:func:`tessera.sched.elastic.ilp.choose_configs`) and
turns the answer into a :class:`~tessera.sched.core.policy.Ranking` with per-job sizes
(:func:`answer`). Between rounds they remember how often each job was restarted
(:class:`ElasticMemory`): Sia and Pollux damp a re-allocation by the *re-allocation factor*
(:func:`realloc_factor`).

Rigid jobs take part with their own GPU count on each flavor the oracle profiles for them
(:meth:`ConfigSet.rigid`) and are placed at that count, never resized.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.perf.goodput_fit import StepFits
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView, Snapshot
from tessera.sched.elastic.goodput import Config, GoodputModel, flavor_nodes
from tessera.sched.elastic.ilp import Choices
from tessera.sched.elastic.sizes import ElasticSize, even_batch


class ElasticPolicy(Policy):
    """Base of the policies that size elastic jobs (``sia``, ``pollux``, ``goodput_srpt``):
    preemptive, round-based, answering with ``Ranking.sizes``, each with its own
    :class:`~tessera.sched.elastic.goodput.GoodputModel` cache (kept across rounds)."""

    preemptive = True
    round_based = True
    elastic = True

    def __init__(self, config: PolicyConfig | None = None, agnostic: bool = False,
                 name: str = "") -> None:
        super().__init__(config, agnostic, name)
        self.model = GoodputModel()

    def elastic_row(self, spec: JobSpec, sets: ConfigSet, most: int, progress: float, j: int,
                    batches: dict[tuple[int, int], float], gns: float | None = None,
                    fits: StepFits = ()) -> list[tuple[int, float]]:
        """Elastic job ``spec``'s (index ``j``) goodput per base configuration of at most
        ``most`` GPUs at ``progress`` (:meth:`GoodputModel.row`; with ``gns`` and ``fits``,
        the job's reported noise scale and fitted throughput, from them); records each
        configuration's best batch in ``batches``."""
        out: list[tuple[int, float]] = []
        for c, g, batch in self.model.row(spec, sets.base_configs, most, progress, gns, fits):
            out.append((c, g))
            batches[(j, c)] = batch
        return out


@dataclass(frozen=True, slots=True)
class ElasticMemory:
    """A policy's memory between rounds.

    Attributes:
        restarts: how many times each active job's allocation was changed while it ran.
        largest_run: the most GPUs each active job has run on so far.
    """

    restarts: Mapping[JobId, int] = field(default_factory=dict)
    largest_run: Mapping[JobId, int] = field(default_factory=dict)

    def explored_max(self, view: JobView) -> int:
        """The most GPUs Sia's and Pollux's simulators let a job have now: twice the most it
        has run on (1 before it first runs). A job's throughput model is fitted to the
        placements it has run on, so its range grows by doubling as it is observed."""
        p = view.placement
        ran = max(self.largest_run.get(view.spec.job_id, 0),
                  p.num_gpus if view.running and p is not None else 0)
        return max(2 * ran, 1)

    @classmethod
    def of(cls, state: object) -> ElasticMemory:
        """The memory handed back in the snapshot, or an empty one (first round, or another
        policy's state)."""
        return state if isinstance(state, ElasticMemory) else cls()


def realloc_factor(age_s: float, restarts: int, restart_s: float) -> float:
    """Pollux's and Sia's damping of a re-allocation, in [0, 1].

    ``(age − restarts × restart_s) / (age + restart_s)``: the share of the job's life it would
    have spent making progress if it paid one more restart, given those it paid already. A
    job younger than one restart is not damped (factor 1).
    """
    if age_s < restart_s:
        return 1.0
    return max(age_s - restarts * restart_s, 0.0) / (age_s + restart_s)


def damp_changes(values: list[tuple[int, float]], view: JobView, current: int | None,
                 memory: ElasticMemory, now_s: float, restart_s: float,
                 ) -> list[tuple[int, float]]:
    """``values`` (per configuration) with every configuration but the job's ``current`` one
    multiplied by its :func:`realloc_factor`; unchanged for a job not running (``None``)."""
    if current is None or not values:
        return values
    f = realloc_factor(now_s - view.spec.submit_time_s,
                       memory.restarts.get(view.spec.job_id, 0), restart_s)
    return [(c, x if c == current else x * f) for c, x in values]


def rigid_rates(ctx: PolicyContext, sets: ConfigSet, spec: JobSpec) -> list[tuple[int, float]]:
    """A rigid job's consolidated rate at its own count on each flavor the oracle profiles
    for it (:meth:`ConfigSet.rigid`), where positive."""
    out: list[tuple[int, float]] = []
    for r in ctx.oracle.rates(spec):
        c = sets.rigid(r.flavor, spec.num_gpus)
        if c is not None and r.consolidated > 0:
            out.append((c, r.consolidated))
    return out


class ConfigSet:
    """The configurations of one round: a base set, plus each rigid job's own count."""

    def __init__(self, base: tuple[Config, ...], nodes: tuple[Node, ...]) -> None:
        self.configs: list[Config] = list(base)
        self.base = len(base)
        self.base_configs = base
        self._index = {(c.flavor, c.num_gpus): i for i, c in enumerate(base)}
        self._per_node = {f: per for f, (_n, per) in flavor_nodes(nodes).items()}

    def rigid(self, flavor: GpuFlavor, num_gpus: int) -> int | None:
        """Index of ``num_gpus`` GPUs of ``flavor`` (added if new; ``None``: no such flavor)."""
        per = self._per_node.get(flavor)
        if per is None:
            return None
        key = (flavor, num_gpus)
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.configs)
            self.configs.append(Config(flavor, num_gpus, per))
        return i

    def allowed(self, spec: JobSpec, c: int) -> bool:
        """Whether configuration ``c`` is of a flavor ``spec`` accepts (any, if it names none)."""
        return not spec.flavors or self.configs[c].flavor in spec.flavors

    def current(self, view: JobView) -> int | None:
        """Index of the configuration a running job holds now (``None``: not running, or a
        gang no configuration describes, e.g. mixed)."""
        p = view.placement
        if not view.running or p is None or p.is_mixed:
            return None
        return self._index.get((p.flavor, p.num_gpus))


def capacity(nodes: tuple[Node, ...]) -> dict[GpuFlavor, int]:
    """GPUs of each flavor on ``nodes`` (an elastic round re-allocates all of them)."""
    out: dict[GpuFlavor, int] = {}
    for n in nodes:
        out[n.flavor] = out.get(n.flavor, 0) + n.gpus
    return out


def answer(
    snap: Snapshot, sets: ConfigSet, choices: Choices, batches: Mapping[tuple[int, int], float],
    memory: ElasticMemory, name: str,
) -> Ranking:
    """The ranking for a solved round.

    Chosen jobs are listed largest gang first (the order the core places new gangs in), each
    at its configuration's flavor; each elastic one gets its count and the batch the goodput
    model chose for it (``batches[(job index, config index)]``), moved to the nearest one in
    its range that splits evenly over its ranks (:func:`~tessera.sched.elastic.sizes.even_batch`;
    if none does, a note says so). A running job whose
    configuration changes (or is taken away) counts one more restart.
    """
    configs = sets.configs
    order = sorted(choices.picked, key=lambda j: (-configs[choices.picked[j]].num_gpus, j))
    candidates: list[tuple[JobId, GpuFlavor]] = []
    sizes: dict[JobId, ElasticSize] = {}
    notes: dict[JobId, str] = {}
    for j in order:
        v = snap.jobs[j]
        c = configs[choices.picked[j]]
        candidates.append((v.spec.job_id, c.flavor))
        batch = batches.get((j, choices.picked[j]))
        e = v.spec.elastic
        if e is not None and batch is not None:
            even = even_batch(batch, c.num_gpus, e.initial_batch_samples, e.max_batch_samples)
            size = max(round(batch), 1) if even is None else even
            sizes[v.spec.job_id] = ElasticSize(c.num_gpus, size)
            notes[v.spec.job_id] = f"{name}: {c.num_gpus}×{c.flavor} at batch {size}" + (
                "" if even is not None else
                f" (no batch in its range {e.initial_batch_samples}-{e.max_batch_samples} "
                f"splits evenly over {c.num_gpus} ranks: their shares differ by one sample)")
    restarts: dict[JobId, int] = {}
    largest: dict[JobId, int] = {}
    for j, v in enumerate(snap.jobs):
        jid = v.spec.job_id
        n = memory.restarts.get(jid, 0)
        if v.running and sets.current(v) != choices.picked.get(j, -1):
            n += 1
        if n:
            restarts[jid] = n
        ran = memory.explored_max(v) // 2
        if ran:
            largest[jid] = ran
    return Ranking(tuple(candidates), state=ElasticMemory(restarts, largest), notes=notes,
                   fallbacks=(choices.fallback,) if choices.fallback else (), sizes=sizes)
