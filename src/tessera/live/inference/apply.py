"""One pass of applying the plan to the GPUs and the replicas (the manager's step 2 and 3).

Level-triggered: each pass compares the plan (:class:`~.planstate.Applied`) with what the device
layer lists and what the store's replica rows and the executor say, and does the next safe
step -- so a pass interrupted by a crash is simply done again by the next service. The order is
the :class:`~tessera.share.replan.Transition`'s, *create, move, destroy*:

1. observe every replica: one that exited or was lost while its slot is still planned for its
   service is restarted (a new run, after :func:`restart_delay_s`); one the manager stopped is
   forgotten once gone;
2. create each planned MIG instance that is missing (a slot still held by an instance the plan
   drops waits for it to go), and start a replica on every free planned slot;
3. only when every planned replica that has a slot of its own runs (*ready*): stop the replicas
   on slots the plan gave another service or no longer has (the new service's replica starts
   there on a later pass);
4. destroy instances the plan no longer has once no replica is on them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from tessera.live.executors.base import Executor
from tessera.live.inference.book import Replica, ServiceBook
from tessera.live.inference.devices import DeviceError, GpuDevices, MigInstance, describe
from tessera.live.inference.planstate import Applied
from tessera.live.inference.spec import ServiceSpec
from tessera.live.store import Store
from tessera.share.mig import Placement
from tessera.share.segments import SegmentOption

Slot = tuple[int, str, int]  # (GPU, "kind@start", MPS process index)
Target = dict[tuple[int, str], SegmentOption]
Instances = dict[tuple[int, str], MigInstance]  # (GPU, "kind@start") -> what runs there


class InferenceManager(Protocol):
    """What a pass needs of :class:`~tessera.live.inference.manager.InferenceManager`."""

    book: ServiceBook
    devices: GpuDevices

    @property
    def executor(self) -> Executor: ...

    @property
    def store(self) -> Store: ...

    @property
    def grace_s(self) -> float: ...

    def applied(self) -> Applied: ...

    def held_devices(self) -> set[int]: ...

    def launch(self, spec: ServiceSpec, inst: MigInstance, proc: int, procs: int,
               replica_id: str | None, run: int, restarts: int, now_s: float) -> Replica: ...

    def start_run(self, spec: ServiceSpec, r: Replica) -> None: ...


def _placement(text: str) -> Placement:
    kind, _, start = text.partition("@")
    return Placement(int(start), kind)


def apply(m: InferenceManager, now_s: float) -> None:
    """One pass (see the module docstring)."""
    applied = m.applied()
    target = applied.slots()
    live = _observe(m, now_s, target)
    insts = _instances(m)
    ready = _create_and_start(m, now_s, target, insts, live)
    if ready:
        _stop_unplanned(m, now_s, target, live)
    _destroy_idle(m, now_s, target, insts, applied.devices)


def _observe(m: InferenceManager, now_s: float,
             target: Target) -> dict[Slot, Replica]:
    """Step 1; returns the replicas still in flight by slot."""
    ex, specs = m.executor, {s.name: s for s in m.book.services()}
    live: dict[Slot, Replica] = {}
    for r in m.book.replicas():
        st = ex.status(r.replica_id, r.run)
        if r.status == "stopping":
            if st.state in ("running", "starting"):  # signalled once (step 3): wait for it
                live[r.slot] = r
                continue
            ex.release(r.replica_id, r.run)
            with m.store.tx() as db:
                m.book.drop_replica(db, r.replica_id)
                m.book.event(db, now_s, r.service, "replica-stopped",
                             f"{r.replica_id} left GPU {r.gpu} {r.placement}")
            continue
        spec = specs.get(r.service)
        if st.state == "absent" and spec is not None:  # stored, never launched: a crash between
            m.start_run(spec, r)
        elif st.state in ("exited", "lost", "unplaceable"):
            if now_s < r.started_s + restart_delay_s(r.restarts):
                live[r.slot] = r  # a replica that keeps failing is restarted ever more slowly
                continue
            ex.release(r.replica_id, r.run)
            seg = target.get((r.gpu, r.placement))
            if spec is None or seg is None or seg.service != r.service:
                with m.store.tx() as db:
                    m.book.drop_replica(db, r.replica_id)
                continue
            again = replace(r, run=r.run + 1, restarts=r.restarts + 1, started_s=now_s)
            with m.store.tx() as db:
                m.book.set_replica(db, r.replica_id, run=again.run, restarts=again.restarts,
                                   started_s=now_s)
                m.book.event(db, now_s, r.service, "replica-restarted",
                             f"{r.replica_id} run {r.run} {st.state}"
                             + (f" (exit {st.exit_code})" if st.exit_code is not None else "")
                             + f"; run {again.run} starts on GPU {r.gpu} {r.placement}")
            m.start_run(spec, again)
            r = again
        live[r.slot] = r
    return live


def restart_delay_s(restarts: int) -> float:
    """How long after its last start a failed replica waits to be restarted: 0.5 s, doubling
    with each restart up to 30 s, so a command that exits at once does not spin."""
    return min(30.0, 0.5 * 2 ** min(restarts, 6))


def _instances(m: InferenceManager) -> Instances:
    out: Instances = {}
    for dev in sorted(m.held_devices()):
        for inst in m.devices.instances(dev):
            out[(dev, str(inst.placement))] = inst
    return out


def _create_and_start(m: InferenceManager, now_s: float, target: Target, insts: Instances,
                      live: dict[Slot, Replica]) -> bool:
    """Step 2; returns whether every planned replica with a slot of its own runs."""
    specs = {s.name: s for s in m.book.services()}
    ready = True
    for (dev, pl), seg in sorted(target.items()):
        inst = insts.get((dev, pl))
        if inst is None:
            try:
                inst = m.devices.create(dev, _placement(pl))
            except DeviceError as e:
                if "overlap" not in str(e):
                    raise
                ready = False  # an instance the plan drops still sits there
                continue
            insts[(dev, pl)] = inst
            with m.store.tx() as db:
                m.book.event(db, now_s, seg.service, "slice-created", describe(inst))
        spec = specs.get(seg.service)
        for p in range(seg.procs):
            r = live.get((dev, pl, p))
            if r is None:
                if spec is not None:
                    r = m.launch(spec, inst, p, seg.procs, None, 1, 0, now_s)
                    live[r.slot] = r
                ready = False
            elif r.service == seg.service and r.procs == seg.procs and r.status == "running":
                ready &= m.executor.status(r.replica_id, r.run).state == "running"
    return ready


def _wanted(r: Replica, target: Target) -> bool:
    seg = target.get((r.gpu, r.placement))
    return seg is not None and seg.service == r.service and seg.procs == r.procs \
        and r.proc < seg.procs


def _stop_unplanned(m: InferenceManager, now_s: float, target: Target,
                    live: dict[Slot, Replica]) -> None:
    """Step 3."""
    for r in live.values():
        if r.status != "running" or _wanted(r, target):
            continue
        if not m.executor.stop(r.replica_id, r.run, m.grace_s):
            continue  # still starting: asked again next pass
        with m.store.tx() as db:
            m.book.set_replica(db, r.replica_id, status="stopping")
            m.book.event(db, now_s, r.service, "replica-stopping",
                         f"{r.replica_id} leaves GPU {r.gpu} {r.placement} (re-planned)")


def _destroy_idle(m: InferenceManager, now_s: float, target: Target, insts: Instances,
                  planned_devices: tuple[int, ...]) -> None:
    """Step 4, and forget GPUs that carry nothing of ours any more."""
    occupied = {(r.gpu, r.placement) for r in m.book.replicas()}
    for key, inst in sorted(insts.items()):
        if key in target or key in occupied:
            continue
        m.devices.destroy(inst.gpu, inst.placement)
        with m.store.tx() as db:
            m.book.event(db, now_s, None, "slice-destroyed", describe(inst))
    held = m.held_devices()
    keep = {d for d in held if d in planned_devices or m.devices.instances(d)}
    if keep != held:
        with m.store.tx() as db:
            m.book.set_state(db, "held", ",".join(map(str, sorted(keep))))
