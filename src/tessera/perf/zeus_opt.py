"""Zeus's per-job optimiser: the power limit by just-in-time profiling, the batch size by a bandit.

Zeus (NSDI'23) minimises, for each run of a recurring training job, the cost

    cost = η · energy_to_accuracy + (1 − η) · max_power · time_to_accuracy

with ``max_power`` the GPU's highest power limit (so both terms are in joules) and η in [0, 1]
the user's weight on energy (η = 1: energy only; η = 0: time only). Two knobs:

* **Power limit, just in time.** Epochs to accuracy do not depend on the power limit, so the
  best limit for a batch size is the one of least *epoch* cost. The first run at a batch size
  profiles every limit for an equal slice of its first epoch, then keeps the cheapest for the
  rest of that run and every later run (:func:`jit_power_limit`).
* **Batch size, across recurrences.** Epochs to accuracy are stochastic (seeds differ), so each
  recurrence is a bandit pull. Zeus first *prunes*: two rounds that walk from the default batch
  b0 downwards, then upwards, each direction stopping at the first batch that misses the
  target, b0 moving to the round's cheapest batch. The survivors become arms of a Gaussian
  Thompson-sampling bandit whose posterior for an arm is N(mean cost, var / n) of its runs;
  each recurrence samples every arm and runs the cheapest sample. *Early stopping* ends a run
  once its next epoch would pass β × the cheapest finished recurrence; it then counts as a miss
  and the job is re-run (``retries``).

:func:`simulate_recurring` replays a recurring job on Zeus's traces (each run samples one
seed's epochs to accuracy); :func:`exhaustive_best` is the ground truth it is checked against.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from tessera.errors import SpecError
from tessera.perf.zeus_table import ZeusTable, ZeusWorkload, check_eta, epoch_cost


def zeus_cost(energy_j: float, time_s: float, eta: float, max_power_w: float) -> float:
    """Zeus's cost of a run: η·energy + (1 − η)·max_power·time (joules)."""
    check_eta(eta)
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


@dataclass(frozen=True, slots=True)
class JitProfile:
    """What the first epoch at a batch size learnt and cost.

    Attributes:
        best_limit_w: the limit of least epoch cost (ties: the higher limit).
        epoch_energy_j, epoch_time_s: the profiled first epoch (each limit for 1/N of it).
    """

    best_limit_w: int
    epoch_energy_j: float
    epoch_time_s: float


def jit_power_limit(t: ZeusTable, w: ZeusWorkload, batch_size: int, eta: float) -> JitProfile:
    """Profile every measured limit of ``batch_size`` within one epoch; keep the cheapest."""
    limits = t.power_limits(w, batch_size)
    if not limits:
        raise SpecError(f"Zeus measured {w.key} on {t.gpu} at no batch {batch_size}")
    rows = [t.power_row(w, batch_size, p) for p in limits]
    best = min(reversed(rows), key=lambda r: epoch_cost(r, eta, t.max_limit_w))
    return JitProfile(best.power_limit_w,
                      statistics.fmean(r.energy_per_epoch_j for r in rows),
                      statistics.fmean(r.time_per_epoch_s for r in rows))


@dataclass(frozen=True, slots=True)
class Config:
    """A (batch size, power limit) choice with its expected cost to accuracy."""

    batch_size: int
    power_limit_w: int
    cost: float
    energy_j: float
    time_s: float


def converging_batches(t: ZeusTable, w: ZeusWorkload) -> tuple[int, ...]:
    """Batch sizes at which every seed reached the target within ``w.max_epochs``."""
    out = []
    for b in t.batch_sizes(w):
        epochs = t.epochs_to_target(w, b)
        if epochs and all(e is not None and e <= w.max_epochs for e in epochs):
            out.append(b)
    return tuple(out)


def expected(t: ZeusTable, w: ZeusWorkload, batch_size: int, limit_w: int,
             eta: float) -> Config:
    """Expected energy, time and cost to accuracy over the seeds of a converging batch."""
    epochs = [e for e in t.epochs_to_target(w, batch_size) if e is not None]
    if not epochs:
        raise SpecError(f"{w.key} never reached its target at batch {batch_size}")
    n = statistics.fmean(epochs)
    row = t.power_row(w, batch_size, limit_w)
    e, s = n * row.energy_per_epoch_j, n * row.time_per_epoch_s
    return Config(batch_size, limit_w, zeus_cost(e, s, eta, t.max_limit_w), e, s)


