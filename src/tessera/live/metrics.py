"""The live service's Prometheus metrics: what ``GET /metrics`` answers.

:class:`ServiceMetrics` is a ``prometheus_client`` collector with a registry of its own (never
the library's global one, so two services in one process never mix). Every scrape reads the
store; nothing is counted on the API's hot paths. The metrics, all prefixed ``tessera_``:

**Gauges, recomputed from the store at every scrape** (so they are right after a restart):

* ``tessera_jobs_pending{queue,flavor,reason}`` -- jobs waiting; ``reason`` is the decision
  core's :class:`~tessera.sched.core.reasons.PendingKind` of the last decision in lower case
  (``quota``, ``capacity``, ``fragmentation`` -- free GPUs but not the locality the gang needs
  --, ``no_fit``), ``unplaceable`` for a job whose run the executor could not place, waiting out
  its backoff, and ``undecided`` for one no decision has looked at yet; ``flavor`` is the one
  flavor the job asks for, or ``any``;
* ``tessera_jobs_admitted{queue,flavor}`` (GPUs given, run being launched) and
  ``tessera_jobs_running{queue,flavor}``, by the flavor of the job's latest run (a mixed gang
  counts once under each of its flavors);
* ``tessera_queue_nominal_gpus``, ``tessera_queue_borrowing_limit_gpus`` (only where limited),
  ``tessera_queue_used_gpus`` and ``tessera_queue_borrowed_gpus`` (used beyond nominal), each
  ``{queue,flavor}``: per flavor for a queue whose quota is given per flavor
  (:attr:`~tessera.sched.core.quotas.QueueQuota.by_flavor`), under ``flavor="any"`` for a
  quota of any flavor. Used GPUs are those the queue's runs hold (planned, running, draining);
* ``tessera_cluster_gpus{flavor}`` -- the cluster's GPUs per flavor.

**Counters, from the store's event log** (:class:`EventTally`): the first scrape after a start
counts every event the store holds, later ones only the new events, so they survive a restart
(jobs deleted by the stored-job caps take their events with them; the next start then counts
less, which Prometheus reads as a counter reset):

* ``tessera_job_transitions_total{from_state,to_state}`` (a submission is ``none`` → ``pending``);
* ``tessera_preemptions_total{reason}`` -- runs the scheduler stopped or plans it withdrew:
  ``policy`` (preempted by the policy), ``move``, ``resize``;
* ``tessera_job_retries_total`` -- failed runs requeued because the job had retries left;
* ``tessera_runs_lost_total`` -- runs that ended without an exit status (the runner, actor or
  node vanished, a launch failed, the embedded Ray head was gone after a restart).

**Since the service started** (the store keeps no timings): the histogram
``tessera_decision_duration_seconds``, the wall time of each decision (the sum of the decision
core's :attr:`~tessera.sched.core.decide.Decision.phase_ms`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tessera.live.learned import prior_rate
from tessera.live.run_energy import energy_metric
from tessera.live.store import HOLDING, Allocation, Store
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.quotas import QueueQuota

if TYPE_CHECKING:
    from tessera.live.service import LiveService

#: The ``flavor`` label of a quota (and a pending job) that is not tied to one flavor.
ANY_FLAVOR = "any"
#: Decision latency buckets (s): a small cluster decides in a millisecond, 10,000 jobs in
#: about 100 ms; beyond a second something is wrong.
DECISION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                      2.5, 5.0)
#: What a preemption's stop request says (``journal.request_stop``), by its first word.
_PREEMPT_REASONS = {"preempted": "policy", "moving": "move", "resizing": "resize",
                    "quota": "quota"}


def preempt_reason(why: str) -> str:
    """The ``reason`` label of a stop request's text (``"preempted by the policy"`` →
    ``policy``; ``other`` for a text this module does not know)."""
    return _PREEMPT_REASONS.get(why.split(" ", 1)[0], "other")


#: Preemptions in a span of the event log, by the first word of their reason: stop requests
#: (``run 3: preempted by the policy``) and planned runs taken back (``plan withdrawn: ...``).
_PREEMPTIONS_SQL = """
SELECT substr(why, 1, instr(why || ' ', ' ') - 1), COUNT(*) FROM (
  SELECT CASE WHEN kind='stop-requested' THEN substr(detail, instr(detail, ': ') + 2)
              ELSE substr(detail, 17) END AS why
  FROM events WHERE seq>? AND seq<=? AND (kind='stop-requested' OR (kind='transition'
    AND from_state='admitted' AND to_state='pending' AND detail LIKE 'plan withdrawn: %')))
