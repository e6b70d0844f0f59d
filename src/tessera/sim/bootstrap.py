"""Sia's bootstrap: a new job first runs a short profile on one GPU of each flavor.

Under ``--speeds learned`` a job arrives with its speeds unknown (the policies see a prior,
:mod:`tessera.sched.core.learned`). Sia (Jayaram Subramanya et al., SOSP'23, §3.2) fixes that
by profiling every new job for a few minutes at its smallest size on each GPU type before its
real allocation. With ``bootstrap_s`` set (``tessera simulate --bootstrap-s 300``) the
simulator does the same, one flavor after another (whichever has an idle GPU first), each
profile an ordinary 1-GPU run:

1. **begin** (at the job's arrival) -- the flavors to profile are those of the cluster the job
   accepts and fits at one GPU (cluster order); the job's spec is swapped for a 1-GPU copy
   restricted to them (``flavors``), under its own id (:func:`profile_id`); placed on one,
   ``F``, it is pinned there with ``bootstrap_s`` of work at its true rate there
   (:meth:`BootstrapProfiles.started`). The real spec, remaining work and startup cost are
   put aside. The decision core sees an
   ordinary 1-GPU job restricted to some flavors and places it like any other: profiles
   wait for a free GPU of a flavor still to profile, and hold it while they run (real
   GPU use, booked as ``bootstrap_gpu_h``); the core never learns that profiling exists.
2. **observe** -- when the profile runs, the truth hands out the job's rate on ``F`` and the
   learned oracle records it (plus its measurement noise): from then on the policies' estimate
   for ``F`` is the observed rate, and the observations on several flavors fit the job's row.
3. **next** (the profile's work is done) -- the world stops the run; the job is restricted to
   the flavors left and requeued, or, after the last, gets back its real spec and work and is
   requeued for its real gang. Its JCT counts from its submission, so it includes every
   profile and every wait for one.

**Idle GPUs only.** A profile never preempts a running job and is never preempted: under
the event and round drivers the world's full decisions do not see profiling jobs, and after
every event the decision core is asked *fill-only* (idle GPUs, nobody moved) about the
profiles waiting (:mod:`tessera.sim.profile_fill`). So a job profiles on arrival if a GPU of
each flavor is idle, between rounds too, and its real gang then waits for a decision like a
new job. Under heavy load a profile waits until a GPU of its flavor falls idle. Gavel's loop
(``--compat gavel``) has no preemption cost and re-leases every GPU each round: there the
profiles are ordinary jobs of its rounds.

What a profile does not do: advance the job's own work (its steps are thrown away, as a
measurement's are), profile a 3-D job (the planner prices those) or, under an elastic
policy, an elastic one (Sia's and Pollux's goodput models price those), or run again after a
failure (what it measured stays measured). A failure during a profile ends the profiling;
the retry runs the real gang. A profile measures one GPU: until the gang itself runs, its
estimate is that rate times its size; once it has run on a flavor, the profiles give the
shape across flavors and the gang's own rate the scale (:meth:`LearnedOracle.observed`).
Profiling cannot be combined with pre-run validation (both replace the job's first run).

**Modes** (``mode``, ``--bootstrap-mode``): the above is ``serial`` (Sia's paper). ``lean``
profiles the job in its own configuration (its gang size, whole GPUs) on every flavor that
has the GPUs idle, all at once (:func:`tessera.sim.profile_fill.fill_concurrent` places them,
outside the core, via :meth:`BootstrapProfiles.pin_concurrent`), never waits (a job that
finds no such flavor queues as its real gang), and counts the fastest part's steps toward
the job's work (:meth:`BootstrapProfiles.credited`); under Gavel's rounds its profiles stay
one flavor per round, at the gang's size and credited. ``free`` and ``oracle`` run nothing:
at arrival the learned oracle gets what every 1-GPU profile would measure (``free``) or the
job's own gang's rate on every flavor (``oracle``, the view is the truth): bounds.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.sched.core.learned import LearnedOracle
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sim.state import SimJob

BootstrapMode = Literal["serial", "lean", "free", "oracle"]
BOOTSTRAP_MODES: tuple[BootstrapMode, ...] = ("serial", "lean", "free", "oracle")
"""``--bootstrap-mode`` values (see the module docstring)."""


def profile_id(job_id: str) -> JobId:
    """The id a job's bootstrap profiles run under (``<job>/profile``): decisions and the
    policies' memories (Gavel's accounts, finish-time fairness's isolated time, attained
    service) keep a profile apart from its job."""
    return JobId(f"{job_id}/profile")


@dataclass(slots=True)
class _Saved:
    """What a profiling job put aside, and the flavors it has still to profile."""

    spec: JobSpec
    remaining: float
    startup_s: float
    todo: list[GpuFlavor]
    credit_steps: float = 0.0
    """Steps of the job's own work the current profile does (``lean``, own configuration)."""


