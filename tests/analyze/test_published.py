"""The published figures the stored data can reproduce, reproduced; the rest reported honestly.

Each trace is analysed once (module-scoped fixture); the tests then read the comparison rows.
Expected *differences* are listed explicitly, so a figure silently drifting from reproduced to
differs (or back) fails here with the figure's name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.analyze.formats import load_trace
from tessera.analyze.published import Comparison, Outcome
from tessera.analyze.report import Analysis, analyze_trace

_CACHE: dict[str, Analysis] = {}


def _analysis(traces: Path, name: str) -> Analysis:
    if name not in _CACHE:
        _CACHE[name] = analyze_trace(load_trace(name))
    return _CACHE[name]


def _row(a: Analysis, quantity: str) -> Comparison:
    matches = [c for c in a.comparisons if c.figure.quantity == quantity]
    assert len(matches) == 1, f"{quantity!r}: {len(matches)} rows"
    return matches[0]


EXPECTED_DIFFERENCES = {
    # Acme's Philly row is computed on the full raw trace; the Pollux table is a filtered subset.
    ("philly-full", "mean GPUs per GPU job"),
    ("philly-full", "median runtime"),
    ("philly-full", "mean runtime"),
    # A third-party quote that does not match the file the NSDI'22 paper plotted.
    ("philly-runtime", "Philly median runtime as quoted"),
    ("philly-runtime", "Philly p90 runtime as quoted"),
    # Helios: the four cluster rows sum to 6,218 GPUs, the authors' total row says 6,220.
    ("helios", "GPUs"),
}
TRACES = ["philly-full", "philly-runtime", "philly-gavel", "itp", "fgd", "fgd-gpuspec33",
          "pai-2020", "spot-2026", "helios", "sia"]


@pytest.mark.parametrize("name", TRACES)
def test_every_measurable_figure_is_reproduced_or_an_expected_difference(
    traces: Path, name: str
) -> None:
    a = _analysis(traces, name)
    assert a.comparisons, "every trace has reference figures"
    for c in a.comparisons:
        key = (name, c.figure.quantity)
        if c.outcome is Outcome.NOT_REPRODUCIBLE:
            assert c.note, f"{key}: a non-reproducible figure must say why"
            assert c.measured is None
        elif key in EXPECTED_DIFFERENCES:
            assert c.outcome is Outcome.DIFFERS, f"{key} now {c.describe()}"
        else:
            assert c.outcome is Outcome.REPRODUCED, f"{key}: {c.describe()}"


FGD_TABLE_1 = {  # FGD ATC'23 Table 1, percent of tasks / of GPU requests
    "0": (13.3, 0.0), "fractional": (37.8, 28.5), "1": (48.0, 64.2),
    "2": (0.2, 0.5), "4": (0.2, 1.0), "8": (0.5, 5.8),
}


@pytest.mark.parametrize("task_class", list(FGD_TABLE_1))
def test_fgd_table_1_task_mix_within_a_tenth_of_a_point(traces: Path, task_class: str) -> None:
    mix = _analysis(traces, "fgd").sharing
    assert mix is not None
    tasks_pct, requests_pct = FGD_TABLE_1[task_class]
    assert mix.tasks_pct[task_class] == pytest.approx(tasks_pct, abs=0.1)
    assert mix.gpu_requests_pct[task_class] == pytest.approx(requests_pct, abs=0.1)


def test_fgd_type_constraints_only_in_the_resampled_variant(traces: Path) -> None:
    default = _analysis(traces, "fgd")
    spec33 = _analysis(traces, "fgd-gpuspec33")
    assert default.sharing is not None and spec33.sharing is not None
    assert default.sharing.constrained_gpu_tasks_pct == 0
    assert spec33.sharing.constrained_gpu_tasks_pct == pytest.approx(33.8, abs=0.05)
    assert _row(default, "GPU tasks with a GPU-type constraint").outcome is (
        Outcome.NOT_REPRODUCIBLE
    )


def test_itp_job_count_and_gpu_hours(traces: Path) -> None:
    jobs = _analysis(traces, "itp").jobs
    assert jobs is not None
    assert jobs.job_count == 69_351
    assert jobs.gpu_hours == pytest.approx(1_632_719.7, abs=0.05)
    assert {t.label: t.jobs for t in jobs.tenants}["cluster04"] == 15_802


def test_pai_2020_inventory_by_type(traces: Path) -> None:
    inv = _analysis(traces, "pai-2020").inventory
    assert inv is not None
    assert (inv.nodes, inv.gpus) == (1_897, 6_742)
    assert {r.gpu_type: r.gpus for r in inv.by_type} == {
        "MISC": 2_240, "P100": 1_596, "V100M32": 1_080, "T4": 994, "V100": 832, "CPU": 0,
    }


def test_philly_sizes_and_runtime_percentiles_from_the_pollux_table(traces: Path) -> None:
    jobs = _analysis(traces, "philly-full").jobs
    assert jobs is not None and jobs.duration is not None
    shares = {r.label: r.jobs_pct for r in jobs.sizes}
    assert shares["1"] == pytest.approx(93.17, abs=0.005)
    assert shares["8"] == pytest.approx(2.00, abs=0.005)
    assert jobs.duration.p50_s == pytest.approx(1_144, abs=0.5)
    assert jobs.duration.p90_s == pytest.approx(11_265, abs=0.5)
    buckets = {r.label: r.gpu_time_pct for r in jobs.size_buckets}
    assert buckets["5-8"] == pytest.approx(48.4, abs=0.05)


def test_philly_runtime_file_matches_nsdi22_figure(traces: Path) -> None:
    d = _analysis(traces, "philly-runtime").jobs
    assert d is not None and d.duration is not None
    assert d.duration.p50_s / 60 == pytest.approx(19.8, abs=0.05)
    assert d.duration.p90_s / 3600 == pytest.approx(3.6, abs=0.05)


def test_helios_per_cluster_rows_reaggregate_to_the_published_totals(traces: Path) -> None:
    h = _analysis(traces, "helios").helios
    assert h is not None
    assert h.clusters == ("Venus", "Earth", "Saturn", "Uranus")
    assert (h.jobs, h.gpu_jobs) == (3_362_981, 1_580_464)
    assert h.gpus == 6_218  # the authors' total row says 6,220 (reported as a difference)
    assert h.mean_gpus_per_gpu_job == pytest.approx(3.72, abs=0.005)
    assert 100 * h.status_share_by_gpu_time["completed"] == pytest.approx(51.3, abs=0.05)
    assert h.daily_capacity_range["Venus"] == (968, 1_264)


def test_philly_occupancy_from_the_node_sequence(traces: Path) -> None:
    occ = _analysis(traces, "philly-full").occupancy
    assert occ is not None
    assert occ.ratio_mean == pytest.approx(0.739, abs=0.0005)
    assert (occ.active_max, occ.total_max) == (450, 552)
