"""``tessera simulate``, ``tessera demo`` and ``tessera policies``; ``tessera traces`` is
registered here from :mod:`tessera.cli.traces` so it keeps its place in ``--help``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tessera.cli.live import _run
from tessera.cli.options import (
    CLUSTER_HELP,
    GPUS_PER_SERVER,
    JSON,
    LIMIT,
    RUN_OUT,
    SEED,
    TENANCY,
    THROUGHPUTS,
    TRACE_HELP,
)
from tessera.cli.settings_flags import settings_flags
from tessera.cli.traces import register as register_traces
from tessera.sched.core.settings import SchedulerSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from tessera.model.cluster import ClusterSpec
    from tessera.model.jobs import Workload
    from tessera.perf.profiles import ThroughputTable
    from tessera.report.settings import Setting
    from tessera.sched.core.tenancy import Tenancy
    from tessera.sim.config import SimConfig
    from tessera.sim.metrics import SimResult
    from tessera.workload.load import TraceLoad

DEMO_CLUSTER = "v100:256,p100:128,k80:64"
DEMO_POLICIES = "fifo,las,max_min_fairness,finish_time_fairness,hetero_srpt"


def _sia_covers(flavors: list[str]) -> bool:
    from tessera.model.gpus import resolve_flavor
    from tessera.perf.sia_table import sia_throughputs

    table = sia_throughputs()
    return all(table.covers(resolve_flavor(f)) for f in flavors)


def run_simulation(
    trace: str,
    cluster_text: str,
    policies: list[str],
    *,
    gpus_per_server: int,
    scheduler: SchedulerSettings,
    config_updates: dict[str, object],
    out: Path | None,
    as_json: bool,
    workers: int,
    throughputs: str | Path | None,
    on_error: str,
    limit: int | None,
    plots: bool,
    trace_format: str | None = None,
    sia_calibration: bool = False,
    carbon: str | None = None,
    slack_h: float | None = None,
) -> list[SimResult]:
    """Shared body of ``simulate`` and ``demo``: load, run, print, write the report."""
    from rich.console import Console

    from tessera.cli.progress import SimProgress, show_progress
    from tessera.report.policies import policy_info
    from tessera.report.settings import run_settings
    from tessera.sched.catalog import make_policy
    from tessera.sim.batch import RunSpec, run_policies

    err = Console(stderr=True)
    for p in policies:
        make_policy(p)  # fail fast on a bad name, before loading anything big
    carbon_trace = None
    if carbon is not None:  # (and on a bad carbon trace)
        from tessera.workload.carbon import load_carbon

        carbon_trace = load_carbon(carbon)
    if config_updates.get("carbon_shift") is not None:  # (the stage forecasts from the trace)
        if carbon_trace is None:
            from tessera.errors import SpecError

            raise SpecError(f"--carbon-shift {config_updates['carbon_shift']} needs --carbon "
                            "gb|fr|de|FILE (the forecast it shifts by)")
        config_updates = {**config_updates, "carbon_trace": carbon_trace}
    inputs = _load_inputs(trace, cluster_text, policies, gpus_per_server, throughputs,
                          on_error, limit, trace_format, sia_calibration)
    if slack_h is not None:
        inputs = replace(inputs, workload=_with_slack(inputs.workload, slack_h))
    config = _sim_config(scheduler, config_updates)
    workload, cluster = inputs.workload, inputs.cluster
    if config.tenancy is not None:  # jobs may name LocalQueues: charge their queues
        workload = _on_cluster_queues(workload, config.tenancy)
        inputs = replace(inputs, workload=workload)
    settings = run_settings(config, policies, trace=workload.name, jobs=len(workload),
                            cluster=cluster.describe(), throughputs=inputs.table.source)
    if not as_json:
        _print_inputs(err, inputs, settings)
    spec = RunSpec(workload, cluster, config, inputs.table, inputs.elastic_workload)
    with SimProgress(policies, len(workload), err, show=show_progress(as_json)) as bar:
        results = run_policies(spec, policies, workers=workers, progress=bar.update)
    if carbon_trace is not None:
        from tessera.sim.energy_result import with_result_carbon

        results = [with_result_carbon(r, carbon_trace) for r in results]
    out_dir = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    report = _write_outputs(results, cluster.total_gpus, out_dir, plots, workload.name,
                            cluster.describe(), settings)
    if as_json:
        payload = {
            "results": {r.policy: {**r.as_dict(), "oracle": policy_info(r.policy).oracle
                                   or None} for r in results},
            "policies": {r.policy: policy_info(r.policy).as_json() for r in results},
            "trace": workload.name, "cluster": cluster.name, "jobs": len(workload),
            "out_dir": str(out_dir), "report": str(report) if report else None,
        }
        sys.stdout.write(json.dumps(payload, default=_json_default) + "\n")
    else:
        _print_results(err, results, config, f"{workload.name} on {cluster.name}")
        err.print(f"results: {out_dir}" + (f"\nreport:  {report}" if report else ""))
    return results


def _tenancy(path: Path, cluster_text: str, gpus_per_server: int, split: str) -> Tenancy:
    """``--tenancy PATH`` read and checked against the cluster's flavors."""
    from tessera.errors import SpecError
    from tessera.live.tenancy_file import load_tenancy_file
    from tessera.model.cluster import load_cluster

    if split != "none":
        raise SpecError("give --tenancy or --quota-per-queue, not both")
    cluster = load_cluster(cluster_text, gpus_per_server)
    return load_tenancy_file(path, list(cluster.gpus_by_flavor())).tree


