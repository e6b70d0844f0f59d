"""A near tie under learned speeds: the flavor other jobs gain less from (issue 35 part 3).

``las`` reads only the order of flavors (``fastest_first``), and where a gang starts it runs
for as long as it runs. Sia's DeepSpeech2 batch 57 on 12 GPUs runs 9.82 steps/s on RTX 2080
Tis and 9.54 on A100s; its estimate puts the A100 a few percent ahead, closer than the
estimate's own error, and on the A100s its hours-long gangs held the GPUs that CIFAR-10
gangs run 4.4x faster on.
"""

from __future__ import annotations

from tessera.model.cluster import load_cluster
from tessera.perf.tables import load_throughputs
from tessera.sched.core.learned import LearnedOracle, ObservedOracle
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import read_trace
from tests.builders import make_job

SIA = load_throughputs("sia")
CLUSTER = load_cluster("sia-64", 8)
FLAVORS = {f.short: f for f in CLUSTER.flavors()}
RTX, A100, T4 = FLAVORS["RTX-2080Ti"], FLAVORS["A100-40GB"], FLAVORS["T4"]


def _oracles() -> tuple[ObservedOracle, LearnedOracle]:
    truth = ObservedOracle(SIA, CLUSTER)
    return truth, LearnedOracle(truth)


def test_a_near_tie_goes_first_to_the_flavor_other_jobs_gain_less_from() -> None:
    _truth, learned = _oracles()
    job = make_job("d", job_type="deepspeech2 (batch size 57)", gpus=12)
    a100, rtx = learned.rate(job, A100, True), learned.rate(job, RTX, True)
    assert rtx < a100 < 1.06 * rtx  # (the estimate: the A100 ahead, by less than its error)
    assert learned.fastest_first(job) == (RTX, A100, T4)


def test_a_tie_observed_on_both_flavors_is_decided_by_the_observations() -> None:
    truth, learned = _oracles()
    job = make_job("d", job_type="deepspeech2 (batch size 57)", gpus=6)
    truth.rate(job, A100, True)  # (true 5.27 steps/s)
    truth.rate(job, RTX, True)  # (true 4.86: 8 % slower, within a near tie; both observed)
    assert learned.rate(job, RTX, True) * 1.08 < learned.rate(job, A100, True)
    assert learned.fastest_first(job) == (A100, RTX, T4)


def test_a_clear_gap_is_no_tie() -> None:
    _truth, learned = _oracles()
    job = make_job("c", job_type="cifar10 (batch size 257)", gpus=16)
    assert learned.fastest_first(job) == (A100, RTX, T4)


def test_las_on_sia_philly_1_loses_nothing_to_learned_speeds() -> None:
    # Main: 1.091x the table's average JCT (DeepSpeech2's gangs on the A100s); now 1.000.
    workload = read_trace("sia-philly-1", throughputs=SIA).workload
    jct = {speeds: simulate(workload, CLUSTER, "las", SimConfig(seed=0, speeds=speeds),
                            SIA).summary.avg_jct_s for speeds in ("table", "learned")}
    assert jct["learned"] < 1.02 * jct["table"]


def test_one_gpu_profiles_on_both_flavors_leave_a_gang_tie_open() -> None:
    # YOLOv3 batch 16 on 4 GPUs: 5.26 steps/s on T4s, 4.91 on A100s. Its 1-GPU rates on both
    # (Sia's bootstrap profiles) put the A100 2.7 % ahead for the gang: the gang's scaling
    # there is still the prior's, so it stays a near tie.
    truth, learned = _oracles()
    job_type = "yolov3 (batch size 16)"
    gang, one = make_job("y", job_type=job_type, gpus=4), make_job("y", job_type=job_type)
    for flavor in (T4, A100):
        truth.rate(one, flavor, True)
    assert learned.rate(gang, T4, True) < learned.rate(gang, A100, True)
    assert learned.fastest_first(gang) == (T4, A100)
