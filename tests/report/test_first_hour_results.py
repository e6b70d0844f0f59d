"""What a new user reads in results (issue 31, first hour): oracle policies are marked wherever
results are shown, and a metric the run did not record is null / – with a note, never 0."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tessera.cli import app
from tessera.report.files import PENDING_RECORD_FIELDS, write_job_csv
from tessera.report.html import write_html_report
from tessera.report.policies import ORACLE_MARK, oracle_note, policy_info
from tessera.report.tables import comparison_table, wait_split_table
from tessera.sched.catalog import gavel_loop_only, list_policies, make_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import PENDING_KEYS, SimResult
from tests.builders import RESNET, make_cluster, make_job, make_workload

runner = CliRunner()


def _text(table: object) -> str:
    con = Console(file=io.StringIO(), width=300)
    con.print(table)
    return con.file.getvalue()  # type: ignore[attr-defined]


# -- oracles ------------------------------------------------------------------------------------

def test_policies_that_say_they_read_oracle_durations_are_the_marked_ones() -> None:
    marked = {name for name, _ in list_policies() if policy_info(name).oracle}
    assert {"hetero_srpt", "sjf", "srtf"} <= marked
    for name, summary in list_policies():
        if "oracle durations" in summary:
            assert name in marked, name
        if "no oracle" in summary:
            assert name not in marked, name
    assert "fifo" not in marked and "las" not in marked and "hetero_gittins" not in marked


def test_the_policy_list_marks_the_same_oracles_as_the_results() -> None:
    """``tessera policies`` (table and ``--json``) marks every oracle the results mark, and
    only those: a new user reading the list learns which policies read true durations."""
    oracles = {name for name, _ in list_policies() if policy_info(name).oracle}
    table = runner.invoke(app, ["policies"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    first_cells = [line.split("│")[1].strip() for line in table.output.splitlines()
                   if line.count("│") >= 2]
    marked = {cell.split()[0] for cell in first_cells if ORACLE_MARK in cell}
    assert marked == oracles
    listed = json.loads(runner.invoke(app, ["policies", "--json"]).output)
    assert {p["policy"] for p in listed if p["oracle"]} == oracles


def test_a_policy_said_to_need_compat_gavel_is_the_one_the_simulator_refuses_without() -> None:
    """``tessera policies`` says "--compat gavel only" of exactly the policies the simulator
    refuses to run without ``--compat gavel`` (its worlds share GPUs, so Gavel's packing
    policies run there with Tessera's costs)."""
    for name, summary in list_policies():
        refused = gavel_loop_only(make_policy(name), shares_gpus=True) is not None
        assert ("--compat gavel only" in summary) == refused, name


def test_comparison_table_marks_oracles_and_says_what_each_policy_does(
    results: list[SimResult],
) -> None:
    text = _text(comparison_table(results))
    assert f"hetero_srpt {ORACLE_MARK}" in text
    assert f"fifo {ORACLE_MARK}" not in text
    assert f"{ORACLE_MARK}: oracle: reads what a real scheduler cannot know" in text
    for r in results:  # one line per policy saying what it does
        assert f"{policy_info(r.policy).marked}: {policy_info(r.policy).summary}" in text
    assert f"hetero_srpt {ORACLE_MARK}" in _text(wait_split_table(results))
    note = oracle_note(results)
    assert note is not None and "hetero_srpt" in note


def test_report_opens_with_what_it_shows_and_marks_oracles(
    results: list[SimResult], tmp_path: Path,
) -> None:
    page = write_html_report(results, [], tmp_path / "r.html", title="t").read_text()
    body = page.split("<body>", 1)[1]
    assert body.index("What this shows") < body.index("Comparison")
    assert "true job durations" in body.split("Settings")[0]
    assert f"hetero_srpt {ORACLE_MARK}" in body
    assert "Policies compared" in body and "SRPT per GPU" in body


def test_simulate_json_names_each_policys_oracle(tmp_path: Path) -> None:
    r = runner.invoke(app, ["simulate", "-t", "philly", "--limit", "20", "-c", "v100:16",
                            "-p", "fifo,hetero_srpt", "--no-plots", "--json",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["results"]["hetero_srpt"]["oracle"].startswith("each job's true")
    assert data["results"]["fifo"]["oracle"] is None
    assert data["policies"]["fifo"]["summary"].startswith("First come")


# -- what is not recorded -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gavel_run() -> SimResult:
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    jobs = [make_job(f"j{i}", steps=3000.0, submit_s=60.0 * i, job_type=RESNET)
            for i in range(6)]
    return simulate(make_workload(*jobs), c, "fifo", SimConfig(compat="gavel"))


def test_compat_gavel_pending_is_null_with_a_note_not_zero(gavel_run: SimResult) -> None:
    d = gavel_run.as_dict()
    assert d["avg_queue_delay_s"] > 0  # jobs did wait: a 0 pending would be a lie
    for key in PENDING_KEYS:
        assert d[key] is None, key
    assert "Gavel's own loop" in d["not_recorded"]["pending_h"]  # type: ignore[index]
    json.dumps(d)  # null, not NaN


def test_compat_gavel_pending_shows_dash_in_table_and_csv(
    gavel_run: SimResult, tmp_path: Path,
) -> None:
    text = _text(wait_split_table([gavel_run]))
    row = next(line for line in text.splitlines() if line.startswith("│ fifo"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1] != "–" and all(c == "–" for c in cells[2:]), cells
    assert "not recorded under --compat gavel" in text
    write_job_csv(gavel_run, tmp_path / "jobs.csv")
    rows = list(csv.DictReader((tmp_path / "jobs.csv").open()))
    assert rows and all(row[f] == "" for row in rows for f in PENDING_RECORD_FIELDS)
    assert all(row["queue_delay_s"] != "" for row in rows)


def test_runs_that_record_pending_keep_their_numbers(results: list[SimResult]) -> None:
    for r in results:
        d = r.as_dict()
        assert "not_recorded" not in d and isinstance(d["pending_h"], float)
