"""Run Gavel's own simulator on a trace, to measure the gap of a ``--compat gavel`` twin.

Gavel is not a dependency of Tessera and none of its code is copied here: this script imports
it from a local checkout of ``stanford-futuredata/gavel`` (its ``scheduler/`` directory, e.g.
at c4fa400) named by ``--gavel`` or ``GAVEL_SRC``, and runs its driver's steps in a subprocess:
``utils.parse_trace``, ``utils.get_policy(name, solver="ECOS", seed)``,
``Scheduler(..., simulate=True, time_per_iteration=360)``, ``simulate(...)``,
``get_average_jct()``. Modules that simulation never uses (the gRPC runtime, ``psutil``,
``matrix_completion``) are replaced by empty stand-ins, and one NumPy ≥ 2 incompatibility is
bridged without changing a result: ``ProportionalPolicy.get_throughputs`` returns an ``m × 1``
array whose rows Gavel passes to ``float()``; the wrapper returns the same values flattened.

Usage::

    python benchmarks/gavel_reference.py --gavel ~/gavel/scheduler trace.tsv max_min_fairness_packed
        [--cluster 12:12:12] [--seed 0]

It prints one JSON line ``{"policy", "avg_jct_s", "makespan_s", "wall_s"}``; collect them into
the ``GAVEL_RESULTS`` file of ``bench_gavel_agreement.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r'''
import contextlib, io, json, sys, time, types
src, trace, name, cluster, seed, tput = sys.argv[1:7]
sys.path[:0] = [src, src + "/policies"]
for mod in ("psutil", "matrix_completion", "runtime", "runtime.rpc"):
    sys.modules[mod] = types.ModuleType(mod)
sys.modules["runtime.rpc"].scheduler_server = None
sys.modules["runtime.rpc"].scheduler_client = None
sys.modules["runtime"].rpc = sys.modules["runtime.rpc"]
import proportional
_get = proportional.ProportionalPolicy.get_throughputs
proportional.ProportionalPolicy.get_throughputs = (
    lambda self, *a, **k: _get(self, *a, **k).reshape(-1))
import scheduler, utils
jobs, arrivals = utils.parse_trace(trace)
policy = utils.get_policy(name, solver="ECOS", seed=int(seed))
sched = scheduler.Scheduler(policy, throughputs_file=tput, simulate=True, seed=int(seed),
                            time_per_iteration=360)
v, p, k = (int(x) for x in cluster.split(":"))
t0 = time.time()
with contextlib.redirect_stdout(io.StringIO()):
    sched.simulate({"v100": v, "p100": p, "k80": k}, arrivals, jobs,
                   num_gpus_per_server={"v100": 1, "p100": 1, "k80": 1})
    jct = sched.get_average_jct(None)
print(json.dumps({"policy": name, "avg_jct_s": jct, "makespan_s": sched._current_timestamp,
                  "wall_s": time.time() - t0}))
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("policy", help="Gavel's policy name (max_min_fairness_packed, fifo_perf ...)")
    ap.add_argument("--gavel", default=os.environ.get("GAVEL_SRC"),
                    help="Gavel's scheduler/ directory (or GAVEL_SRC)")
    ap.add_argument("--cluster", default="12:12:12", help="v100:p100:k80 GPU counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--throughputs", default=None,
                    help="throughputs JSON (default: the checkout's simulation_throughputs.json)")
    args = ap.parse_args(argv)
    if not args.gavel:
        ap.error("name Gavel's scheduler/ directory with --gavel or GAVEL_SRC")
    tput = args.throughputs or os.path.join(args.gavel, "simulation_throughputs.json")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, args.gavel, args.trace, args.policy, args.cluster,
         str(args.seed), tput],
        capture_output=True, text=True, check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        print(out.stderr[-2000:], file=sys.stderr)
        return 1
    print(json.dumps(json.loads(lines[-1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
