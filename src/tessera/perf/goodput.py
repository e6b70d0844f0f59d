"""Goodput: useful training progress per second, the quantity Pollux and Sia schedule by.

*Throughput* is samples processed per second; *statistical efficiency*
(:mod:`tessera.perf.efficiency`) is how much each sample is worth at the batch it was processed
at, relative to the job's initial batch. Their product is **goodput**, in samples-at-the-initial-
batch's-efficiency per second: the rate at which the job approaches its target. A scheduler that
gives a job more GPUs can raise its batch (more throughput) at the cost of efficiency, or keep
the batch and pay more synchronisation; goodput is what says which is better.

A job's *configuration* here is a GPU flavor, a placement (GPUs per server, ``(4, 4)`` = two
servers of four) and a global batch. The global batch ``M`` is split over the ``N`` GPUs and,
when the per-GPU share does not fit in memory, over ``k`` passes of **gradient accumulation**::

    micro-batch b = M / (N k),  k = ceil(M / (N × largest measured local batch))
    iteration time = k × (step_time(b) - sync_time(b)) + sync_time(b)

(each pass computes, gradients are synchronised once per iteration). The largest local batch
the Sia/Pollux profiles measured on a flavor is the one known to fit its memory; accumulation is
what lets bert and yolov3 keep their large batches on the 11-16 GB GPUs. Step and sync times come
from the measured placement (:mod:`tessera.perf.sia`), interpolated linearly between measured
local batches and never extrapolated.

**Placements that were not measured** (more than 16 GPUs, or servers laid out as no placement
file has them, e.g. 24 T4s on six servers) are answered as Sia's simulator answers them
(``Application.get_throughput`` in Sia's ``applications.py``): linear interpolation over
``(servers, GPUs, local batch)`` between the placement rows (averaged per servers and GPUs) and
the *scalability* files, which measured gangs of up to 64 T4s on 16 servers, 24 RTX 2080 Tis on
3 and 16 A100s on 2 (:class:`ScaledSteps`, SciPy's ``LinearNDInterpolator``, as Sia). The local
batches tried there are those the scalability rows measured on at least as many servers and
GPUs (Sia's ``get_max_local_bsz``); outside the measured hull there is no answer.

The **best batch** for a configuration maximises goodput over the global batches between the
initial and the largest profiled one. The candidates are the batches ``N × k × b`` whose split
uses a measured micro-batch ``b`` with ``k`` the fewest passes that fit, plus the range's two
ends: where the step-time interpolation is exact; between two measured batches goodput is
smooth, so this is a fine grid (a search, not a closed form: Pollux optimises the same
function numerically).

>>> est = best_batch("cifar10", resolve_flavor("V100"), (4,), progress_samples=0.0)
>>> est.config.accumulation_steps, est.efficiency <= 1.0
(1, True)
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.interpolate import LinearNDInterpolator

from tessera.errors import NoProfileError, SpecError, TraceFormatError
from tessera.model.gpus import GpuFlavor
from tessera.perf.efficiency import EfficiencyProfile, load_efficiency
from tessera.perf.goodput_fit import EfficiencyFn
from tessera.perf.sia import SIA_SUFFIX_FLAVOR, load_sia_profile, model_dir
from tessera.perf.sia_table import interpolate_step_time

Placement = tuple[int, ...]
"""GPUs used on each server, e.g. ``(8, 4)``: 12 GPUs on two servers."""


def packed_placement(num_gpus: int, gpus_per_node: int) -> Placement:
    """``num_gpus`` on as few servers of ``gpus_per_node`` as possible (``12, 8 → (8, 4)``)."""
    if num_gpus < 1 or gpus_per_node < 1:
        raise SpecError(f"cannot place {num_gpus} GPUs on servers of {gpus_per_node}")
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def _key(placement: Placement | str) -> str:
    """Placement key, independent of server order: ``(4, 8)`` and ``"84"`` are both ``"48"``."""
    digits = [str(g) for g in placement] if not isinstance(placement, str) else list(placement)
    return "".join(sorted(digits))


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """How a global batch is executed on ``N`` GPUs.

    Attributes:
        global_batch_samples: samples per iteration over the whole gang (``M``).
        local_batch_samples: samples per GPU per pass (the micro-batch ``b``).
        accumulation_steps: passes per iteration (``k``; 1 = no accumulation).
    """

    global_batch_samples: float
    local_batch_samples: float
    accumulation_steps: int


@dataclass(frozen=True, slots=True)
class GoodputEstimate:
    """One configuration's speed.

    Attributes:
        config: the batch split.
        iteration_time_s: seconds per training iteration (all passes and the synchronisation).
        throughput_samples_per_s: ``M / iteration_time_s``.
        efficiency: statistical efficiency of ``M`` relative to the initial batch, in (0, 1].
        goodput_samples_per_s: ``throughput × efficiency``: progress per second.
    """

    config: BatchConfig
    iteration_time_s: float
    throughput_samples_per_s: float
    efficiency: float
    goodput_samples_per_s: float


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Measured step and sync time per placement and local batch, for one model on one flavor.

    Attributes:
        model: Sia's model name.
        flavor: the GPU flavor measured.
        points: per placement key, ``(local_bsz, step_time_s, sync_time_s)`` sorted by batch
            (rows measured twice are averaged).
    """

    model: str
    flavor: GpuFlavor
    points: dict[str, tuple[tuple[int, float, float], ...]]
    scaled: ScaledSteps | None = None

    def _points(self, placement: Placement) -> tuple[tuple[int, float, float], ...]:
        key = _key(placement)
        got = self.points.get(key)
        if got is None and self.scaled is not None:
            got = self.scaled.points(placement)
        if not got:
            have = sorted({sum(int(c) for c in k) for k in self.points})
            raise NoProfileError(
                f"{self.model} on {self.flavor.short}: placement {list(placement)} was never "
                f"measured (measured gang sizes: {have[0]}-{have[-1]}"
                f"{'' if self.scaled is None else ', beyond them the scalability rows'})"
            )
        return got

    def local_batch_range(self, placement: Placement) -> tuple[int, int]:
        """Smallest and largest measured local batch at ``placement`` (the largest fits memory)."""
        pts = self._points(placement)
        return pts[0][0], pts[-1][0]

    def measured_local_batches(self, placement: Placement) -> tuple[int, ...]:
        return tuple(p[0] for p in self._points(placement))

    def step_and_sync_s(self, placement: Placement, local_batch: float) -> tuple[float, float]:
        """``(step_time_s, sync_time_s)`` at a local batch, linear between measured batches.

        Raises:
            SpecError: ``local_batch`` is outside the measured range at this placement.
        """
        pts = self._points(placement)
        step = interpolate_step_time([(b, s) for b, s, _ in pts], local_batch)
        sync = interpolate_step_time([(b, y) for b, _, y in pts], local_batch)
        if step is None or sync is None:
            lo, hi = pts[0][0], pts[-1][0]
            raise SpecError(
                f"{self.model} on {self.flavor.short}: local batch {local_batch:g} outside the "
                f"measured range {lo}-{hi} at placement {list(placement)}"
            )
        return step, sync

    def batch_config(self, placement: Placement, global_batch: float) -> BatchConfig:
        """Split ``global_batch`` over the placement, accumulating when a GPU's share is too big.

        Raises:
            SpecError: the batch is too small to give every GPU the smallest measured share.
        """
        n = sum(placement)
        lo, hi = self.local_batch_range(placement)
        k = max(1, math.ceil(global_batch / (n * hi) - 1e-9))
        local = global_batch / (n * k)
        if local < lo - 1e-9:
            raise SpecError(
                f"{self.model} on {self.flavor.short}: global batch {global_batch:g} on {n} GPUs "
                f"is {local:g} samples per GPU, below the smallest measured local batch {lo}"
            )
        return BatchConfig(global_batch, max(local, float(lo)), k)

    def iteration_time_s(self, placement: Placement, config: BatchConfig) -> float:
        """``k × compute + sync``: one iteration with ``k`` accumulation passes."""
        step, sync = self.step_and_sync_s(placement, config.local_batch_samples)
        return config.accumulation_steps * (step - sync) + sync


