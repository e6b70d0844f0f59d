"""What an elastic job would achieve on each configuration: the numbers elastic policies weigh.

A *configuration* is a flavor and a GPU count (:class:`Config`). For an elastic job at its
current point of training, :class:`GoodputModel` answers "what goodput on ``n`` GPUs of flavor
``f``, at the best batch for them?" from the measured Sia/Pollux profiles
(:func:`tessera.perf.goodput.best_batch`): the gang packed on as few servers of ``f`` as the
cluster has, the batch searched between the job's initial and maximum batch, gradient
accumulation where a GPU's share does not fit. The simulator asks the same model how fast a
running elastic job progresses, so a policy is never judged by numbers it could not see.

**Progress.** A job's progress is counted in Pollux's units, samples at the efficiency of the
model's reference batch ``M0`` (``ElasticRange.target_samples`` of them to finish). The
simulator keeps a job's work in ``spec.total_steps`` like any job's, so progress is the same
fraction of the target: ``progress = target × (1 − remaining_steps / total_steps)``, and a
goodput of ``g`` samples/s is ``g × total_steps / target`` steps/s.

**Caching.** Statistical efficiency depends on progress only through the epoch under way in
each validation curve (the gradient statistics are per epoch), so an estimate is cached under
the tuple of those epoch indices: exact, and a job's estimates are recomputed about once per
epoch of training, not once per round.

**Reported noise scale (Pollux's agent).** A job that reports its gradient noise scale
(``JobView.noise_scale_samples``) is valued with Pollux's closed form from that value
(:class:`tessera.perf.goodput_fit.GnsEfficiency`) instead of the table's curves; its
estimates are cached under the value to 3 significant digits
(:func:`~tessera.perf.goodput_fit.quantize_gns`) instead of the epochs. The throughput half
comes from the job's fitted throughput model on a flavor where it has one
(``JobView.step_fits``, :func:`tessera.perf.goodput_fit.fit_throughput`), else from the
measured step times; :meth:`GoodputModel.steps_per_s` (what the simulator progresses a job by)
always reads the table: the truth.

**Restart costs.** Sia's artifact has two tables, and both are kept apart here:
:data:`RESTART_S` is the restart penalty Sia's *policy* assumes when it damps a
re-allocation (``get_restart_penalty`` in its ``sia.py``), :data:`RESCALE_S` what its
*simulator* charges a job for each start, resize or migration (``Application.rescale_time`` in
its ``applications.py``): cifar10 50 s and yolov3 80 s there against 30 s and 45 s in the
policy, the other models the same (Jayaram Subramanya et al., SOSP'23).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from tessera.errors import NoProfileError, SpecError
from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ElasticRange, JobSpec
from tessera.perf.efficiency import load_efficiency
from tessera.perf.goodput import (
    BatchOption,
    GoodputEstimate,
    batch_options,
    best_of,
    packed_placement,
)
from tessera.perf.goodput_fit import (
    GnsEfficiency,
    StepFits,
    ThroughputParams,
    fit_on,
    quantize_gns,
)
from tessera.sched.core.snapshot import JobView, Placement

RESTART_S: Mapping[str, float] = {
    "cifar10": 30.0,
    "deepspeech2": 25.0,
    "bert": 120.0,
    "yolov3": 45.0,
    "imagenet": 250.0,
}
"""Checkpoint + restore seconds per model that Sia's policy assumes in its re-allocation
damping, measured on its cluster (other models: 30 s)."""

RESCALE_S: Mapping[str, float] = {
    "cifar10": 50.0,
    "deepspeech2": 25.0,
    "bert": 120.0,
    "yolov3": 80.0,
    "imagenet": 250.0,
    "ncf": 15.0,
}
"""Checkpoint + restore seconds per model that Sia's simulator charges an elastic job for each
start, resize or migration (other models: 30 s)."""

DEFAULT_RESTART_S = 30.0


def restart_s(elastic: ElasticRange) -> float:
    """The restart a policy assumes one resize or migration of this model costs (s)."""
    return RESTART_S.get(elastic.efficiency_model, DEFAULT_RESTART_S)


def rescale_s(elastic: ElasticRange) -> float:
    """What one start, resize or migration of a job of this model costs in the simulator (s)."""
    return RESCALE_S.get(elastic.efficiency_model, DEFAULT_RESTART_S)


@dataclass(frozen=True, slots=True)
class Config:
    """A flavor and a GPU count an elastic job may be given.

    Attributes:
        flavor: the flavor (as in ``Placement.flavor``).
        num_gpus: GPUs of the gang.
        gpus_per_node: GPUs per server of that flavor (the gang is packed on such servers).
    """

    flavor: GpuFlavor
    num_gpus: int
    gpus_per_node: int

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.num_gpus / self.gpus_per_node)


def flavor_nodes(nodes: tuple[Node, ...]) -> dict[GpuFlavor, tuple[int, int]]:
    """``flavor -> (servers, GPUs per server)`` of the largest servers of each."""
    by: dict[GpuFlavor, list[int]] = {}
    for n in nodes:
        by.setdefault(n.flavor, []).append(n.gpus)
    return {f: (len(g), max(g)) for f, g in by.items()}


@lru_cache(maxsize=64)
def sia_configs(nodes: tuple[Node, ...], max_gpus: int | None = None) -> tuple[Config, ...]:
    """Sia's configuration set: on servers of ``G`` GPUs, 1, 2, 4 … GPUs (powers of two below
    ``G``) on one server, then whole servers, ``G``, ``2G`` … up to the flavor's servers.
    (Cached: the same servers give the same tuple object, round after round.)"""
    out: list[Config] = []
    for fl, (count, per) in flavor_nodes(nodes).items():
        sizes = [1 << k for k in range(per.bit_length()) if (1 << k) < per]
        sizes += [per * k for k in range(1, count + 1)]
        out += [Config(fl, n, per) for n in sizes if max_gpus is None or n <= max_gpus]
    return tuple(out)


@lru_cache(maxsize=64)
def all_counts_configs(nodes: tuple[Node, ...], max_gpus: int) -> tuple[Config, ...]:
    """Every GPU count from 1 to ``max_gpus`` on every flavor (Pollux allocates replicas one by
    one), capped at each flavor's GPUs. (Cached as :func:`sia_configs` is.)"""
    out: list[Config] = []
    for fl, (count, per) in flavor_nodes(nodes).items():
        out += [Config(fl, n, per) for n in range(1, min(max_gpus, count * per) + 1)]
    return tuple(out)


