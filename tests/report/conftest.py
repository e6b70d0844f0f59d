"""Two small runs to report on: an event-driven and a round-based policy."""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult
from tests.builders import RESNET, make_cluster, make_job, make_workload

V100 = default_throughputs().throughput(RESNET, resolve_flavor("v100"))


@pytest.fixture(scope="session")
def results() -> list[SimResult]:
    """fifo (events) and hetero_srpt (rounds of 360 s) on 8 V100s and 2 K80s, with room for
    every job: short jobs of a minute and long ones of an hour."""
    c = make_cluster().node("v100", gpus=8).node("k80", gpus=2).build()
    jobs = [make_job(f"j{i}", steps=V100 * (60 if i % 2 else 3600), submit_s=100.0 * i)
            for i in range(10)]
    w = make_workload(*jobs)
    return [simulate(w, c, "fifo"), simulate(w, c, "hetero_srpt")]