def _on_cluster_queues(workload: Workload, tree: Tenancy) -> Workload:
    """``workload`` with each job's queue naming its ClusterQueue (a LocalQueue's target)."""
    jobs = tuple(j if (cq := tree.cluster_queue(j.queue)) in (None, j.queue)
                 else dataclasses.replace(j, queue=cq) for j in workload.jobs)
    return dataclasses.replace(workload, jobs=jobs)


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What a simulation reads: the trace as loaded, its workload(s), cluster and table."""

    loaded: TraceLoad
    workload: Workload
    elastic_workload: Workload | None
    cluster: ClusterSpec
    table: ThroughputTable


def _load_inputs(
    trace: str, cluster_text: str, policies: list[str], gpus_per_server: int,
    throughputs: str | Path | None, on_error: str, limit: int | None,
    trace_format: str | None, sia_calibration: bool,
) -> _Inputs:
    """Read the throughput table, the cluster and the trace (Sia-calibrated when asked)."""
    from tessera.model.cluster import load_cluster
    from tessera.perf.tables import load_throughputs
    from tessera.sched.catalog import make_policy
    from tessera.workload import read_trace

    table = load_throughputs(throughputs)
    cluster = load_cluster(cluster_text, gpus_per_server)
    loaded = read_trace(trace, format=trace_format, on_error=on_error,  # type: ignore[arg-type]
                        limit=limit, throughputs=table)
    workload, elastic_workload = loaded.workload, None
    if sia_calibration:
        from tessera.workload.elastic import sia_calibrated, tuned_from_m0

        workload = sia_calibrated(workload)
        if any(make_policy(p).elastic for p in policies):
            elastic_workload = tuned_from_m0(workload)
    return _Inputs(loaded, workload, elastic_workload, cluster, table)


def _with_slack(workload: Workload, slack_h: float) -> Workload:
    """``workload`` with ``slack_h`` hours of slack on every job that declares none."""
    from tessera.errors import SpecError

    if not (math.isfinite(slack_h) and slack_h >= 0):
        raise SpecError(f"--slack-h must be >= 0 hours, got {slack_h:g}")
    jobs = tuple(j if j.max_delay_s is not None else replace(j, max_delay_s=slack_h * 3600)
                 for j in workload.jobs)
    return replace(workload, jobs=jobs)


def _sim_config(scheduler: SchedulerSettings, updates: dict[str, object]) -> SimConfig:
    """The run's settings: ``updates`` keyed as flat names (``failure_*``, ``validation_*``,
    ``quota_*`` go to their sections), with the scheduler's settings."""
    from pydantic import BaseModel

    from tessera.sim.config import FailureConfig, QuotaConfig, SimConfig, ValidationConfig

    sections: dict[str, type[BaseModel]] = {
        "failure_": FailureConfig, "validation_": ValidationConfig, "quota_": QuotaConfig}
    parts = {prefix: model.model_validate({k[len(prefix):]: v for k, v in updates.items()
                                           if k.startswith(prefix)})
             for prefix, model in sections.items()}
    plain = {k: v for k, v in updates.items() if not k.startswith(tuple(sections))}
    return SimConfig.model_validate(
        {**plain, "scheduler": scheduler, "failures": parts["failure_"],
         "validation": parts["validation_"], "quotas": parts["quota_"]})


