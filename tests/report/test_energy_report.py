"""The energy table, its HTML and the cluster-power plot (issue 34, part 1)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.report.energy import energy_html, energy_table, plot_power
from tessera.report.html import write_html_report
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_cluster, make_job, make_workload

V100 = default_throughputs().throughput(RESNET, resolve_flavor("v100"))
CFG = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"))


def test_table_html_and_plot_show_the_run_energy(tmp_path: Path) -> None:
    c = make_cluster().node("v100", gpus=2).build()
    r = simulate(make_workload(make_job("a", steps=V100 * 3600)), c, "fifo", CFG)
    assert r.energy is not None
    con = Console(width=200, record=True)
    con.print(energy_table([r]))
    text = con.export_text()
    assert f"{r.energy.energy_kwh:,.2f}" in text and "estimated:tdp-fit" in text
    assert "Energy and power" in energy_html([r])
    png = plot_power([r], tmp_path / "cluster_power.png")
    assert png.stat().st_size > 1000
    html = write_html_report([r], [png], tmp_path / "report.html", "t").read_text()
    assert "Energy and power" in html and "Cluster power (kW) over time" in html
