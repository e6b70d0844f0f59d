"""One executable scenario per thread of issue 32 (part 8), against the decision core and the
simulator.

* Decision-core scenarios are case files under ``cases/threads/`` (``source:`` names the
  thread): the 2/2/8 cohort-tree reclaim (Kueue #10131), no preemption loop in fair sharing
  (#3779), flavor fungibility (#5424), a queue with 0 A100 quota.
* Scenarios that need time to pass run a small workload through the simulator, with the
  tenancy set by :func:`~tests.scenarios.runner.sim_config_of`: time sharing inside a queue
  (#8522), fair sharing from usage history (#9734), and the 0-A100 queue over a whole run.

MIG slice charging (#10108) is not here: the charge function of part 6 is not on this branch
(see ``README.md``). The live-service runs of these scenarios are in ``test_threads_live.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    WithinQueue,
)
from tessera.sched.core.tenancy import FairSharing, Tenancy
from tessera.sim.engine import simulate
from tessera.sim.metrics import JobRecord, SimResult
from tests.scenarios.model import CaseError, NodePool, case_files, load_case
from tests.scenarios.runner import (
    JOB_TYPE,
    check_case,
    cluster_of,
    scenario_throughputs,
    sim_config_of,
)

H100 = resolve_flavor("H100-80GB")
A100 = resolve_flavor("A100-80GB")
FILES = case_files("threads")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_thread_case(path: Path) -> None:
    check_case(load_case(path))


def test_every_thread_has_a_scenario() -> None:
    sources = {load_case(p).source for p in FILES}
    assert {"kueue#10131", "kueue#3779", "kueue#5424"} <= sources
    assert any("zero A100" in s for s in sources)


# -- the simulator ------------------------------------------------------------------------


def _job(name: str, queue: str, gpus: int, run_s: float, flavor: GpuFlavor, submit_s: float,
         priority: int = 0) -> JobSpec:
    """A job that runs ``run_s`` seconds alone on ``gpus`` GPUs of ``flavor``."""
    probe = JobSpec(JobId(name), JOB_TYPE, gpus, 1.0, submit_s, queue=queue)
    cluster = cluster_of([NodePool(flavor, 1, 8)])
    rate = ThroughputOracle(scenario_throughputs(), cluster).rate(probe, flavor, True)
    assert rate > 0, f"{JOB_TYPE} has no profile on {flavor.short}"
    return JobSpec(JobId(name), JOB_TYPE, gpus, rate * run_s, submit_s, queue=queue,
                   priority=priority)


def _run(jobs: list[JobSpec], pools: list[NodePool], tenancy: Tenancy) -> dict[str, JobRecord]:
    tenancy.check(p.flavor for p in pools)
    cfg = sim_config_of(tenancy, checkpoint_s=0.0, restore_s=0.0)
    result: SimResult = simulate(Workload("scenario", tuple(jobs)), cluster_of(pools), "fifo",
                                 cfg, scenario_throughputs())
    return {r.job_id: r for r in result.jobs}


MIN_ADMITTED_S = 600.0


def test_8522_time_sharing_three_equal_jobs_each_wait_at_most_two_min_admitted() -> None:
    """Kueue #8522: three equal-priority 8-GPU jobs on an 8-GPU queue take turns after the
    minimum admitted duration: none waits longer than 2 x min_admitted_s for its first start,
    and all three finish. Checkpoint and restore cost nothing here, so the bound is exact."""
    q = QueueQuota.per_flavor("team", {H100: FlavorQuota(8, 0)},
                              preemption=QueuePreemption(within_queue=WithinQueue.LOWER_PRIORITY),
                              min_admitted_s=MIN_ADMITTED_S)
    jobs = [_job(f"j{i}", "team", 8, 3 * MIN_ADMITTED_S, H100, submit_s=float(i))
            for i in range(3)]
    recs = _run(jobs, [NodePool(H100, 1, 8)], Tenancy({"team": q}))
    for r in recs.values():
        assert r.outcome == "succeeded", r
        assert r.first_start_s is not None
        waited = r.first_start_s - r.submit_s
        assert waited <= 2 * MIN_ADMITTED_S + 1e-6, (r.job_id, waited)
    # They took turns: the job that started first was stopped at least once for the others.
    assert recs["j0"].preemptions >= 1


def test_9734_admission_ordered_by_usage_history() -> None:
    """Kueue #9734 / KEP #9737: with a usage half-life, the queue that used less in the past
    goes first, even when both use nothing right now.

    Team A runs one 8-GPU job alone for an hour (borrowing team B's idle half). Meanwhile
    each team submits an 8-GPU job, A's first. When A's long job ends both teams use nothing,
    so current usage ties (and first come, first served would pick A); A's hour of history
    must send B's job first."""
    cohort = Cohort("org")
    qa = QueueQuota.per_flavor("team-a", {H100: FlavorQuota(4)}, cohort="org")
    qb = QueueQuota.per_flavor("team-b", {H100: FlavorQuota(4)}, cohort="org")
    tenancy = Tenancy({"team-a": qa, "team-b": qb}, {"org": cohort},
                      FairSharing(enabled=True, usage_half_life_s=3600.0))
    jobs = [_job("a-long", "team-a", 8, 3600.0, H100, 0.0),
            _job("a-next", "team-a", 8, 600.0, H100, 60.0),
            _job("b-next", "team-b", 8, 600.0, H100, 61.0)]
    recs = _run(jobs, [NodePool(H100, 1, 8)], tenancy)
    a, b = recs["a-next"].first_start_s, recs["b-next"].first_start_s
    assert a is not None and b is not None
    assert b < a, (a, b)


def test_zero_a100_quota_never_runs_on_a100_over_a_run() -> None:
    """A queue with 0 A100 quota and no borrowing runs only on H100 for a whole run, though
    the A100s stand idle; with a borrowing limit its jobs do spill onto them."""
    pools = [NodePool(H100, 1, 4), NodePool(A100, 1, 8)]

    def tenancy(borrow_gpus: int) -> Tenancy:
        qa = QueueQuota.per_flavor(
            "team-a", {H100: FlavorQuota(4), A100: FlavorQuota(0, borrow_gpus)}, cohort="org")
        qb = QueueQuota.per_flavor("team-b", {A100: FlavorQuota(8)}, cohort="org")
        return Tenancy({"team-a": qa, "team-b": qb}, {"org": Cohort("org")})

    jobs = [_job(f"a{i}", "team-a", 2, 600.0, H100, 30.0 * i) for i in range(6)]
    held = _run(jobs, pools, tenancy(0))
    for r in held.values():
        assert r.outcome == "succeeded", r
        assert A100.short not in r.gpu_s_by_flavor, r
    borrowed = _run(jobs, pools, tenancy(4))
    assert any(A100.short in r.gpu_s_by_flavor for r in borrowed.values())


# -- the case format itself ---------------------------------------------------------------


def test_case_format_refuses_unknown_keys_and_bad_values(tmp_path: Path) -> None:
    good = FILES[0].read_text()
    bad = tmp_path / "typo.yaml"
    bad.write_text(good.replace("expect:\n", "expect:\n  preemptd: []\n"))
    with pytest.raises(CaseError, match=r"typo.yaml: expect.preemptd: unknown key"):
        load_case(bad)
    bad.write_text(good.replace("gpus_per_node: 4", "gpus_per_node: 4.5", 1))
    with pytest.raises(CaseError, match=r"cluster\[0\].gpus_per_node: must be a whole number"):
        load_case(bad)
    bad.write_text(good.replace("reclaim_within_cohort: LowerPriority",
                                "reclaim_within_cohort: Sometimes", 1))
    with pytest.raises(CaseError, match="'Sometimes' is not one of Never, LowerPriority, Any"):
        load_case(bad)


def test_case_with_quota_for_a_flavor_the_cluster_lacks_is_refused(tmp_path: Path) -> None:
    text = FILES[0].read_text().replace("{H100-80GB: {nominal: 8}}", "{L4: {nominal: 8}}")
    bad = tmp_path / "absent.yaml"
    bad.write_text(text)
    with pytest.raises(CaseError, match="quota for flavor 'NVIDIA-L4'"):
        load_case(bad)
