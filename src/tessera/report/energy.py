"""Energy, power and carbon of simulation results: a table, its HTML, a power-over-time plot.

The numbers come from :class:`tessera.sim.energy.EnergySummary` (each result's ``energy``);
this module only shows them, in the terminal (:func:`energy_table`), in ``report.html``
(:func:`energy_html`) and as a PNG of cluster power over time (:func:`plot_power`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.table import Table

from tessera.report.plots import _plt, finish_time_plot, first_submission_s
from tessera.report.tables import Column, fmt, legend
from tessera.sim.metrics import SimResult

__all__ = ["ENERGY_COLUMNS", "energy_html", "energy_rows", "energy_table", "plot_power"]

ENERGY_COLUMNS: tuple[Column, ...] = (
    Column("energy kWh", "energy_kwh", "num",
           "cluster energy from the first submission to the last job's end: busy GPUs at "
           "their job's average power, idle GPUs at idle power"),
    Column("avg kW", "avg_power_kw", "num", "energy ÷ that span"),
    Column("peak kW", "peak_power_kw", "num", "highest cluster power at any instant"),
    Column("kWh/job", "energy_per_job_kwh", "num",
           "mean energy of a job's GPUs over its runs, jobs that ran"),
    Column("carbon kg", "carbon_kg", "num",
           "CO2eq under the --carbon trace (– without one)"),
)


def energy_rows(r: SimResult) -> dict[str, object]:
    """The :data:`ENERGY_COLUMNS` values of ``r`` (``None`` where it has no energy)."""
    e = r.energy
    ran = [j.energy_kwh for j in r.jobs if j.energy_kwh]
    return {
        "energy_kwh": e.energy_kwh if e else None,
        "avg_power_kw": e.avg_power_kw if e else None,
        "peak_power_kw": e.peak_power_kw if e else None,
        "energy_per_job_kwh": sum(ran) / len(ran) if ran else None,
        "carbon_kg": e.carbon_kg if e else None,
    }


def _caption(results: Sequence[SimResult]) -> str:
    sources = sorted({s for r in results if r.energy for s in r.energy.power_sources})
    region = next((r.energy.carbon_region for r in results
                   if r.energy and r.energy.carbon_region), None)
    return (legend(ENERGY_COLUMNS) + "\npower: " + (", ".join(sources) or "–")
            + " (docs/energy.md)" + (f"; carbon: {region}" if region else ""))


def energy_table(results: Sequence[SimResult], title: str = "energy and power") -> Table:
    """One row per policy: energy, average and peak power, energy per job, carbon."""
    table = Table(title=title, caption=_caption(results), caption_justify="left",
                  header_style="bold")
    table.add_column("policy")
    for c in ENERGY_COLUMNS:
        table.add_column(c.header, justify="right")
    for r in results:
        row = energy_rows(r)
        table.add_row(r.policy, *(fmt(row[c.key], c.kind) for c in ENERGY_COLUMNS))
    return table


def energy_html(results: Sequence[SimResult]) -> str:
    """The energy table as an HTML section, its legend under it."""
    e = html.escape
    head = "".join(f"<th>{e(c.header)}</th>" for c in ENERGY_COLUMNS)
    rows = "".join(
        f"<tr><td>{e(r.policy)}</td>"
        + "".join(f"<td>{e(fmt(energy_rows(r)[c.key], c.kind))}</td>" for c in ENERGY_COLUMNS)
        + "</tr>" for r in results)
    notes = "".join(f"<li>{e(line)}</li>" for line in _caption(results).splitlines())
    return (f"<h2>Energy and power</h2><table><tr><th>policy</th>{head}</tr>{rows}</table>"
            f"<ul>{notes}</ul>")


def plot_power(results: Sequence[SimResult], path: Path) -> Path:
    """Cluster power over time (kW), one step line per policy, same time axis as the
    utilization plot."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    start = first_submission_s(results)
    for r in results:
        if r.energy is None:
            continue
        t, p = r.energy.series(4000)
        ax.step((np.array(t) - start) / 3600.0, p, where="post", label=r.policy, lw=1)
    ax.set_ylabel("cluster power (kW)")
    ax.set_title("Cluster power over time")
    return finish_time_plot(fig, ax, results, path)
