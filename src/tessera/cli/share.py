"""``tessera share``: plan MIG/MPS sharing for inference services, and list MIG layouts.

``tessera share plan --services services.yaml --gpu A100-80GB`` chooses each service's segments,
packs them onto the fewest GPUs, prints every GPU's layout, the lower bound, and the SLO
attainment predicted by replaying Poisson traffic against the plan. ``--parvagpu DIR
--scenario N`` plans one of ParvaGPU's published scenarios instead. ``tessera share layouts``
lists the legal MIG layouts of a GPU. ``tessera share cosim`` reserves the plan's GPUs in a
cluster, simulates a training trace on the rest and the services' request streams on the plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tessera.cli.options import (
    CLUSTER_HELP,
    GPU_HELP,
    GPUS_PER_SERVER,
    JSON,
    LIMIT,
    METHOD,
    POLICY_HELP,
    PRE_R510,
    PROFILES,
    SEED,
    THROUGHPUTS,
    TRACE_HELP,
    TRAFFIC_S,
    deprecated_alias,
    prefer,
)
from tessera.cli.share_p99 import (
    PROXY,
    REQUESTS_PER_SERVICE,
    TARGET,
    TRACES_DIR_HELP,
    register_p99,
    register_reconfig,
    register_simulate,
)
from tessera.errors import SpecError

if TYPE_CHECKING:
    from tessera.share.mig import MigGpu
    from tessera.share.plan import SharePlan
    from tessera.share.profiles import BatchingRule, ProfileTable, Service
    from tessera.share.serving_sim import SimResult as ServingResult
    from tessera.sim.cosim import CosimResult

share_app = typer.Typer(
    help="MIG/MPS GPU sharing for SLO-bound inference: plan services, list MIG layouts.",
    epilog="Example: tessera share plan --scenario 3",
    no_args_is_help=True,
)


@share_app.command("plan", epilog="Example: tessera share plan --services "
                   "examples/services-a100.yaml --gpu A100-80GB --traffic-s 5")
def plan_cmd(
    services: Path | None = typer.Option(None, "--services", help="Services YAML file."),
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP, show_default="the services "
                                   "file's gpu:, else A100-80GB"),
    parvagpu: Path | None = typer.Option(
        None, "--parvagpu", help="A ParvaGPU data folder (prof_data/, SLO/)."
    ),
    scenario: int | None = typer.Option(None, "--scenario", help="ParvaGPU SLO scenario (1-6)."),
    profiles: Path | None = PROFILES,
    method: str = METHOD,
    time_limit_s: float = typer.Option(60.0, "--time-limit-s", min=0.0,
                                       help="Time limit of the ILP solver (s)."),
    traffic_s: float = TRAFFIC_S,
    seed: int = SEED,
    pre_r510: bool = PRE_R510,
    proxy: bool = PROXY,
    target: float = TARGET,
    requests: int = REQUESTS_PER_SERVICE,
    arrivals: str = typer.Option("poisson", "--arrivals", help="Arrival process of the p99 "
                                 "check: poisson, genai or dlrm (the trace's inter-arrivals)."),
    traces_dir: Path | None = typer.Option(None, "--traces-dir", help=TRACES_DIR_HELP),
    max_gpus: int | None = typer.Option(None, "--max-gpus", min=1, help="GPUs available; "
                                        "more needed is an 'infeasible' error."),
    as_json: bool = JSON,
    old_time_limit: float | None = deprecated_alias("--time-limit", "--time-limit-s"),
    old_sim_seconds: float | None = deprecated_alias("--sim-seconds", "--traffic-s"),
) -> None:
    """Plan inference services onto the fewest MIG-partitioned GPUs such that every service
    meets its SLO at p99 in the serving simulation.

    Give --services FILE, or --scenario N (with --parvagpu DIR) for a ParvaGPU scenario. The
    planner packs under the profile model, replays --requests per service (Poisson, or a
    trace's inter-arrivals with --arrivals), and tightens the headroom / batch budget of any
    service that misses p99 until all pass. A plan that still misses is preceded by a WARNING.
    --proxy gives the profile-model plan alone with a --traffic-s Poisson replay.
    """
    from tessera.share.packing import plan_services
    from tessera.share.serving_sim import poisson_streams, simulate

    time_limit_s = prefer(time_limit_s, old_time_limit, "--time-limit", "--time-limit-s")
    sim_s = prefer(traffic_s, old_sim_seconds, "--sim-seconds", "--traffic-s")
    svcs, rule, table, g = _plan_inputs(services, gpu, parvagpu, scenario, profiles)
    if not proxy and sim_s > 0:
        from tessera.cli.share_p99 import run_p99_plan

        run_p99_plan(svcs, rule, table, g, method=method, time_limit_s=time_limit_s,
                     r510=not pre_r510, target=target, requests=requests, arrivals=arrivals,
                     traces_dir=traces_dir, seed=seed, max_gpus=max_gpus, as_json=as_json)
        return
    plan = plan_services(
        svcs, table, g, rule, method=method, time_limit_s=time_limit_s, r510=not pre_r510
    )
    sim = None
    if sim_s > 0:
        sim = simulate(plan, poisson_streams(svcs, sim_s, seed), table, seed=seed)
    if as_json:
        typer.echo(json.dumps(_plan_json(plan, g, sim, sim_s), indent=2))
    else:
        _print_plan(plan, g, sim, sim_s)


def _plan_inputs(
    services: Path | None, gpu: str | None, parvagpu: Path | None, scenario: int | None,
    profiles: Path | None,
) -> tuple[tuple[Service, ...], BatchingRule, ProfileTable, MigGpu]:
    """The services, batching rule, profile table and GPU that ``share plan`` was given."""
    from tessera.share.mig import mig_gpu
    from tessera.share.profiles import PARVAGPU_RULE, load_parvagpu_profiles, parvagpu_scenario
    from tessera.share.spec import load_services

    if (services is None) == (scenario is None):
        raise SpecError("give either --services FILE or --scenario N (with optional --parvagpu)")
    _folder(parvagpu, "--parvagpu")
    _folder(profiles, "--profiles")
    if services is not None:
        spec = load_services(services)
        svcs, rule = spec.services, spec.rule
        gpu_name = gpu or spec.gpu or "A100-80GB"
        table = load_parvagpu_profiles(profiles)
    else:
        assert scenario is not None
        table = load_parvagpu_profiles(parvagpu or profiles)
        svcs = parvagpu_scenario(scenario, parvagpu, table.models())
        rule = PARVAGPU_RULE
        gpu_name = gpu or "A100-80GB"
    g = mig_gpu(gpu_name)
    if table.gpu != g.gpu:
        raise SpecError(
            f"profiles are for {table.gpu}; there is no profile data for {g.gpu} "
            "(MIG slices are not performance-proportional: profile on the target GPU)"
        )
    return svcs, rule, table, g


def _plan_json(plan: SharePlan, g: MigGpu, sim: ServingResult | None, sim_s: float,
               ) -> dict[str, Any]:
    from tessera.share.plan import plan_to_json

    out = plan_to_json(plan, g)
    if sim is not None:
        out["predicted"] = {
            "traffic": f"poisson {sim_s:g} s",
            "slo_violations": sim.violations,
            "attainment": round(sim.attainment, 6),
            "services": [
                {"name": o.service, "p99_ms": round(o.p99_ms, 3), "slo_ms": o.slo_ms,
                 "attainment": round(o.attainment, 6)}
                for o in sim.services
            ],
        }
    return out


def _print_plan(plan: SharePlan, g: MigGpu, sim: ServingResult | None, sim_s: float) -> None:
    from tessera.share.plan import plan_claim, replay_verdict

    typer.echo(
        f"{plan.gpu}: {plan.gpus_used} GPUs ({plan.method}; lower bound {plan.lower_bound}; "
        f"{plan.solve_s * 1000:.0f} ms)"
    )
    typer.echo(f"  {plan_claim(plan)}")
    for n, ga in enumerate(plan.gpus):
        typer.echo(f"  GPU {n:3d}  {ga.layout}")
        for inst in ga.instances:
            s = inst.segment
            typer.echo(
                f"      {inst.placement!s:8} {g.profile(s.kind).name:10} {s.service:20} "
                f"batch {s.batch:3d} x {s.procs} proc  {s.latency_ms:7.1f} ms  "
                f"{s.throughput_rps:8.1f} req/s"
            )
    if sim is None:
        return
    typer.echo(
        f"Predicted SLO attainment ({sim_s:g} s Poisson): {sim.attainment * 100:.3f} % of "
        f"requests; {sim.violations} service(s) with p99 over SLO"
    )
    for o in sim.services:
        flag = "ok" if o.meets_slo else "VIOLATED"
        typer.echo(f"  {o.service:20} p99 {o.p99_ms:8.1f} ms / SLO {o.slo_ms:8.1f} ms  {flag}")
    typer.echo(replay_verdict(plan, sim.violations))


@share_app.command("layouts", epilog="Example: tessera share layouts --gpu H100-80GB --json")
def layouts_cmd(
    gpu: str = typer.Option(..., "--gpu", help=GPU_HELP),
    double_memory: bool = typer.Option(
        False, "--with-1g-double-mem", help="Include the double-memory 1g profile."
    ),
    all_layouts: bool = typer.Option(False, "--all", help="Every legal layout, not only maximal."),
    pre_r510: bool = PRE_R510,
    as_json: bool = JSON,
) -> None:
    """List the legal MIG layouts of a GPU (maximal ones by default)."""
    from tessera.share.mig import BASE_KINDS, DOUBLE_MEMORY_KINDS, enumerate_layouts, mig_gpu

    g = mig_gpu(gpu)
    kinds = DOUBLE_MEMORY_KINDS if double_memory else BASE_KINDS
    lays = enumerate_layouts(g, kinds, maximal_only=not all_layouts, r510=not pre_r510)
    if as_json:
        rows = [{"layout": [str(p) for p in lay.placements], "multiset": lay.multiset()}
                for lay in lays]
        typer.echo(json.dumps({"gpu": g.gpu, "count": len(lays), "layouts": rows}, indent=2))
        return
    kind_names = ", ".join(f"{k}={g.profile(k).name}" for k in kinds)
    what = "legal" if all_layouts else "maximal"
    typer.echo(f"{g.gpu}: {len(lays)} {what} layouts ({kind_names})")
    for lay in lays:
        sms = sum(g.profile(p.kind).sm_count for p in lay.placements)
        typer.echo(f"  {lay!s:40} {lay.multiset():24} {sms:4d} SMs")


@share_app.command("check", epilog='Example: tessera share check "3g@4 2g@0 1g@2 1g@3" '
                   "--gpu A100-80GB")
def check_cmd(
    layout: str = typer.Argument(..., help='Placements, e.g. "3g@4 2g@0 1g@2 1g@3".'),
    gpu: str = typer.Option(..., "--gpu", help=GPU_HELP),
    pre_r510: bool = PRE_R510,
) -> None:
    """Check a MIG layout against the hardware rules and print its creation order."""
    from tessera.share.mig import creation_order, mig_gpu, parse_layout

    g = mig_gpu(gpu)
    lay = parse_layout(g, layout, r510=not pre_r510)
    typer.echo(f"legal on {g.gpu}: {lay}")
    for step in creation_order(g, lay):
        typer.echo(
            f"  create GI profile {step.gi_profile_id} ({step.profile_name}) at {step.start}"
        )


@share_app.command("cosim", epilog="Example: tessera share cosim --services "
                   "examples/services-a100.yaml -t philly --limit 300 "
                   "-c a100-80gb:16,v100:32,t4:16")
def cosim_cmd(
    services: Path = typer.Option(..., "--services", help="Services YAML file."),
    trace: str = typer.Option(..., "--trace", "-t", help=TRACE_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    gpus_per_server: int = GPUS_PER_SERVER,
    policy: str = typer.Option("las", "--policy", "-p", help=POLICY_HELP),
    limit: int | None = LIMIT,
    requests: str = typer.Option("poisson", "--requests", help="Request streams: poisson, genai "
                                 "or dlrm (Alibaba trace shapes at each service's rate)."),
    traffic_s: float = TRAFFIC_S,
    traces_dir: Path | None = typer.Option(None, "--traces-dir", help="Folder holding "
                                           "alibaba_genai_2026/ and alibaba_dlrm_2025/."),
    profiles: Path | None = PROFILES,
    method: str = METHOD,
    compare: bool = typer.Option(True, "--compare/--no-compare", help="Also run training on "
                                 "the full cluster to measure the reservation's JCT cost."),
    seed: int = SEED,
    throughputs: str = THROUGHPUTS,
    as_json: bool = JSON,
    old_serve_seconds: float | None = deprecated_alias("--serve-seconds", "--traffic-s"),
) -> None:
    """Services on MIG slices, training on the rest: SLO attainment and training cost."""
    from tessera.model.cluster import load_cluster
    from tessera.model.gpus import resolve_flavor
    from tessera.perf.tables import load_throughputs
    from tessera.sched.catalog import make_policy
    from tessera.share.profiles import load_parvagpu_profiles
    from tessera.share.spec import load_services
    from tessera.sim.config import SimConfig
    from tessera.sim.cosim import cosim_to_json, cosimulate
    from tessera.workload import read_trace

    serve_s = prefer(traffic_s, old_serve_seconds, "--serve-seconds", "--traffic-s")
    _folder(profiles, "--profiles")
    _folder(traces_dir, "--traces-dir")
    make_policy(policy)  # fail fast on a bad name
    spec = load_services(services)
    table = load_parvagpu_profiles(profiles)
    full = load_cluster(cluster, gpus_per_server)
    tput = load_throughputs(throughputs)
    workload = read_trace(trace, limit=limit, throughputs=tput).workload
    r = cosimulate(
        spec.services, spec.rule, table, full, workload, policy=policy,
        service_gpu=resolve_flavor(spec.gpu) if spec.gpu else None, method=method,
        requests=requests, serve_seconds=serve_s, traces_dir=traces_dir,
        seed=seed, compare=compare, config=SimConfig(seed=seed), throughputs=tput,
    )
    if as_json:
        out = cosim_to_json(r)
        out["trace"] = workload.name
        typer.echo(json.dumps(out, indent=2))
    else:
        _print_cosim(r, f"{workload.name}, {len(workload)} jobs")


def _print_cosim(r: CosimResult, training: str) -> None:
    """The co-simulation as text: the reservation, serving per service, training's cost."""
    res = r.reservation
    typer.echo(f"cluster   {r.cluster}")
    typer.echo(
        f"services  {len(r.plan.services)} on {r.plan.gpus_used} x {r.mig_gpu} "
        f"({r.plan.method}, lower bound {r.plan.lower_bound}); one service per whole GPU needs "
        f"{r.whole_gpu_baseline}: {r.gpus_saved} GPU(s) saved"
    )
    where = ", ".join(f"{n.node_id} {n.reserved}/{n.node_gpus}" for n in res.nodes) or "none"
    typer.echo(f"reserved  {res.gpus} GPU(s) on {len(res.nodes)} node(s): {where}")
    typer.echo(f"training  {res.remaining.describe()}")
    typer.echo(
        f"Serving ({r.requests}, {r.serve_seconds:g} s): {r.serving.attainment * 100:.3f} % of "
        f"requests within SLO; {r.serving.violations} service(s) with p99 over SLO"
    )
    for o in r.serving.services:
        flag = "ok" if o.meets_slo else "VIOLATED"
        typer.echo(
            f"  {o.service:20} {o.requests:8d} req  p99 {o.p99_ms:8.1f} ms / SLO "
            f"{o.slo_ms:8.1f} ms  {o.attainment * 100:7.3f} %  {flag}"
        )
    typer.echo(f"Training ({training}, policy {r.policy}):")
    rows = [("with services", r.training)] + ([("full cluster", r.baseline)] if r.baseline else [])
    for label, t in rows:
        typer.echo(
            f"  {label:14} {t.gpus:5d} GPUs  avg JCT {t.avg_jct_s / 3600:8.2f} h  "
            f"utilization {t.utilization * 100:5.1f} %  done {t.succeeded}/{t.jobs}"
            + (f", rejected {t.rejected}" if t.rejected else "")
            + (f", unfinished {t.unfinished}" if t.unfinished else "")
        )
    inc = r.jct_increase
    if inc is not None:
        typer.echo(f"  reservation cost: avg JCT {inc * 100:+.1f} %")
    for note in r.notes:
        typer.echo(f"note: {note}")


def _folder(path: Path | None, flag: str) -> None:
    """Refuse a folder option that names nothing, before a reader says something vaguer."""
    if path is not None and not path.exists():
        raise SpecError(f"{flag}: no such folder: {path}")
    if path is not None and not path.is_dir():
        raise SpecError(f"{flag}: not a folder: {path}")


def register(app: typer.Typer) -> None:
    """Add the ``share`` sub-app to the root CLI."""
    register_p99(share_app)
    register_simulate(share_app, _plan_inputs)
    register_reconfig(share_app, _plan_inputs)
    app.add_typer(share_app, name="share")
