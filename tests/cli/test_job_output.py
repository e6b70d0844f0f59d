"""``tessera job`` in words: local ISO times, readable spans, no ``None``, flavors as text."""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from typing import Any

import pytest

from tessera.cli.job_text import flavors_text, human_span, job_lines, local_time

SUBMIT_S = 1796131929.650


def _job(**changes: Any) -> dict[str, Any]:
    job = {
        "job_id": "j-1a2b3c4d5e", "name": "train", "queue": "team-a", "state": "succeeded",
        "final": True, "gpus": 4, "flavors": ["A100-80GB", "V100"], "priority": 1.0,
        "max_retries": 2, "attempts": 1, "runs": 1, "command": ["python", "train.py"],
        "model": None, "job_type": None, "requires_locality": True,
        "submitted_s": SUBMIT_S, "started_s": SUBMIT_S + 3.2, "finished_s": SUBMIT_S + 3723.0,
        "reason": "", "exit_code": 0, "placement": None,
        "events": [
            {"ts_s": SUBMIT_S, "kind": "transition", "from": None, "to": "pending",
             "detail": "submitted by a"},
            {"ts_s": SUBMIT_S + 3.2, "kind": "transition", "from": "pending", "to": "admitted",
             "detail": ""},
            {"ts_s": SUBMIT_S + 4.0, "kind": "launch", "from": None, "to": None,
             "detail": "run 1"},
        ],
    }
    job.update(changes)
    return job


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (42.4, "42s"), (307, "5m 07s"), (3723, "1h 02m"), (3 * 86400 + 4 * 3600, "3d 04h"),
    (-5, "0s"),
])
def test_human_span(seconds: float, text: str) -> None:
    assert human_span(seconds) == text


def test_local_time_is_iso_8601_in_the_local_zone() -> None:
    text = local_time(SUBMIT_S)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", text)
    assert datetime.fromisoformat(text).timestamp() == pytest.approx(SUBMIT_S, abs=1)


def test_flavors_as_text() -> None:
    assert flavors_text([]) == "any"
    assert flavors_text(["T4"]) == "T4"
    assert flavors_text(["A100-80GB", "V100"]).startswith("A100-80GB, V100")


def test_finished_job_has_no_raw_values() -> None:
    text = "\n".join(job_lines(_job(), now_s=SUBMIT_S + 9999))
    assert "None" not in text and "[" not in text and "1796131929" not in text
    assert "placement" not in text  # finished and no longer placed: nothing to say
    assert f"started: {local_time(SUBMIT_S + 3.2)} (waited 3s)" in text
    assert f"finished: {local_time(SUBMIT_S + 3723.0)} (ran 1h 02m)" in text
    assert "request: 4 GPU(s) of A100-80GB, V100" in text
    assert "command: python train.py" in text and "exit code: 0" in text
    assert f"{local_time(SUBMIT_S)}  → pending  submitted by a" in text
    assert "pending → admitted" in text and "launch  run 1" in text


def test_waiting_job_says_not_placed_and_how_long() -> None:
    job = _job(state="pending", final=False, started_s=None, finished_s=None, exit_code=None,
               reason="needs 4 GPUs of T4", flavors=[], events=[])
    lines = job_lines(job, now_s=SUBMIT_S + 125)
    text = "\n".join(lines)
    assert "placement: not placed" in text and "reason: needs 4 GPUs of T4" in text
    assert "waiting: 2m 05s" in text and "of any" in text
    assert "exit code" not in text and "started" not in text and "events" not in text


def test_running_job_shows_placement_and_run_time() -> None:
    job = _job(state="running", final=False, finished_s=None, exit_code=None,
               placement="4×A100-80GB: 4 GPUs on node a100-80gb-0000")
    text = "\n".join(job_lines(job, now_s=SUBMIT_S + 3.2 + 90))
    assert "placement: 4×A100-80GB: 4 GPUs on node a100-80gb-0000" in text
    assert "running: 1m 30s since its first start" in text


def test_command_keeps_its_quotes() -> None:
    """A shell command shows as one pastable line, not as loose words (issue 31)."""
    job = _job(command=["sh", "-c", 'printf "%s done\\n" "$NAME"', "--", "a b", ""])
    line = next(x for x in job_lines(job, now_s=SUBMIT_S + 9999) if "command:" in x)
    shown = line.split("command: ", 1)[1]
    assert shown == """sh -c 'printf "%s done\\n" "$NAME"' -- 'a b' ''"""
    assert shlex.split(shown) == job["command"]


def test_quoted_command_is_still_terminal_safe() -> None:
    job = _job(command=["echo", "\x1b[2Jgone", "two\nlines"])
    line = next(x for x in job_lines(job, now_s=SUBMIT_S + 9999) if "command:" in x)
    assert "\x1b" not in line and "\n" not in line
    assert line.endswith("command: echo '\\x1b[2Jgone' 'two\\x0alines'")


def test_runs_and_failed_runs_are_told_apart() -> None:
    """``attempts`` counts failed runs (what retries use up): a job that ran once and
    succeeded reads "runs 1; failed 0", not "attempts: 0 ... runs 1"."""
    text = "\n".join(job_lines(_job(attempts=0, runs=1), now_s=SUBMIT_S + 9999))
    assert re.search(r"runs: 1; failed 0 \(retries allowed: 2\)", text)
    assert "attempts" not in text


def test_a_job_that_never_ran_shows_no_log_retention() -> None:
    """A job cancelled before it ran has no logs, so no "kept until ... after the job
    finished" line."""
    never = _job(state="cancelled", runs=0, attempts=0, started_s=None, exit_code=None,
                 log_retention_s=7 * 86400.0, logs_removed_s=SUBMIT_S + 7 * 86400.0)
    text = "\n".join(job_lines(never, now_s=SUBMIT_S + 60))
    assert "kept until" not in text and "logs" not in text
    ran = _job(log_retention_s=7 * 86400.0, logs_removed_s=SUBMIT_S + 7 * 86400.0)
    assert "kept until" in "\n".join(job_lines(ran, now_s=SUBMIT_S + 60))
