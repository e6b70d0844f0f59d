"""ParvaGPU's own deployments as :class:`~tessera.share.plan.SharePlan` objects.

ParvaGPU publishes, for each of its six SLO scenarios, the deployment its configurator and
allocator produced (``deployment/SLO<k>_ParvaGPU_deploy.csv``: one row per MIG instance with
the GPU, the model, the placement start slice, the instance size in compute slices, the batch
size and the number of MPS processes). Reading it into a plan lets the same serving simulation
judge both planners side by side (:func:`compare_scenario`).

The batch latency and throughput of each instance come from the same profile table that Tessera
plans with; an instance whose (model, size, batch, processes) was never profiled is an error.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tessera.errors import SpecError
from tessera.share.mig import BASE_KINDS, MigGpu, MigLayoutError
from tessera.share.p99 import ArrivalModel, meets, plan_for_p99
from tessera.share.packing import materialise, patterns
from tessera.share.plan import GpuAssignment, Instance, SharePlan, gpu_assignment
from tessera.share.profiles import (
    KIND_BY_COMPUTE_SLICES,
    PARVAGPU_RULE,
    ProfileTable,
    Service,
    parvagpu_scenario,
)
from tessera.share.segments import SegmentOption
from tessera.share.serving_sim import SimResult, simulate

_COLUMNS = ("Num instance", "Num GPU", "Model", "Placement", "Instance size", "Batch size",
            "Num proc")


def _deploy_text(scenario: int, directory: Path | None) -> tuple[str, str]:
    name = f"SLO{scenario}_ParvaGPU_deploy.csv"
    if directory is None:
        res = resources.files("tessera.data").joinpath("parvagpu/deployment", name)
        return res.read_text(), f"(bundled) deployment/{name}"
    path = directory / "deployment" / name
    if not path.is_file():
        raise SpecError(f"ParvaGPU deployment not found: {path}")
    return path.read_text(), str(path)


def load_parvagpu_deployment(
    scenario: int, services: tuple[Service, ...], table: ProfileTable, gpu: MigGpu,
    directory: Path | None = None,
) -> SharePlan:
    """ParvaGPU's deployment for ``scenario`` as a plan over ``services`` (one per model)."""
    if not 1 <= scenario <= 6:
        raise SpecError(f"scenario must be 1..6, got {scenario}")
    text, source = _deploy_text(scenario, directory)
    kinds = dict(KIND_BY_COMPUTE_SLICES)
    by_model = {s.model: s for s in services}
    per_gpu: dict[tuple[int, int], list[Instance]] = {}  # (node, GPU on the node)
    for line, rec in enumerate(csv.DictReader(text.splitlines()), start=2):
        missing = [c for c in _COLUMNS if c not in rec]
        if missing:
            raise SpecError(f"{source}: missing column(s) {', '.join(missing)}")
        model = rec["Model"]
        svc = by_model.get(model)
        if svc is None:
            raise SpecError(f"{source}:{line}: model {model!r} is not a service of scenario "
                            f"{scenario}")
        size, batch, procs = int(rec["Instance size"]), int(rec["Batch size"]), int(rec["Num proc"])
        if size not in kinds:
            raise SpecError(f"{source}:{line}: unknown instance size {size}")
        kind = kinds[size]
        point = table.point(model, kind, batch, procs)
        prof = gpu.profile(kind)
        seg = SegmentOption(svc.name, model, kind, batch, procs, point.latency_ms,
                            point.throughput_rps, prof.compute_slices, prof.memory_slices)
        key = (int(rec["Num instance"]), int(rec["Num GPU"]))
        per_gpu.setdefault(key, []).append(Instance(int(rec["Placement"]), seg))
    gpus = tuple(_relayout(gpu, insts, source, n) for n, insts in sorted(per_gpu.items()))
    return SharePlan(gpu.gpu, "parvagpu", gpus, 0, False, 0.0, services, PARVAGPU_RULE)


def _relayout(gpu: MigGpu, insts: list[Instance], source: str,
              n: tuple[int, int]) -> GpuAssignment:
    """Keep the recorded start slots when they form a legal layout; otherwise (ParvaGPU's
    allocator checks only the start slot, so 32 of its 46 GPUs are illegal as recorded) put
    the same multiset of instances into a maximal pattern that holds it."""
    try:
        return gpu_assignment(gpu, insts)
    except MigLayoutError:
        pass
    need = [sum(i.segment.kind == k for i in insts) for k in BASE_KINDS]
    for pat in patterns(gpu):
        if all(pat.counts[j] >= need[j] for j in range(len(BASE_KINDS))):
            return materialise(gpu, [pat], [i.segment for i in insts])[0]
    kinds = sorted(i.segment.kind for i in insts)
    raise SpecError(f"{source}: node {n[0]} GPU {n[1]}: instances {kinds} fit no legal MIG "
                    "layout")


@dataclass(frozen=True, slots=True)
class ScenarioRow:
    """One planner on one scenario, judged by the simulation."""

    scenario: int
    planner: str
    gpus: int
    violated: tuple[str, ...]
    attainment: dict[str, float]  # per service

    @property
    def worst(self) -> float:
        return min(self.attainment.values()) if self.attainment else 1.0


def _row(scenario: int, planner: str, plan: SharePlan, sim: SimResult,
         target: float) -> ScenarioRow:
    return ScenarioRow(
        scenario, planner, plan.gpus_used,
        tuple(o.service for o in sim.services if not meets(o, target)),
        {o.service: o.attainment for o in sim.services},
    )


def compare_scenario(
    scenario: int, table: ProfileTable, gpu: MigGpu, *, arrivals: ArrivalModel | None = None,
    target: float = 0.99, directory: Path | None = None,
) -> tuple[ScenarioRow, ScenarioRow]:
    """Tessera's p99-checked plan and ParvaGPU's deployment of one scenario, both replayed
    against the same request streams: (tessera, parvagpu)."""
    arrivals = arrivals or ArrivalModel()
    services = parvagpu_scenario(scenario, directory, table.models())
    ours = plan_for_p99(services, table, gpu, PARVAGPU_RULE, arrivals=arrivals, target=target)
    theirs = load_parvagpu_deployment(scenario, services, table, gpu, directory)
    sim = simulate(theirs, arrivals.streams(services), table, seed=arrivals.seed)
    return (_row(scenario, "tessera", ours.plan, ours.sim, target),
            _row(scenario, "parvagpu", theirs, sim, target))
