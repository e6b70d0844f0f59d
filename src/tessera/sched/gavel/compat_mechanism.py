"""Gavel's round mechanism, the part every ``--compat gavel`` policy shares.

Gavel (``scheduler/scheduler.py`` @ c4fa400) runs in rounds of ``--time_per_iteration``
(360 s). Its policies only say *what share* ``X[job, type]`` of each worker type a job deserves;
the mechanism turns shares into the jobs that run this round, and that part decides most of
what a trace's average JCT comes out as, so it is reproduced here line for line:

1. **gated recompute** -- shares are recomputed only when something happened (an arrival, a
   completion, a failed micro-task) *and* ``reset_interval_s`` (1920 s) passed since the last
   reset, or the last reset was at time 0;
2. **reset bookkeeping** -- deficits accumulate ``X·elapsed − (time − 180 s)``, every job's
   time restarts at the 180 s seed, each type's total at ``180 × jobs``;
3. **priorities** ``X / (job time / type time)``;
4. **selection** -- one list per type sorted by ``(priority, deficit, share)``, the lists
   concatenated in Gavel's type order (``v100, p100, k80``; shuffled each round for the agnostic
   policies), then one greedy pass that skips what does not fit.

:class:`GavelCompatPolicy` does all of this in :meth:`~GavelCompatPolicy.rank` and asks a
subclass only for the shares (:meth:`~GavelCompatPolicy.allocate`, Gavel's
``_compute_allocation``); the subclasses, one per Gavel policy, are in
:mod:`tessera.sched.gavel.compat`. :func:`gavel_boundary` is what the simulator's
Gavel driver reports at each round boundary (time credited per micro-task, events).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView, Snapshot
from tessera.sched.gavel import (
    Backend,
    GavelState,
    JobAccount,
    ShareProblem,
    Shares,
    SolverName,
    credit_round,
    priorities,
    ranked_entries,
    resolve_solver,
)
from tessera.sched.gavel.packed import PackedState, credit_combos

#: Gavel's round (``--time_per_iteration``); jobs are seeded with half of it per flavor.
ROUND_S = 360.0
#: Gavel's ``minimum_time_between_allocation_resets``.
RESET_INTERVAL_S = 1920.0
#: Gavel's worker-type order for heterogeneity-aware policies.
PERF_ORDER = ("v100", "p100", "k80")
#: Our flavor behind each of Gavel's worker types (``V100-16GB`` for ``v100``).
_GAVEL_TYPE_OF = {resolve_flavor(name): name for name in PERF_ORDER}


def gavel_type(flavor: GpuFlavor) -> str:
    """Gavel's worker-type name for one of our flavors (``V100-16GB`` → ``v100``)."""
    return _GAVEL_TYPE_OF.get(flavor, flavor.short.lower())


class GavelCompatConfig(PolicyConfig):
    seed: int = Field(0, description="Gavel's --seed (FIFO RNG: seed; type shuffler: seed+5)")
    solver: SolverName = Field("auto", description="ecos | highs | highs-ipm | auto")
    reset_interval_s: float = Field(RESET_INTERVAL_S, ge=0)


def run_round_s(snap: Snapshot) -> float:
    """The run's round length, from the snapshot (``--round-s``, or Gavel's 360 s under
    ``--compat gavel``): Gavel seeds every job with half of it per flavor. A snapshot without
    one (a test calling ``rank`` directly) gets Gavel's :data:`ROUND_S`."""
    return snap.round_s if snap.round_s is not None else ROUND_S


def gavel_boundary(
    state: Any,
    credits: Sequence[tuple[JobId | tuple[JobId, ...], GpuFlavor, float]],
    event: bool,
    drained: bool,
) -> Any:
    """What the simulator reports at a round boundary, before it asks for the next round.

    Args:
        state: the policy state returned last round (left alone unless it is a
            :class:`~tessera.sched.gavel.GavelState`).
        credits: ``(job, flavor, execution_s)`` per successful micro-task of the round that just
            ended (``job`` a tuple of the jobs of a packed pair, or of one job), completed jobs
            included (Gavel's ``_done_callback`` adds the time before it
            removes the job).
        event: an arrival, completion or failed micro-task happened at this boundary.
        drained: no arrivals are left and nothing ran last round (Gavel then sets
            ``_last_reset_time = 0``, forcing a recompute).
    """
    if isinstance(state, PackedState):
        return credit_combos(state, [(c if isinstance(c, tuple) else (c,), f, s)
                                     for c, f, s in credits], event, drained)
    if not isinstance(state, GavelState):
        return state
    return credit_round(state, [(c[0] if isinstance(c, tuple) else c, f, s)
                                for c, f, s in credits], event, drained)


