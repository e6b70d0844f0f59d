"""Live step-time fits (Pollux's agent): a job's throughput model from its progress reports.

A report may carry ``local_batch``: the samples per GPU of each optimizer step the job runs now
(what Pollux's agent reports; :func:`tessera.progress`, ``tessera.train`` send it). The gang
size is the run's, which the service knows. From those the service derives step times on its
own clock, as it derives rates (:mod:`tessera.live.progress`):

1. **Step time per size.** Per run and local batch, the accepted reports' ``(arrival, steps)``
   points; once they span :data:`~tessera.live.progress.MIN_INTERVALS` (2) intervals, the
   step time at ``(run's GPUs, local batch)`` on the run's flavor is ``1 / median rate``
   (the last :data:`~tessera.live.progress.WINDOW` intervals). A mixed-flavor gang teaches
   nothing here (its step time is no one flavor's).
2. **The fit.** Each round (:meth:`LiveStepFits.refit`, from
   :func:`tessera.live.learned.apply_learned`), a job's new step times go into a
   :class:`~tessera.perf.step_book.StepBook`: once a flavor has :data:`MIN_FIT_POINTS` (2)
   distinct ``(GPUs, local batch)`` sizes, Pollux's model is fitted to them
   (:func:`tessera.perf.goodput_fit.fit_throughput`); later sizes refit only when the model
   mispredicts them by more than 1 %, and a refit is published only when it moves a
   prediction by more than 1 %.
3. **Used and kept.** The published fits are laid on the job's view
   (``JobView.step_fits``), where Sia and Pollux price that flavor's iteration times from
   them instead of the bundled profile, from the next decision on. The job's events say
   when a flavor is first fitted and when its fit moves. Each publication is written to the
   store (``meta`` key ``stepfit:<job>``: the version, and per flavor the observed step
   times and the fit), so a restart loses no fit. A row that cannot be read back (not JSON,
   another shape, an unknown flavor, a step time that is not positive and finite) is dropped
   with a logged warning and one event on the job (:data:`CORRUPT_NOTE`): the job is valued
   by its profile again until it reports anew; the loop never stops on it.

**Refused** (422, with the reason, the job unharmed; :func:`check_local_batch`): a
``local_batch`` that is not a finite number, ``<= 0``, or over :data:`MAX_LOCAL_BATCH`.
**Bounded:** a job chooses its own ``local_batch``, so one that reports a new value each time
could grow its meters, its fit's points and its stored row without end; a run meters at most
:data:`MAX_SIZES_PER_FLAVOR` local batches and a job's flavor keeps at most that many sizes
(later new ones are accepted as reports but teach no step time).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from tessera.live.store import Store
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.goodput_fit import StepFits, ThroughputParams
from tessera.perf.step_book import StepBook

log = logging.getLogger("tessera.live.step_fits")

STEP_META = "stepfit:"
CORRUPT_NOTE = ("stored step-time fit (meta {key}) is unreadable and was dropped ({why}); "
                "the job is valued by its profile until it reports its local batch again")
MIN_FIT_POINTS = 2
"""Distinct ``(GPUs, local batch)`` sizes on a flavor before it is fitted (with one, the
model is the bare ``beta * m``: it says nothing the rate does not)."""
MAX_LOCAL_BATCH = 1 << 20
"""Samples per GPU per step above which a report is absurd (a million)."""
MAX_SIZES_PER_FLAVOR = 64
"""Distinct local batches a run meters, and ``(GPUs, local batch)`` sizes a job keeps per
flavor (an elastic job visits a few dozen at most; the rest would only slow every refit)."""
_WINDOW = 21  # points kept per (run, local batch): live.progress.WINDOW intervals
_MIN_INTERVALS = 2


def check_local_batch(value: object) -> str | None:
    """Why a reported local batch is refused, or ``None`` when it is usable."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"local_batch must be a number, got {value!r:.40}"
    if not math.isfinite(value):
        return f"local_batch must be finite, got {value}"
    if value <= 0:
        return f"local_batch must be > 0 (samples per GPU per step), got {value:g}"
    if value > MAX_LOCAL_BATCH:
        return f"local_batch {value:g} is absurd (over {MAX_LOCAL_BATCH} samples per GPU)"
    return None