class BootstrapProfiles:
    """The jobs in their bootstrap profiles, and what they put aside (module docstring).

    Args:
        profile_s: how long each profile runs, in seconds of simulated time.
        truth: the true speeds (a profile lasts ``profile_s`` at its flavor's true rate).
        learned: the policies' view; its ``profiling`` set names the jobs profiling now.
        elastic_policy: the policy sizes elastic jobs itself (their goodput model prices
            them, so they are not profiled); a rigid policy runs every job at its
            ``num_gpus``, elastic range or not, and profiles them all.
        by_id: the world's jobs by id, where each profile's id is entered (decisions name
            a profile by its own id, :func:`profile_id`).
        mode: ``serial`` (Sia's paper), ``lean`` (concurrent, never waiting, credited),
            ``free`` (the zero-cost bound of 1-GPU profiles) or ``oracle`` (the job's own
            gang measured on every flavor at no cost: no estimate error left), see the module
            docstring.

    Raises:
        SpecError: ``profile_s`` is not a positive, finite number of seconds, or ``mode``
            is not one of :data:`BOOTSTRAP_MODES`.
    """

    def __init__(self, profile_s: float, truth: ThroughputOracle,
                 learned: LearnedOracle, elastic_policy: bool = False,
                 by_id: MutableMapping[JobId, SimJob] | None = None,
                 mode: BootstrapMode = "serial") -> None:
        if not (profile_s > 0 and profile_s < float("inf")):
            raise SpecError(f"bootstrap profile of {profile_s!r} s: must be a positive, "
                            "finite number of seconds")
        if mode not in BOOTSTRAP_MODES:
            raise SpecError(f"bootstrap mode {mode!r}: expected one of "
                            f"{', '.join(BOOTSTRAP_MODES)}")
        self.mode: BootstrapMode = mode
        self.profile_s = float(profile_s)
        self.truth = truth
        self.learned = learned
        self.elastic_policy = elastic_policy
        self.by_id = by_id if by_id is not None else {}
        self._saved: dict[int, _Saved] = {}
        self.profiles_run = 0

    def __contains__(self, job_idx: int) -> bool:
        """Whether job ``job_idx`` is in one of its profiles."""
        return job_idx in self._saved

    def flavors_for(self, spec: JobSpec) -> list[GpuFlavor]:
        """The flavors ``spec`` gets a profile on: every cluster flavor it accepts where its
        1-GPU copy has a rate (fits there), in the cluster's order. A profile may take any
        of the flavors still to profile (whichever has an idle GPU first)."""
        if spec.parallelism is not None or (self.elastic_policy and spec.elastic is not None):
            return []
        allowed = self.truth.cluster_flavors
        if spec.flavors:
            allowed = tuple(f for f in allowed if f in spec.flavors)
        size = spec.num_gpus if self.mode == "lean" else 1
        one = replace(spec, num_gpus=size, requires_locality=False, flavors=())
        ok = {r.flavor for r in self.truth.real_rates(one) if r.consolidated > 0}
        return [f for f in allowed if f in ok]

    def _profile_spec(self, saved: _Saved) -> JobSpec:
        """What a profile of ``saved``'s job runs, under the profile's id and on no flavor
        yet: one whole GPU (``serial``), or the job's own gang (``lean``: its own
        configuration, so its steps are the job's)."""
        size = saved.spec.num_gpus if self.mode == "lean" else 1
        return replace(_one_gpu(saved.spec), job_id=profile_id(saved.spec.job_id),
                       num_gpus=size)

    def begin(self, job: SimJob) -> None:
        """Turn ``job``'s first run into its first profile (nothing if it has none to run)."""
        todo = self.flavors_for(job.spec)
        if not todo:
            return
        if self.mode in ("free", "oracle"):  # (bounds: every profile's result, at no cost)
            seen = _one_gpu(job.spec) if self.mode == "free" else job.spec
            for flavor in todo:
                self.learned.observe(seen, flavor)
            return
        self._saved[job.idx] = _Saved(job.spec, job.remaining, job.startup_s, todo)
        pid = profile_id(job.spec.job_id)
        self.learned.start_profile(pid, job.spec.job_id)
        self.by_id[pid] = job
        self._pin(job, tuple(todo))

    def _pin(self, job: SimJob, flavors: tuple[GpuFlavor, ...]) -> None:
        """Make ``job`` a 1-GPU run of ``profile_s`` on one of ``flavors`` (the work is that
        of the first; :meth:`started` sets the flavor it got)."""
        saved = self._saved[job.idx]
        pinned = replace(self._profile_spec(saved), flavors=flavors)
        rate = ThroughputOracle.rate(self.truth, pinned, flavors[0], True)  # (not observed)
        duration_s, saved.credit_steps = self._duration_s(saved, rate)
        steps = rate * duration_s
        job.spec = replace(pinned, total_steps=steps)
        job.remaining = steps
        job.startup_s = 0.0
        job.view = None

    def credited(self, spec: JobSpec) -> bool:
        """Whether a profile of ``spec`` runs its own configuration (``lean`` mode: its own
        gang size, on whole GPUs, no planner): then the profile's steps are the job's own."""
        return self.mode == "lean" and spec.gpu_milli is None and spec.parallelism is None

    def _duration_s(self, saved: _Saved, best_rate: float) -> tuple[float, float]:
        """How long the next profile runs, and the steps of the job's work it does: a
        credited profile stops when the job's work is done (its fastest replica's steps,
        ``best_rate``, are the job's); any other runs ``profile_s`` and does none."""
        if not self.credited(saved.spec) or best_rate <= 0:
            return self.profile_s, 0.0
        duration_s = min(self.profile_s, saved.remaining / best_rate)
        return duration_s, best_rate * duration_s

    def todo(self, job_idx: int) -> list[GpuFlavor]:
        """The flavors job ``job_idx`` has still to profile (empty for a job not profiling)."""
        saved = self._saved.get(job_idx)
        return [] if saved is None else list(saved.todo)

    def profile_gpus(self, job_idx: int) -> int:
        """GPUs of each flavor a profile of job ``job_idx`` takes (``lean``: its gang's)."""
        return self._profile_spec(self._saved[job_idx]).num_gpus

    def pin_concurrent(self, job: SimJob,
                       parts: Sequence[tuple[GpuFlavor, tuple[tuple[str, int], ...]]]
                       ) -> tuple[Placement, float]:
        """Make ``job``'s next profile run on each of ``parts`` (``(flavor, gpus_by_node)``,
        distinct flavors still to profile, :meth:`profile_gpus` GPUs each) at once, struck
        off its list; returns the placement to start it on and the rate its work is measured
        in. One part: the profile runs as its pinned copy there. Several: as one copy over
        all their GPUs, restricted to those flavors, whose steps measure nothing (the
        profiles' observations are handed out by :meth:`observe_started`; where the truth
        has no speed for that mixed copy, the caller runs it at the returned rate). It lasts
        one profile, less where a credited profile's fastest part finishes the job's work."""
        saved = self._saved[job.idx]
        base = self._profile_spec(saved)
        each = []
        for f, nodes in parts:
            saved.todo.remove(f)
            pinned, p = replace(base, flavors=(f,)), Placement.of(f, nodes)
            each.append((pinned, p, ThroughputOracle.placement_rate(self.truth, pinned, p)))
        best = max(r for _s, _p, r in each)
        duration_s, saved.credit_steps = self._duration_s(saved, best)
        if len(each) == 1:
            spec, p, rate = each[0]
        else:
            spec = replace(base, num_gpus=base.num_gpus * len(parts),
                           flavors=tuple(f for f, _n in parts))
            p = Placement.mixed(tuple((n, f, c) for f, nodes in parts for n, c in nodes))
            rate = ThroughputOracle.placement_rate(self.truth, spec, p)
        if rate <= 0:  # (no speed for this copy: the profile's own clock, 1 step/s)
            rate = 1.0
        job.spec = replace(spec, total_steps=rate * duration_s)
        job.remaining = job.spec.total_steps
        job.startup_s = 0.0
        job.view = None
        return p, rate

    def observe_started(self, job: SimJob, flavors: Sequence[GpuFlavor]) -> None:
        """A concurrent profile of ``job`` started on ``flavors``: the learned oracle records
        the rate of the profile's gang (1 GPU, or the job's own in ``lean``) on each."""
        seen = self._profile_spec(self._saved[job.idx])
        for flavor in flavors:
            self.learned.observe(seen, flavor)

    def started(self, job: SimJob, flavor: GpuFlavor) -> None:
        """``job``'s profile was placed on ``flavor``: pin it there (``profile_s`` of work at
        its rate there) and strike the flavor off its list (nothing for a job not
        profiling, or one already pinned there)."""
        saved = self._saved.get(job.idx)
        if saved is None or flavor not in saved.todo:
            return
        saved.todo.remove(flavor)
        self._pin(job, (flavor,))

    def next(self, job: SimJob) -> bool:
        """``job``'s current profile finished: pin it to the next flavor, or give it back its
        real spec and work after the last. Returns whether another profile follows."""
        saved = self._saved[job.idx]
        self.profiles_run += max(len(job.spec.flavors), 1)
        saved.remaining = max(saved.remaining - saved.credit_steps, 0.0)
        saved.credit_steps = 0.0
        if saved.todo and saved.remaining > 0:
            self._pin(job, tuple(saved.todo))
            return True
        self.end(job)
        return False

    def without_profiles(self, jobs: tuple[JobView, ...]) -> tuple[JobView, ...]:
        """``jobs`` less those in a profile (what a full decision of the world sees)."""
        ids = self.learned.profiling
        return tuple(v for v in jobs if v.spec.job_id not in ids)

    def waiting(self, jobs: tuple[JobView, ...]) -> tuple[JobView, ...]:
        """The views among ``jobs`` of profiles waiting for a GPU."""
        ids = self.learned.profiling
        return tuple(v for v in jobs if v.state is JobState.PENDING and v.spec.job_id in ids)

    def end(self, job: SimJob) -> None:
        """Give the job back its real spec and work (its profiles done, failed or cut short)."""
        saved = self._saved.pop(job.idx, None)
        if saved is None:
            return
        job.spec, job.remaining, job.startup_s = saved.spec, saved.remaining, saved.startup_s
        job.view = None
        self.learned.end_profile(profile_id(job.spec.job_id))

    def real_spec(self, job_idx: int) -> JobSpec | None:
        """The real spec of a job in a profile (``None`` for a job not profiling)."""
        saved = self._saved.get(job_idx)
        return None if saved is None else saved.spec

    def profiling(self) -> list[int]:
        """Indices of the jobs in a profile."""
        return list(self._saved)


def _one_gpu(spec: JobSpec) -> JobSpec:
    """``spec`` on one whole GPU of any flavor, anywhere (what a profile runs)."""
    return replace(spec, num_gpus=1, requires_locality=False, flavors=(), total_steps=1.0,
                   gpu_milli=None)
