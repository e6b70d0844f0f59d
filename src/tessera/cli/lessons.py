"""``tessera lessons``: the Philly study's lessons replayed in the simulator.

``tessera lessons locality`` sweeps the locality wait (how long a gang waits for one node
before it is split); ``tessera lessons failures`` measures GPU-hours lost to failures with and
without pre-run validation. Both print a table and write a CSV and a PNG (``docs/lessons.md``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tessera.cli.options import (
    ARRIVAL_SCALE,
    CLUSTER_HELP,
    GPUS_PER_SERVER,
    JSON,
    LIMIT,
    POLICY_HELP,
    RUN_OUT,
    SEED,
    TRACE_HELP,
)

if TYPE_CHECKING:
    from tessera.model.cluster import ClusterSpec
    from tessera.model.jobs import Workload

lessons_app = typer.Typer(
    help="The Philly study's lessons (Jeon et al., ATC'19) replayed in the simulator.",
    epilog="Example: tessera lessons locality -t philly -c p40:512",
    no_args_is_help=True,
)


def _load(trace: str, cluster: str, gpus_per_server: int, limit: int | None,
          arrival_scale: float) -> tuple[Workload, ClusterSpec]:
    from tessera.lessons import compress_arrivals
    from tessera.model.cluster import load_cluster
    from tessera.workload import load_trace

    c = load_cluster(cluster, gpus_per_server)
    w = compress_arrivals(load_trace(trace, limit=limit), arrival_scale)
    return w, c


def _echo_json(title: str, rows: list[dict[str, object]], paths: list[Path]) -> None:
    """The study as one JSON object (non-finite numbers, such as a wait of never, as null)."""
    def clean(v: object) -> object:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    typer.echo(json.dumps({"title": title, "rows": [{k: clean(v) for k, v in r.items()}
                                                    for r in rows],
                           "files": [str(p) for p in paths]}, indent=2))


def _policy_label(policy: str) -> str:
    """The policy as results show it: marked ◆ when it is an oracle."""
    from tessera.report.policies import policy_info

    return policy_info(policy).marked


def _oracle_line(policy: str) -> str | None:
    """What an oracle policy reads that a real scheduler cannot (``None`` for the others)."""
    from tessera.report.policies import policy_info

    info = policy_info(policy)
    return info.line() if info.oracle else None


def _out(out: Path | None, name: str) -> Path:
    return out or Path("runs") / f"lessons-{name}-{time.strftime('%Y%m%d-%H%M%S')}"


@lessons_app.command("locality", epilog="Example: tessera lessons locality -t philly "
                     "-c philly --thresholds 0,5m,30m,2h,never")
def locality(
    trace: str = typer.Option("philly", "--trace", "-t", help=TRACE_HELP),
    cluster: str = typer.Option("philly", "--cluster", "-c", help=CLUSTER_HELP),
    gpus_per_server: int = GPUS_PER_SERVER,
    thresholds: str = typer.Option("0,5m,30m,2h,never", help="Locality waits to compare, "
                                   "each with its unit: seconds (30), 5m, 2h, or never."),
    policy: str = typer.Option("fifo", "--policy", "-p", help=POLICY_HELP),
    limit: int | None = LIMIT,
    arrival_scale: float = ARRIVAL_SCALE,
    seed: int = SEED,
    out: Path | None = RUN_OUT,
    as_json: bool = JSON,
) -> None:
    """Queueing delay and GPU utilization against the locality wait before splitting a gang."""
    from rich.console import Console
    from rich.table import Table

    from tessera.lessons.locality import (
        LOCALITY_COLUMNS,
        locality_sweep,
        parse_thresholds,
        split_note,
        threshold_label,
        why_rows_tie,
        write_locality_outputs,
    )
    from tessera.report.tables import human_duration

    try:
        ths = parse_thresholds(thresholds)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--thresholds") from e
    w, c = _load(trace, cluster, gpus_per_server, limit, arrival_scale)
    title = (f"{w.name} ({len(w)} jobs) on {c.describe()}, "
             f"policy {_policy_label(policy)}, seed {seed}")
    rows = locality_sweep(w, c, ths, policy=policy, seed=seed)
    paths = write_locality_outputs(rows, _out(out, "locality"), title)
    if as_json:
        _echo_json(title, [{"threshold": threshold_label(r.threshold_s), **asdict(r)}
                           for r in rows], paths)
        return
    t = Table(*(h for h, _m in LOCALITY_COLUMNS), title=title, header_style="bold",
              caption="\n".join(f"{h}: {m}" for h, m in LOCALITY_COLUMNS),
              caption_justify="left")
    for r in rows:
        t.add_row(threshold_label(r.threshold_s), human_duration(r.avg_queue_s),
                  human_duration(r.avg_queue_multi_s),
                  human_duration(r.wait_fragmentation_s_mean),
                  human_duration(r.wait_capacity_s_mean), human_duration(r.avg_jct_s),
                  human_duration(r.avg_jct_multi_s), f"{100 * r.utilization:.1f} %",
                  f"{100 * r.useful_utilization:.1f} %", f"{r.split_gpu_h:,.0f}",
                  f"{r.too_big_gpu_h:,.0f}", f"{r.split_by_wait_gpu_h:,.0f}",
                  f"{r.split_slowdown_gpu_h:,.0f}", str(r.never_started))
    con = Console(width=240)
    con.print(t)
    tie = why_rows_tie(rows, w, c)  # (says whose the split GPU-hours are, when runs tie)
    for note in (tie, None if tie else split_note(rows, w, c), _oracle_line(policy)):
        if note:
            con.print(note)
    con.print("wrote " + ", ".join(str(p) for p in paths))


@lessons_app.command("failures", epilog="Example: tessera lessons failures -t philly "
                     "-c philly --failure-rate 0.3")
def failures(
    trace: str = typer.Option("philly", "--trace", "-t", help=TRACE_HELP),
    cluster: str = typer.Option("philly", "--cluster", "-c", help=CLUSTER_HELP),
    gpus_per_server: int = GPUS_PER_SERVER,
    failure_rate: float = typer.Option(0.3, help="Share of jobs that fail (Philly ≈ 0.3)."),
    repeat_probability: float = typer.Option(0.5, help="Chance a retried job fails again."),
    early_share: float = typer.Option(0.6, help="Share of failures that strike early."),
    early_window_s: float = typer.Option(600.0, help="Early failures strike within this (s)."),
    validation_s: float = typer.Option(600.0, help="Length of the 1-GPU validation run (s)."),
    min_gpus: str = typer.Option("2,8", help="Validate gangs of at least these sizes "
                                 "(one run each)."),
    checkpoint_interval_s: float = typer.Option(1800.0, help="Periodic checkpoint (s)."),
    policy: str = typer.Option("fifo", "--policy", "-p", help=POLICY_HELP),
    limit: int | None = LIMIT,
    arrival_scale: float = ARRIVAL_SCALE,
    seed: int = SEED,
    out: Path | None = RUN_OUT,
    as_json: bool = JSON,
) -> None:
    """GPU-hours lost to failures with and without pre-run validation of big gangs."""
    from rich.console import Console
    from rich.table import Table

    from tessera.lessons.failures import FAILURE_COLUMNS, failure_study, write_failure_outputs
    from tessera.report.tables import human_duration

    try:
        sizes = [int(x) for x in min_gpus.split(",") if x.strip()]
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--min-gpus") from e
    w, c = _load(trace, cluster, gpus_per_server, limit, arrival_scale)
    title = (f"{w.name} ({len(w)} jobs) on {c.describe()}, policy {_policy_label(policy)}, "
             f"failure rate {failure_rate:.0%}, early {early_share:.0%} within "
             f"{early_window_s:g} s, validation {validation_s:g} s, seed {seed}")
    rows = failure_study(
        w, c, min_gpus=sizes, failure_rate=failure_rate,
        repeat_probability=repeat_probability, early_share=early_share,
        early_window_s=early_window_s, validation_s=validation_s,
        checkpoint_interval_s=checkpoint_interval_s, policy=policy, seed=seed)
    paths = write_failure_outputs(rows, _out(out, "failures"), title)
    if as_json:
        _echo_json(title, [asdict(r) for r in rows], paths)
        return
    t = Table(*(h for h, _m in FAILURE_COLUMNS), title=title, header_style="bold",
              caption="\n".join(f"{h}: {m}" for h, m in FAILURE_COLUMNS),
              caption_justify="left")
    for r in rows:
        t.add_row(r.label, f"{r.lost_on_gangs_gpu_h:,.1f}", f"{r.lost_in_validation_gpu_h:,.1f}",
                  f"{r.lost_gpu_h:,.1f}", f"{r.validation_gpu_h:,.1f}", f"{r.cost_gpu_h:,.1f}",
                  f"{r.saved_gpu_h:,.1f}", str(r.failures), str(r.caught_in_validation),
                  str(r.failed_jobs), human_duration(r.avg_jct_s), f"{r.jct_ratio:.3f}×",
                  human_duration(r.avg_jct_multi_s))
    con = Console(width=200)
    con.print(t)
    oracle = _oracle_line(policy)
    if oracle:
        con.print(oracle)
    con.print("wrote " + ", ".join(str(p) for p in paths))


def register(app: typer.Typer) -> None:
    """Add the ``lessons`` sub-app to the CLI."""
    app.add_typer(lessons_app, name="lessons", rich_help_panel="Simulation")