def _print_inputs(err: Console, inputs: _Inputs, settings: Sequence[Setting]) -> None:
    """What is about to run, on stderr: the trace and its notes, the cluster, the settings."""
    workload, cluster, table = inputs.workload, inputs.cluster, inputs.table
    err.print(f"[bold]trace[/] {workload.name}: {len(workload)} jobs ({inputs.loaded.format})")
    for note in workload.notes:
        err.print(f"  [dim]{note}[/]")
    if inputs.elastic_workload is not None:
        err.print(f"  [dim]{inputs.elastic_workload.notes[-1]} (elastic policies; rigid ones "
                  "run the trace's batch)[/]")
    for row in inputs.loaded.skipped[:10]:
        err.print(f"  [yellow]skipped[/] {row}")
    err.print(f"[bold]cluster[/] {cluster.describe()}")
    idle = [f.short for f in cluster.flavors() if not table.covers(f)]
    if idle:
        err.print(f"  [yellow]warning[/] no throughput profile for {', '.join(idle)} in "
                  f"{table.source}: no job of this trace can run there"
                  + ("; --throughputs sia covers them" if _sia_covers(idle) else ""))
    shown = [s for s in settings if s.name not in ("trace", "cluster")]
    for s in shown:
        if s.value not in ("off", "none"):
            err.print(f"[bold]{s.name}[/] {s.value}")
    off = [s.name for s in shown if s.value in ("off", "none")]
    if off:
        err.print(f"[bold]off[/] {', '.join(off)}")


def _print_results(err: Console, results: list[SimResult], config: SimConfig, title: str,
                   ) -> None:
    """The comparison and waiting tables on stdout (160 columns when piped), their notes."""
    from rich.console import Console

    from tessera.report.policies import oracle_note
    from tessera.report.rho import rho_note
    from tessera.report.tables import comparison_table, wait_split_table

    con = Console()
    if not con.is_terminal:
        con = Console(width=160)
    con.print(comparison_table(results, title=title))
    oracles = oracle_note(results)
    if oracles:
        con.print(oracles)
    con.print(wait_split_table(results))
    from tessera.report.energy import energy_table

    con.print(energy_table(results))
    note = rho_note(results)
    if note:
        con.print(note)
    if config.scheduler.mixed_gangs:
        con.print("mixed gangs (GPU-hours held by jobs spanning flavors): " + ", ".join(
            f"{r.policy} {r.extras.get('mixed_gpu_h', 0.0):.1f}" for r in results))
    for r in results:
        for note in r.notes:
            err.print(f"[yellow]note[/] {r.policy}: {note}")


def _json_default(o: object) -> object:
    if isinstance(o, float):
        return None
    return str(o)


def _write_outputs(
    results: list[SimResult], total_gpus: int, out: Path, plots: bool, trace: str,
    cluster: str, settings: Sequence[Setting],
) -> Path | None:
    from tessera.report.files import write_run_files
    from tessera.sched.catalog import make_policy

    out.mkdir(parents=True, exist_ok=True)
    write_run_files(results, out)
    (out / "config.json").write_text(json.dumps(
        {"trace": trace, "cluster": cluster, "policies": [r.policy for r in results],
         "policy_options": {r.policy: make_policy(r.policy).config.model_dump(mode="json")
                            for r in results},
         "sim": results[0].config.model_dump() if results else {}}, indent=2, default=str))
    if not plots:
        return None
    from tessera.report.html import write_html_report
    from tessera.report.plots import plot_jct_cdf, plot_rho, plot_timeseries

    images = [
        plot_jct_cdf(results, out / "jct_cdf.png"),
        plot_timeseries(results, total_gpus, out / "utilization_queue.png"),
        plot_rho(results, out / "ftf_rho.png"),
    ]
    from tessera.report.energy import plot_power

    images.append(plot_power(results, out / "cluster_power.png"))
    from tessera.report.estimate_error import plot_estimate_error

    errors = plot_estimate_error(results, out / "estimate_error.png")
    images += [errors] if errors is not None else []
    return write_html_report(results, images, out / "report.html",
                             title=f"Tessera: {trace}", settings=settings)