GROUP BY 1"""
#: Runs lost in a span of the event log: a run's end (``run 3: ...``, the job failed, was
#: preempted, or had finished already) whose allocation has no exit status and was launched.
_LOST_SQL = """
SELECT COUNT(*) FROM events e JOIN allocations a ON a.job_id=e.job_id
  AND a.run=CAST(substr(e.detail, 5, instr(e.detail, ':') - 5) AS INTEGER)
WHERE e.seq>? AND e.seq<=? AND e.detail LIKE 'run %:%'
  AND (e.kind='run-ended' OR (e.kind='transition' AND e.to_state IN ('failed', 'preempted')))
  AND a.exit_code IS NULL AND a.detail NOT LIKE 'withdrawn before launch:%'"""


class EventTally:
    """The counters that the store's event log can give, kept up to date incrementally.

    The log's ``seq`` only grows (SQLite ``AUTOINCREMENT``), so each :meth:`update` reads the
    events after the last one it counted, each counter by one aggregate query in SQLite, so
    even the first scrape after a start, which counts the whole log, reads no event into
    Python.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last_seq = 0
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.preemptions: Counter[str] = Counter()
        self.retries = 0
        self.runs_lost = 0
        self._lock = threading.Lock()  # two scrapes at once count each event once

    def update(self) -> None:
        """Count the events written since the last update."""
        with self._lock:
            read = self.store._read  # the store's read lock and fault handling
            top = int(read("SELECT COALESCE(MAX(seq), 0) FROM events")[0][0])
            if top <= self.last_seq:
                return
            span = (self.last_seq, top)
            for old, new, n in read(
                    "SELECT COALESCE(from_state, 'none'), to_state, COUNT(*) FROM events "
                    "WHERE seq>? AND seq<=? AND to_state IS NOT NULL "
                    "AND kind IN ('transition', 'submitted') GROUP BY 1, 2", span):
                self.transitions[(str(old), str(new))] += int(n)
                if (old, new) == ("failed", "pending"):
                    self.retries += int(n)
            for word, n in read(_PREEMPTIONS_SQL, span):
                self.preemptions[preempt_reason(str(word))] += int(n)
            self.runs_lost += int(read(_LOST_SQL, span)[0][0])
            self.last_seq = top


#: The unfinished jobs, without decoding their specs: id, queue, state, and the one flavor
#: the job asks for (``NULL``: none or several; a spec stored in format 1 keeps its fields at
#: the top level).
_ACTIVE_SQL = """
SELECT job_id, queue, state, CASE WHEN json_array_length(f)=1 THEN json_extract(f, '$[0]') END
FROM (SELECT job_id, queue, state, COALESCE(json_extract(spec_json, '$.spec.flavors'),
                                            json_extract(spec_json, '$.flavors')) AS f
      FROM jobs WHERE final=0)"""


_STATES = {s.value: s for s in JobState}


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """An unfinished job as the metrics need it: ``flavor`` is the one flavor it asks for
    (short name), ``None`` for none or several."""

    job_id: str
    queue: str
    state: JobState
    flavor: str | None


def active_jobs(store: Store) -> list[ActiveJob]:
    """The store's unfinished jobs, read without decoding their specs (a scrape with 10,000
    pending jobs would spend most of its time there)."""
    short: dict[str, str] = {}  # stored name → short name, resolved once per scrape
    out: list[ActiveJob] = []
    for job_id, queue, state, name in store._read(_ACTIVE_SQL):
        if name is not None and name not in short:
            short[name] = resolve_flavor(name).short
        out.append(ActiveJob(job_id, queue, _STATES[state],
                             short[name] if name is not None else None))
    return out


