"""One scheduler, two clocks: the live service and the simulator start the same jobs at the
same times on a replayed trace.

The live service runs as it does in production (store, journal, lifecycle, executor protocol),
but on a clock this test moves, with a replay executor whose runs last exactly their
``expected_duration_s`` (and, when preempted, keep the progress they made, as a checkpointed
run does). The simulator runs the same trace with the same scheduler settings at 1 step/s and
no checkpoint cost. Every job's first start and finish must agree to the microsecond, and so
must the preemptions and moves.

Writing it found four places where the service did not run the policy it simulated: running
jobs' views had no ``as_of_s`` (LAS saw their attained service from time 0), omitted the current
run from ``run_s_by_flavor`` and its progress rate, a moved job was stopped and left for a later
round instead of being moved, and the exit of a run the scheduler itself had stopped triggered an
extra decision the simulator never takes.

Packing policies run the same check with Gavel's job types at their measured speeds, alone and
paired (:class:`SharingReplayExecutor`). Writing it found five more: a decision relabelled runs
before their steps were banked at the pair speeds they had (``RunSpeeds.settle_all`` now banks
them first); a job moving onto its new partner's node left an old run there whose end settled
the partner at the pair speed for time it had run alone (``live.speeds.running_mates``); a run
whose partner had left was shown to the policy still paired (``live.view``); two runs written
in one decision took host and rider by job id, not by the order the simulator starts them
(``Allocation.seq``); and ``hetero_gittins`` put a job whose attained service was a whole
minute less one ulp in the minute before, so float noise in the order steps are summed changed
its rank. Gavel's packing twins agree too, except that a trace must not start at 0 s (see the
test).
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from tessera.live.executors.base import LaunchSpec, RunStatus
from tessera.live.executors.gpu_sharing import Mechanism
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.speeds import running_mates
from tessera.live.store import Event, Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.profiles import ThroughputTable
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult
from tests.live.helpers import write_config

ADMIN = Principal("admin", None)
CLUSTER = "v100:4,k80:4"


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class ReplayExecutor:
    """Runs that take exactly their remaining work in seconds (their total steps, at 1 step/s);
    a stopped run keeps its progress (it checkpointed) and exits with 143 at once."""

    name = "replay"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.svc: LiveService | None = None
        self.work_s: dict[str, float] = {}
        self.done_s: dict[str, float] = {}
        self.runs: dict[tuple[str, int], tuple[float, int | None]] = {}

    def launch(self, spec: LaunchSpec) -> None:
        assert self.svc is not None
        rec = self.svc.store.get(spec.job_id)
        assert rec is not None
        self.work_s[spec.job_id] = rec.job.spec.total_steps
        self.runs[(spec.job_id, spec.run)] = (self.clock(), None)

    def _end_s(self, job_id: str, run: int) -> float:
        start, _code = self.runs[(job_id, run)]
        return start + self.work_s[job_id] - self.done_s.get(job_id, 0.0)

    def _finished(self, job_id: str, run: int) -> bool:
        return self.clock() >= self._end_s(job_id, run) - 1e-9

    def status(self, job_id: str, run: int) -> RunStatus:
        if (job_id, run) not in self.runs:
            return RunStatus("absent")
        _start, code = self.runs[(job_id, run)]
        if code is not None:
            return RunStatus("exited", exit_code=code, stopped=True)
        if self._finished(job_id, run):
            return RunStatus("exited", exit_code=0)
        return RunStatus("running")

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        start, code = self.runs[(job_id, run)]
        if code is None:
            self.done_s[job_id] = self.done_s.get(job_id, 0.0) + self.clock() - start
            self.runs[(job_id, run)] = (start, 143)
        return True

    def release(self, job_id: str, run: int) -> None:
        pass

    def close(self) -> None:
        pass

    def next_exit_s(self) -> float | None:
        ends = [self._end_s(j, r) for (j, r), (_s, code) in self.runs.items()
                if code is None and self.status(j, r).state == "running"]
        return min(ends, default=None)


def _trace(seed: int, n: int) -> list[tuple[float, float, int]]:
    """``(arrival offset s, duration s, gpus)`` per job."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.choice([0.0, 5.0, 20.0, 60.0])
        out.append((t, float(rng.choice([30, 90, 200, 400])), rng.choice([1, 1, 2, 4])))
    return out