def register(app: typer.Typer) -> None:
    """Add the simulation commands to the CLI (``traces`` after ``demo``, as in ``--help``)."""
    _register_simulate(app)
    _register_demo(app)
    register_traces(app)
    _register_policies(app)


def _register_simulate(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Simulation", epilog="Example: tessera simulate -t philly "
                 "-c v100:64,p100:64,k80:64 -p fifo,las,hetero_srpt")
    @settings_flags(SchedulerSettings)
    def simulate(
        trace: str = typer.Option(..., "--trace", "-t", help=TRACE_HELP),
        trace_format: str | None = typer.Option(None, "--format", help="Trace format when "
                                                "detection is not enough (gavel, philly, "
                                                "itp, fgd, sia)."),
        cluster: str = typer.Option("gavel-108", "--cluster", "-c", help=CLUSTER_HELP),
        policy: str = typer.Option("fifo,las,max_min_fairness,hetero_srpt", "--policy", "-p",
                                   help="Scheduling policies to compare, comma-separated "
                                   "(`tessera policies` lists them); add -agnostic for the "
                                   "heterogeneity-blind twin, :option=value to set an option "
                                   "(`tessera policies NAME` lists them), e.g. -p "
                                   "hetero_pack,hetero_pack:min_gain=0.05 runs both."),
        gpus_per_server: int = GPUS_PER_SERVER,
        compat: str | None = typer.Option(None, help="`gavel`: no preemption/restore cost, "
                                          "no failures, 360 s rounds, Gavel's mechanism."),
        compat_solver: str = typer.Option("auto", help="LP solver under --compat gavel: "
                                          "auto | ecos | highs-ipm | highs."),
        failure_rate: float = typer.Option(0.0, help="Share of jobs that fail (Philly ≈ 0.3)."),
        quota_per_queue: str = typer.Option("none", help="Tenant quotas: none | equal | demand "
                                            "(divide the cluster among the trace's queues, "
                                            "Philly's VCs, equally or by GPU-time)."),
        quota_borrowing_gpus: int = typer.Option(0, help="GPUs a queue may borrow beyond its "
                                                 "quota (-1: unlimited)."),
        failure_model: str = typer.Option("uniform", help="uniform | early-late (a share of "
                                          "failures strikes in the first minutes)."),
        validate_min_gpus: int = typer.Option(0, help="Pre-run validation on 1 GPU before "
                                              "gangs of at least this many GPUs (0: off)."),
        validation_s: float = typer.Option(300.0, help="Length of the 1-GPU validation run (s)."),
        seed: int = SEED,
        limit: int | None = LIMIT,
        on_error: str = typer.Option("raise", help="raise | skip malformed trace rows "
                                     "(skipped rows are counted and listed)."),
        throughputs: str = THROUGHPUTS,
        speeds: str = typer.Option("table", help="What policies read a job's per-flavor "
                                   "speed from: table | learned (estimates from the other "
                                   "job types and the job's own runs; the table still drives "
                                   "progress; docs/scheduler.md, Learned speeds)."),
        bootstrap_s: float | None = typer.Option(
            None, "--bootstrap-s", help="With --speeds learned, Sia's bootstrap: each new job "
            "first runs a profile of this many seconds on one GPU of each GPU type it can use "
            "(real time and GPU use: its JCT includes them; at most 86400; default: no "
            "bootstrap; docs/scheduler.md)."),
        bootstrap_mode: str = typer.Option(
            "serial", "--bootstrap-mode", help="With --bootstrap-s: serial (one GPU type after "
            "another, each waiting for an idle GPU) | lean (one idle GPU of each type at once, "
            "never waiting; a 1-GPU job's profile trains it) | free (the bound: every "
            "profile's result at arrival, at no cost) | oracle (the job's own gang measured "
            "on every type at arrival, at no cost: no estimate error)."),
        measurement_noise: float = typer.Option(
            0.0, "--measurement-noise", help="With --speeds learned, each observed rate is "
            "the true one times exp(noise·z), z standard normal, seeded (0: exact; at most "
            "10)."),
        goodput: str = typer.Option("table", help="What Sia and Pollux read an elastic job's "
                                    "goodput from: table (the bundled profiles) | gns "
                                    "(efficiency from the gradient noise scale the job's "
                                    "simulated agent reports, Pollux's closed form) | "
                                    "reported (that, and step times from a throughput model "
                                    "fitted to the step times it observed); the profiles "
                                    "still drive progress (docs/scheduler.md, Goodput "
                                    "online)."),
        out: Path | None = RUN_OUT,
        workers: int = typer.Option(0, help="Parallel processes (0: one per policy, ≤ CPUs)."),
        json_out: bool = JSON,
        plots: bool = typer.Option(True, help="Write PNG plots and the HTML report."),
        sia_calibration: bool = typer.Option(False, help="Run a Sia workload's elastic jobs "
                                             "as Sia's simulator does (cifar10 1.8×, other "
                                             "models 1.2× slower than profiled; under elastic "
                                             "policies they tune their batch from their "
                                             "model's smallest validated batch M0), to compare "
                                             "with Sia's published figures."),
        tenancy: Path | None = TENANCY,
        power_budget_kw: float | None = typer.Option(
            None, "--power-budget-kw", help="Keep the cluster's power (busy and idle GPUs) "
            "under this many kW at every instant: per-job power limits, then waiting, after "
            "any policy decides; above the cluster's idle draw; default: no budget "
            "(docs/energy.md, Power budget)."),
        power_capping: str = typer.Option("flow", help="How --power-budget-kw is kept: flow "
                                          "(per-job limits) or uniform (one limit for every "
                                          "GPU, the baseline); needs --power-budget-kw."),
        power_wait_fast: bool = typer.Option(
            False, "--power-fast-boards", help="While --power-budget-kw binds, a job that would "
            "start on a GPU type 3x or more slower than one a running job frees soon (its "
            "remaining time at most half the run time waiting saves) waits for it "
            "(docs/energy.md, Power budget); needs --power-budget-kw, not uniform; default: "
            "off."),
        zeus_eta: float | None = typer.Option(
            None, "--zeus-eta", help="Per-job Zeus: every job at the power limit minimising "
            "η·energy + (1-η)·MAXPOWER·time on its GPU type (η in [0, 1]; default: off; "
            "docs/energy.md)."),
        energy_types: bool = typer.Option(
            False, "--energy-types", help="With --zeus-eta: offer each job its GPU types "
            "cheapest first by that cost, and only those within --energy-slack of its "
            "cheapest (it waits for a better type otherwise)."),
        energy_slack: float = typer.Option(0.5, help="How much costlier than its cheapest "
                                           "type a job may run on (0.5 = 50 %)."),
        carbon: str | None = typer.Option(None, "--carbon", help="Grid carbon intensity for "
                                          "carbon_kg: gb | fr | de (2020 traces read from the "
                                          "data folder) or a CSV FILE of time,gCO2eq/kWh "
                                          "(docs/energy.md)."),
        carbon_shift: str | None = typer.Option(
            None, "--carbon-shift", help="Shift jobs with slack to cleaner hours before the "
            "policy decides: carbon-time | wait-awhile (GAIA's baselines) | ours (capacity-"
            "aware filling with --carbon-price); needs --carbon; default: no shifting "
            "(docs/energy.md)."),
        carbon_price: float = typer.Option(
            0.0, "--carbon-price", help="ours: grams of CO2 one GPU-hour of delay is worth "
                                        "(0: cleanest slots with room; higher: less waiting); "
                                        "needs --carbon-shift ours."),
        slack_h: float | None = typer.Option(
            None, "--slack-h", help="Give every job that declares no slack (max_delay_s) this "
                                    "many hours of it (default: none)."),
        suspend_after_s: float | None = typer.Option(
            None, "--suspend-after-s", help="Power saving (Slurm's SuspendTime): seconds a server "
            "stays idle (every GPU free) before it is suspended; a job started on it waits "
            "--resume-s (every policy and --carbon-shift mode; docs/energy.md). Default: "
            "servers never sleep."),
        resume_s: float = typer.Option(
            300.0, "--resume-s", help="With --suspend-after-s: seconds a server takes to resume."),
        off_power_w: float = typer.Option(
            5.0, "--off-power-w", help="With --suspend-after-s: watts per GPU of a suspended "
                                       "server (standby; estimated)."),
        settings: SchedulerSettings = SchedulerSettings(),
    ) -> None:
        """Simulate scheduling policies on a trace and compare them side by side.

        The Scheduler options are the same settings `tessera serve` runs with.
        """
        from tessera.sched.core.policy import split_policies

        pols = split_policies(policy)
        if speeds not in ("table", "learned"):
            from tessera.errors import SpecError

            raise SpecError(f"--speeds {speeds!r}: table or learned")
        if goodput not in ("table", "gns", "reported"):
            from tessera.errors import SpecError

            raise SpecError(f"--goodput {goodput!r}: table, gns or reported")
        _check_learned_flags(speeds, bootstrap_s, measurement_noise)
        if bootstrap_mode not in ("serial", "lean", "free", "oracle"):
            from tessera.errors import SpecError

            raise SpecError(f"--bootstrap-mode {bootstrap_mode!r}: serial, lean, free or "
                            "oracle")
        if bootstrap_mode != "serial" and bootstrap_s is None:
            from tessera.errors import SpecError

            raise SpecError(f"--bootstrap-mode {bootstrap_mode} needs --bootstrap-s")
        n = workers or min(len(pols), os.cpu_count() or 1)
        updates: dict[str, object] = {
            "seed": seed, "compat": compat, "compat_solver": compat_solver, "speeds": speeds,
            "goodput": goodput, "bootstrap_s": bootstrap_s, "bootstrap_mode": bootstrap_mode,
            "measurement_noise": measurement_noise,
            "failure_job_failure_rate": failure_rate,
            "failure_time_model": failure_model,
            "validation_min_gpus": validate_min_gpus, "validation_validation_s": validation_s,
            "quota_split": quota_per_queue,
            "quota_borrowing_limit_gpus": None if quota_borrowing_gpus < 0
            else quota_borrowing_gpus,
        }
        _check_unused_energy_flags(power_budget_kw, power_capping, carbon_shift,
                                   carbon_price)
        _check_zeus_flags(zeus_eta, energy_types, energy_slack)
        if power_budget_kw is not None:
            from tessera.errors import SpecError

            if not (math.isfinite(power_budget_kw) and power_budget_kw > 0):
                raise SpecError(f"--power-budget-kw must be > 0 kW, got {power_budget_kw:g}")
            if power_capping not in ("flow", "uniform"):
                raise SpecError(f"--power-capping {power_capping!r}: flow or uniform")
            updates["power_budget_kw"] = power_budget_kw
            updates["power_capping"] = power_capping
            updates["power_wait_fast"] = power_wait_fast
        if power_wait_fast and (power_budget_kw is None or power_capping == "uniform"):
            from tessera.errors import SpecError

            raise SpecError("--power-fast-boards needs --power-budget-kw with --power-capping "
                            + ("flow (got no --power-budget-kw)" if power_budget_kw is None
                               else f"flow (got {power_capping})"))
        if zeus_eta is not None or energy_types:
            updates.update(zeus_eta=zeus_eta, energy_types=energy_types,
                           energy_slack=energy_slack)
        if carbon_shift is not None:
            from tessera.errors import SpecError
            from tessera.sched.core.carbon_stage import SHIFT_MODES

            if carbon_shift not in SHIFT_MODES:
                raise SpecError(f"--carbon-shift {carbon_shift!r}: one of "
                                f"{', '.join(SHIFT_MODES)}")
            if not (math.isfinite(carbon_price) and carbon_price >= 0):
                raise SpecError(f"--carbon-price must be >= 0 g per GPU-hour, got "
                                f"{carbon_price:g}")
            updates.update(carbon_shift=carbon_shift, carbon_price_g_per_gpu_h=carbon_price)
        if suspend_after_s is not None:
            updates.update(_sleep_settings(suspend_after_s, resume_s, off_power_w))
        elif resume_s != 300.0 or off_power_w != 5.0:
            from tessera.errors import SpecError

            raise SpecError("--resume-s and --off-power-w need --suspend-after-s (they shape "
                            "how idle servers sleep)")
        if tenancy is not None:
            updates["tenancy"] = _run(lambda: _tenancy(tenancy, cluster, gpus_per_server,
                                                             quota_per_queue))
        run_simulation(trace, cluster, pols, gpus_per_server=gpus_per_server,
                       scheduler=settings, config_updates=updates, out=out, as_json=json_out,
                       workers=n, throughputs=throughputs, on_error=on_error, limit=limit,
                       plots=plots, trace_format=trace_format, sia_calibration=sia_calibration,
                       carbon=carbon, slack_h=slack_h)


