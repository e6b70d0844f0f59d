"""report.html lists the run's settings and explains every column, mark and ρ; the settings
say what the run used (checkpoint and restore apart, the cadence of each policy)."""

from __future__ import annotations

from pathlib import Path

from tessera.report.html import write_html_report
from tessera.report.settings import Setting, decides_in_rounds, run_settings
from tessera.report.tables import COLUMNS, WAIT_COLUMNS
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import FailureConfig, SimConfig
from tessera.sim.metrics import SimResult

POLICIES = ["fifo", "hetero_srpt"]


def _settings(config: SimConfig) -> dict[str, str]:
    out = run_settings(config, POLICIES, trace="philly", jobs=10, cluster="test: 8×V100",
                       throughputs="gavel (bundled)")
    return {s.name: s.value for s in out}


def test_settings_name_checkpoint_and_restore_apart() -> None:
    s = _settings(SimConfig(scheduler=SchedulerSettings(checkpoint_s=30, restore_s=45)))
    assert s["preemption cost"].startswith("checkpoint 30 s + restore 45 s per preemption")
    assert s["trace"] == "philly (10 jobs)" and s["policies"] == "fifo, hetero_srpt"
    assert s["failures"] == "off" and s["seed"] == "0"
    assert "elastic" not in s["preemption cost"]  # no elastic policy compared


def test_settings_say_elastic_jobs_pay_their_models_restart() -> None:
    out = run_settings(SimConfig(), ["las", "sia", "pollux"], trace="t", jobs=1, cluster="c",
                       throughputs="sia")
    cost = {x.name: x.value for x in out}["preemption cost"]
    assert cost.startswith("checkpoint 30 s + restore 30 s")
    assert "; sia, pollux: an elastic job pays its model's measured restart" in cost


def test_settings_give_each_policy_its_cadence() -> None:
    s = _settings(SimConfig())
    assert "in rounds of 360 s: hetero_srpt" in s["cadence"]
    assert "on events (arrivals, completions, wake-ups): fifo" in s["cadence"]
    assert not decides_in_rounds(SimConfig(), "fifo")
    assert decides_in_rounds(SimConfig(), "not-a-policy") is False


def test_settings_are_the_effective_ones() -> None:
    s = _settings(SimConfig(compat="gavel", failures=FailureConfig(job_failure_rate=0.3)))
    assert s["preemption cost"].startswith("checkpoint 0 s + restore 0 s")
    assert s["failures"] == "off" and "gavel" in s["compatibility"]
    assert "in rounds of 360 s: fifo, hetero_srpt" in s["cadence"]


def test_report_lists_settings_and_explains_everything(
        results: list[SimResult], tmp_path: Path) -> None:
    settings = run_settings(results[0].config, POLICIES, trace="t", jobs=10, cluster="c",
                            throughputs="gavel")
    page = write_html_report(results, [], tmp_path / "r.html", "t", settings=settings
                             ).read_text()
    assert "<h2>Settings</h2>" in page
    assert "checkpoint 30 s + restore 30 s per preemption" in page
    for c in (*COLUMNS, *WAIT_COLUMNS):
        assert f"<dt>{c.header}</dt>" in page
    assert "<dt>★</dt>" in page and "<dt>JCT ÷ best</dt>" in page and "★" in page
    assert "<h2>Reading ρ</h2>" in page and "ideal time" in page
    assert "jobs under 10 min alone" in page
    assert "start wait</b> counts only the wait before a job's first run" in page


def test_report_without_settings_still_renders(results: list[SimResult],
                                               tmp_path: Path) -> None:
    page = write_html_report(results, [], tmp_path / "r.html", "t").read_text()
    assert "<h2>Settings</h2>" not in page and "<h2>Comparison</h2>" in page
    assert Setting("a", "b").value == "b"