ScaleRow = tuple[int, int, int, float, float]
"""One measured ``(servers, GPUs, local batch, step time s, sync time s)``."""


@dataclass(frozen=True, slots=True)
class ScaledSteps:
    """Step and sync times of placements no placement file measured, as Sia's simulator
    computes them (module doc): linear over ``(servers, GPUs, local batch)`` between the
    placement rows, averaged per ``(servers, GPUs, local batch)``, and the scalability rows.

    Attributes:
        cloud: the interpolation's data points.
        scalability: the scalability rows alone (they say which local batches fit).
    """

    cloud: tuple[ScaleRow, ...]
    scalability: tuple[ScaleRow, ...]
    _memo: dict[tuple[int, int], tuple[tuple[int, float, float], ...]] = field(
        default_factory=dict, compare=False, repr=False)
    _interp: list[LinearNDInterpolator] = field(default_factory=list, compare=False, repr=False)

    def points(self, placement: Placement) -> tuple[tuple[int, float, float], ...]:
        """``(local batch, step s, sync s)`` at ``placement`` for each local batch the
        scalability rows measured on at least as many servers and GPUs, inside the measured
        hull (empty: no answer)."""
        nodes, gpus = sum(1 for g in placement if g), sum(placement)
        got = self._memo.get((nodes, gpus))
        if got is None:
            batches = sorted({b for n, r, b, _s, _y in self.scalability
                              if n >= nodes and r >= gpus})
            out = []
            if batches and self.cloud:
                if not self._interp:
                    xs = np.asarray([row[:3] for row in self.cloud], dtype=float)
                    ys = np.asarray([row[3:] for row in self.cloud], dtype=float)
                    self._interp.append(LinearNDInterpolator(xs, ys))
                # Sia caps the servers at 16, the most its scalability rows measured.
                at = np.asarray([(min(nodes, 16), gpus, b) for b in batches], dtype=float)
                for b, (step, sync) in zip(batches, self._interp[0](at), strict=True):
                    if math.isfinite(step) and math.isfinite(sync) and step > 0:
                        out.append((b, float(step), float(sync)))
            got = self._memo[(nodes, gpus)] = tuple(out)
        return got


