"""``tessera speeds``: how well a job's per-flavor speed can be guessed (issue 35, part 2).

For each throughput table (Gavel's, Sia's, or a Gavel-layout file) and each protocol it prints,
per flavor, the mean absolute percentage error (MAPE) and the worst error of the speed
estimator (:mod:`tessera.perf.estimate`) with the prior alone (k = 0) and after k observations
of the job on other flavors. ``--json`` prints the same rows for scripts. ``--bound`` adds,
beside each one-observation row, the hindsight MAPE of the best predictor of two classes
(:mod:`tessera.perf.speed_bound`): what no method of the class can beat.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import TYPE_CHECKING

import typer

from tessera.cli.options import JSON

if TYPE_CHECKING:
    from tessera.perf.profiles import ThroughputTable
    from tessera.perf.speed_eval import FlavorError

EPILOG = "Example: tessera speeds --table sia --model-known -k 1"

#: One-observation ratio rules of :mod:`tessera.perf.pair_ratio` (its ``VARIANTS``), k = 1 only.
PAIR_PRIORS = ("mean-log", "median-log", "mape", "near-rate", "near-work", "auto")

#: The priors ``--prior`` accepts.
PRIORS = ("roofline", "kernels", *PAIR_PRIORS)


def register(app: typer.Typer) -> None:
    """Add the ``speeds`` command to ``app``."""
    app.command("speeds", epilog=EPILOG)(speeds)


def speeds(
    tables: list[str] = typer.Option(
        ["gavel", "sia"], "--table",
        help="Throughput table to evaluate (repeat for several): gavel (K80/P100/V100), sia "
        "(T4/RTX-2080Ti/RTX-6000/V100/A100) or a Gavel-layout JSON file."),
    protocols: list[str] = typer.Option(
        ["flavor", "job-type"], "--protocol",
        help="Leave-one-out protocol (repeat for several): flavor or job-type."),
    ks: list[int] = typer.Option(
        [0, 1, 2], "--observations", "-k", help="Observations of the job on other flavors "
        "(repeat; 0 = the prior alone). Values the table has too few flavors for are skipped."),
    model: bool = typer.Option(
        False, "--model-known", help="The job names its model (its batch size is new): "
        "the table's job types of that model give its shape."),
    prior: str = typer.Option(
        "roofline", "--prior", help="What answers before and beside observations: roofline "
        "(matrix completion; a flavor no table covers from its peak FP32 FLOP/s) or kernels "
        "(also a per-job roofline from the FLOPs, bytes and kernels the job's model computes, "
        "blended with the completion as cross-validation on the other job types and flavors "
        "chooses; Gavel's and Sia's job types only), or, for k = 1 only, a ratio per flavor "
        "pair learned from the other job types (perf/pair_ratio.py): mean-log, median-log, "
        "mape, near-rate, near-work (nearest job types in FLOPs and bytes per step) or auto "
        "(per pair, the rule with the lowest leave-one-out error on the other job types)."),
    bound: bool = typer.Option(
        False, "--bound", help="Beside each k = 1 row, the hindsight bounds of "
        "perf/speed_bound.py: the MAPE of the best ratio per flavor pair (scale %) and of "
        "the best c * r**b (r^b %), per model too with --model-known. Chosen knowing the "
        "answers: a floor for the class, never a prediction."),
    as_json: bool = JSON,
) -> None:
    """Measure how well Tessera guesses a job's speed on each GPU flavor it has not run on:
    leave-one-out prediction error (MAPE, worst case) per flavor, prior alone and after k
    observations.

    The estimator completes the table's other job types in log space (Gavel's matrix
    completion), answers flavors no table covers with the roofline (peak FLOP/s), and fits
    the job's scale (one observation) and shape (two or more) from its observed rates.
    --prior kernels adds a roofline per job from what its model computes (FLOPs, bytes,
    kernels per step, counted by tools/count_job_work.py).

    Protocols: job-type hides a job type's whole row (a new job on flavors the table knows);
    flavor also hides the target flavor's column (a GPU no table measured, answered by the
    roofline): Habitat's question. MAPE is the mean of |predicted - measured| / measured over
    every job type and choice of observed flavors; 'best from' is the observed flavor that
    predicted this one best (chosen in hindsight, so optimistic).
    """
    from tessera.errors import SpecError
    from tessera.perf.kernel_eval import evaluate_kernels
    from tessera.perf.speed_eval import PROTOCOLS, evaluate
    from tessera.perf.tables import load_throughputs

    for p in protocols:
        if p not in PROTOCOLS:
            raise SpecError(f"--protocol {p!r}: one of {', '.join(PROTOCOLS)}")
    if prior not in PRIORS:
        raise SpecError(f"--prior {prior!r}: one of {', '.join(PRIORS)}")
    if prior != "roofline" and model:
        raise SpecError(f"--prior {prior} and --model-known do not combine: only the "
                        "roofline prior uses the job's model")
    if any(k < 0 for k in ks):
        raise SpecError(f"-k {min(ks)}: the number of observations is 0 or more")
    if 1 not in ks and (bound or prior in PAIR_PRIORS):  # (else: silently no such row)
        what = "--bound" if bound else f"--prior {prior}"
        raise SpecError(f"{what} is for one observation: add -k 1 (got -k "
                        f"{' -k '.join(map(str, ks))})")
    rows: list[dict[str, object]] = []
    for name in tables:
        table = load_throughputs(name)
        floors = _bounds(table, model) if bound else {}
        if prior == "kernels":  # (once per table, not a "skipped" line per protocol and k)
            from tessera.perf.estimate import table_matrix
            from tessera.perf.job_work import table_work

            try:
                table_work(table_matrix(table, 1)[0])
            except SpecError as e:
                raise SpecError(f"--prior kernels, table {name!r}: {e}") from None
        for protocol in protocols:
            for k in ks:
                try:
                    if prior in PAIR_PRIORS:
                        errors = _pairs(table, protocol, k, prior)
                    else:
                        errors = (evaluate_kernels(table, protocol, k) if prior == "kernels"
                                  else evaluate(table, protocol, k, use_model=model))
                except SpecError as e:  # k too large for this table's flavors
                    typer.echo(f"skipped: {e}", err=True)
                    continue
                rows += [{"table": name, "prior": prior, "model_known": model,
                          **asdict(e), **(floors.get(e.flavor, {}) if k == 1 else {})}
                         for e in errors]
    if as_json:
        typer.echo(json.dumps([{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                for k, v in r.items()} for r in rows], indent=2))
        return
    _print(rows)


def _pairs(table: ThroughputTable, protocol: str, k: int, prior: str) -> list[FlavorError]:
    """A ratio rule's errors; :class:`SpecError` for ``k`` other than 1."""
    from tessera.errors import SpecError
    from tessera.perf.pair_ratio import evaluate_pairs

    if k != 1:
        raise SpecError(f"k={k}: --prior {prior} is a rule for one observation (k = 1)")
    return evaluate_pairs(table, protocol, prior)


