"""The simulator runs a mixed gang at the planner's predicted speed and books it per flavor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload.readers.gavel_tsv import write_gavel_tsv
from tests.builders import make_cluster, make_job, make_workload

_P100 = resolve_flavor("P100")
_V100_16GB = resolve_flavor("V100-16GB")

R50 = "ResNet-50 (batch size 64)"


def _cluster():  # type: ignore[no-untyped-def]
    return make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()


def test_a_gang_bigger_than_every_flavor_runs_only_as_a_mix() -> None:
    c = _cluster()
    w = make_workload(make_job("big", 8, steps=5000, job_type=R50))
    off = simulate(w, c, "fifo")
    assert off.jobs[0].outcome == "rejected" and "of one flavor" in off.jobs[0].reason
    on = simulate(w, c, "fifo", SimConfig(scheduler=SchedulerSettings(mixed_gangs=True)))
    rec = on.jobs[0]
    speed = ThroughputOracle(default_throughputs(), c).mixed_rate(
        w.jobs[0], ((_P100, 4), (_V100_16GB, 4)))
    assert rec.outcome == "succeeded"
    assert rec.jct_s == pytest.approx(5000 / speed)
    busy = dict(kv.split("=") for kv in rec.gpu_s_by_flavor.split(";"))
    assert float(busy["V100-16GB"]) == pytest.approx(4 * rec.jct_s, abs=1)
    assert float(busy["P100"]) == pytest.approx(4 * rec.jct_s, abs=1)
    assert on.extras["mixed_gpu_h"] == pytest.approx(8 * rec.jct_s / 3600)


def test_a_mix_moves_to_one_flavor_once_it_frees_up() -> None:
    # "short" holds one V100 server long enough that "long" starts on 4 V100 + 4 K80 rather
    # than wait; once the V100s free up, the mix pays for its move to 8 V100.
    c = make_cluster().node("v100", gpus=4, count=2).node("k80", gpus=4).build()
    t = "ResNet-50 (batch size 16)"
    w = make_workload(
        make_job("short", 4, steps=100_000, job_type=t, flavors=("v100",)),
        make_job("long", 8, steps=400_000, submit_s=1, job_type=t),
    )
    r = simulate(w, c, "hetero_srpt", SimConfig(
        scheduler=SchedulerSettings(mixed_gangs=True, mixed_min_speed=0.1)))
    long = next(j for j in r.jobs if j.job_id == "long")
    assert long.outcome == "succeeded" and long.migrations == 1
    assert "K80=" in long.gpu_s_by_flavor and r.extras["mixed_gpu_h"] > 0
    waited = simulate(w, c, "hetero_srpt")
    assert long.jct_s < next(j for j in waited.jobs if j.job_id == "long").jct_s


def test_same_seed_same_result_with_mixed_gangs() -> None:
    from tessera.workload.synth import generate_gavel_like

    c = make_cluster().node("v100", gpus=4, count=2).node("p100", gpus=4, count=2).node(
        "k80", gpus=4, count=2).build()
    w = generate_gavel_like(60, 2.0, 3)
    cfg = SimConfig(scheduler=SchedulerSettings(mixed_gangs=True))
    a, b = simulate(w, c, "las", cfg), simulate(w, c, "las", cfg)
    assert a.extras["mixed_gpu_h"] > 0  # mixed gangs did run
    assert a.jobs == b.jobs and a.summary == b.summary


def test_compat_gavel_turns_mixed_gangs_off() -> None:
    cfg = SimConfig(scheduler=SchedulerSettings(mixed_gangs=True), compat="gavel")
    assert not cfg.effective().scheduler.mixed_gangs


@pytest.mark.parametrize("policy", ["fifo", "las", "srtf", "hetero_srpt", "hetero_gittins",
                                    "max_min_fairness", "finish_time_fairness"])
def test_every_policy_runs_a_gang_only_a_mix_can_hold(policy: str) -> None:
    w = make_workload(make_job("small", 2, steps=500, job_type=R50),
                      make_job("big", 8, steps=5000, submit_s=1, job_type=R50))
    r = simulate(w, _cluster(), policy, SimConfig(scheduler=SchedulerSettings(mixed_gangs=True)))
    assert r.summary.succeeded == 2, [j.outcome for j in r.jobs]


def test_cli_simulate_with_mixed_gangs(tmp_path: Path) -> None:
    trace = tmp_path / "t.tsv"
    write_gavel_tsv(make_workload(make_job("big", 8, steps=5000, job_type=R50)), trace)
    out = subprocess.run(
        [sys.executable, "-c", "from tessera.cli import main; main()", "simulate", "-t",
         str(trace), "-c", "v100:4,p100:4", "--gpus-per-server", "4", "-p", "fifo",
         "--mixed-gangs", "--json", "--no-plots", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    fifo = result["results"]["fifo"]
    assert fifo["mixed_gpu_h"] > 0 and fifo["succeeded"] == 1