def _check_unused_energy_flags(power_budget_kw: float | None, power_capping: str,
                               carbon_shift: str | None, carbon_price: float) -> None:
    """Refuse a flag that only shapes another, absent one (it would be silently ignored).
    (``--slack-h`` without ``--carbon-shift`` is allowed: the unshifted baseline of a
    comparison runs the same jobs, slack and all.)"""
    from tessera.errors import SpecError

    if power_capping != "flow" and power_budget_kw is None:
        raise SpecError(f"--power-capping {power_capping} needs --power-budget-kw (it says how "
                        "that budget is kept)")
    if carbon_price != 0 and carbon_shift != "ours":
        raise SpecError(f"--carbon-price {carbon_price:g} needs --carbon-shift ours (only "
                        "ours prices delay)")


def _check_zeus_flags(zeus_eta: float | None, energy_types: bool, energy_slack: float) -> None:
    """Refuse ``--zeus-eta`` outside [0, 1] and ``--energy-slack`` without the type choice it
    shapes, before any policy runs (they were found only mid-run, or silently ignored)."""
    from tessera.errors import SpecError

    if zeus_eta is not None and not (math.isfinite(zeus_eta) and 0.0 <= zeus_eta <= 1.0):
        raise SpecError(f"--zeus-eta must be in [0, 1] (the weight of energy in Zeus's cost), "
                        f"got {zeus_eta:g}")
    if not (math.isfinite(energy_slack) and energy_slack >= 0):
        raise SpecError(f"--energy-slack must be >= 0 (0.5 = 50 % costlier than the cheapest "
                        f"type), got {energy_slack:g}")
    if energy_slack != 0.5 and not energy_types:
        raise SpecError(f"--energy-slack {energy_slack:g} needs --energy-types (it says which "
                        "types that choice offers)")


