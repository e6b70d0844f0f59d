"""Test builders: small clusters and jobs in one readable line each.

    cluster = make_cluster().node("v100", gpus=4, count=2).node("k80", gpus=2).build()
    job = make_job("a", gpus=2, steps=1000)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.model.cluster import ClusterSpec, Node, make_nodes
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId, JobSpec, JobState, Workload
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator

RESNET = "ResNet-18 (batch size 64)"
RECO = "Recommendation (batch size 1024)"


@dataclass
class ClusterBuilder:
    nodes: list[Node] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def node(self, flavor: str | GpuFlavor, gpus: int, count: int = 1, rack: str | None = None,
             ) -> ClusterBuilder:
        key = flavor if isinstance(flavor, str) else flavor.short
        start = self.counters.get(key, 0)
        f = resolve_flavor(flavor) if isinstance(flavor, str) else flavor
        self.nodes += make_nodes(f, count, gpus, start=start, rack=rack)
        self.counters[key] = start + count
        return self

    def build(self, name: str = "test") -> ClusterSpec:
        return ClusterSpec(name, tuple(self.nodes))


def make_cluster() -> ClusterBuilder:
    return ClusterBuilder()


def make_job(
    job_id: str,
    gpus: int = 1,
    steps: float = 1000.0,
    submit_s: float = 0.0,
    job_type: str = RESNET,
    **kw: object,
) -> JobSpec:
    return JobSpec(JobId(job_id), job_type, gpus, steps, submit_s, **kw)  # type: ignore[arg-type]


def make_workload(*jobs: JobSpec, name: str = "test") -> Workload:
    return Workload(name, tuple(jobs))


def view(spec: JobSpec, state: JobState = JobState.PENDING, placement: Placement | None = None,
         **kw: object) -> JobView:
    return JobView(spec, state, kw.pop("remaining_steps", spec.total_steps),  # type: ignore[arg-type]
                   placement, **kw)  # type: ignore[arg-type]


def snapshot(cluster: ClusterSpec, *views: JobView, now_s: float = 0.0, **kw: object) -> Snapshot:
    return Snapshot(now_s, cluster, tuple(views), **kw)  # type: ignore[arg-type]


def plan_json(model: str, devices: str, global_batch: int,
              gpus_per_server: int) -> dict[str, object]:
    """``tessera plan --json``'s answer for these devices, through the real command."""
    import json

    import typer
    from typer.testing import CliRunner

    from tessera.cli.plan import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:
        """Test root."""

    out = CliRunner().invoke(app, ["plan", "--model", model, "--devices", devices,
                                   "--global-batch", str(global_batch), "--gpus-per-server",
                                   str(gpus_per_server), "--json"])
    assert out.exit_code == 0, out.output
    result: dict[str, object] = json.loads(out.output)
    return result


def busy_simulator(policy: str, cfg: SimConfig, k80_nodes: int = 2) -> Simulator:
    """A :class:`~tessera.sim.engine.Simulator` of 40 jobs of 1-4 GPUs arriving every 40 s on
    two 4-GPU V100 nodes and ``k80_nodes`` 4-GPU K80 nodes: busy enough that jobs wait, are
    preempted and fail (with ``cfg``'s failures), for tests that check the simulator's books
    at every decision."""
    c = make_cluster().node("v100", gpus=4, count=2).node("k80", gpus=4, count=k80_nodes).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=2e4 + 5e3 * (i % 7), submit_s=40 * i,
                     max_retries=2) for i in range(40)]
    return Simulator(make_workload(*jobs), c, make_policy(policy), cfg, default_throughputs())
