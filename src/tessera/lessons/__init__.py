"""The Philly study's lessons (Jeon et al., ATC'19) replayed in the simulator.

* :mod:`.locality` -- how long a gang should wait for one node before it is split: queueing
  delay against GPU efficiency (split gangs run at the profiles' unconsolidated speed).
* :mod:`.failures` -- GPU-hours lost to failures, with and without pre-run validation of big
  gangs on one GPU.

Both run the ordinary simulator (one decision core) with different settings, and write a CSV,
a PNG and a table. ``docs/lessons.md`` has the parameters, their sources and measured figures.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import Workload


def compress_arrivals(workload: Workload, factor: float) -> Workload:
    """Divide every submission time by ``factor`` (> 1 raises the offered load)."""
    if factor == 1.0:
        return workload
    jobs = tuple(replace(j, submit_time_s=j.submit_time_s / factor) for j in workload.jobs)
    return replace(workload, name=f"{workload.name}×{factor:g}", jobs=jobs)
