"""Shared GPUs in Tessera's own drivers: two training jobs on one gang (co-location).

A packing policy (``Policy.packs``) may put a *partner* on the GPUs of a running *host*
(:mod:`tessera.sched.packing.pairs` decides and checks the pair). :class:`SharingWorld` is the
:class:`~tessera.sim.world.SimWorld` that books such pairs:

* **GPUs are booked once per pair.** The first job of a pair to start books the gang's GPUs;
  the second joins without booking. When one leaves (completes, fails, is preempted or moves),
  the other keeps the GPUs and runs alone; the GPUs come back only when both have left. A job
  pairs with one other job at most, so no GPU is ever used by more than two jobs.
* **Speeds are measured.** While paired, each job runs at the pair's measured speed on that
  flavor (:func:`~tessera.perf.colocation.pair_rates`, Gavel's co-location table); alone it runs
  at its own speed again. A speed change is not a restart: the job keeps running, its progress
  is settled at the old speed up to the change and its completion is re-planned.
* **Costs are Tessera's.** A partner that starts, resumes or moves pays checkpoint/restore like
  any job; a job whose GPUs stay the same while its partner comes or goes pays nothing
  (MPS/time-slicing needs no restart), which is why such a "start" is only a relabel here.
* **Books.** The time two jobs shared a gang is counted once in GPU-time (half to each job), and
  the utilisation samples count shared GPUs once.

A pair the decision core names but the world cannot honour (the host is not running on those
GPUs) is not an error of the world: the job then books its GPUs like any gang and runs alone.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import JobState
from tessera.perf.colocation import PairRefusal, pair_rates
from tessera.sched.core.decide import Decision
from tessera.sched.core.snapshot import Placement
from tessera.sim.events import COMPLETE, FAIL
from tessera.sim.metrics import SimResult
from tessera.sim.state import SimJob
from tessera.sim.world import SimWorld


def same_gpus(a: Placement, b: Placement) -> bool:
    """Whether two single-flavor placements hold the same GPUs, whoever shares them (a mixed
    gang is never shared)."""
    return a.same_gpus(b) and not a.is_mixed


class SharingWorld(SimWorld):
    """A :class:`SimWorld` whose gangs may be shared by two jobs (see the module docstring)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.mate: dict[int, int] = {}
        """``{job index: its partner's index}``, both ways, for every running pair."""
        self.paired_since_s: dict[int, float] = {}
        """When each running pair formed, keyed by the pair's smaller job index."""
        self.guests: set[int] = set()
        """The job of each running pair that joined second (its partner booked the GPUs)."""

    # -- decisions ------------------------------------------------------------------------------

    def apply(self, d: Decision, t_s: float) -> list[SimJob]:
        """Carry out ``d``; a running job whose GPUs stay the same (only its partner changes)
        is relabelled in place instead of being stopped and restarted."""
        relabel: set[object] = set()
        for jid in d.started:
            job = self.by_id[jid]
            new = d.placements[jid]
            if not (job.state is JobState.RUNNING and job.placement is not None
                    and same_gpus(job.placement, new)):
                continue
            if job.idx in self.guests and self._both_stay_apart(job, new, d):
                continue  # GPUs are counted per node: the guest takes another GPU there
            want = self.by_id.get(new.colocated_with[0]) if new.colocated_with else None
            if (want is not None and want.spec.job_id in relabel
                    and self.mate.get(job.idx) != want.idx):
                continue  # both ran apart on that node: this one moves to join the other
            job.placement = new
            job.view = None
            relabel.add(jid)
        if relabel:
            d = replace(d, started=tuple(j for j in d.started if j not in relabel))
        return super().apply(d, t_s)

    # -- job transitions --------------------------------------------------------------------------

    def start(self, job: SimJob, p: Placement, t_s: float) -> None:
        """Start ``job`` on ``p``; join its named partner's GPUs when that partner runs there."""
        mate = self._host_for(job, p)
        super().start(job, p, t_s)
        if mate is None:
            return
        for node_id, k in p.gpus_by_node:  # the host booked them: give the second booking back
            self.free[node_id] += k
        self.mate[job.idx] = mate.idx
        self.mate[mate.idx] = job.idx
        self.paired_since_s[min(job.idx, mate.idx)] = t_s
        self.guests.add(job.idx)
        mate.placement = replace(mate.placement or p, colocated_with=(job.spec.job_id,))
        self._rerate_pair(job, mate, t_s)

    def stop(self, job: SimJob, t_s: float) -> None:
        """Settle ``job`` and free its GPUs, unless its partner stays on them (then the partner
        keeps them and runs alone from ``t_s``)."""
        mate_idx = self.mate.pop(job.idx, None)
        p = job.placement
        super().stop(job, t_s)
        if mate_idx is None or p is None:
            return
        mate = self.jobs[mate_idx]
        del self.mate[mate_idx]
        for node_id, k in p.gpus_by_node:  # the partner still holds them
            self.free[node_id] -= k
        since = self.paired_since_s.pop(min(job.idx, mate_idx))
        self.guests.discard(job.idx)
        self.guests.discard(mate_idx)
        self._count_once(job, mate, p, t_s - since)
        if mate.placement is not None:
            mate.placement = replace(mate.placement, colocated_with=())
            self._rerate(mate, self.truth.placement_rate(mate.spec, mate.placement), t_s)

    # -- books ------------------------------------------------------------------------------------

    def tick(self, t_s: float, advance_running: bool) -> None:
        """As :meth:`SimWorld.tick`, with each shared gang's GPUs counted once in the samples."""
        n = len(self.samples)
        super().tick(t_s, advance_running)
        if self.mate and len(self.samples) > n:
            shared = sum(self.jobs[i].spec.num_gpus for i in self.paired_since_s)
            for k in range(n, len(self.samples)):
                s = self.samples[k]
                self.samples[k] = replace(s, busy_gpus=s.busy_gpus - shared)

    def finish(self, wall0_s: float) -> SimResult:
        """Settle the pairs still running at the end, then as :meth:`SimWorld.finish`."""
        for lo, since in list(self.paired_since_s.items()):
            a, b = self.jobs[lo], self.jobs[self.mate[lo]]
            if a.placement is not None:
                self._count_once(a, b, a.placement, self.last_t - since)
        return super().finish(wall0_s)

    def check_books(self) -> None:
        """Raise ``AssertionError`` unless the books agree: every pair is labelled both ways on
        the same GPUs, no job has two partners, and each node's free GPUs plus the GPUs booked
        there (once per gang, shared or not) make its capacity."""
        used = {n.node_id: 0 for n in self.cluster.nodes}
        for j in self.running.values():
            p = j.placement
            assert p is not None, f"job {j.spec.job_id} runs without a placement"
            m = self.mate.get(j.idx)
            if m is None:
                assert not p.colocated_with, f"job {j.spec.job_id} labelled shared, runs alone"
            else:
                mate = self.jobs[m]
                assert self.mate.get(m) == j.idx, f"job {j.spec.job_id}: pair not symmetric"
                assert mate.placement is not None and same_gpus(mate.placement, p)
                assert p.colocated_with == (mate.spec.job_id,), (
                    f"job {j.spec.job_id} shares with {mate.spec.job_id}, labelled "
                    f"{p.colocated_with}")
            if j.idx in self.guests:
                continue
            for node_id, k in p.gpus_by_node:
                used[node_id] += k
        for n in self.cluster.nodes:
            assert used[n.node_id] + self.free[n.node_id] == n.gpus, (
                f"node {n.node_id}: {used[n.node_id]} booked + {self.free[n.node_id]} free "
                f"!= {n.gpus}")

    def shared_gpus(self) -> int:
        """GPUs now held by two jobs."""
        return sum(self.jobs[i].spec.num_gpus for i in self.paired_since_s)

    # -- helpers ----------------------------------------------------------------------------------

    def _both_stay_apart(self, job: SimJob, new: Placement, d: Decision) -> bool:
        """Whether ``job``'s pair breaks while both jobs keep placements on the same node and
        count: the core then gave one of them other GPUs there (it counts GPUs, not which
        ones), and the guest is the one that moves."""
        mate = self.jobs[self.mate[job.idx]]
        if new.colocated_with == (mate.spec.job_id,):
            return False
        other = d.placements.get(mate.spec.job_id)
        return other is not None and same_gpus(other, new)

    def _host_for(self, job: SimJob, p: Placement) -> SimJob | None:
        """The running job ``job`` joins on ``p``: the partner ``p`` names, when it runs on the
        same GPUs and shares with nobody else; else ``None`` (``job`` books ``p`` itself)."""
        if not p.colocated_with:
            return None
        host = self.by_id.get(p.colocated_with[0])
        if (host is None or host is job or host.state is not JobState.RUNNING
                or host.placement is None or host.idx in self.mate
                or not same_gpus(host.placement, p)):
            return None
        return host

    def _rerate_pair(self, a: SimJob, b: SimJob, t_s: float) -> None:
        """Both jobs of a new pair run at their measured pair speeds from ``t_s``."""
        p = a.placement
        assert p is not None
        rates = pair_rates(self.truth.table, a.spec, b.spec, p.flavor)
        if isinstance(rates, PairRefusal):  # the core checked the pair: this is a bug
            raise RuntimeError(f"pair without a measurement reached the simulator: {rates}")
        self._rerate(a, rates.first_steps_per_s, t_s)
        self._rerate(b, rates.second_steps_per_s, t_s)

    def _rerate(self, job: SimJob, rate: float, t_s: float) -> None:
        """``job`` runs at ``rate`` from ``t_s`` on: settle its progress at the old speed, then
        re-plan its completion (and failure) at the new one. Earlier plans become stale."""
        job.advance_each(self._ticks)
        job.advance(t_s)
        job.rate = rate
        job.epoch += 1
        job.view = None
        if rate <= 0:
            return
        finish = max(job.progress_from_s, t_s) + job.remaining / rate
        self.schedule(finish, COMPLETE, job.idx, job.epoch)
        if job.flaky:
            fail_s = self.failure_times.fail_at_s(job.idx, job.attempts, job.progress_from_s,
                                                  finish, self.validation.real_run_s(job.idx))
            if fail_s is not None and fail_s > t_s:
                self.schedule(fail_s, FAIL, job.idx, job.epoch)

    def _count_once(self, a: SimJob, b: SimJob, p: Placement, shared_s: float) -> None:
        """Both jobs booked the gang's GPU-time while they shared it: keep half on each."""
        if shared_s <= 0:
            return
        half = p.num_gpus * shared_s / 2
        for j in (a, b):
            j.busy_gpu_s[p.flavor] = j.busy_gpu_s.get(p.flavor, 0.0) - half