#: The longest ``--bootstrap-s``: a day per GPU type (Sia profiles for seconds; the simulator
#: steps through a profile, so an absurd length would run for hours).
MAX_BOOTSTRAP_S = 86_400.0
#: The largest ``--measurement-noise``: ``exp(noise · z)`` must stay a float for any drawn z
#: (at 1000 it overflowed into a traceback); 10 already scatters rates over e^±20.
MAX_MEASUREMENT_NOISE = 10.0
def _sleep_settings(suspend_after_s: float, resume_s: float,
                    off_power_w: float) -> dict[str, object]:
    """The server-sleep settings of ``--suspend-after-s``, checked (one-line errors)."""
    from tessera.errors import SpecError

    for flag, value in (("--suspend-after-s", suspend_after_s), ("--resume-s", resume_s),
                        ("--off-power-w", off_power_w)):
        if not (math.isfinite(value) and value >= 0):
            raise SpecError(f"{flag} must be a finite number >= 0, got {value:g}")
    return {"suspend_after_s": suspend_after_s, "resume_s": resume_s,
            "off_power_w": off_power_w}


def _check_learned_flags(speeds: str, bootstrap_s: float | None, noise: float) -> None:
    """Refuse ``--bootstrap-s`` / ``--measurement-noise`` values that cannot apply."""
    from tessera.errors import SpecError

    if bootstrap_s is not None and not (math.isfinite(bootstrap_s) and bootstrap_s > 0):
        raise SpecError(f"--bootstrap-s must be > 0 seconds, got {bootstrap_s:g}")
    if bootstrap_s is not None and bootstrap_s > MAX_BOOTSTRAP_S:
        raise SpecError(f"--bootstrap-s must be at most {MAX_BOOTSTRAP_S:g} seconds (a day "
                        f"of profile per GPU type), got {bootstrap_s:g}")
    if not (math.isfinite(noise) and noise >= 0):
        raise SpecError(f"--measurement-noise must be >= 0, got {noise:g}")
    if noise > MAX_MEASUREMENT_NOISE:
        raise SpecError(f"--measurement-noise must be at most {MAX_MEASUREMENT_NOISE:g} (the "
                        f"spread of log(observed rate)), got {noise:g}")
    if speeds != "learned" and (bootstrap_s is not None or noise):
        raise SpecError("--bootstrap-s and --measurement-noise need --speeds learned")