def _median_step_s(points: Iterable[tuple[float, float]]) -> float | None:
    """``1 / median rate`` of ``(time s, cumulative steps)`` points, ``None`` with fewer than
    two intervals or no progress."""
    pts = list(points)
    rates = sorted((s1 - s0) / (t1 - t0) for (t0, s0), (t1, s1) in itertools.pairwise(pts)
                   if t1 > t0)
    if len(rates) < _MIN_INTERVALS:
        return None
    mid = len(rates) // 2
    rate = rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2
    return 1.0 / rate if rate > 0 else None


class LiveStepFits:
    """Every active job's step times and published fits (module docstring). ``record`` runs
    on the API's threads, the rest on the loop's."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.book = StepBook(min_points=MIN_FIT_POINTS)
        self._lock = threading.Lock()
        self._meters: dict[tuple[str, int, float], deque[tuple[float, float]]] = {}
        self._pending: dict[str, dict[GpuFlavor, dict[tuple[int, float], float]]] = {}
        self._loaded: set[str] = set()
        self._notes: dict[str, str] = {}  # a dropped stored row, said once by refit

    def record(self, job_id: str, run: int, flavor: GpuFlavor | None, gpus: int,
               local_batch: float, steps: float, now_s: float) -> None:
        """An accepted report of run ``run`` on ``gpus`` GPUs of ``flavor`` at
        ``local_batch``: its step time there, once two intervals are seen."""
        if flavor is None or gpus < 1:
            return
        with self._lock:
            key = (job_id, run, local_batch)
            if key not in self._meters and sum(
                    k[0] == job_id and k[1] == run for k in self._meters) >= MAX_SIZES_PER_FLAVOR:
                return  # (bounded: module docstring)
            meter = self._meters.setdefault(key, deque(maxlen=_WINDOW))
            meter.append((now_s, steps))
            step_s = _median_step_s(meter)
            if step_s is None:
                return
            by = self._pending.setdefault(job_id, {}).setdefault(flavor, {})
            size = (gpus, local_batch)
            known = self.book.observations(job_id).get(flavor, {})
            if size not in by and size not in known and \
                    len(by) + len(known) >= MAX_SIZES_PER_FLAVOR:
                return
            by[size] = step_s

    def refit(self, job_id: str) -> list[str]:
        """Put ``job_id``'s new step times into its fit; the events to record (a flavor
        fitted for the first time, a fit that moved)."""
        self._load(job_id)
        with self._lock:
            pending = self._pending.pop(job_id, None)
        events = [note] if (note := self._notes.pop(job_id, None)) else []
        if not pending:
            return events
        before = dict(self.book.fits(job_id))
        for flavor, sizes in pending.items():
            if not self.book.observe(job_id, flavor, [(n, m, s) for (n, m), s in sizes.items()]):
                continue
            new = dict(self.book.fits(job_id))[flavor]
            seen = self.book.observations(job_id)[flavor]
            old = before.get(flavor)
            if old is None:
                events.append(f"step times fitted on {flavor.short} from {len(seen)} sizes "
                              f"(GPUs x local batch): {_describe(new, seen)}; Sia and Pollux "
                              f"use the fit there from the next decision")
            else:
                (n, m), _s = max(sizes.items(), key=lambda kv: kv[1])
                events.append(f"step-time fit on {flavor.short} moved (version "
                              f"{self.book.version(job_id)}): {n} GPUs x {m:g} now "
                              f"{new.iteration_s(n, m):.3g} s/step (was "
                              f"{old.iteration_s(n, m):.3g})")
        if events:
            self._write(job_id)
        return events

    def fits(self, job_id: str) -> StepFits:
        """``job_id``'s published fits (loaded from the store the first time)."""
        self._load(job_id)
        return self.book.fits(job_id)

    def fits_of(self, job_ids: Iterable[str]) -> dict[str, StepFits]:
        """``{job: fits}`` of those of ``job_ids`` with a published fit."""
        out = {j: self.fits(j) for j in job_ids}
        return {j: f for j, f in out.items() if f}

    def sizes(self, job_id: str) -> dict[GpuFlavor, set[tuple[int, float]]]:
        """The ``(GPUs, local batch)`` sizes ``job_id`` has a step time at, per flavor
        (fitted or still waiting for the next round)."""
        self._load(job_id)
        out = {f: set(o) for f, o in self.book.observations(job_id).items()}
        with self._lock:
            for f, o in self._pending.get(job_id, {}).items():
                out.setdefault(f, set()).update(o)
        return out

    def retain(self, job_ids: set[str]) -> None:
        """Keep in memory only these jobs (the active ones); the others' fits stay in the
        store."""
        with self._lock:
            for jid in [j for j in self._loaded if j not in job_ids]:
                self._loaded.discard(jid)
                self.book.forget(jid)
                self._pending.pop(jid, None)

    def forget_run(self, job_id: str, run: int) -> None:
        """A run ended: drop its meters (its step times stay)."""
        with self._lock:
            for key in [k for k in self._meters if k[0] == job_id and k[1] == run]:
                del self._meters[key]

    # -- the store -----------------------------------------------------------------------

    def _write(self, job_id: str) -> None:
        fits = dict(self.book.fits(job_id))
        flavors = {f.short: {"obs": [[n, m, s] for (n, m), s in sorted(obs.items())],
                             "fit": fits[f].as_array().tolist() if f in fits else None}
                   for f, obs in self.book.observations(job_id).items()}
        self.store.set_meta(STEP_META + job_id, json.dumps(
            {"version": self.book.version(job_id), "flavors": flavors}))

    def _load(self, job_id: str) -> None:
        if job_id in self._loaded:
            return
        self._loaded.add(job_id)
        raw = self.store.meta(STEP_META + job_id)
        if not raw:
            return
        try:
            fits, obs, version = parse(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError,
                RecursionError) as e:  # (RecursionError: JSON nested too deep)
            why = f"{type(e).__name__}: {str(e)[:120]}"
            note = CORRUPT_NOTE.format(key=STEP_META + job_id, why=why)
            log.warning("job %s: %s", job_id, note)
            self._notes[job_id] = note
            return
        self.book.restore(job_id, fits, version, obs)


