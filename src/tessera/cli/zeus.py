"""``tessera zeus``: Zeus's per-job power limit and batch size on Zeus's measured traces.

    tessera zeus [--gpu v100] --eta 0.5 [--workload imagenet] [--json]

For each workload it prints the user's default (batch b0 at the GPU's highest power limit),
the cheapest configuration of the whole table (exhaustive search), what Zeus's optimiser
learns over a recurring job (JIT power-limit profiling + a Thompson-sampling bandit over batch
sizes with early stopping), and the energy and time of all its recurrences.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from tessera.cli.options import JSON

EPILOG = "Example: tessera zeus --gpu v100 --eta 0.5 --workload imagenet"


def register(app: typer.Typer) -> None:
    """Add the ``zeus`` command to ``app``."""
    app.command("zeus", epilog=EPILOG)(zeus)


def zeus(
    gpu: str | None = typer.Option(None, "--gpu", help="GPU of Zeus's traces: v100, a40, "
                                   "p100, rtx6000 (or a catalog flavor Zeus measured: "
                                   "V100-16GB, P100, RTX-6000); default: all four."),
    workloads: list[str] = typer.Option([], "--workload", "-w", help="Workload (repeat for "
                                        "several; default all six): imagenet, cifar100, "
                                        "squad, librispeech, movielens-1m, sentiment140, or "
                                        "dataset/network."),
    eta: float = typer.Option(0.5, "--eta", help="Weight on energy in Zeus's cost "
                              "eta*energy + (1-eta)*max_power*time, in [0, 1]: 1 = energy "
                              "only, 0 = time only."),
    beta: float = typer.Option(2.0, "--beta", help="Early stopping: a run stops once its cost "
                               "would pass beta x the cheapest finished recurrence (>= 1)."),
    recurrences: int | None = typer.Option(None, "--recurrences", help="How often the job "
                                           "recurs (default: Zeus's 2 x |batches| x |limits|)."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same "
                             "result."),
    as_json: bool = JSON,
) -> None:
    """Zeus's per-job optimiser: the power limit and batch size of least energy-time cost.

    The power limit is chosen just in time: the first run at a batch size tries every limit
    for a slice of its first epoch and keeps the cheapest. The batch size is learnt over the
    job's recurrences: two pruning rounds from b0, then Gaussian Thompson sampling. All numbers
    come from Zeus's measurements (NSDI'23; Apache-2.0), nothing is estimated.
    """
    from tessera.model.gpus import resolve_flavor
    from tessera.perf.zeus_opt import exhaustive_best, expected, simulate_recurring
    from tessera.perf.zeus_table import (
        WORKLOADS,
        ZEUS_GPUS,
        ZeusTable,
        check_eta,
        workload,
        zeus_gpu_of,
    )

    check_eta(eta)
    names = list(ZEUS_GPUS) if gpu is None else [gpu.strip().lower()]
    tables = [ZeusTable.load(g if g in ZEUS_GPUS else zeus_gpu_of(resolve_flavor(g)))
              for g in names]
    chosen = [workload(w) for w in workloads] if workloads else list(WORKLOADS)
    rows: list[dict[str, Any]] = []
    for table, w in ((t, w) for t in tables for w in chosen):
        b0 = table.default_batch(w)
        base = expected(table, w, b0, table.max_limit_w, eta)
        best = exhaustive_best(table, w, eta)
        rec = simulate_recurring(table, w, eta, beta=beta, recurrences=recurrences, seed=seed)
        rows.append({
            "workload": w.key, "gpu": table.gpu, "eta": eta, "max_power_w": table.max_limit_w,
            "default": _cfg(base), "exhaustive": _cfg(best), "zeus": _cfg(rec.final),
            "saving_vs_default": 1 - best.cost / base.cost,
            "recurrences": len({r.recurrence for r in rec.runs}), "runs": len(rec.runs),
            "total_energy_kwh": rec.energy_j / 3.6e6, "total_time_h": rec.time_s / 3600,
        })
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"Zeus, eta={eta}: cost = eta*E + (1-eta)*max_power*T per run to target "
               "(E kWh, T h; max_power: the GPU's highest limit)")
    head = (f"{'gpu':8} {'workload':31} {'default b0@max':>16} {'exhaustive best':>16} "
            f"{'zeus learnt':>13} {'saving':>7} {'E/run':>7} {'T/run':>7} {'runs':>5} "
            f"{'total E':>8} {'total T':>8}")
    typer.echo(head)
    for r in rows:
        d, b, z = r["default"], r["exhaustive"], r["zeus"]
        typer.echo(f"{r['gpu']:8} {r['workload']:31} "
                   f"{d['batch_size']:>9}@{d['power_limit_w']:>3}W "
                   f"{b['batch_size']:>9}@{b['power_limit_w']:>3}W "
                   f"{z['batch_size']:>6}@{z['power_limit_w']:>3}W "
                   f"{r['saving_vs_default']:>7.1%} {b['energy_kwh']:>7.3f} {b['time_h']:>7.2f} "
                   f"{r['runs']:>5} {r['total_energy_kwh']:>8.2f} {r['total_time_h']:>8.1f}")


def _cfg(c: Any) -> dict[str, Any]:
    return {"batch_size": c.batch_size, "power_limit_w": c.power_limit_w, "cost_j": c.cost,
            "energy_kwh": c.energy_j / 3.6e6, "time_h": c.time_s / 3600}
