"""Each job's observed step times and the throughput model published from them, versioned.

Pollux's agent (:mod:`tessera.perf.goodput_fit`) fits a job's iteration-time model to the step
times it observed at each ``(GPUs, local batch)`` on a flavor. The policies cache goodput rows
under the fit (``JobView.step_fits`` is part of the key of
:meth:`tessera.sched.elastic.goodput.GoodputModel.row`), so a fit that changes with every
observation makes every decision recompute that job's rows -- and a refit costs a least-squares
solve. :class:`StepBook` keeps both cheap:

* **Refit on surprise only.** A new observation the published model already predicts within
  ``tolerance`` (relative) plus the model's worst error on the points it was fitted to (no
  refit can explain a new point better than it explains its own: Pollux's model is off the
  measured profiles by a few percent) is recorded but refits nothing; a refit starts from the
  published model (:func:`~tessera.perf.goodput_fit.fit_throughput`'s ``start``).
* **Publish on a move only.** After a refit, the new model replaces the published one only
  where it moves a prediction by more than ``tolerance`` -- at an observed size, or at 1 to 64
  GPUs at an observed local batch (where the policies extrapolate). Otherwise the published
  object stays, so every cache keyed on it still hits.

Each published change bumps the job's :meth:`StepBook.version`, and only that job's cache
entries go stale: the decisions of a job whose fit did not move are the same as if it had not
reported at all since.

>>> from tessera.model.gpus import resolve_flavor
>>> book, a100 = StepBook(), resolve_flavor("A100-40GB")
>>> book.observe("j", a100, [(1, 64.0, 0.2)])
True
>>> book.observe("j", a100, [(1, 64.0, 0.2)])   # nothing new
False
>>> book.version("j")
1
"""

from __future__ import annotations

from collections.abc import Iterable

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.goodput_fit import StepFits, ThroughputParams, fit_throughput

DEFAULT_TOLERANCE = 0.01
"""A fit that moves no prediction by more than 1 % is not republished."""

PROBE_GPUS = (1, 2, 4, 8, 16, 32, 64)
"""Gang sizes a republished fit is compared at (beside the observed ones)."""

Observation = tuple[int, float, float]
"""``(GPUs, local batch samples, seconds per optimizer step)``."""


def moved(old: ThroughputParams, new: ThroughputParams, sizes: Iterable[tuple[int, float]],
          tolerance: float) -> bool:
    """Whether ``new`` predicts a step time more than ``tolerance`` (relative) away from
    ``old`` at any of ``sizes`` (``(GPUs, local batch)``) or at :data:`PROBE_GPUS` of their
    local batches."""
    sizes = list(sizes)
    probes = set(sizes) | {(n, m) for n in PROBE_GPUS for _g, m in sizes}
    for n, m in probes:
        before = old.iteration_s(n, m)
        if abs(new.iteration_s(n, m) - before) > tolerance * before:
            return True
    return False


def _worst_error(fit: ThroughputParams, seen: dict[tuple[int, float], float]) -> float:
    """The largest relative error of ``fit`` on the step times it was fitted to."""
    return max(abs(fit.iteration_s(n, m) / s - 1.0) for (n, m), s in seen.items())


class StepBook:
    """Step times per job and flavor, and each job's published fits (module docstring).

    Args:
        tolerance: relative change of a predicted step time below which a new observation
            triggers no refit and a refit is not republished (``>= 0``; 0 refits and
            republishes on every change).
        min_points: distinct sizes a flavor needs before it is fitted at all (the simulator
            fits from the first; the live service waits for two).
    """

    def __init__(self, tolerance: float = DEFAULT_TOLERANCE, min_points: int = 1) -> None:
        if not tolerance >= 0:
            raise SpecError(f"step-fit tolerance must be >= 0, got {tolerance}")
        if min_points < 1:
            raise SpecError(f"a fit needs at least 1 observed size, got {min_points}")
        self.tolerance = tolerance
        self.min_points = min_points
        """Distinct ``(GPUs, local batch)`` sizes a flavor needs before its first fit."""
        self._obs: dict[str, dict[GpuFlavor, dict[tuple[int, float], float]]] = {}
        self._fits: dict[str, StepFits] = {}
        self._version: dict[str, int] = {}
        self._resid: dict[tuple[str, GpuFlavor], float] = {}
        self.refits = 0
        """How many least-squares fits were solved (for benchmarks)."""

    def observe(self, job: str, flavor: GpuFlavor, steps: Iterable[Observation]) -> bool:
        """Record ``steps`` of ``job`` on ``flavor`` (a size seen before takes the new time);
        refit and republish as the module docstring says. True when the published fits
        changed.

        Raises:
            SpecError: an observation that is not positive and finite (via the fit).
        """
        seen = self._obs.setdefault(job, {}).setdefault(flavor, {})
        fresh = {(n, m): s for n, m, s in steps if seen.get((n, m)) != s}
        if not fresh:
            return False
        published = dict(self._fits.get(job, ()))
        old = published.get(flavor)
        seen.update(fresh)
        if len(seen) < self.min_points:
            return False
        slack = self.tolerance + self._resid.get((job, flavor), 0.0)
        if old is not None and not any(abs(old.iteration_s(n, m) - s) > slack * s
                                       for (n, m), s in fresh.items()):
            return False  # predicted already (as well as the fit's own points): nothing new
        new = fit_throughput([(n, m, s) for (n, m), s in sorted(seen.items())], old)
        self.refits += 1
        if old is not None and not moved(old, new, seen, self.tolerance):
            self._resid[(job, flavor)] = _worst_error(old, seen)
            return False
        self._resid[(job, flavor)] = _worst_error(new, seen)
        published[flavor] = new
        self._fits[job] = tuple(published.items())
        self._version[job] = self._version.get(job, 0) + 1
        return True

    def fits(self, job: str) -> StepFits:
        """``job``'s published fits per flavor (the same object until one moves)."""
        return self._fits.get(job, ())

    def version(self, job: str) -> int:
        """How many times ``job``'s published fits changed (0: never fitted)."""
        return self._version.get(job, 0)

    def observations(self, job: str) -> dict[GpuFlavor, dict[tuple[int, float], float]]:
        """``job``'s recorded step times per flavor and ``(GPUs, local batch)`` (read-only)."""
        return self._obs.get(job, {})

    def restore(self, job: str, fits: StepFits, version: int,
                observations: dict[GpuFlavor, dict[tuple[int, float], float]]) -> None:
        """Publish ``fits`` for ``job`` over ``observations``, as they were persisted (after
        a restart); no refit."""
        self._obs[job] = {f: dict(o) for f, o in observations.items()}
        if fits:
            self._fits[job] = fits
        self._version[job] = version

    def forget(self, job: str) -> None:
        """Drop everything about ``job`` (it finished)."""
        self._obs.pop(job, None)
        self._fits.pop(job, None)
        self._version.pop(job, None)
        for key in [k for k in self._resid if k[0] == job]:
            del self._resid[key]
