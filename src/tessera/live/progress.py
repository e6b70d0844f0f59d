"""Progress reports: what a running job says about its own speed, checked and kept.

A run posts its cumulative steps (and samples, and gradient noise scale) to
``POST /api/progress/<job>/<run>`` with the run's own token (:mod:`tessera.progress_report`,
``TESSERA_PROGRESS_URL`` / ``TESSERA_PROGRESS_TOKEN``). This module decides what a report is
worth:

**Who may report.** The token is ``HMAC-SHA256(key, "<job>:<run>")``, the key 32 random bytes
kept in the store's ``meta`` table (the private store; never served, never logged). The service
needs no per-run table to check it, a restart keeps every running job's token valid, and one
run's token says nothing about another's: a report whose token is not that run's is refused
(403) before anything else is looked at, so a job cannot probe other runs. A run that is not
running (finished, stopped, unknown) is refused too (409 / 404); the job is never touched.

**What is refused, with a reason** (422, and an event on the job, once per kind per run):
a value that is not a finite number, negative values, steps that go backwards, and a jump
faster than :data:`JUMP_FACTOR` (100) times the faster of the run's prior speed and its
measured speed on that flavor. A job with no ``job_type`` in any table has an arbitrary
prior (1 step/s); until it has a measured rate only the checks that need no speed apply.

**Rate limit.** One report per run per :data:`MIN_INTERVAL_S` (1 s) is counted; the others
are answered 429 (and not kept). The client sends no faster by itself.

**The estimate.** A run's speed is the **median** of its last :data:`WINDOW` (20) intervals'
rates (steps between two accepted reports / seconds between their arrival at the service):
the service's own clock, never the job's, and a median so that one stall (a checkpoint, an
evaluation) or one burst does not move it. A rate needs :data:`MIN_INTERVALS` (2) intervals.
Each job's runs' estimates (flavor, nodes, rate, when) are kept in the store
(``meta`` key ``progress:<job>``, rewritten when a run's rate moved by more than 1 % or 30 s
after it was last written), so a restart loses none (at most 30 s of a drift under 1 %); a
job's measured rate on a flavor is its latest run's there. A row a restart cannot read (torn,
hand-edited, an unknown flavor, a rate that is not positive) is dropped with a warning and one
event on the job (:data:`CORRUPT_NOTE`), which keeps its prior until its runs report again.

**Gradient noise scale (Pollux's agent).** A report's ``gns`` (samples, at the job's initial
batch) is kept per job, the last :data:`GNS_WINDOW` (5) accepted values; the job's noise
scale is their median (:func:`tessera.perf.goodput_fit.fit_noise_scale`), handed to the next
decision (``JobView.noise_scale_samples``), where Sia and Pollux fit the job's statistical
efficiency from it instead of the bundled table. A negative or non-finite ``gns`` refuses the
whole report (422, with the reason). Kept in memory only: after a restart a job is valued
by the table again until its next report.

**Step times (Pollux's agent).** A report's ``local_batch`` (samples per GPU per step) with
the run's gang size gives the job's step time at that size; from two sizes on a flavor the
service fits the job's throughput model and Sia and Pollux use it (:mod:`.step_fits`). A
``local_batch`` that is not a finite number in ``(0, 2**20]`` refuses the report (422).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import logging
import math
import secrets
import statistics
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.live.step_fits import LiveStepFits, check_local_batch
from tessera.live.store import Store
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.goodput_fit import fit_noise_scale

KEY_META = "progress_key"
JOB_META = "progress:"
CORRUPT_NOTE = ("stored progress rates (meta {key}) are unreadable and were dropped ({why}); "
                "the job is scheduled with its prior speed until its runs report again")
"""The event (once) and warning for a ``progress:<job>`` row a restart cannot read."""

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 1.0
WINDOW = 20
MIN_INTERVALS = 2
JUMP_FACTOR = 100.0
#: A run's estimate is written to the store when it moved by more than this fraction, or
#: this long after it was last written (s); a restart loses at most that much.
WRITE_MOVE = 0.01
WRITE_EVERY_S = 30.0
#: Runs whose estimates a job keeps (the latest ones).
KEPT_RUNS = 8
FIELDS = ("steps", "samples", "gns", "local_batch")
#: Noise-scale reports a job's estimate is the median of.
GNS_WINDOW = 5


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to one report: HTTP status, one-line detail, and the event to record on the
    job (``None``: none)."""

    status: int
    detail: str
    event: str | None = None


