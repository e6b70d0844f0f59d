"""Roofline calibration per GPU: measured vs leave-one-out predicted sustained FLOP/s.

Run: ``PYTHONPATH=src python benchmarks/bench_roofline.py``. Prints two tables: (1) per workload
class and measured GPU, the measured sustained FLOP/s, the roofline's prediction from the other
GPUs' median efficiency, and the error — what an estimate for an unmeasured GPU may be off by;
(2) per catalog GPU and class, the sustained FLOP/s the planner uses and whether it is measured
(own or same-chip) or an estimate.
"""

from __future__ import annotations

from tessera.model.gpus import CATALOG
from tessera.perf.roofline import WORKLOADS, peak_flops_per_s
from tessera.perf.steptime import CostModel


def main() -> None:
    rl = CostModel(estimate_unprofiled=True).roofline()
    print(f"{'class':<12} {'GPU':<11} {'measured TF/s':>13} {'predicted':>10} {'error':>7}  "
          "source")
    for w in WORKLOADS:
        for r in rl.calibration(w):
            src = next(m.source for m in rl.measurements(w) if m.flavor == r.flavor)
            print(f"{w:<12} {r.flavor.short:<11} {r.measured_flops_per_s / 1e12:>13.1f} "
                  f"{r.predicted_flops_per_s / 1e12:>10.1f} {r.error:>+7.0%}  {src}")
    print()
    head = "".join(f"{w + ' TF/s':>22}" for w in WORKLOADS)
    print(f"{'GPU':<11} {'peak TF/s':>9}{head}")
    for f in CATALOG:
        cells = []
        for w in WORKLOADS:
            e = rl.efficiency(f, w)
            tag = "meas" if e.measured else "est"
            cells.append(f"{rl.sustained_flops_per_s(f, w) / 1e12:>12.1f} ({e.value:4.0%} {tag})")
        print(f"{f.short:<11} {peak_flops_per_s(f, 'transformer') / 1e12:>9.1f}"
              + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