class ServiceMetrics(Collector):
    """The service's metrics (the module docstring) in a registry of their own.

    Build one per service: the API's ``/metrics`` route and the metrics port share it, and it
    watches the service's decisions (:attr:`LiveService.decision_watchers`) for the latency
    histogram.
    """

    def __init__(self, svc: LiveService) -> None:
        self.svc = svc
        self.registry = CollectorRegistry(auto_describe=False)
        self.decisions = Histogram(
            "tessera_decision_duration_seconds",
            "Wall time of one scheduling decision (the sum of its phases), since the service "
            "started.", buckets=DECISION_BUCKETS_S, registry=self.registry)
        self.tally = EventTally(svc.store)
        self.registry.register(self)
        svc.decision_watchers.append(self.observe_decision)

    def observe_decision(self, d: Decision) -> None:
        """Record one decision's wall time (called on the loop thread after each round)."""
        self.decisions.observe(sum(ms for _, ms in d.phase_ms) / 1e3)

    def render(self) -> bytes:
        """The metrics in Prometheus' text format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """Every metric but the histogram (the registry collects that one itself)."""
        self.tally.update()
        yield from self._counters()
        records = active_jobs(self.svc.store)
        holding = self.svc.store.allocations(HOLDING)
        yield from self._jobs(records, holding)
        yield from self._quotas(records, holding)
        yield self._speeds(holding)
        yield energy_metric(self.svc.store._read)
        cluster = GaugeMetricFamily("tessera_cluster_gpus", "GPUs of the cluster, per flavor.",
                                    labels=["flavor"])
        for flavor, n in self.svc.cluster.gpus_by_flavor().items():
            cluster.add_metric([flavor.short], n)
        yield cluster

    def _counters(self) -> Iterator[Metric]:
        t = self.tally
        moves = CounterMetricFamily(
            "tessera_job_transitions", "Job state transitions, from the store's event log "
            "(kept across restarts; jobs pruned by the stored-job caps no longer count). A "
            "submission counts as from_state none.", labels=["from_state", "to_state"])
        for (old, new), n in sorted(t.transitions.items()):
            moves.add_metric([old, new], n)
        preempt = CounterMetricFamily(
            "tessera_preemptions", "Runs the scheduler stopped, or planned runs it withdrew, "
            "by reason: policy (preempted for a higher-ranked job), move, resize.",
            labels=["reason"])
        for reason, n in sorted(t.preemptions.items()):
            preempt.add_metric([reason], n)
        yield moves
        yield preempt
        yield CounterMetricFamily(
            "tessera_job_retries", "Failed runs requeued because their job had retries left "
            "(max_retries), from the store's event log.", value=t.retries)
        yield CounterMetricFamily(
            "tessera_runs_lost", "Runs that ended without an exit status (runner, actor or "
            "node gone; launch failed), from the store's event log.", value=t.runs_lost)

    def _jobs(self, records: list[ActiveJob], holding: list[Allocation]) -> Iterator[Metric]:
        latest = {a.job_id: a for a in holding}  # ordered by creation: the last run wins
        last = self.svc.last_decision
        decided = last.pending if last is not None else {}
        backoff = self.svc.backoff
        now_s = self.svc.clock()
        pending: Counter[tuple[str, str, str]] = Counter()
        placed: dict[JobState, Counter[tuple[str, str]]] = {
            JobState.ADMITTED: Counter(), JobState.RUNNING: Counter()}
        for r in records:
            if r.state is JobState.PENDING:
                flavor = r.flavor or ANY_FLAVOR
                why = decided.get(JobId(r.job_id))
                reason = ("unplaceable" if backoff.get(r.job_id, (0.0,))[0] > now_s
                          else why.kind.name.lower() if why is not None else "undecided")
                pending[(r.queue, flavor, reason)] += 1
            elif r.state in placed:
                a = latest.get(r.job_id)
                for flavor in _flavors_of(a):
                    placed[r.state][(r.queue, flavor)] += 1
        yield _gauge("tessera_jobs_pending", "Jobs waiting, by queue, the flavor they ask for "
                     "(any: more than one) and the reason of the last decision.",
                     ["queue", "flavor", "reason"], pending)
        yield _gauge("tessera_jobs_admitted", "Jobs given GPUs whose run is being launched, "
                     "by queue and flavor.", ["queue", "flavor"], placed[JobState.ADMITTED])
        yield _gauge("tessera_jobs_running", "Jobs running, by queue and flavor (a mixed gang "
                     "under each of its flavors).", ["queue", "flavor"],
                     placed[JobState.RUNNING])

    def _quotas(self, records: list[ActiveJob], holding: list[Allocation]) -> Iterator[Metric]:
        quotas = self.svc.tenancy.quotas
        queue_of = {r.job_id: r.queue for r in records}
        used: Counter[tuple[str, str]] = Counter()
        for a in holding:
            queue = queue_of.get(a.job_id) or self._queue_of(a.job_id)
            q = quotas.get(queue) if queue is not None else None
            if q is None:
                continue
            for flavor, n in a.placement.flavor_counts():
                used[(q.name, flavor.short if q.by_flavor else ANY_FLAVOR)] += n
        labels = ["queue", "flavor"]
        nominal = GaugeMetricFamily("tessera_queue_nominal_gpus", "A queue's nominal "
                                    "(guaranteed) GPUs, per flavor or flavor=any.", labels=labels)
        limit = GaugeMetricFamily("tessera_queue_borrowing_limit_gpus", "GPUs a queue may "
                                  "borrow beyond nominal (absent: no limit).", labels=labels)
        in_use = GaugeMetricFamily("tessera_queue_used_gpus", "GPUs a queue's runs hold "
                                   "(planned, running, draining).", labels=labels)
        borrowed = GaugeMetricFamily("tessera_queue_borrowed_gpus", "GPUs a queue uses beyond "
                                     "its nominal quota.", labels=labels)
        for q in quotas.values():
            for label, nominal_gpus, borrow in _quota_lines(q):
                key = [q.name, label]
                n = used.pop((q.name, label), 0)
                nominal.add_metric(key, nominal_gpus)
                if borrow is not None:
                    limit.add_metric(key, borrow)
                in_use.add_metric(key, n)
                borrowed.add_metric(key, max(n - nominal_gpus, 0))
        for (queue, label), n in sorted(used.items()):  # a flavor outside the queue's quota
            in_use.add_metric([queue, label], n)
            borrowed.add_metric([queue, label], n)
        yield from (nominal, limit, in_use, borrowed)

    def _speeds(self, holding: list[Allocation]) -> Metric:
        """Each running job's speed on its flavor: the prior the scheduler started from
        (``predicted``) and, once the job reports progress, the measured rate it now schedules
        with (``measured``; docs/live.md, "Progress reports"). Running jobs only, so the series
        come and go with runs; a mixed gang has no one flavor and is left out."""
        g = GaugeMetricFamily(
            "tessera_job_speed_steps_per_s", "A running job's steps per second on its flavor: "
            "source=predicted is the prior (a table, or 1 for a job no table knows), "
            "source=measured the rate its progress reports give.",
            labels=["job", "queue", "flavor", "source"])
        for a in holding:
            flavor = a.placement.sole_flavor
            rec = self.svc.store.get(a.job_id) if a.status == "running" else None
            if flavor is None or rec is None:
                continue
            labels = [a.job_id, rec.queue, flavor.short]
            g.add_metric([*labels, "predicted"], prior_rate(self.svc, rec, flavor))
            measured = self.svc.progress.measured(a.job_id).get(flavor)
            if measured is not None:
                g.add_metric([*labels, "measured"], measured)
        return g

    def _queue_of(self, job_id: str) -> str | None:
        """The queue of a finished job whose run still drains (a cancel)."""
        rec = self.svc.store.get(job_id)
        return rec.queue if rec is not None else None


def _quota_lines(q: QueueQuota) -> Iterable[tuple[str, int, int | None]]:
    """``(flavor label, nominal GPUs, borrowing limit)`` of each line of a queue's quota."""
    if not q.by_flavor:
        return [(ANY_FLAVOR, q.nominal_gpus, q.borrowing_limit_gpus)]
    return [(f.short, fq.nominal_gpus, fq.borrowing_limit_gpus) for f, fq in q.flavors.items()]


def _flavors_of(a: Allocation | None) -> list[str]:
    """The flavor labels of a run (``any`` when the job has no run on record)."""
    if a is None:
        return [ANY_FLAVOR]
    return [f.short for f, _ in a.placement.flavor_counts()]


def _gauge(name: str, doc: str, labels: list[str],
           values: Counter[tuple[str, str, str]] | Counter[tuple[str, str]]) -> Metric:
    g = GaugeMetricFamily(name, doc, labels=labels)
    for key, n in sorted(values.items()):
        g.add_metric(list(key), n)
    return g
