"""Carbon traces: the regions from the data folder, files, and bad traces refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.workload.carbon import load_carbon, parse_carbon
from tessera.workload.datadir import find_data

HEAD = "Time,Carbon Intensity\n"
runner = CliRunner()


def _csv(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "ci.csv"
    p.write_text(HEAD + body)
    return p


@pytest.mark.parametrize(("body", "message"), [
    ("2020-01-01 00:00,100\n2020-01-01 00:30,-5\n",
     r"ci.csv line 3: intensity -5 gCO2eq/kWh is negative"),
    ("2020-01-01 00:00,100\n2020-01-01 00:30,abc\n", r"line 3: intensity 'abc' is not a number"),
    ("2020-01-01 00:00,100\nyesterday,100\n", r"line 3: unparseable time 'yesterday'"),
    ("2020-01-01 00:00,100\n2020-01-01 03:00,100\n",
     r"line 3: gap of 3 h from 2020-01-01 00:00:00 to 2020-01-01 03:00"),
    ("2020-01-01 00:30,100\n2020-01-01 00:00,100\n", r"line 3: time 2020-01-01 00:00 is not after"),
    ("2020-01-01 00:00,100\n", r"needs at least two rows"),
    ("2020-01-01 00:00,nan\n2020-01-01 00:30,1\n", r"line 2: intensity nan .* not finite"),
])
def test_a_bad_trace_is_a_clear_error_naming_the_value(
    tmp_path: Path, body: str, message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        parse_carbon(_csv(tmp_path, body), "x")


def test_a_file_trace_reads_and_its_step_holds(tmp_path: Path) -> None:
    t = load_carbon(str(_csv(tmp_path, "2020-01-01 00:00,100\n2020-01-01 00:30,200\n")))
    assert t.at(0.0) == 100 and t.at(1800.0) == 200 and t.period_s == 3600.0
    assert t.mean_g_per_kwh(900.0, 2700.0) == pytest.approx(150.0)


def test_a_missing_region_names_the_folders_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    with pytest.raises(SpecError, match=r"carbon region 'gb' needs carbon/gb_ci.csv .* "
                                        r"TESSERA_DATA_DIR"):
        load_carbon("gb")
    with pytest.raises(SpecError, match=r"--carbon 'mars': not a region \(gb, fr, de\)"):
        load_carbon("mars")


@pytest.mark.skipif(find_data("carbon/gb_ci.csv") is None, reason="needs the public data")
def test_the_regions_read_from_the_data_folder() -> None:
    for region, low, high in (("gb", 60, 400), ("fr", 19, 117), ("de", 100, 600)):
        t = load_carbon(region)
        assert low <= t.g_per_kwh.min() and t.g_per_kwh.max() <= high
        assert t.period_s > 360 * 86400


def test_simulate_json_carries_energy_and_carbon(tmp_path: Path) -> None:
    ci = _csv(tmp_path, "2020-01-01 00:00,200\n2020-01-01 00:30,200\n")
    r = runner.invoke(app, ["simulate", "-t", "philly", "-c", "v100:8", "-p", "fifo",
                            "--limit", "20", "--no-plots", "--out", str(tmp_path / "o"),
                            "--carbon", str(ci), "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["results"]["fifo"]
    assert m["energy_kwh"] > 0 and m["peak_power_kw"] >= m["avg_power_kw"] > 0
    assert m["carbon_kg"] == pytest.approx(m["energy_kwh"] * 0.2)
    assert m["carbon_region"] == "ci.csv"


def test_simulate_refuses_a_bad_carbon_trace_before_running(tmp_path: Path) -> None:
    ci = _csv(tmp_path, "2020-01-01 00:00,200\n2020-01-01 00:30,-1\n")
    r = runner.invoke(app, ["simulate", "-t", "philly", "-c", "v100:8", "-p", "fifo",
                            "--limit", "20", "--no-plots", "--out", str(tmp_path / "o"),
                            "--carbon", str(ci)])
    assert isinstance(r.exception, SpecError)  # (the CLI's entry point prints it in one line)
    assert "intensity -1 gCO2eq/kWh is negative" in str(r.exception)
    assert not (tmp_path / "o").exists()  # (refused before anything ran)