def parse(d: Mapping[str, Any]) -> tuple[StepFits, dict[GpuFlavor, dict[tuple[int, float],
                                                                      float]], int]:
    """``(fits, observations, version)`` of a persisted ``stepfit:<job>`` value.

    Raises:
        ValueError, KeyError, TypeError: a value of another shape, an unknown flavor, a size
            or step time that is not positive and finite, a fit that is not five finite numbers.
        OverflowError: a count (GPUs, the version) that is JSON's ``Infinity`` or ``1e999``.
    """
    fits: list[tuple[GpuFlavor, ThroughputParams]] = []
    obs: dict[GpuFlavor, dict[tuple[int, float], float]] = {}
    for short, v in d["flavors"].items():
        f = resolve_flavor(short)
        obs[f] = {}
        for n, m, s in v["obs"]:
            size = (int(n), float(m))
            if not (size[0] >= 1 and _positive(size[1]) and _positive(float(s))):
                raise ValueError(f"step time {s!r} at {n!r} GPUs x {m!r} on {short}")
            obs[f][size] = float(s)
        if v.get("fit") is not None:
            params = [float(x) for x in v["fit"]]
            if len(params) != 5 or not all(map(math.isfinite, params)):
                raise ValueError(f"fit on {short} is not five finite numbers: {v['fit']!r:.80}")
            fits.append((f, ThroughputParams(*params)))
    version = int(d["version"])
    if version < 0:
        raise ValueError(f"version {version}")
    return tuple(fits), obs, version


def _positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def _describe(fit: ThroughputParams, seen: Mapping[tuple[int, float], float]) -> str:
    """``"1x64 0.2 s (fit 0.2), 2x64 ..."``: what was observed and what the fit says."""
    return ", ".join(f"{n}x{m:g} {s:.3g} s (fit {fit.iteration_s(n, m):.3g})"
                     for (n, m), s in sorted(seen.items()))
