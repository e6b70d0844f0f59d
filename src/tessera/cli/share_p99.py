"""``tessera share plan`` checked at p99, and ``tessera share parvagpu`` (side by side).

``share plan`` (without ``--proxy``) runs :func:`tessera.share.p99.plan_for_p99`: the plan it
prints meets every SLO at p99 in the seeded serving simulation, or a WARNING line naming the
failing services comes *before* the plan. ``share parvagpu`` replays ParvaGPU's own
deployments and Tessera's p99-checked plans for the six scenarios against the same request
streams and prints GPUs, violated services and attainment per service.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tessera.cli.options import GPU_HELP, JSON, SEED
from tessera.errors import SpecError

# Options shared by share plan / parvagpu / simulate / reconfig: one help text each.
SERVICES_HELP = "Services YAML file."
SCENARIO_HELP = "ParvaGPU SLO scenario (1-6)."
PARVAGPU_HELP = "A ParvaGPU data folder (prof_data/, SLO/)."
TRACES_DIR_HELP = "Folder holding alibaba_genai_2026/ and alibaba_dlrm_2025/."
PROXY = typer.Option(False, "--proxy", help="Use the profile-model plan alone (no p99 loop; "
                     "share plan then replays --traffic-s of Poisson traffic).")
TARGET = typer.Option(0.99, "--target", min=0.0, max=1.0, help="Attainment each service must "
                      "reach in the simulation (fraction of its requests within the SLO).")
REQUESTS_PER_SERVICE = typer.Option(50_000, "--requests-per-service", min=100,
                                    help="Requests per service in the p99 check.")
WINDOW_H = typer.Option(6.0, "--window-h", help="Window of trace time (h): attainment is "
                        "reported, and re-planning done, per window.")
REQUEST_TRACE_HELP = ("Request trace: genai or dlrm (Alibaba traces, found like other public "
                      "data or in --traces-dir) or a CSV with an arrival_s column.")

if TYPE_CHECKING:
    from tessera.share.mig import MigGpu
    from tessera.share.p99 import ArrivalModel, P99Plan
    from tessera.share.profiles import BatchingRule, ProfileTable, Service


def _traces_folder(name: str, traces_dir: Path | None) -> Path | None:
    """The traces folder for ``genai``/``dlrm`` (an error saying where data is looked for)."""
    from tessera.workload.datadir import find_data, missing_data_message

    folder = traces_dir or find_data("traces")
    if folder is None and name in ("genai", "dlrm"):
        raise SpecError(missing_data_message(f"the {name} request trace", "traces/")
                        + " or pass --traces-dir")
    return folder


def arrival_model(kind: str, requests: int, seed: int, traces_dir: Path | None) -> ArrivalModel:
    """The arrival model named on the command line (trace files found like other readers)."""
    from tessera.share.arrivals import read_trace_times
    from tessera.share.p99 import ArrivalModel

    if kind == "poisson":
        return ArrivalModel("poisson", requests, seed)
    if kind not in ("genai", "dlrm"):
        raise SpecError(f"unknown arrival process {kind!r}: use poisson, genai or dlrm")
    folder = _traces_folder(kind, traces_dir)
    assert folder is not None
    return ArrivalModel(kind, requests, seed, read_trace_times(kind, folder))


def run_p99_plan(
    svcs: tuple[Service, ...], rule: BatchingRule, table: ProfileTable, g: MigGpu, *,
    method: str, time_limit_s: float, r510: bool, target: float, requests: int,
    arrivals: str, traces_dir: Path | None, seed: int, max_gpus: int | None, as_json: bool,
) -> None:
    """Plan, check at p99, print (text or JSON)."""
    from tessera.share.p99 import plan_for_p99

    model = arrival_model(arrivals, requests, seed, traces_dir)
    res = plan_for_p99(svcs, table, g, rule, arrivals=model, target=target, method=method,
                       time_limit_s=time_limit_s, r510=r510, max_gpus=max_gpus)
    if as_json:
        typer.echo(json.dumps(p99_json(res, g), indent=2))
    else:
        print_p99(res, g)


def p99_json(res: P99Plan, g: MigGpu) -> dict[str, Any]:
    from tessera.share.p99 import meets, p99_claim
    from tessera.share.plan import plan_to_json

    out = plan_to_json(res.plan, g)
    out["optimal_under"] = p99_claim(res)
    out["predicted"] = {  # the same block as --proxy prints, for scripts that read it
        "traffic": res.arrivals.describe(),
        "slo_violations": res.sim.violations,
        "attainment": round(res.sim.attainment, 6),
        "services": [{"name": o.service, "p99_ms": round(o.p99_ms, 3), "slo_ms": o.slo_ms,
                      "attainment": round(o.attainment, 6)} for o in res.sim.services],
    }
    out["p99_check"] = {
        "meets": res.meets,
        "arrivals": res.arrivals.describe(),
        "target_attainment": res.target,
        "proxy_gpus": res.proxy_gpus,
        "rounds": res.rounds,
        "slo_violations": len(res.failing()),
        "services": [
            {"name": o.service, "requests": o.requests, "p50_ms": round(o.p50_ms, 3),
             "p99_ms": round(o.p99_ms, 3), "slo_ms": o.slo_ms,
             "attainment": round(o.attainment, 6), "meets": meets(o, res.target),
             "latency_fraction": round(res.knobs[o.service].latency_fraction, 4),
             "max_utilization": round(res.knobs[o.service].max_utilization, 4)}
            for o in res.sim.services
        ],
    }
    return out


def print_p99(res: P99Plan, g: MigGpu) -> None:
    """The verdict first, then the claim, the layout, and the per-service check."""
    from tessera.share.p99 import meets, p99_claim, p99_verdict

    plan = res.plan
    typer.echo(p99_verdict(res))
    typer.echo(f"{plan.gpu}: {plan.gpus_used} GPUs ({plan.method}; lower bound "
               f"{plan.lower_bound}; profile-model plan {res.proxy_gpus}; "
               f"{res.solve_s * 1000:.0f} ms)")
    typer.echo(f"  {p99_claim(res)}")
    for n, ga in enumerate(plan.gpus):
        typer.echo(f"  GPU {n:3d}  {ga.layout}")
        for inst in ga.instances:
            s = inst.segment
            typer.echo(
                f"      {inst.placement!s:8} {g.profile(s.kind).name:10} {s.service:20} "
                f"batch {s.batch:3d} x {s.procs} proc  {s.latency_ms:7.1f} ms  "
                f"{s.throughput_rps:8.1f} req/s"
            )
    typer.echo(f"Predicted SLO attainment ({res.arrivals.describe()}): "
               f"{res.sim.attainment * 100:.3f} % of requests on time")
    for o in res.sim.services:
        flag = "ok" if meets(o, res.target) else "VIOLATED"
        typer.echo(f"  {o.service:20} p99 {o.p99_ms:8.1f} ms / SLO {o.slo_ms:8.1f} ms  "
                   f"{o.attainment * 100:7.3f} %  {flag}")


def register_p99(share_app: typer.Typer) -> None:
    """Add ``share parvagpu`` to the share sub-app."""

    @share_app.command("parvagpu", epilog="Example: tessera share parvagpu --requests 20000")
    def parvagpu_cmd(
        parvagpu: Path | None = typer.Option(None, "--parvagpu", help=PARVAGPU_HELP),
        scenario: int | None = typer.Option(None, "--scenario", help=SCENARIO_HELP),
        target: float = TARGET,
        requests: int = REQUESTS_PER_SERVICE,
        seed: int = SEED,
        as_json: bool = JSON,
    ) -> None:
        """Tessera's p99-checked plans beside ParvaGPU's own deployments, same simulation.

        All six scenarios unless --scenario; --parvagpu also needs deployment/ (bundled data
        if omitted)."""
        from tessera.share.mig import mig_gpu
        from tessera.share.p99 import ArrivalModel
        from tessera.share.parvagpu_deploy import compare_scenario
        from tessera.share.profiles import load_parvagpu_profiles

        if parvagpu is not None and not parvagpu.is_dir():
            raise SpecError(f"--parvagpu: no such folder: {parvagpu}")
        table = load_parvagpu_profiles(parvagpu)
        g = mig_gpu("A100-80GB")
        model = ArrivalModel("poisson", requests, seed)
        chosen = [scenario] if scenario is not None else list(range(1, 7))
        rows = [r for sc in chosen
                for r in compare_scenario(sc, table, g, arrivals=model, target=target,
                                          directory=parvagpu)]
        if as_json:
            typer.echo(json.dumps({"arrivals": model.describe(), "target": target, "rows": [
                {"scenario": r.scenario, "planner": r.planner, "gpus": r.gpus,
                 "violated": list(r.violated),
                 "attainment": {k: round(v, 6) for k, v in r.attainment.items()}}
                for r in rows]}, indent=2))
            return
        typer.echo(f"Each plan replayed with {model.describe()}; a service is violated when "
                   f"p99 > SLO or attainment < {target * 100:g} %")
        typer.echo(f"{'scenario':>8} {'planner':9} {'GPUs':>4} {'worst':>8}  violated services")
        for r in rows:
            bad = ", ".join(f"{v} ({r.attainment[v] * 100:.1f} %)" for v in r.violated) or "-"
            typer.echo(f"{r.scenario:8d} {r.planner:9} {r.gpus:4d} {r.worst * 100:7.2f}%  {bad}")
        for planner in ("tessera", "parvagpu"):
            mine = [r for r in rows if r.planner == planner]
            typer.echo(f"total {planner}: {sum(r.gpus for r in mine)} GPUs, "
                       f"{sum(len(r.violated) for r in mine)} violated service(s)")


def register_simulate(share_app: typer.Typer, plan_inputs: Callable[..., Any]) -> None:
    """Add ``share simulate --trace`` to the share sub-app (``plan_inputs``: how ``share plan``
    turns --services/--scenario into services, rule, profile table and GPU)."""

    @share_app.command("simulate", epilog="Example: tessera share simulate --scenario 3 "
                       "--trace genai --plot attainment.png")
    def simulate_cmd(
        trace: str = typer.Option(..., "--trace", "-t", help=REQUEST_TRACE_HELP),
        services: Path | None = typer.Option(None, "--services", help=SERVICES_HELP),
        scenario: int | None = typer.Option(None, "--scenario", help=SCENARIO_HELP),
        gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
        traces_dir: Path | None = typer.Option(None, "--traces-dir", help=TRACES_DIR_HELP),
        window_h: float = WINDOW_H,
        rate_is: str = typer.Option("mean", "--rate-is", help="What a service's rate_rps "
                                    "stands for: the trace's mean rate, or its peak window's."),
        proxy: bool = PROXY,
        plot: Path | None = typer.Option(None, "--plot", help="Write the attainment-over-time "
                                         "PNG here."),
        seed: int = SEED,
        as_json: bool = JSON,
    ) -> None:
        """Replay a real request trace against the plan: p99 and SLO attainment over time."""
        from tessera.share.p99 import plan_for_p99
        from tessera.share.packing import plan_services
        from tessera.share.traces import read_request_trace, replay

        svcs, rule, table, g = plan_inputs(services, gpu, None, scenario, None)
        tr = read_request_trace(trace, _traces_folder(trace, traces_dir))
        if proxy:
            plan = plan_services(svcs, table, g, rule)
        else:
            plan = plan_for_p99(svcs, table, g, rule).plan
        rep = replay(plan, tr, table, window_h=window_h, rate_is=rate_is, seed=seed)
        if plot is not None:
            from tessera.report.serving_plots import attainment_plot

            attainment_plot(rep, plot)
        if as_json:
            typer.echo(json.dumps({
                "trace": tr.name, "requests_in_trace": len(tr.arrivals_s),
                "trace_days": round(tr.duration_s / 86400, 3), "gpus": plan.gpus_used,
                "window_h": window_h, "rate_is": rate_is, "plot": str(plot) if plot else None,
                "services": [{"name": n, "requests": rep.requests[n], "slo_ms": rep.slo_ms[n],
                              "p99_ms": round(rep.p99_ms[n], 3),
                              "attainment": round(rep.attainment[n], 6),
                              "worst_window_attainment": round(rep.worst_window(n), 6)}
                             for n in rep.slo_ms],
                "windows": [{"start_h": w.start_h, "requests": w.requests,
                             "attainment": {k: (None if v != v else round(v, 6))
                                            for k, v in w.attainment.items()}}
                            for w in rep.windows],
            }, indent=2))
            return
        kind = "profile model" if proxy else "p99-checked, Poisson"
        typer.echo(f"{Path(tr.name).name}: {len(tr.arrivals_s):,} events over "
                   f"{tr.duration_s / 86400:.1f} days, time-compressed per service so its "
                   f"rate is the trace's {rate_is} rate ({window_h:g} h windows); plan of "
                   f"{plan.gpus_used} GPUs ({kind})")
        for n in rep.slo_ms:
            flag = "ok" if rep.p99_ms[n] <= rep.slo_ms[n] else "VIOLATED"
            typer.echo(f"  {n:20} {rep.requests[n]:7d} req  p99 {rep.p99_ms[n]:8.1f} ms / SLO "
                       f"{rep.slo_ms[n]:7.1f} ms  {rep.attainment[n] * 100:7.3f} %  worst "
                       f"{window_h:g} h window {rep.worst_window(n) * 100:6.2f} %  {flag}")
        if plot is not None:
            typer.echo(f"plot: {plot}")


def register_reconfig(share_app: typer.Typer, plan_inputs: Callable[..., Any]) -> None:
    """Add ``share reconfig`` (re-planning over a trace's windows) to the share sub-app."""

    @share_app.command("reconfig", epilog="Example: tessera share reconfig --scenario 3 "
                       "--trace genai --window-h 6")
    def reconfig_cmd(
        trace: str = typer.Option("genai", "--trace", "-t", help=REQUEST_TRACE_HELP),
        services: Path | None = typer.Option(None, "--services", help=SERVICES_HELP),
        scenario: int | None = typer.Option(None, "--scenario", help=SCENARIO_HELP),
        traces_dir: Path | None = typer.Option(None, "--traces-dir", help=TRACES_DIR_HELP),
        window_h: float = WINDOW_H,
        create_s: float = typer.Option(2.0, "--create-s", help="MIG instance create (s)."),
        destroy_s: float = typer.Option(1.0, "--destroy-s", help="MIG instance destroy (s)."),
        load_s: float = typer.Option(10.0, "--load-s", help="Model load per instance (s)."),
        flat_s: float | None = typer.Option(None, "--flat-s", help="Every transition takes "
                                            "this long instead (e.g. 60)."),
        requests: int = typer.Option(5_000, "--level-requests", min=100, help="Requests per "
                                     "service in each rate level's p99 check."),
        own_arrivals: bool = typer.Option(False, "--own-arrivals", help="Size and check each "
                                          "rate level under the trace's own inter-arrivals in "
                                          "its windows, not Poisson."),
        seed: int = SEED,
        as_json: bool = JSON,
    ) -> None:
        """Peak-sized plan vs re-planning per window (without and with MIG transition cost).

        Each service's rate_rps is its rate in the trace's busiest window."""
        from tessera.share.p99 import ArrivalModel
        from tessera.share.reconfig import ReconfigCost, compare_strategies
        from tessera.share.traces import read_request_trace

        svcs, rule, table, g = plan_inputs(services, None, None, scenario, None)
        tr = read_request_trace(trace, _traces_folder(trace, traces_dir))
        cost = ReconfigCost(create_s, destroy_s, load_s, flat_s)
        c = compare_strategies(svcs, tr, table, g, rule, window_h=window_h, cost=cost,
                               arrivals=ArrivalModel("poisson", requests, seed),
                               own_arrivals=own_arrivals)
        rows = [{"strategy": s.name, "gpu_hours": round(s.gpu_hours, 2),
                 "transition_gpu_hours": round(s.transition_gpu_hours, 3),
                 "peak_gpus": s.peak_gpus, "transitions": s.transitions,
                 "instance_changes": s.instance_changes, "attainment": round(s.attainment, 6),
                 "violating_windows": s.violating_windows,
                 "replan_s_max": round(s.replan_s_max, 4)} for s in c.strategies]
        if as_json:
            typer.echo(json.dumps({"trace": tr.name, "window_h": window_h, "windows": c.windows,
                                   "arrivals": "own" if own_arrivals else "poisson",
                                   "rate_levels": c.levels, "cost": str(cost),
                                   "saving_vs_peak": round(c.saving_vs_peak, 4),
                                   "strategies": rows}, indent=2))
            return
        typer.echo(f"{Path(tr.name).name}: {c.windows} windows of {window_h:g} h, "
                   f"{c.levels} rate levels; {cost}; each level checked under "
                   + ("the trace's own inter-arrivals in its windows" if own_arrivals
                      else "Poisson arrivals"))
        typer.echo(f"{'strategy':12} {'GPU-h':>9} {'of which transitions':>21} {'peak GPUs':>9} "
                   f"{'transitions':>11} {'attainment':>11} {'windows missing p99':>20}")
        for s in c.strategies:
            typer.echo(f"{s.name:12} {s.gpu_hours:9.1f} {s.transition_gpu_hours:21.3f} "
                       f"{s.peak_gpus:9d} {s.transitions:11d} {s.attainment * 100:10.4f}% "
                       f"{s.violating_windows:20d}")
        typer.echo(f"re-planning (with cost) uses {c.saving_vs_peak * 100:.1f} % fewer GPU-hours "
                   "than the peak-sized plan")