def _replay(tmp_path: Path, policy: str, settings: SchedulerSettings,
            arrivals: list[tuple[float, str]], ex: ReplayExecutor | None = None,
            cluster: ClusterSpec | None = None, sharing: bool = False,
            ) -> tuple[LiveService, list[str], float]:
    """Replay ``(offset s, job request)`` arrivals through the live service on ``ex`` (a
    :class:`ReplayExecutor` by default) and ``cluster`` (``CLUSTER`` by default), with one
    queue, ``team-a``, whose quota no trace reaches (and that shares GPUs with ``sharing``)."""
    ex = ex or ReplayExecutor(Clock())
    clock = ex.clock
    t0 = clock.now_s
    state = tmp_path / policy
    write_config(state, [{"name": "team-a", "nominal_gpus": 64, "borrowing_limit_gpus": None,
                          "sharing": sharing}, {"name": "team-b", "nominal_gpus": 0}])
    svc = LiveService(Store(state / "state.db"), ex, cluster or load_cluster(CLUSTER, 4),
                      load_tenancy(state), policy, tmp_path / f"{policy}-work",
                      ServiceOptions(scheduler=settings), clock=clock)
    ex.svc = svc
    ids: list[str] = []
    nxt = 0
    wake: float | None = None
    next_round: float | None = None
    while True:
        dirty = False
        while nxt < len(arrivals) and t0 + arrivals[nxt][0] <= clock.now_s + 1e-9:
            req = parse_request(f"name: j{nxt}\nqueue: team-a\n{arrivals[nxt][1]}")
            ids.append(svc.submit(req, ADMIN).job_id)
            nxt += 1
            dirty = True
        for _ in range(20):  # settle this instant: observe exits, decide, launch, stop
            dirty |= svc.observe(clock.now_s)
            if svc.uses_rounds:  # the service's own rounds cadence
                acted, next_round = svc._round_cadence(clock.now_s, dirty, next_round)
            else:
                acted = dirty or (wake is not None and wake <= clock.now_s + 1e-9)
                wake = svc.round(clock.now_s) if acted else wake
            dirty = False
            svc.act(clock.now_s)
            if not acted and not svc.store.allocations(("planned", "stopping")):
                break
        times = [t for t in (ex.next_exit_s(), wake, next_round,
                             t0 + arrivals[nxt][0] if nxt < len(arrivals) else None)
                 if t is not None and t > clock.now_s + 1e-9]
        if not times:
            break
        clock.now_s = min(times)
    return svc, ids, t0


def _assert_agree(svc: LiveService, ids: list[str], t0: float, sim: SimResult) -> list[Event]:
    """Every job succeeded live and started and finished when the simulator says (to 1e-6 s),
    with as many moves and preemptions; returns the jobs' live events."""
    recs = [svc.store.get(j) for j in ids]
    by_id = {j.job_id: j for j in sim.jobs}
    for r in recs:
        assert r is not None and r.state.value == "succeeded"
        s = by_id[r.job_id]
        assert r.first_start_s is not None and s.first_start_s is not None
        assert r.first_start_s - t0 == pytest.approx(s.first_start_s, abs=1e-6), r.job.name
        assert r.finish_s is not None and s.finish_s is not None
        assert r.finish_s - t0 == pytest.approx(s.finish_s, abs=1e-6), r.job.name
    events = [e for j in ids for e in svc.store.events(j)]
    moves = sum(1 for e in events if e.kind == "move-planned")
    preempted = sum(1 for e in events if e.to_state == "preempted") - moves
    assert moves == sum(j.migrations for j in sim.jobs)
    assert preempted == sum(j.preemptions for j in sim.jobs)
    return events


def _sleep_table(cluster: ClusterSpec) -> ThroughputTable:
    sizes = range(1, cluster.total_gpus + 1)
    iso = {(f.short, cons): {("command", g): 1.0 for g in sizes}
           for f in cluster.flavors() for cons in (True, False)}
    return ThroughputTable("1 step/s", iso, {}, cluster.flavors()[0].short)


@pytest.mark.parametrize("policy", [
    "fifo", "sjf", "las", "srtf", "max_min_fairness", "hetero_srpt", "finish_time_fairness"])
