"""Real request traces (issue 36, part 2): readers, bad input, replay with attainment over time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError, TraceFormatError
from tessera.share.mig import mig_gpu
from tessera.share.packing import plan_services
from tessera.share.profiles import BatchingRule, Service, load_parvagpu_profiles
from tessera.share.traces import (
    DLRM_FILE,
    GENAI_FILE,
    read_arrivals_csv,
    read_dlrm,
    read_genai,
    replay,
)

TRACES = Path("/work/shared/data/traces")
runner = CliRunner()
GENAI_HEAD = "gmt_create,predict_type,predict_status,exec_time_seconds\n"


@pytest.fixture(scope="module")
def traces() -> Path:
    if not (TRACES / GENAI_FILE).is_file():
        pytest.skip("shared traces not available")
    return TRACES


def test_genai_reader_reads_every_request_in_order(traces: Path) -> None:
    tr = read_genai(traces / GENAI_FILE)
    assert len(tr.arrivals_s) == 26_823 and tr.arrivals_s[0] == 0.0
    assert np.all(np.diff(tr.arrivals_s) >= 0)
    assert 22.9 < tr.duration_s / 86400 < 23.1
    assert tr.size_unit == "exec_time_s" and np.nanmedian(tr.size) == 23.0


def test_dlrm_reader_orders_instances_and_keeps_lifetimes(traces: Path) -> None:
    tr = read_dlrm(traces / DLRM_FILE)
    assert len(tr.arrivals_s) == 16_591 and tr.skipped == 23_871 - 16_591
    assert np.all(np.diff(tr.arrivals_s) >= 0)
    assert tr.size_unit == "lifetime_s" and np.nanmin(tr.size) >= 0


def test_unsorted_genai_times_are_an_error(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text(GENAI_HEAD + "2024-11-15 16:57:50,T,S,3\n2024-11-15 16:57:49,T,S,3\n")
    with pytest.raises(TraceFormatError, match=r":3 .*not sorted"):
        read_genai(f)


@pytest.mark.parametrize("rows, match", [
    ("arrival_s\n0.5\n-1\n", ":3 .*negative"),
    ("arrival_s\n2\n1\n", ":3 .*not sorted"),
    ("arrival_s\n1\nx\n", ":3 "),
    ("t\n1\n2\n", "no arrival_s column"),
])
def test_bad_arrival_csv(tmp_path: Path, rows: str, match: str) -> None:
    f = tmp_path / "a.csv"
    f.write_text(rows)
    with pytest.raises((TraceFormatError, SpecError), match=match):
        read_arrivals_csv(f)


def test_dlrm_negative_or_backward_times_are_errors(tmp_path: Path) -> None:
    head = "instance_sn,app_name,creation_time,scheduled_time,deletion_time\n"
    f = tmp_path / "d.csv"
    f.write_text(head + "i0,a,-5,,\ni1,a,7,,\n")
    with pytest.raises(TraceFormatError, match="negative"):
        read_dlrm(f)
    f.write_text(head + "i0,a,5,,3\ni1,a,7,,\n")
    with pytest.raises(TraceFormatError, match="before created"):
        read_dlrm(f)


def _burst_csv(path: Path) -> Path:
    """Ten hours of steady arrivals, then one hour at fifty times their rate (9 x the mean)."""
    steady = np.arange(0, 36_000, 10.0)
    burst = np.arange(36_000, 39_600, 0.2)
    path.write_text("arrival_s\n" + "\n".join(f"{t:g}" for t in np.concatenate([steady, burst])))
    return path


def test_replay_shows_attainment_falling_in_the_burst_window(tmp_path: Path) -> None:
    table = load_parvagpu_profiles()
    svc = (Service("r50", "resnet50", 400.0, 100.0),)
    plan = plan_services(svc, table, mig_gpu("A100-80GB"), BatchingRule())
    tr = read_arrivals_csv(_burst_csv(tmp_path / "b.csv"))
    rep = replay(plan, tr, table, window_h=1.0)
    att = [w.attainment["r50"] for w in rep.windows]
    assert len(att) == 11 and att[0] == 1.0 and att[-1] < 0.5  # the burst overloads the plan
    peak = replay(plan, tr, table, window_h=1.0, rate_is="peak")
    assert min(w.attainment["r50"] for w in peak.windows) > 0.99


def test_share_simulate_trace_json_and_plot(tmp_path: Path) -> None:
    svc = tmp_path / "s.yaml"
    svc.write_text("services:\n  - {name: r50, model: resnet50, rate_rps: 400, slo_ms: 100}\n")
    png = tmp_path / "att.png"
    r = runner.invoke(app, ["share", "simulate", "--services", str(svc), "--trace",
                            str(_burst_csv(tmp_path / "b.csv")), "--window-h", "1",
                            "--plot", str(png), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [round(w["start_h"]) for w in data["windows"]] == list(range(11))
    assert data["services"][0]["worst_window_attainment"] < 0.5
    assert png.stat().st_size > 5_000