class GavelCompatPolicy(Policy):
    """Gavel's round mechanism around one of its policies; subclasses compute the shares."""

    preemptive = True
    round_based = True
    Config = GavelCompatConfig
    #: Gavel refuses priority-0 entries for policies whose name starts with "FIFO".
    refuses_zero_priority: ClassVar[bool] = False
    #: Whether :meth:`allocate` solves an optimisation (FIFO does not).
    uses_solver: ClassVar[bool] = True

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        """Gavel's ``_compute_allocation``: ``(X, new memory, fallbacks)`` for the jobs of
        ``p`` (``views`` in the same order)."""
        raise NotImplementedError

    # -- the mechanism ------------------------------------------------------------------------

    def _cfg(self) -> GavelCompatConfig:
        cfg = self.config
        assert isinstance(cfg, GavelCompatConfig)
        return cfg

    def _initial(self) -> GavelState:
        cfg = self._cfg()
        return GavelState(
            flavors=(), accounts={}, worker_time_s=(), shares=None, last_reset_s=0.0,
            need_update=True, shuffle_rng=random.Random(cfg.seed + 5).getstate(),
        )

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self._cfg()
        snap = ctx.snapshot
        st = snap.policy_state if isinstance(snap.policy_state, GavelState) else self._initial()
        now = snap.now_s
        half = run_round_s(snap) / 2.0  # (the run's round, never a second setting)
        cap: dict[GpuFlavor, int] = {}
        for node in snap.up_nodes():
            cap[node.flavor] = cap.get(node.flavor, 0) + node.gpus
        flavors = tuple(cap)
        jobs = snap.jobs
        ids = tuple(j.job_id for j in jobs)
        thr_maps = [_real_rates(ctx, j) for j in jobs]
        thr = np.array([[t.get(f, 0.0) for f in flavors] for t in thr_maps]).reshape(
            len(ids), len(flavors))

        # Membership: new jobs get the 180 s seed and zero deficits; finished ones vanish.
        job_time, deficit, worker_time = st.arrays(ids, flavors, half)
        need_update = st.need_update or ids != st.known
        shares, memory, last_reset = st.shares, st.memory, st.last_reset_s
        fallbacks: tuple[str, ...] = ()

        # _update_priorities: the gated reset and recompute.
        elapsed = now - last_reset
        if need_update and (elapsed >= cfg.reset_interval_s or last_reset == 0):
            old = shares.aligned(ids, flavors)[0] if shares is not None else np.zeros_like(thr)
            received = np.where(np.isnan(job_time), half, job_time) - half
            deficit = deficit + (old * elapsed - received)
            job_time = np.full_like(job_time, half)
            seeded = 0.0
            for _ in ids:
                seeded += half
            worker_time = np.full(len(flavors), seeded)
            last_reset = now
            p = _problem(jobs, flavors, cap, thr_maps)
            backend = (Backend(ctx.lp(), resolve_solver(cfg.solver)) if self.uses_solver
                       else Backend(ctx.lp()))
            x, memory, fallbacks = self.allocate(p, jobs, now, memory, backend)
            shares = Shares(p.jobs, p.flavors, x)
            need_update = False

        # Priorities: share / (job time / flavor time).
        a = shares.aligned(ids, flavors)[0] if shares is not None else np.zeros_like(thr)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(worker_time == 0.0, 0.0, np.nan_to_num(job_time) / worker_time)
        prio = priorities(a, frac, thr != 0.0)

        # Type order (a fresh shuffle every call for the agnostic policies).
        order = _perf_order(flavors)
        shuffler = random.Random()
        shuffler.setstate(st.shuffle_rng)
        if self.agnostic:
            shuffler.shuffle(order)

        # _schedule_jobs_on_workers_helper: one greedy pass over the concatenated lists.
        col = {f: k for k, f in enumerate(flavors)}
        queue = ranked_entries(prio, deficit, a, np.ones(a.shape, dtype=bool),
                               [col[f] for f in order])
        run = self._greedy(queue, jobs, flavors, cap, thr, prio, shares)

        new_state = GavelState(
            flavors=flavors,
            accounts={jid: JobAccount(tuple(job_time[i].tolist()), tuple(deficit[i].tolist()))
                      for i, jid in enumerate(ids)},
            worker_time_s=tuple(worker_time.tolist()), shares=shares, last_reset_s=last_reset,
            need_update=need_update, shuffle_rng=shuffler.getstate(), memory=memory,
        )
        return Ranking(tuple(run), state=new_state, notes=_notes(shares, ids),
                       fallbacks=fallbacks)


    def _greedy(
        self, queue: Sequence[tuple[int, int]], jobs: Sequence[JobView],
        flavors: Sequence[GpuFlavor], cap: dict[GpuFlavor, int], thr: np.ndarray,
        prio: np.ndarray, shares: Shares | None,
    ) -> list[tuple[JobId, GpuFlavor]]:
        """Gavel's one greedy pass: walk ``queue`` (``(job row, flavor column)`` entries in
        priority order), giving each job not yet chosen its whole gang on the first flavor
        with room, a speed there and (for the policies that refuse it) a positive priority.
        A picked job without a share is not given workers (its GPUs idle this round). Returns
        ``(job, flavor)`` pairs, largest gangs first."""
        ids = [j.job_id for j in jobs]
        left = [cap[f] for f in flavors]
        scale = [j.spec.num_gpus for j in jobs]
        picked: list[tuple[int, int]] = []
        chosen: set[int] = set()
        for m, k in queue:
            if left[k] == 0 or m in chosen or thr[m, k] <= 0:
                continue
            if self.refuses_zero_priority and prio[m, k] <= 0.0:
                continue
            if scale[m] > left[k]:
                continue
            left[k] -= scale[m]
            chosen.add(m)
            picked.append((m, k))
        run = [(ids[m], flavors[k]) for m, k in picked if shares is not None and ids[m] in shares]
        gang = {jid: scale[m] for m, jid in enumerate(ids)}
        run.sort(key=lambda c: -gang[c[0]])
        return run