def exhaustive_best(t: ZeusTable, w: ZeusWorkload, eta: float) -> Config:
    """The cheapest (batch, limit) of the whole table by expected cost: the ground truth."""
    check_eta(eta)
    return min((expected(t, w, b, p, eta) for b in converging_batches(t, w)
                for p in t.power_limits(w, b)), key=lambda c: c.cost)


def zeus_choice(t: ZeusTable, w: ZeusWorkload, eta: float) -> Config:
    """Zeus's choice with full knowledge of the epochs: the JIT limit of each batch, then the
    batch of least expected cost. Equals :func:`exhaustive_best` (the limit does not change
    the epochs to accuracy), which the tests check on every table."""
    best = [expected(t, w, b, jit_power_limit(t, w, b, eta).best_limit_w, eta)
            for b in converging_batches(t, w)]
    return min(best, key=lambda c: c.cost)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a recurring job: its knobs, what it used and whether it reached the target."""

    recurrence: int
    batch_size: int
    power_limit_w: int
    energy_j: float
    time_s: float
    cost: float
    reached: bool
    profiled: bool


@dataclass
class _Arms:
    """Gaussian Thompson sampling over batch sizes; rewards are costs (lower is better)."""

    rng: random.Random
    costs: dict[int, list[float]] = field(default_factory=dict)

    def pick(self, arms: tuple[int, ...]) -> int:
        cold = [a for a in arms if len(self.costs.get(a, ())) < 2]
        if cold:
            return self.rng.choice(cold)
        samples = {}
        for a in arms:
            c = self.costs[a]
            mean = math.fsum(c) / len(c)
            sd = math.sqrt(math.fsum((x - mean) ** 2 for x in c) / len(c) / len(c))
            samples[a] = self.rng.gauss(mean, sd) if sd > 0 else mean
        return min(arms, key=lambda a: samples[a])

    def best(self, arms: tuple[int, ...]) -> int:
        return min(arms, key=lambda a: math.fsum(self.costs[a]) / len(self.costs[a]))


@dataclass(frozen=True, slots=True)
class Recurring:
    """The outcome of :func:`simulate_recurring`.

    Attributes:
        runs: every run in order (retries included; runs early-stopped before their first
            epoch ran nothing and are not listed).
        final: the batch of least mean cost among the bandit's arms (while still pruning: among
            the batches that reached the target), at its JIT limit, with its expected cost.
        energy_j, time_s: totals over ``runs``.
    """

    runs: tuple[Run, ...]
    final: Config
    energy_j: float
    time_s: float


def default_recurrences(t: ZeusTable, w: ZeusWorkload) -> int:
    """Zeus's default number of recurrences: 2 × |batch sizes| × |power limits|."""
    limits = {p for b in t.batch_sizes(w) for p in t.power_limits(w, b)}
    return 2 * len(t.batch_sizes(w)) * len(limits)