def test_live_and_simulated_starts_agree(tmp_path: Path, policy: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ids_rng = random.Random(5)  # job ids break ties in both drivers: make them reproducible
    def token_hex(n: int) -> str:
        return f"{ids_rng.getrandbits(8 * n):0{2 * n}x}"

    monkeypatch.setattr("tessera.live.service.secrets", SimpleNamespace(token_hex=token_hex))
    trace = _trace(7, 24)
    settings = SchedulerSettings(checkpoint_s=0.0, restore_s=0.0)
    svc, ids, t0 = _replay(tmp_path, policy, settings, [
        (at, f"gpus: {gpus}\ncommand: sleep {dur}\nexpected_duration_s: {dur}")
        for at, dur, gpus in trace])
    cluster = load_cluster(CLUSTER, 4)
    specs = tuple(JobSpec(JobId(j), "command", g, dur, at, queue="team-a")
                  for j, (at, dur, g) in zip(ids, trace, strict=True))
    sim = simulate(Workload("replay", specs), cluster, policy,
                   SimConfig(scheduler=settings), table=_sleep_table(cluster))
    events = _assert_agree(svc, ids, t0, sim)
    if policy == "las":  # the trace does exercise preemption (not only moves)
        assert sum(e.to_state == "preempted" for e in events) > sum(
            e.kind == "move-planned" for e in events)


class SharingReplayExecutor(ReplayExecutor):
    """A replay executor whose runs may share GPUs. A run ends when the service's own account
    of its steps (``live.speeds``: alone at its flavor's speed, beside a partner at the pair
    speed Gavel measured) reaches the job's total -- the speeds the simulator's
    ``SharingWorld`` runs pairs at. The service banks a stopped run's steps itself."""

    shares_gpus = True

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism:
        return Mechanism("time-slicing")

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> None:
        return None

    def _left(self, job_id: str, run: int) -> tuple[float, float]:
        """(steps left, steps/s now) of a running run, as the service counts them."""
        assert self.svc is not None
        store, speeds = self.svc.store, self.svc.speeds
        rec, a = store.get(job_id), store.allocation(job_id, run)
        assert rec is not None and a is not None
        mate = running_mates(store.allocations(("running", "stopping"))).get((job_id, run))
        mate_rec = store.get(mate.job_id) if mate is not None else None
        rate = speeds.rate(rec.job.spec, a, mate_rec.job.spec if mate_rec else None)
        done = speeds.done_before(rec) + speeds.steps(a, rate, self.clock())
        return rec.job.spec.total_steps - done, rate

    def _finished(self, job_id: str, run: int) -> bool:
        return self._left(job_id, run)[0] <= 1e-6

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        start, code = self.runs[(job_id, run)]
        if code is None:
            self.runs[(job_id, run)] = (start, 143)
        return True

    def next_exit_s(self) -> float | None:
        ends = []
        for (j, r), (_s, code) in self.runs.items():
            if code is None and self.status(j, r).state == "running":
                left, rate = self._left(j, r)
                ends.append(self.clock() + left / rate)
        return min(ends, default=None)


#: Gavel job types whose pairs Gavel measured on V100 and K80 (perf/colocation.py).
PACK_TYPES = ("ResNet-18 (batch size 32)", "LM (batch size 20)", "CycleGAN",
              "Transformer (batch size 64)", "A3C", "Recommendation (batch size 512)")


@pytest.mark.parametrize("seed", [3, 16])
@pytest.mark.parametrize(
    "policy", ["hetero_pack", "max_min_fairness_packed", "fifo_packed", "gandiva"])
def test_live_and_simulated_packing_agree(tmp_path: Path, policy: str, seed: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Packing policies too: on two nodes of two GPUs (V100, K80) the same pairs form, break
    and move at the same times, live and simulated, and every job starts and ends at the same
    instant, at the speeds Gavel measured alone and paired. (When this was written, seeds 1-60
    at 40-60 jobs agreed for the first two policies and seeds 1-40 at 25 jobs for all four;
    these two seeds fail without any one of the fixes the module docstring names.)"""
    ids_rng = random.Random(5)

    def token_hex(n: int) -> str:
        return f"{ids_rng.getrandbits(8 * n):0{2 * n}x}"

    monkeypatch.setattr("tessera.live.service.secrets", SimpleNamespace(token_hex=token_hex))
    rng = random.Random(seed)
    jobs: list[tuple[float, str, float]] = []
    # Nothing arrives at 0 s: Gavel's mechanism takes a reset at time 0 for "never reset" and
    # recomputes at the next round, which a live clock (never at 0) does not reproduce.
    t = 30.0
    for _ in range(40):
        t += rng.choice([0.0, 30.0, 120.0])
        jobs.append((t, rng.choice(PACK_TYPES), float(rng.choice([200, 1500, 6000]))))
    settings = SchedulerSettings(checkpoint_s=0.0, restore_s=0.0, round_s=60.0)
    cluster = load_cluster("v100:2,k80:2", 2)
    svc, ids, t0 = _replay(
        tmp_path, policy, settings,
        [(at, f"command: sleep 1\njob_type: {jt}\ntotal_steps: {steps}") for at, jt, steps in jobs],
        SharingReplayExecutor(Clock()), cluster, sharing=True)
    specs = tuple(JobSpec(JobId(j), jt, 1, steps, at, queue="team-a")
                  for j, (at, jt, steps) in zip(ids, jobs, strict=True))
    sim = simulate(Workload("replay", specs), cluster, policy, SimConfig(scheduler=settings))
    events = _assert_agree(svc, ids, t0, sim)
    joins = sum(1 for e in events if e.kind == "sharing" and "joins its GPUs" in e.detail)
    assert joins >= 5, "too few pairs formed: the test would check little"