def _bounds(table: ThroughputTable, model: bool) -> dict[str, dict[str, float]]:
    """Per flavor, the hindsight bounds the rows show (the model's classes with ``model``)."""
    from tessera.perf.speed_bound import one_observation_bounds

    out = {}
    for b in one_observation_bounds(table):
        scale, power = (b.scale_model, b.power_model) if model else (b.scale, b.power)
        out[b.flavor] = {"bound_scale": scale, "bound_power": power}
    return out


def _print(rows: list[dict[str, object]]) -> None:
    bound = any("bound_scale" in r for r in rows)
    header = (f"{'table':<8} {'protocol':<9} {'k':>1}  {'flavor':<11} {'MAPE %':>7} "
              + (f"{'scale %':>8} {'r^b %':>6} " if bound else "")
              + f"{'worst %':>8}  {'n':>4}  {'worst job':<28} best from")
    typer.echo(header)
    typer.echo("-" * len(header))
    for r in rows:
        best = (f"{r['best_source']} ({r['best_source_mape']:.1f} %)" if r["best_source"]
                else "")
        floor = ""
        if bound:
            floor = (f"{r['bound_scale']:>8.1f} {r['bound_power']:>6.1f} " if "bound_scale" in r
                     else f"{'':>8} {'':>6} ")
        typer.echo(f"{r['table']!s:<8} {r['protocol']!s:<9} {r['k']!s:>1}  {r['flavor']!s:<11} "
                   f"{r['mape']:>7.1f} {floor}{r['worst']:>8.1f}  {r['predictions']!s:>4}  "
                   f"{str(r['worst_job'])[:28]:<28} {best}")
