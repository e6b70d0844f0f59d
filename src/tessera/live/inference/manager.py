"""Plan the services onto MIG slices, apply the layout, keep every replica running.

:class:`InferenceManager` is driven by the service's loop thread (:meth:`tick`, every
``check_s``), so the executor is only ever called from that one thread; API threads call
:meth:`submit`, :meth:`set_rate` and :meth:`delete`, which check and store, then mark the plan
stale. Each tick:

1. **Plan** (when the services changed). The first plan is the p99-checked planner's
   (:func:`tessera.share.p99.plan_for_p99`, heuristic packing); later ones start from the
   applied plan with :func:`tessera.share.p99_replan.replan_for_p99`, which keeps what still
   serves, lists its :class:`~tessera.share.replan.Transition` in a safe order, and tightens
   each service's rule until the serving simulation (Poisson arrivals at the expected rates,
   ``arrivals``) says it meets its SLO at p99 and the attainment ``target``. A layout that still
   misses after ``p99_rounds`` is applied with a ``p99-miss`` event naming the services, written
   with the ``planned`` event, never silently (otherwise a ``p99-met`` event). Planned GPUs
   are mapped to physical ones: surviving GPUs keep theirs, new ones take GPUs of the inference
   node that training does not hold. A plan that needs more GPUs than are free, or that takes
   a queue over its MIG quota, is refused with a service event and the old plan stays.
2. **Apply**, level-triggered against what the device layer and the store say, so a restart in
   the middle resumes where it stopped -- in the Transition's order: *create* the missing MIG
   instances and start their replicas; only when every replica of the new plan that has its own
   slot runs, *move* (stop a replica on a slice the plan gave another service, then start that
   service's replica there) and *stop* replicas the plan no longer has; *destroy* instances
   without a replica last. So capacity never drops below demand during a change, and no service
   has fewer replicas in flight than before it.
3. **Restart** replicas that exited or were lost (a new run of the same replica, on its slice).

A replica is one executor run (``svc-<service>-<id>``, run 1, 2, ... on restarts) with
``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` of its slice; when a slice runs several MPS processes, each
gets ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = 100 / processes. The GPUs the services hold are
taken out of the cluster the training scheduler sees (:meth:`training_cluster`), and the GPUs
training holds are never given to services, as the co-simulation (:mod:`tessera.sim.cosim`)
models the split.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from tessera.errors import SpecError
from tessera.live.executors.base import Executor, LaunchSpec
from tessera.live.inference.apply import apply
from tessera.live.inference.book import Replica, ServiceBook
from tessera.live.inference.devices import DeviceError, GpuDevices, MigInstance, describe
from tessera.live.inference.planstate import (
    Applied,
    applied_json,
    load_applied,
    quota_problem,
)
from tessera.live.inference.spec import ServiceSpec
from tessera.live.service import Forbidden, Rejected
from tessera.live.store import HOLDING, Store
from tessera.live.tenancy import JobDefaults, Principal
from tessera.model.cluster import ClusterSpec, Node
from tessera.sched.core.snapshot import Placement as GangPlacement
from tessera.share.mig import mig_gpu
from tessera.share.p99 import ArrivalModel, plan_for_p99
from tessera.share.p99_replan import replan_for_p99
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service, load_parvagpu_profiles
from tessera.share.replan import Change
from tessera.share.segments import service_options
from tessera.share.serving_sim import ServiceOutcome

if TYPE_CHECKING:
    from tessera.live.service import LiveService

log = logging.getLogger("tessera.live.inference")

#: How many times the planning rate of a service is raised to reach its ``min_replicas``.
MIN_REPLICA_STEPS = 16
#: Requests per service in the live p99 check (p99 is the 200th slowest): keeps a re-plan in
#: the service loop to tens of CPU milliseconds.
LIVE_P99_REQUESTS = 20_000


class ServiceRefused(Rejected):
    """A service that cannot be stored: unknown model or queue, SLO or rate no layout meets,
    over MIG quota, more GPUs than the inference node has (the API answers 422)."""


class ServiceForbidden(Forbidden):
    """A tenant acting on a queue that is not its own (the API answers 403)."""


class InferenceManager:
    """See the module docstring. ``table``: the profile table (default the bundled ParvaGPU
    A100-80GB one); the device layer's GPUs must be of its GPU model. ``arrivals``, ``target``
    and ``p99_rounds``: the p99 check of every plan (Poisson, :data:`LIVE_P99_REQUESTS`
    requests per service, 99 % on time, 12 rounds by default)."""

    def __init__(self, svc: LiveService, devices: GpuDevices, table: ProfileTable | None = None,
                 rule: BatchingRule | None = None, check_s: float = 0.2,
                 arrivals: ArrivalModel | None = None, target: float = 0.99,
                 p99_rounds: int = 12) -> None:
        self.svc = svc
        self.arrivals = arrivals or ArrivalModel(requests_per_service=LIVE_P99_REQUESTS)
        self.target = target
        self.p99_rounds = p99_rounds
        #: The last plan's p99 check: services that missed, rounds, CPU seconds of the plan.
        self.last_check: tuple[tuple[ServiceOutcome, ...], int, float] = ((), 0, 0.0)
        self.devices = devices
        self.table = table or load_parvagpu_profiles()
        self.rule = rule or BatchingRule()
        self.check_s = check_s
        gpus = devices.gpus()
        if not gpus:
            raise DeviceError(f"the {devices.name} device layer sees no GPU")
        self.gpu = mig_gpu(gpus[0].model)
        if self.table.gpu != self.gpu.gpu:
            raise SpecError(f"the profile table is for {self.table.gpu}, the GPUs are "
                            f"{self.gpu.gpu}: profile this GPU first")
        node = next((n for n in svc.cluster.nodes if n.flavor == self.gpu.flavor), None)
        if node is None:
            raise SpecError(f"cluster {svc.cluster.name!r} has no {self.gpu.gpu} node for the "
                            "services' GPUs")
        self.node: Node = node
        self.book = ServiceBook(svc.store)
        self._lock = threading.Lock()
        self._last_tick_s = float("-inf")
        self._last_refusal: str | None = None

    @property
    def executor(self) -> Executor:
        return self.svc.executor

    @property
    def store(self) -> Store:
        return self.svc.store

    @property
    def grace_s(self) -> float:
        return self.svc.opts.grace_s

    # -- API side (any thread) ---------------------------------------------------------------

    def submit(self, spec: ServiceSpec, who: Principal) -> ServiceSpec:
        """Check and store a new service; the loop plans and starts it.

        Raises:
            ServiceForbidden: another tenant's queue.
            ServiceRefused: see :class:`ServiceRefused`; a name already taken.
        """
        self._check_queue(spec.queue, who)
        if self.svc.executor.name != "local":
            raise ServiceRefused(f"services run on the local executor only (this service uses "
                                 f"{self.svc.executor.name})")
        with self._lock:
            if self.book.get(spec.name) is not None:
                raise ServiceRefused(f"service {spec.name!r} exists: change its rate with "
                                     "`tessera service rate`, or delete it first")
            self._check_plan([*self.book.services(), spec])
            with self.svc.store.tx() as db:
                self.book.put(db, spec, self.svc.clock())
                self.book.event(db, self.svc.clock(), spec.name, "submitted",
                                f"{spec.model} at {spec.rate_rps:g} req/s within "
                                f"{spec.slo_ms:g} ms, queue {spec.queue}")
        self.svc.poke()
        return spec

    def set_rate(self, name: str, rate_rps: float, who: Principal) -> ServiceSpec:
        """Change a service's expected rate; the loop re-plans (:mod:`tessera.share.replan`)."""
        with self._lock:
            old = self.visible(name, who)
            new = old.with_rate(rate_rps)
            self._check_plan([new if s.name == name else s for s in self.book.services()])
            with self.svc.store.tx() as db:
                self.book.put(db, new, self.svc.clock())
                self.book.event(db, self.svc.clock(), name, "rate",
                                f"expected rate {old.rate_rps:g} -> {rate_rps:g} req/s")
        self.svc.poke()
        return new

    def delete(self, name: str, who: Principal) -> None:
        with self._lock:
            self.visible(name, who)
            with self.svc.store.tx() as db:
                self.book.delete(db, name)
                self.book.event(db, self.svc.clock(), name, "deleted",
                                "its replicas stop and its slices go at the next plan")
        self.svc.poke()

    def visible(self, name: str, who: Principal) -> ServiceSpec:
        """The service, if ``who`` may see it. Raises KeyError otherwise (the API's 404)."""
        spec = self.book.get(name)
        if spec is None or not who.may_see(spec.queue):
            raise KeyError(name)
        return spec

    def _check_queue(self, queue: str, who: Principal) -> None:
        if not who.may_see(queue):
            raise ServiceForbidden(f"token {who.name!r} may submit only to queue {who.queue!r}")
        if queue not in self.svc.tenancy.quotas:
            raise ServiceRefused(f"unknown queue {queue!r}; queues: "
                                 f"{', '.join(self.svc.tenancy.quotas)}")

    def _check_plan(self, specs: list[ServiceSpec]) -> None:
        """Refuse services the profiles cannot serve, or whose fresh plan is over a queue's
        MIG quota or the inference node's GPUs."""
        for s in specs:
            try:
                service_options(Service(s.name, s.model, s.rate_rps, s.slo_ms), self.table,
                                self.gpu, self.rule)
            except (SpecError, KeyError) as e:
                raise ServiceRefused(f"service {s.name!r}: {e}") from None
        plan = self._fresh_plan(specs)
        problem = quota_problem(plan, self.gpu, {s.name: s.queue for s in specs},
                                self.svc.tenancy.mig_quotas)
        if problem is not None:
            raise ServiceRefused(problem)
        if plan.gpus_used > self.node.gpus:
            raise ServiceRefused(f"infeasible: the services need {plan.gpus_used} "
                                 f"{self.gpu.gpu} GPUs at least; node {self.node.node_id} has "
                                 f"{self.node.gpus}")

    # -- planning ------------------------------------------------------------------------------

    def _services(self, specs: list[ServiceSpec], bump: dict[str, float]) -> tuple[Service, ...]:
        return tuple(Service(s.name, s.model, s.rate_rps * bump.get(s.name, 1.0), s.slo_ms)
                     for s in specs)

    def _min_replicas(self, specs: list[ServiceSpec], plan_of: object) -> SharePlan:
        """Plan with ``plan_of(services)``, raising a service's planning rate until it has its
        ``min_replicas`` processes (at most :data:`MIN_REPLICA_STEPS` times)."""
        bump: dict[str, float] = {}
        assert callable(plan_of)
        for _ in range(MIN_REPLICA_STEPS):
            plan: SharePlan = plan_of(self._services(specs, bump))
            short = [s for s in specs if replicas_of(plan, s.name) < s.min_replicas]
            if not short:
                return plan
            for s in short:
                bump[s.name] = bump.get(s.name, 1.0) * 1.5
        raise ServiceRefused(f"min_replicas of {', '.join(s.name for s in short)} not reached "
                             f"by raising their planned rate {MIN_REPLICA_STEPS} times")

    def _fresh_plan(self, specs: list[ServiceSpec]) -> SharePlan:
        if not specs:
            return SharePlan(self.gpu.gpu, "empty", (), 0, True, 0.0, (), self.rule)

        def by_p99(svcs: tuple[Service, ...]) -> SharePlan:
            res = plan_for_p99(svcs, self.table, self.gpu, self.rule, arrivals=self.arrivals,
                               target=self.target, method="heuristic",
                               max_rounds=self.p99_rounds)
            self.last_check = (res.failing(), res.rounds, res.solve_s)
            return res.plan

        return self._min_replicas(specs, by_p99)

    def applied(self) -> Applied:
        text = self.book.state("plan")
        if text is None:
            return Applied(self._fresh_plan([]), ())
        return load_applied(text, self.gpu)

    def training_held(self) -> int:
        """GPUs of the inference node held by training runs."""
        return sum(c for a in self.svc.store.allocations(HOLDING)
                   for n, c in a.placement.gpus_by_node if n == self.node.node_id)

    def held_devices(self) -> set[int]:
        """Physical GPUs the services hold: planned ones, and any still carrying our slices."""
        held = set(self.applied().devices)
        text = self.book.state("held")
        if text:
            held |= {int(x) for x in text.split(",")}
        return held

    def training_cluster(self) -> ClusterSpec:
        """The cluster the training scheduler sees: the inference node less the services'
        GPUs."""
        held = len(self.held_devices())
        if held == 0:
            return self.svc.cluster
        nodes = tuple(replace(n, gpus=max(0, n.gpus - held)) if n.node_id == self.node.node_id
                      else n for n in self.svc.cluster.nodes)
        return ClusterSpec(self.svc.cluster.name, nodes)

    def _free_devices(self, held: set[int]) -> list[int]:
        usable = [g.index for g in self.devices.gpus() if g.mig_enabled][: self.node.gpus]
        room = self.node.gpus - self.training_held() - len(held)
        return [d for d in usable if d not in held][: max(0, room)]

    def _plan(self, now_s: float) -> None:
        specs = self.book.services()
        old = self.applied()
        held = self.held_devices()
        changes = ""
        cpu0_s = time.process_time()
        if not old.plan.gpus:
            plan = self._fresh_plan(specs)
            devices = self._free_devices(held)[: plan.gpus_used]
        elif not specs:
            plan, devices = self._fresh_plan([]), []
        else:
            tr = None

            def by_replan(svcs: tuple[Service, ...]) -> SharePlan:
                nonlocal tr
                res = replan_for_p99(old.plan, svcs, self.table, self.gpu, self.rule,
                                     arrivals=self.arrivals, target=self.target,
                                     max_rounds=self.p99_rounds)
                self.last_check = (res.failing(), res.rounds, res.cpu_s)
                tr = res.transition
                return tr.plan

            plan = self._min_replicas(specs, by_replan)
            assert tr is not None
            keep = survivors(old, tr.changes)
            check_survivors(old, plan, keep)
            fresh = self._free_devices(held)[: plan.gpus_used - len(keep)]
            devices = [old.devices[g] for g in keep] + fresh
            changes = ", ".join(f"{n} {a}" for a in ("create", "reassign", "retune", "destroy")
                                if (n := tr.count(a)))
        problem = quota_problem(plan, self.gpu, {s.name: s.queue for s in specs},
                                self.svc.tenancy.mig_quotas)
        if problem is None and len(devices) < plan.gpus_used:
            problem = (f"the plan needs {plan.gpus_used} GPUs; {len(devices)} of node "
                       f"{self.node.node_id} are free of training (waiting for more)")
        if problem is not None:
            if problem != self._last_refusal:
                with self.svc.store.tx() as db:
                    self.book.event(db, now_s, None, "plan-refused", problem)
                self._last_refusal = problem
            return
        self._last_refusal = None
        bad, rounds, _ = self.last_check if specs else ((), 0, 0.0)
        cpu_s = time.process_time() - cpu0_s
        self.last_check = (bad, rounds, cpu_s)
        applied = Applied(plan, tuple(devices))
        with self.svc.store.tx() as db:
            self.book.set_state(db, "plan", applied_json(applied))
            self.book.set_state(db, "held", ",".join(map(str, sorted(held | set(devices)))))
            self.book.set_state(db, "dirty", "0")
            self.book.event(db, now_s, None, "planned",
                            f"{plan.gpus_used} GPU(s) {list(devices)}: "
                            + "; ".join(f"GPU {d} {ga.layout}" for d, ga in
                                        zip(devices, plan.gpus, strict=True))
                            + (f" ({changes})" if changes else ""))
            if bad:
                self.book.event(db, now_s, None, "p99-miss", p99_warning(bad, self.target))
            elif specs:
                self.book.event(db, now_s, None, "p99-met",
                                f"every service meets its SLO at p99 in the simulation "
                                f"({self.arrivals.describe()}; {rounds} round(s), "
                                f"{cpu_s * 1e3:.0f} ms CPU to plan)")

    # -- the loop side -------------------------------------------------------------------------

    def tick(self, now_s: float) -> None:
        """Plan if the services changed, then apply (see the module docstring)."""
        if now_s - self._last_tick_s < self.check_s:
            return
        self._last_tick_s = now_s
        with self._lock:
            if self.book.state("dirty") == "1":
                self._plan(now_s)
            try:
                apply(self, now_s)
            except DeviceError as e:
                if str(e) != self._last_refusal:
                    with self.svc.store.tx() as db:
                        self.book.event(db, now_s, None, "device-error", str(e))
                    self._last_refusal = str(e)

    def launch(self, spec: ServiceSpec, inst: MigInstance, proc: int, procs: int,
               replica_id: str | None, run: int, restarts: int, now_s: float) -> Replica:
        """Store a replica row and its ``replica-started`` event, then start its run (the store
        first: a restart finds the row and launches it if the executor never did)."""
        rid = replica_id or f"svc-{spec.name}-{secrets.token_hex(4)}"
        r = Replica(rid, spec.name, inst.gpu, str(inst.placement), inst.uuid, proc, procs, run,
                    "running", now_s, restarts)
        with self.svc.store.tx() as db:
            self.book.add_replica(db, r)
            self.book.event(db, now_s, spec.name, "replica-started",
                            f"{rid} on {describe(inst)}, MPS process {proc + 1} of {procs}")
        self.start_run(spec, r)
        return r

    def start_run(self, spec: ServiceSpec, r: Replica) -> None:
        env = [*spec.env, ("TESSERA_SERVICE", spec.name),
               ("TESSERA_MIG_PROFILE", self.gpu.profile(r.placement.split("@")[0]).name)]
        if r.procs > 1:
            env.append(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(100 // r.procs)))
        defaults = self.svc.tenancy.job_defaults.get(spec.queue, JobDefaults())
        ls = LaunchSpec(r.replica_id, r.run, spec.command, tuple(env),
                        GangPlacement.of(self.gpu.flavor, ((self.node.node_id, 1),)),
                        str(self.svc.work_dir / "services" / r.replica_id),
                        run_as=defaults.run_as or self.svc.opts.run_as,
                        grace_s=self.svc.opts.grace_s, visible_devices=r.mig_uuid)
        self.svc.executor.launch(ls)


def p99_warning(bad: tuple[ServiceOutcome, ...], target: float) -> str:
    """The ``p99-miss`` event's text: each failing service's simulated p99 and attainment."""
    return (f"WARNING: the applied layout misses p99 in the simulation for {len(bad)} "
            f"service(s): " + ", ".join(
                f"{o.service} p99 {o.p99_ms:.1f} ms / SLO {o.slo_ms:g} ms, "
                f"{o.attainment * 100:.2f} % on time (target {target * 100:g} %)" for o in bad))


def replicas_of(plan: SharePlan, service: str) -> int:
    """Replica processes a plan gives a service: its segments' MPS processes."""
    return sum(i.segment.procs for i in plan.instances_of(service))


def survivors(old: Applied, changes: tuple[Change, ...]) -> list[int]:
    """Old plan GPUs that :func:`~tessera.share.replan.replan` keeps, in its order: those with
    an instance it does not destroy, or a slot it fills (it drops the others as empty)."""
    destroyed = {(c.gpu, c.placement) for c in changes if c.action == "destroy"}
    created = {c.gpu for c in changes if c.action == "create"}
    return [g for g, ga in enumerate(old.plan.gpus)
            if g in created or any((g, str(i.placement)) not in destroyed for i in ga.instances)]


def check_survivors(old: Applied, new: SharePlan, keep: list[int]) -> None:
    """Guard: each kept GPU's new layout holds the old instances it did not destroy, so the
    device mapping matches what the Transition says (raises RuntimeError if not)."""
    for j, g in enumerate(keep):
        if j >= len(new.gpus):
            raise RuntimeError(f"re-plan kept old GPU {g} but planned only {len(new.gpus)}")
        now = {str(p) for p in new.gpus[j].layout.placements}
        if not now & {str(i.placement) for i in old.plan.gpus[g].instances} and now:
            raise RuntimeError(f"re-plan's GPU {j} does not continue old GPU {g}")