def _register_demo(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Simulation", epilog="Example: tessera demo --out runs/demo")
    def demo(
        out: Path | None = RUN_OUT,
        json_out: bool = JSON,
    ) -> None:
        """The main job: five policies on a week of the Philly trace (bundled) on a mixed
        V100/P100/K80 cluster, with the comparison table and an HTML report."""
        pols = DEMO_POLICIES.split(",")
        updates: dict[str, object] = {"seed": 0}
        run_simulation("philly", DEMO_CLUSTER, pols, gpus_per_server=8,
                       scheduler=SchedulerSettings(), config_updates=updates, out=out,
                       as_json=json_out, workers=min(len(pols), os.cpu_count() or 1),
                       throughputs=None, on_error="raise", limit=None, plots=True)


def _register_policies(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Simulation", epilog="Example: tessera policies hetero_pack "
                 "(its options), then tessera simulate -t philly -p "
                 "hetero_pack,hetero_pack:short_first=0.1 to compare")
    def policies(
        name: str | None = typer.Argument(None, help="A policy: list its options instead."),
        as_json: bool = JSON,
    ) -> None:
        """List scheduling policies (append -agnostic for the heterogeneity-blind twin), or one
        policy's options, which are set as NAME:option=value wherever a policy is named."""
        from rich.console import Console
        from rich.table import Table

        from tessera.report.policies import ORACLE_MARK, ORACLE_MEANING, policy_info
        from tessera.sched.catalog import list_policies, policy_options

        if name is not None:
            options = policy_options(name)
            if as_json:
                typer.echo(json.dumps([{"option": o, "default": d, "description": what}
                                       for o, d, what in options], indent=2))
                return
            t = Table("option", "default", "what it does", header_style="bold",
                      title=f"{name}: set as {name}:option=value")
            for row in options:
                t.add_row(*row)
            Console().print(t if options else f"{name} has no options")
            return
        infos = [policy_info(name) for name, _summary in list_policies()]
        if as_json:
            typer.echo(json.dumps([{"policy": i.label, **i.as_json()} for i in infos], indent=2))
            return
        t = Table("policy", "what it does", header_style="bold",
                  caption=f"{ORACLE_MARK} {ORACLE_MEANING}")
        for info in infos:
            t.add_row(info.marked, info.summary + (f" Oracle: reads {info.oracle}."
                                                   if info.oracle else ""))
        Console().print(t)
        from tessera.sched.resources.allocate import HOST_MODE_SUMMARIES

        modes = Table("resources=", "CPUs and host memory per gang (any policy above that "
                      "neither shares GPUs nor resizes jobs: fifo:resources=tune)",
                      header_style="bold")
        for mode, what in HOST_MODE_SUMMARIES:
            modes.add_row(mode, what)
        modes.add_row(":repack=round", "with proportional, greedy or tune: Synergy's round as a "
                      "twin -- every decision deals every gang's GPUs, CPUs and memory again, "
                      "oldest first (run with --mode rounds --round-s 300 --checkpoint-s 0 "
                      "--restore-s 0).")
        Console().print(modes)
