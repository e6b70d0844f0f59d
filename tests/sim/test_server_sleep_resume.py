"""Review of server sleep (:mod:`tessera.sim.server_sleep`): every job started on a server
that is still resuming waits for the same boot, not only the first one to wake it."""

from __future__ import annotations

import pytest

from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload
from tests.sim.test_server_sleep import RATE, _cfg


def _finishes(b_submit_s: float) -> tuple[float, float]:
    """One 2-GPU server, idle from 10 s, suspended from 610 s (a boot takes 300 s); job ``a``
    (1 GPU, 200 s) wakes it at 1,000 s, job ``b`` (the same) arrives at ``b_submit_s``."""
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("z", steps=RATE * 10),
                      make_job("a", steps=RATE * 200, submit_s=1000),
                      make_job("b", steps=RATE * 200, submit_s=b_submit_s))
    r = simulate(w, c, "fifo", _cfg(suspend_after_s=600, resume_s=300, off_power_w=0))
    return r.jobs[1].finish_s, r.jobs[2].finish_s


def test_two_jobs_started_on_one_suspended_server_both_wait_for_its_resume() -> None:
    # Both start together at 1,000 s: the server boots once (up at 1,300 s), for both.
    a_s, b_s = _finishes(1000)
    assert a_s == pytest.approx(1500.0)
    assert b_s == pytest.approx(1500.0)  # was 1,200: it ran on a server still off


def test_a_job_started_while_its_server_resumes_waits_the_rest_of_the_boot() -> None:
    # The second job is placed at 1,100 s, during the boot: it progresses from 1,300 s.
    a_s, b_s = _finishes(1100)
    assert a_s == pytest.approx(1500.0)
    assert b_s == pytest.approx(1500.0)  # was 1,300