def progress_samples(view: JobView, now_s: float) -> float:
    """Statistical progress of an elastic job at ``now_s`` (samples at ``M0``'s efficiency)."""
    e = view.spec.elastic
    assert e is not None
    done = 1.0 - view.remaining_at(now_s) / view.spec.total_steps
    return e.target_samples * min(max(done, 0.0), 1.0)


class GoodputModel:
    """Goodput per configuration of elastic jobs, from the bundled profiles (cached; see the
    module docstring). One per policy or simulation; not shared between threads."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, GpuFlavor, tuple[int, ...], int, int, tuple[float, ...],
                                ThroughputParams | None], GoodputEstimate | None] = {}
        self._options: dict[tuple[str, GpuFlavor, tuple[int, ...], int, int],
                            tuple[BatchOption, ...] | None] = {}
        self._epochs: dict[tuple[str, float], tuple[int, ...]] = {}
        self._rows: dict[tuple[ElasticRange, tuple[GpuFlavor, ...], int, tuple[float, ...],
                               StepFits], tuple[tuple[int, float, float], ...]] = {}
        self._row_configs: tuple[Config, ...] = ()

    def estimate(self, elastic: ElasticRange, flavor: GpuFlavor, placement: tuple[int, ...],
                 progress: float, gns: float | None = None,
                 fit: ThroughputParams | None = None) -> GoodputEstimate | None:
        """Goodput at the best batch on ``placement`` (GPUs per server) of ``flavor``; ``None``
        when that placement was never measured or no batch in range can be split over it.
        With ``gns`` (a reported noise scale, samples) the efficiency is Pollux's closed form
        from it, else the table's; with ``fit`` (the job's throughput model fitted on
        ``flavor``) the iteration times are the fit's, else the measured profile's (which
        still says which batches fit in memory)."""
        model = elastic.efficiency_model
        epochs = self.efficiency_key(model, progress, gns)
        key = (model, flavor, tuple(sorted(placement)), elastic.initial_batch_samples,
               elastic.max_batch_samples, epochs, fit)
        hit = self._cache.get(key, self)
        if hit is not self:
            return hit  # type: ignore[return-value]
        if len(self._cache) > 262144:
            self._cache.clear()
        okey = key[:5]
        options = self._options.get(okey, ())
        if options == ():
            try:
                options = batch_options(model, flavor, key[2],
                                        max_batch=elastic.max_batch_samples,
                                        min_batch=elastic.initial_batch_samples)
            except (NoProfileError, SpecError):
                options = None
            self._options[okey] = options
        eff = (load_efficiency(model) if gns is None
               else GnsEfficiency(epochs[1], elastic.initial_batch_samples))
        if options and fit is not None:
            n = sum(placement)
            secs = fit.iteration_times_s(n, [o.config.local_batch_samples for o in options],
                                         [o.config.accumulation_steps for o in options])
            options = tuple(BatchOption(o.config, s) for o, s in zip(options, secs, strict=True))
        est = None if not options else best_of(options, eff, progress)
        self._cache[key] = est
        return est

    def row(self, spec: JobSpec, configs: tuple[Config, ...], most_gpus: int,
            progress: float, gns: float | None = None,
            fits: StepFits = ()) -> tuple[tuple[int, float, float], ...]:
        """``(index, goodput samples/s, best batch)`` of each configuration in ``configs`` the
        elastic job ``spec`` may take at ``progress``: of a flavor it accepts, within its
        elastic range and at most ``most_gpus``, measured, with a positive goodput; in
        ``configs`` order.

        Cached per (range, flavors, cap, epochs under way) for one ``configs`` tuple (the up
        servers' configurations, the same object round after round,
        :func:`sia_configs`): a job's row is recomputed when it enters a new epoch or its cap
        grows, not every round, and the same for every job of the same application."""
        e = spec.elastic
        assert e is not None
        if configs is not self._row_configs or len(self._rows) > 65536:
            self._rows.clear()
            self._row_configs = configs
        hi = min(e.max_gpus, most_gpus)
        key = (e, spec.flavors, hi, self.efficiency_key(e.efficiency_model, progress, gns),
               fits)
        got = self._rows.get(key)
        if got is None:
            allowed = set(spec.flavors)
            out = []
            for c, config in enumerate(configs):
                if (e.min_gpus <= config.num_gpus <= hi
                        and (not allowed or config.flavor in allowed)):
                    est = self.at_config(e, config, progress, gns, fit_on(fits, config.flavor))
                    if est is not None and est.goodput_samples_per_s > 0:
                        out.append((c, est.goodput_samples_per_s,
                                    est.config.global_batch_samples))
            got = self._rows[key] = tuple(out)
        return got

    def epochs(self, model: str, progress: float) -> tuple[int, ...]:
        """The epoch under way in each of ``model``'s validation curves at ``progress``."""
        epochs = self._epochs.get((model, progress))
        if epochs is None:
            if len(self._epochs) > 4096:
                self._epochs.clear()
            epochs = self._epochs[(model, progress)] = _epochs(model, progress)
        return epochs

    def efficiency_key(self, model: str, progress: float,
                       gns: float | None = None) -> tuple[float, ...]:
        """What a job's efficiency depends on: the epochs under way (:meth:`epochs`), or, for a
        reported noise scale, ``(-1, gns to 3 significant digits)``."""
        if gns is None:
            return self.epochs(model, progress)
        return (-1.0, quantize_gns(gns))

    def at_config(self, elastic: ElasticRange, config: Config, progress: float,
                  gns: float | None = None,
                  fit: ThroughputParams | None = None) -> GoodputEstimate | None:
        """:meth:`estimate` for a configuration, its gang packed on as few servers as possible."""
        return self.estimate(elastic, config.flavor,
                             packed_placement(config.num_gpus, config.gpus_per_node), progress,
                             gns, fit)

    def steps_per_s(self, spec: JobSpec, placement: Placement, progress: float) -> float:
        """How fast an elastic job progresses on ``placement``, in ``spec`` steps per second
        (the measured placement, else the same GPUs packed; 0 if neither was measured), slowed
        by the job's ``ElasticRange.slowdown``."""
        e = spec.elastic
        assert e is not None
        per_node = tuple(c for _n, c in placement.gpus_by_node)
        est = self.estimate(e, placement.flavor, per_node, progress)
        if est is None:
            est = self.estimate(e, placement.flavor,
                                packed_placement(placement.num_gpus, max(per_node)), progress)
        if est is None:
            return 0.0
        return est.goodput_samples_per_s / e.slowdown * spec.total_steps / e.target_samples


def _epochs(model: str, progress: float) -> tuple[int, ...]:
    """The epoch under way in each of ``model``'s curves at ``progress`` (the cache key)."""
    eff = load_efficiency(model)
    steps = progress / eff.initial_batch_samples
    return tuple(c.epoch_at(steps) for c in eff.curves)
