"""Tessera's Zeus optimiser against Zeus's own trace-driven simulator, per workload and GPU.

Both replay the same recurring job (Zeus's defaults: target, epoch cap and b0 of
``run_alibaba.py``; 2 × |B| × |P| recurrences; η, β = 2) on the same bundled traces, for
``--seeds`` seeds each, and the table compares the mean total energy and time over all runs
(retries included) and the batch size each ends on. Zeus's code is not part of Tessera: fetch
``ml-energy/zeus`` and point ``--zeus-src`` at a checkout of it (a directory holding
``zeus/``); it needs numpy and pandas, and imports ``sklearn.metrics.auc`` at module level
without calling it in the simulator -- give a stand-in package on ``--extra-path`` when
scikit-learn is not installed. Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/zeus_vs_simulator.py \
        --zeus-src /tmp/zeus-src --extra-path /tmp/zeus-shim [--gpu v100] [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from importlib import resources

from tessera.perf.zeus_opt import default_recurrences, simulate_recurring
from tessera.perf.zeus_table import WORKLOADS, ZeusTable

# Runs inside a child Python with Zeus on its path; prints one JSON line per (workload, seed).
_ZEUS_DRIVER = r"""
import json, sys, contextlib, io
import pandas as pd
from zeus._legacy.job import Job
from zeus._legacy.policy import JITPowerLimitOptimizer, PruningGTSBatchSizeOptimizer
from zeus._legacy.simulate import Simulator
args = json.loads(sys.argv[1])
train = pd.read_csv(args["train"]); power = pd.read_csv(args["power"])
for w in args["jobs"]:
    for seed in args["seeds"]:
        job = Job(w["dataset"], w["network"], w["optimizer"], w["target"], w["max_epochs"], w["b0"])
        sim = Simulator(train, power, PruningGTSBatchSizeOptimizer(seed=seed, verbose=False),
                        JITPowerLimitOptimizer(verbose=False), seed=seed, verbose=False)
        with contextlib.redirect_stdout(io.StringIO()):
            h = sim.simulate_one_job(job, w["recurrences"], args["beta"], args["eta"])
        last = int(h[-1].bs)
        energy, time = float(sum(e.energy for e in h)), float(sum(e.time for e in h))
        print(json.dumps({"key": w["key"], "seed": seed, "energy_j": energy, "time_s": time,
                          "runs": len(h), "last_bs": last}))
"""


def _zeus_runs(gpu: str, eta: float, beta: float, seeds: list[int], zeus_src: str,
               extra: str | None) -> list[dict[str, float | int | str]]:
    t = ZeusTable.load(gpu)
    data = resources.files("tessera.data").joinpath("zeus")
    jobs = [{"key": w.key, "dataset": w.dataset, "network": w.network,
             "optimizer": w.optimizer, "target": w.target_metric, "max_epochs": w.max_epochs,
             "b0": t.default_batch(w), "recurrences": default_recurrences(t, w)}
            for w in WORKLOADS]
    arg = json.dumps({"train": str(data.joinpath("summary_train.csv")),
                      "power": str(data.joinpath(f"summary_power_{gpu}.csv")),
                      "jobs": jobs, "seeds": seeds, "eta": eta, "beta": beta})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (zeus_src, extra) if p))
    proc = subprocess.run([sys.executable, "-c", _ZEUS_DRIVER, arg], env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"Zeus's simulator failed:\n{proc.stderr[-2000:]}")
    out = proc.stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zeus-src", required=True, help="directory holding Zeus's zeus/ package")
    ap.add_argument("--extra-path", default=None, help="extra PYTHONPATH for Zeus's child run")
    ap.add_argument("--gpu", action="append", help="v100, a40, p100, rtx6000 (default: all)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=2.0)
    a = ap.parse_args()
    seeds = list(range(1, a.seeds + 1))
    print(f"eta={a.eta} beta={a.beta} seeds={seeds}; means over seeds; diff = ours/zeus - 1")
    print(f"{'gpu':8} {'workload':32} {'E zeus kWh':>11} {'E ours':>9} {'dE':>7} "
          f"{'T zeus h':>9} {'T ours':>8} {'dT':>7}  last bs zeus/ours")
    for gpu in a.gpu or ["v100", "a40", "p100", "rtx6000"]:
        zeus = _zeus_runs(gpu, a.eta, a.beta, seeds, a.zeus_src, a.extra_path)
        t = ZeusTable.load(gpu)
        for w in WORKLOADS:
            z = [r for r in zeus if r["key"] == w.key]
            ours = [simulate_recurring(t, w, a.eta, beta=a.beta, seed=s) for s in seeds]
            ze = statistics.fmean(float(r["energy_j"]) for r in z) / 3.6e6
            zt = statistics.fmean(float(r["time_s"]) for r in z) / 3600
            oe = statistics.fmean(o.energy_j for o in ours) / 3.6e6
            ot = statistics.fmean(o.time_s for o in ours) / 3600
            zb = sorted(int(r["last_bs"]) for r in z)
            ob = sorted(o.runs[-1].batch_size for o in ours)
            print(f"{gpu:8} {w.key:32} {ze:11.2f} {oe:9.2f} {oe / ze - 1:+7.1%} "
                  f"{zt:9.1f} {ot:8.1f} {ot / zt - 1:+7.1%}  {zb} / {ob}")


if __name__ == "__main__":
    main()
