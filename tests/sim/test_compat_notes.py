"""A setting a compat mode overrides is reported in the run's notes (issue 31).

``--compat gavel`` runs Gavel's 360 s rounds with free swaps whatever ``--round-s``,
``--checkpoint-s`` and ``--restore-s`` say; the run's notes (printed by ``simulate``, in
``--json`` and in the report) now say so instead of overwriting them silently.
"""

from __future__ import annotations

from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import FailureConfig, SimConfig
from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload


def test_compat_gavel_reports_the_round_it_overrode() -> None:
    cfg = SimConfig(compat="gavel", compat_solver="highs",
                    scheduler=SchedulerSettings(round_s=60.0, checkpoint_s=10.0),
                    failures=FailureConfig(job_failure_rate=0.5))
    w = make_workload(make_job("a", steps=1000), make_job("b", steps=3000, submit_s=5))
    r = simulate(w, make_cluster().node("v100", gpus=2).build(), "fifo", cfg)
    [note] = [n for n in r.notes if n.startswith("--compat gavel overrides")]
    assert "--round-s 60 → 360" in note and "--checkpoint-s 10 → 0" in note
    assert "--restore-s 30 → 0" in note and "failures off" in note
    assert note in r.as_dict()["notes"]  # type: ignore[operator]


def test_no_compat_no_override_note() -> None:
    assert SimConfig(scheduler=SchedulerSettings(round_s=60.0)).compat_overrides() == ()
    w = make_workload(make_job("a", steps=1000))
    r = simulate(w, make_cluster().node("v100", gpus=1).build(), "fifo")
    assert not any("overrides" in n for n in r.notes)
