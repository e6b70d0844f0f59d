"""Slow nodes: a node on which every job runs persistently slower than the same jobs elsewhere.

From the progress reports' run estimates (:mod:`tessera.live.progress`) the rule is:

* **evidence** is a run that sits on one node and whose estimate is fresh (updated within
  :attr:`SlowNodes.fresh_s`, 120 s); the run's **reference** is the median rate of the same
  job's runs on the same flavor on *other* nodes, else its table prior on that flavor (a job
  with no table prior and no run elsewhere gives no evidence: its prior is arbitrary);
* a run is **slow** when its rate is more than :attr:`SlowNodes.threshold` (30 %) below its
  reference -- well outside the few percent that step times of one job vary between healthy
  GPUs of one model, and what a throttled GPU, a noisy neighbour or a degraded link costs;
* a node is **marked slow** when at least :attr:`SlowNodes.min_jobs` (2) jobs of at least
  :attr:`SlowNodes.min_queues` (2) queues give evidence there, *every*
  one of them is slow, and each has been measured there for at least
  :attr:`SlowNodes.hold_s` (300 s) -- two jobs so that one job's own slowness (a bad input
  pipeline) does not condemn a node, all of them so that one fast job clears it, and five
  minutes so that a transient straggler (issue 37's coded steps handle those) does not.
  Two *queues*, because a job's reports are its own word: one tenant whose jobs all report
  slow on a node could otherwise close that node to every other tenant.

A slow node stays in the snapshot's ``down_nodes``: no new gang is placed there; running gangs
keep running. It is **cleared** when a fresh run there is within the threshold (normal speed
has returned), or after :attr:`SlowNodes.expire_s` (30 min) with no fresh slow evidence
(nothing new is placed there, so evidence may never come back), each with an event.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tessera.live.progress import RunRate
from tessera.model.gpus import GpuFlavor


@dataclass(frozen=True, slots=True)
class Evidence:
    """One fresh run on one node: its job, rate and reference (steps/s)."""

    job_id: str
    queue: str
    node: str
    steps_per_s: float
    reference: float
    since_s: float

    @property
    def ratio(self) -> float:
        return self.steps_per_s / self.reference


@dataclass
class SlowNodes:
    """The slow-node rule's settings and the nodes it marked (node -> when marked, last slow
    evidence)."""

    threshold: float = 0.30
    min_jobs: int = 2
    min_queues: int = 2
    hold_s: float = 300.0
    fresh_s: float = 120.0
    expire_s: float = 1800.0
    marked: dict[str, float] = field(default_factory=dict)

    def evidence(self, runs: Mapping[str, list[RunRate]], now_s: float,
                 prior: Callable[[str, GpuFlavor], float | None],
                 queue_of: Callable[[str], str]) -> dict[str, list[Evidence]]:
        """Per node, the fresh single-node runs with a reference (see the module docstring);
        ``queue_of`` names each job's queue."""
        out: dict[str, list[Evidence]] = {}
        for job_id, rrs in runs.items():
            for rr in rrs:
                if len(rr.nodes) != 1 or now_s - rr.updated_s > self.fresh_s:
                    continue
                node = rr.nodes[0]
                elsewhere = [o.steps_per_s for o in rrs
                             if o.flavor == rr.flavor and node not in o.nodes]
                ref = statistics.median(elsewhere) if elsewhere else prior(job_id, rr.flavor)
                if ref is None or ref <= 0:
                    continue
                out.setdefault(node, []).append(
                    Evidence(job_id, queue_of(job_id), node, rr.steps_per_s, ref, rr.since_s))
        return out

    def update(self, evidence: Mapping[str, list[Evidence]], now_s: float) -> list[str]:
        """Mark and clear nodes; returns the events' texts (one per change)."""
        events: list[str] = []
        for node, ev in sorted(evidence.items()):
            slow = [e for e in ev if e.ratio < 1.0 - self.threshold]
            if node in self.marked:
                normal = [e for e in ev if e.ratio >= 1.0 - self.threshold]
                if normal:
                    del self.marked[node]
                    e = normal[0]
                    events.append(f"node {node} no longer slow: {e.job_id} runs at "
                                  f"{e.steps_per_s:.3g} steps/s there ({e.ratio:.0%} of "
                                  f"{e.reference:.3g} elsewhere); gangs may be placed there")
                elif slow:
                    self.marked[node] = now_s
                continue
            held = [e for e in slow if now_s - e.since_s >= self.hold_s]
            if len(ev) >= self.min_jobs and len(held) == len(ev) and \
                    len({e.queue for e in ev}) >= self.min_queues:
                self.marked[node] = now_s
                what = "; ".join(f"{e.job_id} {e.steps_per_s:.3g} vs {e.reference:.3g} "
                                 f"steps/s ({1 - e.ratio:.0%} slower)" for e in ev)
                events.append(f"node {node} marked slow: every job there runs more than "
                              f"{self.threshold:.0%} slower than elsewhere for "
                              f"{self.hold_s:g} s ({what}); no new gangs are placed there")
        for node, last in sorted(self.marked.items()):
            if now_s - last > self.expire_s:
                del self.marked[node]
                events.append(f"node {node} no longer avoided: no slow run measured there "
                              f"for {self.expire_s:g} s")
        return events