@dataclass(frozen=True, slots=True)
class RunRate:
    """One run's measured speed: on which flavor and nodes, how fast, from how many intervals,
    over which stretch of time (service clock)."""

    run: int
    flavor: GpuFlavor
    nodes: tuple[str, ...]
    steps_per_s: float
    intervals: int
    since_s: float
    updated_s: float

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "flavor": self.flavor.short, "nodes": list(self.nodes),
                "steps_per_s": self.steps_per_s, "intervals": self.intervals,
                "since_s": self.since_s, "updated_s": self.updated_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunRate:
        rate = float(d["steps_per_s"])
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"steps_per_s {d['steps_per_s']!r} is not a positive number")
        since_s, updated_s = float(d["since_s"]), float(d["updated_s"])
        if not (math.isfinite(since_s) and math.isfinite(updated_s)):
            raise ValueError(f"since_s {d['since_s']!r} or updated_s {d['updated_s']!r} is "
                             "not a finite time")
        nodes = d["nodes"]
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise ValueError(f"nodes {nodes!r:.60} is not a list of node ids")
        return cls(int(d["run"]), resolve_flavor(str(d["flavor"])), tuple(nodes), rate,
                   int(d["intervals"]), since_s, updated_s)


@dataclass
class _Meter:
    """A run's accepted reports (in memory): ``(arrival s, steps)``, newest last."""

    points: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW + 1))
    refused: set[str] = field(default_factory=set)


def median_rate(points: list[tuple[float, float]] | deque[tuple[float, float]]) -> float | None:
    """The median of the intervals' rates of ``(time s, cumulative steps)`` points, or
    ``None`` with fewer than :data:`MIN_INTERVALS` intervals."""
    pts = list(points)
    rates = [(s1 - s0) / (t1 - t0) for (t0, s0), (t1, s1) in itertools.pairwise(pts) if t1 > t0]
    if len(rates) < MIN_INTERVALS:
        return None
    return float(statistics.median(rates))


def check_values(body: Mapping[str, Any]) -> tuple[dict[str, float], str | None]:
    """The report's numbers, or a one-line reason it is refused (unknown field, not a finite
    number, negative, no ``steps``)."""
    if not isinstance(body, Mapping):
        return {}, "a report is a JSON object such as {\"steps\": 120, \"samples\": 3840}"
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        return {}, f"unknown field {unknown[0]!r}; a report has {', '.join(FIELDS)}"
    out: dict[str, float] = {}
    for k, v in body.items():
        if v is None:
            continue
        if k == "local_batch" and (why := check_local_batch(v)) is not None:
            return {}, why
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return {}, f"{k} must be a number, got {v!r:.40}"
        if not math.isfinite(v):
            return {}, f"{k} must be finite, got {v}"
        if v < 0:
            return {}, f"{k} must be >= 0, got {v:g}"
        out[k] = float(v)
    if "steps" not in out:
        return {}, "a report needs steps (cumulative optimizer steps)"
    return out, None


RunWhere = tuple[str, GpuFlavor | None, tuple[str, ...]]
"""Where a run is: its allocation status, its flavor (``None`` for a mixed gang), its nodes."""


