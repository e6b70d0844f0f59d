"""The Sia/Pollux throughput table: measured rows, interpolation, memory limits, selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import NoProfileError, SpecError
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.perf.sia import load_sia_profile
from tessera.perf.sia_table import interpolate_step_time, sia_job_type, sia_throughputs
from tessera.perf.tables import load_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import load_trace

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "workload"


def _mean_step(model: str, flavor: str, placement: str, bsz: int) -> float:
    p = load_sia_profile(model, resolve_flavor(flavor))
    ts = [t for pl, b, t in zip(p.placement, p.local_bsz, p.step_time_s, strict=True)
          if pl == placement and b == bsz]
    assert ts, (model, flavor, placement, bsz)
    return sum(ts) / len(ts)


def test_measured_rows_give_gang_steps_per_second() -> None:
    tb = sia_throughputs()
    jt = sia_job_type("imagenet", 40)
    one = _mean_step("imagenet", "V100", "1", 40)
    assert tb.throughput(jt, resolve_flavor("V100"), 1) == pytest.approx(1 / one)
    assert tb.throughput(jt, resolve_flavor("T4"), 4) == pytest.approx(
        4 / _mean_step("imagenet", "T4", "4", 40))
    # Unconsolidated: the placement with the most servers (four T4 servers, one GPU each).
    assert tb.throughput(jt, resolve_flavor("T4"), 4, consolidated=False) == pytest.approx(
        4 / _mean_step("imagenet", "T4", "1111", 40))


def test_every_job_type_runs_on_the_reference_flavor() -> None:
    tb = sia_throughputs()
    assert tb.reference_flavor.short == "V100-16GB"
    for jt in tb.job_types():
        assert tb.throughput(jt, resolve_flavor("V100"), 1) > 0


def test_other_flavors_are_interpolated_between_their_measured_batches() -> None:
    assert interpolate_step_time([(10, 1.0), (20, 2.0)], 15) == pytest.approx(1.5)
    assert interpolate_step_time([(10, 1.0), (20, 2.0)], 20) == pytest.approx(2.0)
    assert interpolate_step_time([(10, 1.0), (20, 2.0)], 21) is None
    assert interpolate_step_time([(10, 1.0), (20, 2.0)], 9) is None
    tb = sia_throughputs()
    a100 = {b for p, b in zip(*(lambda p: (p.placement, p.local_bsz))(
        load_sia_profile("bert", resolve_flavor("A100-40GB"))), strict=True) if p == "1"}
    v100 = {b for p, b in zip(*(lambda p: (p.placement, p.local_bsz))(
        load_sia_profile("bert", resolve_flavor("V100"))), strict=True) if p == "1"}
    b = min(v100 - a100)  # a V100 batch the A100 never ran: interpolated there
    lo, hi = max(x for x in a100 if x < b), min(x for x in a100 if x > b)
    rate = tb.throughput(sia_job_type("bert", b), resolve_flavor("A100-40GB"), 1)
    slow, fast = (1 / _mean_step("bert", "A100-40GB", "1", x) for x in (hi, lo))
    assert slow <= rate <= fast


def test_a_batch_that_never_fit_has_no_entry() -> None:
    tb = sia_throughputs()
    big = max(int(t.split()[-1].rstrip(")")) for t in tb.job_types() if t.startswith("imagenet"))
    assert big > load_sia_profile("imagenet", resolve_flavor("T4")).max_local_bsz
    with pytest.raises(NoProfileError):
        tb.throughput(sia_job_type("imagenet", big), resolve_flavor("T4"), 1)


def test_a100_80gb_is_answered_from_a100_40gb() -> None:
    tb = sia_throughputs()
    jt = sia_job_type("cifar10", 64)
    assert tb.throughput(jt, resolve_flavor("A100-80GB"), 2) == tb.throughput(
        jt, resolve_flavor("A100-40GB"), 2)


def test_tables_by_name_or_path(tmp_path: Path) -> None:
    assert load_throughputs(None) is default_throughputs()
    assert load_throughputs("gavel") is default_throughputs()
    assert load_throughputs("sia") is sia_throughputs()
    with pytest.raises(SpecError, match="built-in tables: gavel, sia"):
        load_throughputs(tmp_path / "missing.json")


def test_sia_reader_names_jobs_by_application_with_the_sia_table() -> None:
    wl = load_trace(GOLDEN / "sia_small.csv", throughputs=sia_throughputs())
    apps = [j.model for j in wl.jobs]
    assert all(j.batch_size is not None and j.batch_size > 0 for j in wl.jobs)
    assert [j.job_type.split(" ")[0] for j in wl.jobs] == apps


def test_modern_mixed_uses_every_flavor_with_the_sia_table() -> None:
    tb = sia_throughputs()
    wl = load_trace(GOLDEN / "sia_small.csv", throughputs=tb)
    cluster = load_cluster("a100-40gb:4,v100:4,t4:4", 4)
    from tessera.workload.synth import generate_gavel_like

    many = generate_gavel_like(40, 20.0, 1, throughputs=tb)
    r = simulate(many, cluster, "fifo", SimConfig(), tb)
    assert r.summary.succeeded == len(many)
    assert all(u > 0 for u in r.summary.utilization_by_flavor.values())
    # The 6-GPU cifar10 job fits no flavor (4 GPUs each) alone: it runs only as a mixed gang,
    # whose speed the planner's cost model predicts (the job names a profiled application).
    assert simulate(wl, cluster, "las", SimConfig(), tb).summary.rejected == 1
    mixed = simulate(wl, cluster, "las", SimConfig(
        scheduler=SchedulerSettings(mixed_gangs=True)), tb)
    assert mixed.summary.succeeded == len(wl) and mixed.extras["mixed_gpu_h"] > 0
