"""The ``tessera`` entry point: every command is wired, errors exit with status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ["simulate", "demo", "traces", "policies", "analyze", "plan", "train", "share",
            "serve", "submit", "jobs", "explain", "lessons", "export"]


def _tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from tessera.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


def test_help_lists_every_command() -> None:
    out = _tessera("--help")
    assert out.returncode == 0
    for cmd in COMMANDS:
        assert cmd in out.stdout, cmd


@pytest.mark.parametrize(
    ("args", "message"),
    [(["simulate", "-t", "/no/such/trace"], "no trace file"),
     (["simulate", "-t", "philly", "-p", "fofo"], "unknown policy"),
     (["simulate", "-t", "philly", "-p", "fifo,hetero_pack:min_gian=1"],
      "unknown option 'min_gian'"),
     (["policies", "fofo"], "unknown policy 'fofo'"),
     (["simulate", "-t", "philly", "-c", "zz:4"], "unknown GPU flavor"),
     (["simulate", "-t", "philly", "--throughputs", "nope"], "built-in tables: gavel, sia"),
     (["simulate", "--no-such-flag"], "No such option"),
     (["simulate", "-t", "philly", "--mode", "bogus"], "Invalid value for --mode"),
     (["serve", "--round-s", "-1"], "Invalid value for --round-s")],
    ids=["missing-trace", "bad-policy", "bad-policy-option", "options-of-unknown-policy",
         "bad-flavor", "bad-throughputs", "usage",
         "bad-scheduler-setting", "bad-serve-setting"],
)
def test_errors_exit_2_with_one_clear_line(args: list[str], message: str) -> None:
    out = _tessera(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_policies_lists_registered_policies() -> None:
    out = _tessera("policies")
    assert out.returncode == 0
    for name in ("fifo", "las", "max_min_fairness", "finish_time_fairness", "hetero_srpt"):
        assert name in out.stdout


def test_policies_name_lists_that_policys_options() -> None:
    out = _tessera("policies", "hetero_pack")
    assert out.returncode == 0
    for option in ("short_first", "min_gain", "prior_minutes"):
        assert option in out.stdout
    assert "hetero_pack:option=value" in out.stdout


def test_simulate_and_serve_share_the_scheduler_flags() -> None:
    """Both commands take every SchedulerSettings field as a flag, with the same help."""
    from tessera.sched.core.settings import SchedulerSettings

    sim, serve = _tessera("simulate", "--help"), _tessera("serve", "--help")
    for name in SchedulerSettings.model_fields:
        flag = "--" + name.replace("_", "-")
        assert flag[:18] in sim.stdout and flag[:18] in serve.stdout, flag