def load_step_times(model: str, flavor: GpuFlavor,
                    root: str | Path | None = None) -> StepTimes:
    """The placement profiles of ``model`` on ``flavor`` as :class:`StepTimes` (cached), with
    its scalability rows for placements beyond them (:class:`ScaledSteps`)."""
    return _step_times(model, flavor, None if root is None else str(root))


@lru_cache(maxsize=128)
def _step_times(model: str, flavor: GpuFlavor, root: str | None) -> StepTimes:
    prof = load_sia_profile(model, flavor, root)
    acc: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    grouped: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
    for p, b, st, sy in zip(prof.placement, prof.local_bsz, prof.step_time_s, prof.sync_time_s,
                            strict=True):
        if st > 0:
            acc[_key(p)][b].append((st, sy))
            grouped[(len(p), sum(int(c) for c in p), b)].append((st, sy))
    points = {
        key: tuple(
            (b, sum(s for s, _ in v) / len(v), sum(y for _, y in v) / len(v))
            for b, v in sorted(by_b.items())
        )
        for key, by_b in acc.items()
    }
    scale = _scalability_rows(model, flavor, root)
    cloud = tuple((n, r, b, sum(s for s, _ in v) / len(v), sum(y for _, y in v) / len(v))
                  for (n, r, b), v in sorted(grouped.items())) + scale
    return StepTimes(model, prof.flavor, points, ScaledSteps(cloud, scale) if scale else None)


def _scalability_rows(model: str, flavor: GpuFlavor, root: str | None) -> tuple[ScaleRow, ...]:
    """The rows of ``model``'s ``scalability-<suffix>.csv`` files of ``flavor`` (columns
    read by header; rows with a non-positive step time skipped, as for placements)."""
    out: list[ScaleRow] = []
    for f in sorted(model_dir(model, root).iterdir(), key=lambda f: f.name):
        name = f.name
        if not (name.startswith("scalability-") and name.endswith(".csv")):
            continue
        suffix = name[len("scalability-"):-len(".csv")]
        if SIA_SUFFIX_FLAVOR.get(suffix) != flavor:
            continue
        for line, row in enumerate(csv.DictReader(f.read_text().splitlines()), start=2):
            try:
                n, g, b = (float(row[c]) for c in ("num_nodes", "num_replicas", "local_bsz"))
                if not (n.is_integer() and g.is_integer() and b.is_integer()):
                    raise ValueError(f"servers, GPUs and local batch must be whole: {n}, {g}, {b}")
                r = (int(n), int(g), int(b), float(row["step_time"]), float(row["sync_time"]))
            except (KeyError, ValueError, TypeError) as e:
                raise TraceFormatError(f"{model}/{name}", line, None,
                                       f"bad scalability row: {e}") from None
            if r[3] > 0:
                out.append(r)
    return tuple(out)