class ProgressBook:
    """Checks reports and keeps every job's measured speeds (see the module docstring).

    Args:
        store: the service's store (the token key and the kept estimates live there).
        run_where: ``(job, run) -> (state, flavor or None, nodes)`` of a run the store
            holds, ``None`` for an unknown run; state is the allocation's status.
        prior: ``(job, flavor) -> steps/s`` a table predicts for the job there, ``None``
            when no table knows its type (its scheduling prior is then an arbitrary 1 step/s).
        run_gpus: ``(job, run) -> GPUs`` of a run's gang, for step-time fits
            (:mod:`.step_fits`; asked only of reports with a ``local_batch``); by default one
            GPU per node the run holds.
    """

    def __init__(self, store: Store,
                 run_where: Callable[[str, int], RunWhere | None],
                 prior: Callable[[str, GpuFlavor], float | None],
                 run_gpus: Callable[[str, int], int] | None = None) -> None:
        self.store = store
        self._run_where = run_where
        self._prior = prior
        self._run_gpus = run_gpus
        self.steps = LiveStepFits(store)
        """Step times per gang size and local batch, and the fits (:mod:`.step_fits`)."""
        key = store.meta(KEY_META)
        if key is None:
            key = secrets.token_hex(32)
            store.set_meta(KEY_META, key)
        self._key = bytes.fromhex(key)
        self._lock = threading.Lock()
        self._meters: dict[tuple[str, int], _Meter] = {}
        self._last_s: dict[tuple[str, int], float] = {}
        self._rates: dict[str, list[RunRate]] = {}
        self._changed: set[str] = set()
        self._written: dict[tuple[str, int], tuple[float, float]] = {}
        self._gns: dict[str, deque[float]] = {}
        self._notes: dict[str, str] = {}  # a dropped stored row, said once (take_note)

    # -- tokens --------------------------------------------------------------------------

    def token(self, job_id: str, run: int) -> str:
        """Run ``(job_id, run)``'s secret (what ``TESSERA_PROGRESS_TOKEN`` holds)."""
        return hmac.new(self._key, f"{job_id}:{run}".encode(), hashlib.sha256).hexdigest()

    def token_matches(self, job_id: str, run: int, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.token(job_id, run), token)

    # -- reports -------------------------------------------------------------------------

    def report(self, job_id: str, run: int, token: str | None, body: Any,
               now_s: float) -> Outcome:
        """Judge one report (any thread); the API answers with the outcome's status."""
        if not self.token_matches(job_id, run, token):
            return Outcome(403, f"this token may not report for run {run} of {job_id}")
        where = self._run_where(job_id, run)
        if where is None:
            return Outcome(404, f"no run {run} of job {job_id}")
        state, flavor, nodes = where
        if state != "running":
            return Outcome(409, f"run {run} of job {job_id} is {state}: it reports no more")
        key = (job_id, run)
        with self._lock:
            last = self._last_s.get(key)
            if last is not None and now_s - last < MIN_INTERVAL_S:
                return Outcome(429, f"at most one report per {MIN_INTERVAL_S:g} s per run")
            values, why = check_values(body)
            meter = self._meters.setdefault(key, _Meter())
            if why is None and meter.points:
                why = self._check_step(job_id, flavor, meter, values["steps"], now_s)
            if why is not None:
                kind = why.split(" ", 1)[0]
                event = None if kind in meter.refused else f"progress report refused: {why}"
                meter.refused.add(kind)
                return Outcome(422, why, event)
            self._last_s[key] = now_s
            if "gns" in values:
                self._gns.setdefault(job_id, deque(maxlen=GNS_WINDOW)).append(values["gns"])
            meter.points.append((now_s, values["steps"]))
            if "local_batch" in values:
                gpus = (self._run_gpus(job_id, run) if self._run_gpus is not None
                        else len(nodes))
                self.steps.record(job_id, run, flavor, gpus, values["local_batch"],
                                  values["steps"], now_s)
            rate = median_rate(meter.points)
            if rate is not None and flavor is not None:
                self._keep(job_id, RunRate(run, flavor, nodes, rate, len(meter.points) - 1,
                                           meter.points[0][0], now_s))
        return Outcome(200, "accepted")

    def _check_step(self, job_id: str, flavor: GpuFlavor | None, meter: _Meter, steps: float,
                    now_s: float) -> str | None:
        t0, s0 = meter.points[-1]
        if steps < s0:
            return f"steps went backwards ({steps:g} after {s0:g})"
        if flavor is None:
            return None
        expected = max(self._prior(job_id, flavor) or 0.0,
                       self.measured(job_id).get(flavor) or 0.0)
        cap = JUMP_FACTOR * expected
        rate = (steps - s0) / max(now_s - t0, 1e-9)
        if expected > 0 and rate > cap:
            return (f"jump of {steps - s0:g} steps in {now_s - t0:.1f} s ({rate:.3g} steps/s) "
                    f"is over {JUMP_FACTOR:g}x the expected {cap / JUMP_FACTOR:.3g} steps/s")
        return None

    def _keep(self, job_id: str, rr: RunRate) -> None:
        """Keep ``rr`` as its run's estimate; write the job's estimates to the store when the
        run's rate moved by more than :data:`WRITE_MOVE` or :data:`WRITE_EVERY_S` passed since
        it was last written (one commit per report per run would be thousands a second)."""
        old = self._load(job_id)
        runs = [r for r in old if r.run != rr.run][-(KEPT_RUNS - 1):]
        runs.append(rr)
        self._rates[job_id] = runs
        self._changed.add(job_id)
        written = self._written.get((job_id, rr.run))
        if written is None or abs(rr.steps_per_s - written[1]) > WRITE_MOVE * written[1] or \
                rr.updated_s - written[0] >= WRITE_EVERY_S:
            self._written[(job_id, rr.run)] = (rr.updated_s, rr.steps_per_s)
            self.store.set_meta(JOB_META + job_id,
                                json.dumps({"runs": [r.to_json() for r in runs]}))

    # -- what was learned ----------------------------------------------------------------

    def _load(self, job_id: str) -> list[RunRate]:
        hit = self._rates.get(job_id)
        if hit is None:
            raw = self.store.meta(JOB_META + job_id)
            try:
                hit = [RunRate.from_json(d) for d in json.loads(raw)["runs"]] if raw else []
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError,
                    RecursionError) as e:  # (RecursionError: JSON nested too deep)
                hit = []  # the job keeps its prior until its runs report again
                self._notes[job_id] = CORRUPT_NOTE.format(
                    key=JOB_META + job_id, why=f"{type(e).__name__}: {str(e)[:120]}")
                log.warning("job %s: %s", job_id, self._notes[job_id])
            self._rates[job_id] = hit
        return hit

    def take_note(self, job_id: str) -> str | None:
        """Why the job's stored rates were dropped (once; ``None``: nothing to say)."""
        with self._lock:
            return self._notes.pop(job_id, None)

    def runs(self, job_id: str) -> list[RunRate]:
        """The job's kept run estimates, oldest first."""
        with self._lock:
            return list(self._load(job_id))

    def runs_view(self, job_id: str) -> list[RunRate]:
        """:meth:`runs` without the copy, for the loop thread (a list is never changed in
        place: a new estimate replaces it)."""
        hit = self._rates.get(job_id)
        return hit if hit is not None else self.runs(job_id)

    def take_changed(self) -> set[str]:
        """The jobs with a new estimate since the last call."""
        with self._lock:
            out, self._changed = self._changed, set()
        return out

    def noise_scales(self) -> dict[str, float]:
        """``{job: gradient noise scale}`` of every job that reported one (samples)."""
        with self._lock:
            got = {j: fit_noise_scale(list(v)) for j, v in self._gns.items()}
        return {j: g for j, g in got.items() if g is not None}

    def measured(self, job_id: str) -> dict[GpuFlavor, float]:
        """``{flavor: steps/s}``: the job's latest run's rate on each flavor."""
        return {r.flavor: r.steps_per_s for r in self._load(job_id)}

    def retain(self, job_ids: set[str]) -> None:
        """Keep in memory only these jobs' estimates (the active ones); the others stay in the
        store and are read again when asked for."""
        with self._lock:
            for jid in [j for j in self._rates if j not in job_ids]:
                del self._rates[jid]
            for jid in [j for j in self._gns if j not in job_ids]:
                del self._gns[jid]
        self.steps.retain(job_ids)

    def forget_run(self, job_id: str, run: int) -> None:
        """A run ended: drop its meter (its estimate stays)."""
        with self._lock:
            self._meters.pop((job_id, run), None)
            self._last_s.pop((job_id, run), None)
            self._written.pop((job_id, run), None)
        self.steps.forget_run(job_id, run)
