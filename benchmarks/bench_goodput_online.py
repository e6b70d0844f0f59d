"""Goodput online (Pollux's agent): Sia and Pollux with the efficiency table vs reported GNS.

For each Sia workload and elastic policy, simulates twice on ``sia-64`` with Sia's table, in
the setting of ``bench_elastic.py`` (jobs calibrated as Sia's simulator runs them, batches
tuned from ``M0``, 60 s rounds), once per goodput source: ``table`` (the policy reads each
job's efficiency and step times from the bundled profiles), ``gns`` (efficiency from the
noise scale its simulated agent reports) and ``reported`` (that, and step times from the
throughput model fitted to what it observed; :mod:`tessera.sim.gns_agent`). The profiles still
drive progress. Prints one JSON line per pair: the average JCTs and their ratios to the
first source, and each run's wall time: the cost of a source (``reported`` refits a job only
when its model is surprised and republishes only a fit that moved, :mod:`tessera.perf.step_book`;
docs/scheduler.md, "Cost of reported", has the rows before and after).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_goodput_online.py \
        [--workloads sia-philly-1,sia-philly-2] [--policies sia,pollux]
"""

from __future__ import annotations

import argparse
import json
import time

from tessera.model.cluster import load_cluster
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import load_trace
from tessera.workload.elastic import sia_calibrated, tuned_from_m0


def compare(name: str, policy: str, sources: list[str]) -> dict[str, object]:
    """Average JCT (h) of ``policy`` on workload ``name`` per goodput source."""
    table = sia_throughputs()
    w = tuned_from_m0(sia_calibrated(load_trace(name, throughputs=table)))
    row: dict[str, object] = {"workload": name, "policy": policy}
    jct_h = {}
    for goodput in sources:
        t0 = time.perf_counter()
        cfg = SimConfig(scheduler=SchedulerSettings(round_s=60.0),
                        goodput=goodput)  # type: ignore[arg-type]
        r = simulate(w, load_cluster("sia-64"), policy, cfg, table)
        jct_h[goodput] = r.summary.avg_jct_s / 3600
        row[f"{goodput}_jct_h"] = round(jct_h[goodput], 4)
        row[f"{goodput}_unfinished"] = r.summary.unfinished
        row[f"{goodput}_wall_s"] = round(time.perf_counter() - t0, 1)
    for src in sources[1:]:
        row[f"{src}_ratio"] = round(jct_h[src] / jct_h[sources[0]], 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="sia-philly-1,sia-philly-2")
    ap.add_argument("--policies", default="sia,pollux")
    ap.add_argument("--sources", default="table,gns,reported", help="table first")
    a = ap.parse_args()
    for name in a.workloads.split(","):
        for policy in a.policies.split(","):
            print(json.dumps(compare(name, policy, a.sources.split(","))), flush=True)


if __name__ == "__main__":
    main()