def estimate(times: StepTimes, efficiency: EfficiencyProfile, placement: Placement,
             global_batch: float, progress_samples: float) -> GoodputEstimate:
    """Throughput, efficiency and goodput of one configuration at one point of training."""
    efficiency.check_batch(global_batch)
    config = times.batch_config(placement, global_batch)
    t = times.iteration_time_s(placement, config)
    tput = global_batch / t
    eff = efficiency.efficiency(global_batch, progress_samples)
    return GoodputEstimate(config, t, tput, eff, tput * eff)


def goodput(model: str, flavor: GpuFlavor, placement: Placement, global_batch: float,
            progress_samples: float, root: str | Path | None = None) -> GoodputEstimate:
    """:func:`estimate` for a model by name, from the bundled profiles by default."""
    return estimate(load_step_times(model, flavor, root), load_efficiency(model, root),
                    placement, global_batch, progress_samples)


def candidate_batches(times: StepTimes, placement: Placement, min_batch: float,
                      max_batch: float) -> tuple[float, ...]:
    """Global batches worth evaluating in ``[min_batch, max_batch]`` (see the module doc)."""
    n = sum(placement)
    measured = times.measured_local_batches(placement)
    out = {float(min_batch), float(max_batch)}
    k = 1
    while n * k * measured[0] <= max_batch:
        # Only splits that use k passes because k - 1 would not fit (the split batch_config
        # makes), so each candidate's micro-batch is a measured one.
        out.update(float(n * k * b) for b in measured
                   if min_batch <= n * k * b <= max_batch and b * k > measured[-1] * (k - 1))
        k += 1
    return tuple(sorted(out))


def best_batch(model: str, flavor: GpuFlavor, placement: Placement,
               progress_samples: float, max_batch: float | None = None,
               root: str | Path | None = None, min_batch: float | None = None,
               ) -> GoodputEstimate:
    """The global batch with the highest goodput on this configuration, and its estimate.

    ``min_batch`` and ``max_batch`` bound the search (a job's declared initial and maximum
    batch, ``ElasticRange``; default: the model's reference and largest profiled batch). The
    smallest batch searched is also at least the one that gives every GPU its smallest
    measured share.

    Raises:
        SpecError: no batch in range can be run on this many GPUs, or ``max_batch`` is outside
            the profiled range.
        NoProfileError / NoEfficiencyDataError: the model, flavor or placement was not measured.
    """
    eff = load_efficiency(model, root)
    return best_of(batch_options(model, flavor, placement, max_batch, root, min_batch), eff,
                   progress_samples)


@dataclass(frozen=True, slots=True)
class BatchOption:
    """One candidate global batch on one configuration, with its speed (independent of
    progress: only the efficiency changes as training advances)."""

    config: BatchConfig
    iteration_time_s: float


def batch_options(model: str, flavor: GpuFlavor, placement: Placement,
                  max_batch: float | None = None, root: str | Path | None = None,
                  min_batch: float | None = None) -> tuple[BatchOption, ...]:
    """The batches :func:`best_batch` weighs on this configuration, with their iteration times
    (computed once per configuration; :func:`best_of` picks among them at any progress).

    Raises: as :func:`best_batch`.
    """
    times = load_step_times(model, flavor, root)
    eff = load_efficiency(model, root)
    top = eff.max_batch_samples if max_batch is None else max_batch
    low = eff.initial_batch_samples if min_batch is None else min_batch
    eff.check_batch(top)
    eff.check_batch(low)
    lo_local, _ = times.local_batch_range(placement)
    bottom = max(low, sum(placement) * lo_local)
    if bottom > top:
        raise SpecError(
            f"{model} on {sum(placement)} {times.flavor.short} GPUs needs a global batch of at "
            f"least {bottom} ({lo_local} per GPU), above the maximum {top:g}"
        )
    out = []
    for m in candidate_batches(times, placement, bottom, top):
        config = times.batch_config(placement, m)
        out.append(BatchOption(config, times.iteration_time_s(placement, config)))
    return tuple(out)


def best_of(options: tuple[BatchOption, ...], efficiency: EfficiencyFn,
            progress_samples: float) -> GoodputEstimate:
    """The option with the highest goodput at ``progress_samples`` (the first among equals)."""
    best: GoodputEstimate | None = None
    for o in options:
        m = o.config.global_batch_samples
        tput = m / o.iteration_time_s
        e = efficiency.efficiency(m, progress_samples)
        if best is None or tput * e > best.goodput_samples_per_s:
            best = GoodputEstimate(o.config, o.iteration_time_s, tput, e, tput * e)
    assert best is not None  # the range's two ends are always candidates
    return best