def simulate_recurring(t: ZeusTable, w: ZeusWorkload, eta: float, *, beta: float = 2.0,
                       recurrences: int | None = None, seed: int = 1,
                       max_retries: int = 20) -> Recurring:
    """Replay a recurring job under Zeus's optimiser on the traces; seeded, deterministic.

    Raises:
        SpecError: for η outside [0, 1], β < 1, or a default batch that misses the target.
    """
    check_eta(eta)
    if not (beta >= 1.0):
        raise SpecError(f"beta (early-stop threshold) must be >= 1, got {beta}")
    n_rec = default_recurrences(t, w) if recurrences is None else recurrences
    if n_rec < 1:
        raise SpecError(f"recurrences must be >= 1, got {n_rec}")
    rng = random.Random(seed)
    arms = _Arms(rng)
    pruner = _Pruner(t.batch_sizes(w), t.default_batch(w))
    jit: dict[int, JitProfile] = {}
    min_cost = math.inf
    runs: list[Run] = []
    for rec in range(n_rec):
        spent = 0.0
        for _ in range(max_retries):
            bs = pruner.next() if not pruner.done else arms.pick(pruner.survivors)
            profiled = bs not in jit
            prof = jit.setdefault(bs, jit_power_limit(t, w, bs, eta))
            run = _run(t, w, bs, prof, profiled, eta, beta * min_cost, rng, rec)
            if run is None:  # even one epoch would pass the early-stop threshold
                _observe(pruner, arms, bs, 100 * beta * min_cost, False)
                continue
            runs.append(run)
            spent += run.cost
            _observe(pruner, arms, bs, run.cost, run.reached)
            if run.reached:
                min_cost = min(min_cost, spent)
                break
            if rec == 0:
                raise SpecError(f"{w.key}'s default batch {bs} missed its target on {t.gpu}")
        else:
            raise SpecError(f"{w.key} missed its target {max_retries} times in a row")
    reached = {r.batch_size for r in runs if r.reached}
    pool = pruner.survivors if pruner.done else tuple(b for b in arms.costs if b in reached)
    b = arms.best(pool)
    final = expected(t, w, b, jit_power_limit(t, w, b, eta).best_limit_w, eta)
    return Recurring(tuple(runs), final, sum(r.energy_j for r in runs),
                     sum(r.time_s for r in runs))


def _observe(pruner: _Pruner, arms: _Arms, bs: int, cost: float, reached: bool) -> None:
    arms.costs.setdefault(bs, []).append(cost)
    if not pruner.done:
        pruner.report(bs, cost, reached)


def _run(t: ZeusTable, w: ZeusWorkload, bs: int, prof: JitProfile, profiled: bool, eta: float,
         cost_cap: float, rng: random.Random, rec: int) -> Run | None:
    """One run: sample a seed's epochs to accuracy, stop early at ``cost_cap``."""
    row = t.power_row(w, bs, prof.best_limit_w)
    target = rng.choice(t.epochs_to_target(w, bs))
    cap = w.max_epochs
    if math.isfinite(cost_cap):
        cap = min(cap, int(cost_cap // epoch_cost(row, eta, t.max_limit_w)))
    if cap == 0:
        return None
    reached = target is not None and target <= cap
    epochs = target if reached and target is not None else cap
    energy = row.energy_per_epoch_j * epochs
    time = row.time_per_epoch_s * epochs
    if profiled:  # the first epoch ran every limit for a slice instead
        energy += prof.epoch_energy_j - row.energy_per_epoch_j
        time += prof.epoch_time_s - row.time_per_epoch_s
    return Run(rec, bs, prof.best_limit_w, energy, time,
               zeus_cost(energy, time, eta, t.max_limit_w), reached, profiled)


class _Pruner:
    """Zeus's two pruning rounds: from b0 down, then up, each direction until a miss."""

    def __init__(self, batches: tuple[int, ...], b0: int, rounds: int = 2) -> None:
        self.batches, self.b0, self.rounds_left = tuple(sorted(batches)), b0, rounds
        self.survivors: tuple[int, ...] = ()
        self.done = False
        self._start_round()

    def _start_round(self) -> None:
        i = self.batches.index(self.b0)
        self._down = list(reversed(self.batches[: i + 1]))
        self._up = list(self.batches[i + 1:])
        self._good: list[int] = []
        self._best = math.inf

    def next(self) -> int:
        return self._down[0] if self._down else self._up[0]

    def report(self, bs: int, cost: float, reached: bool) -> None:
        queue = self._down if self._down else self._up
        if not queue or queue[0] != bs:
            raise SpecError(f"pruning expected batch {queue[0] if queue else None}, got {bs}")
        queue.pop(0)
        if reached:
            self._good.append(bs)
            if cost < self._best:
                self._best, self.b0 = cost, bs
        else:
            queue.clear()
        if self._down or self._up:
            return
        self.rounds_left -= 1
        self.batches = tuple(sorted(self._good))
        if not self.batches:
            raise SpecError("every batch size was pruned: none reached the target")
        if self.rounds_left == 0:
            self.survivors, self.done = self.batches, True
        else:
            self._start_round()