def _notes(shares: Shares | None, ids: Sequence[JobId]) -> dict[JobId, str]:
    notes: dict[JobId, str] = {}
    if shares is None or not shares.jobs:
        return notes
    for jid in ids:
        sh = shares.of(jid)
        if sh:
            notes[jid] = "Gavel share " + ", ".join(
                f"{gavel_type(f)} {x:.2f}" for f, x in sh.items() if x > 1e-6
            )
    return notes


def _real_rates(ctx: PolicyContext, j: JobView) -> dict[GpuFlavor, float]:
    """Gavel's ``_throughputs``: the isolated, consolidated rate on every flavor (0 if none);
    under ``--speeds learned``, the estimate the policy may see (an aware oracle's ``rates``
    are its real rates)."""
    o = ctx.oracle
    return {r.flavor: r.consolidated for r in (o.real_rates if o.agnostic else o.rates)(j.spec)}


def _perf_order(flavors: Sequence[GpuFlavor]) -> list[GpuFlavor]:
    """``v100, p100, k80`` (those present), then any other flavor, fastest first."""
    by_name = {gavel_type(f): f for f in flavors}
    order = [by_name[n] for n in PERF_ORDER if n in by_name]
    rest = sorted((f for f in flavors if f not in order), key=lambda f: -f.fp32_tflops)
    return order + rest


def _problem(
    jobs: Sequence[JobView],
    flavors: Sequence[GpuFlavor],
    cap: Mapping[GpuFlavor, int],
    thr: Sequence[Mapping[GpuFlavor, float]],
) -> ShareProblem:
    """Gavel's order: jobs by id (the snapshot's), flavors alphabetical by Gavel's names."""
    cols = tuple(sorted(flavors, key=gavel_type))
    return ShareProblem(
        jobs=tuple(j.job_id for j in jobs),
        flavors=cols,
        tput=np.array([[t.get(f, 0.0) for f in cols] for t in thr],
                      dtype=float).reshape(len(jobs), len(cols)),
        scale=np.array([j.spec.num_gpus for j in jobs], dtype=float),
        weight=np.array([j.spec.priority_weight for j in jobs], dtype=float),
        capacity=np.array([cap[f] for f in cols], dtype=float),
    )
