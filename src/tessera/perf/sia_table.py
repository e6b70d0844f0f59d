"""A throughput table from the Sia/Pollux profiles: T4, V100, A100 and RTX GPUs.

Gavel's table (:mod:`tessera.perf.profiles`) covers K80, P100 and V100 only, so on a modern
cluster (``sia-64``: Sia's T4 + RTX 2080 Ti + A100 setting; ``modern-mixed``: A100 + V100 + T4)
most GPUs would sit idle. The
Sia/Pollux profiles (:mod:`tessera.perf.sia`) measured six workloads on T4, V100, A100-40GB,
RTX 2080Ti and Quadro RTX 6000, at many placements and local batches. This module turns them
into the same :class:`~tessera.perf.profiles.ThroughputTable` the scheduler already reads:

* **job types** are ``"<model> (batch size <b>)"`` for every local batch b measured on one GPU
  of the reference flavor, V100 (``imagenet (batch size 40)``): b samples per GPU per step, so
  a gang's global batch grows with its size, as in Gavel's profiles. Other flavors measured a
  slightly different batch grid; their step time at b is interpolated linearly between their
  two nearest measured batches (step time is close to linear in the batch, see
  :mod:`tessera.perf.steptime`), never extrapolated: a batch above a flavor's largest
  measured one did not fit in its memory;
* **throughput** is in Gavel's unit, worker-steps per second summed over the gang
  (``N / step_time`` for N GPUs: every GPU finishes one local step per iteration), from the
  measured row: the
  *consolidated* value from the single-server placement (``"4"``), the *unconsolidated* one
  from the multi-server placement with the most servers (``"1111"`` before ``"22"``); rows
  measured twice (two files of one flavor) are averaged;
* a flavor that never ran a local batch has no entry for it (the batch did not fit in its
  memory), and gang sizes that were not measured are extrapolated by the table's usual,
  labelled rule; A100-80GB is answered from A100-40GB measurements (same chip, more memory),
  and V100-32GB from V100-16GB by the table's proxy rule;
* there are no co-location measurements.

``tessera simulate --throughputs sia`` selects it; the Sia trace reader then names each job by
its own application (``imagenet``) instead of the closest Gavel family.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from itertools import pairwise
from pathlib import Path

from tessera.errors import NoProfileError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import ThroughputTable
from tessera.perf.sia import load_sia_profile, sia_flavors, sia_models

#: Flavors answered from another flavor's Sia measurements (same chip, more memory).
SIA_TWINS: dict[str, str] = {"A100-80GB": "A100-40GB"}


def sia_job_type(model: str, local_bsz: int) -> str:
    """The job type of ``model`` at ``local_bsz`` samples per GPU."""
    return f"{model} (batch size {local_bsz})"


def _spread_key(placement: str) -> tuple[int, int]:
    """Order multi-server placements: most servers first, then the most even."""
    return (-len(placement), -min(int(c) for c in placement))


def interpolate_step_time(points: list[tuple[int, float]], b: float) -> float | None:
    """Step time at local batch ``b`` from sorted ``(batch, time)`` points, linear between the
    measured neighbours; ``None`` outside the measured range (above it: out of memory)."""
    if not points or b < points[0][0] or b > points[-1][0]:
        return None
    if points[0][0] == b:
        return points[0][1]
    for (b0, t0), (b1, t1) in pairwise(points):
        if b0 < b <= b1:
            return t0 + (t1 - t0) * (b - b0) / (b1 - b0)
    return None


def build_sia_throughputs(root: str | Path | None = None,
                          reference_flavor: str = "V100-16GB") -> ThroughputTable:
    """Build the table from the profiles under ``root`` (the bundled copy by default)."""
    ref = resolve_flavor(reference_flavor)
    isolated: dict[tuple[str, bool], dict[tuple[str, int], float]] = defaultdict(dict)
    for model in sia_models(root):
        try:
            ref_prof = load_sia_profile(model, ref, root)
        except NoProfileError:  # (gpt_pmp: a pipeline model measured on two flavors only)
            continue
        grid = sorted({b for p, b in zip(ref_prof.placement, ref_prof.local_bsz, strict=True)
                       if p == "1"})
        for flavor in sia_flavors(model, root):
            prof = load_sia_profile(model, flavor, root)
            times: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            for p, b, step in zip(prof.placement, prof.local_bsz, prof.step_time_s, strict=True):
                if step > 0:
                    times[p][b].append(step)
            spread: dict[int, str] = {}
            for p in times:
                n = sum(int(c) for c in p)
                if len(p) > 1 and (n not in spread or _spread_key(p) < _spread_key(spread[n])):
                    spread[n] = p
            short = flavor.short
            for p, by_b in times.items():
                gpus = sum(int(c) for c in p)
                if len(p) > 1 and spread[gpus] != p:
                    continue
                points = sorted((b, sum(ts) / len(ts)) for b, ts in by_b.items())
                for b in grid:
                    t = interpolate_step_time(points, b)
                    if t is not None and t > 0:
                        # N / step time: every GPU finishes one local step per iteration.
                        isolated[(short, len(p) == 1)][(sia_job_type(model, b), gpus)] = gpus / t
    for twin, source in SIA_TWINS.items():
        t_short, s_short = resolve_flavor(twin).short, resolve_flavor(source).short
        for cons in (True, False):
            if (s_short, cons) in isolated:
                isolated[(t_short, cons)] = dict(isolated[(s_short, cons)])
    label = "sia profiles (bundled)" if root is None else f"sia profiles ({root})"
    return ThroughputTable(label, dict(isolated), {}, reference_flavor=ref)


@cache
def sia_throughputs() -> ThroughputTable:
    """The table from the bundled Sia profiles, built once per process."""
    return build_sia_throughputs()
