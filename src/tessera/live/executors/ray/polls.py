"""How the Ray executor learns its ranks' states: snapshots of every host, never waited for.

The service asks about every run in turn, often; a round trip to a rank's host per run cost
tens of milliseconds each on a busy machine. Instead one ``poll_all`` per node asks each host
for the state of every rank it holds, and the answers together form a **snapshot**. A new
snapshot is asked for at most every ``ttl_s``; the scheduling loop never waits for it while a
launch is under way: it keeps judging runs by the last snapshot that arrived.

**Which snapshot may judge which run.** A host is a threaded actor: a ``poll_all`` may run
before, during or after a ``start`` sent earlier. A snapshot asked for *before* a rank's start
call returned may therefore lack the rank, or show it between registration and process start
(``absent``) -- while the executor has just seen the rank start and called the run
``running``. Judging the run by such a snapshot says "absent", and the service records a run
that is running fine as lost ("executor has no record of this run"). So snapshots are
numbered, and a run the executor saw start (:meth:`RankPolls.confirm`) is judged only by a
snapshot asked for after that; until one arrives it is ``running``, as the start said. A run
the executor did not start itself (adopted after a restart) started before any snapshot of
this executor, so any snapshot may judge it; one missing from the snapshot in hand is asked
about afresh, waiting, as a restart needs a definite answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray

from tessera.live.executors.ray.worker import RankKey

Poll = tuple[str, int | None, bool]
"""A rank's ``(state, status, stopped)`` as its host reports it (``RankHost.poll``)."""
RUNNING: Poll = ("running", None, False)
ABSENT: Poll = ("absent", None, False)
#: How often, at most, a pending snapshot is looked at without waiting (the service asks about
#: every run in turn; a ``ray.wait`` per run cost a millisecond each on a busy machine).
CHECK_S = 0.02


@dataclass
class _Asked:
    """A snapshot asked for and not yet complete: each node's ``poll_all`` ref."""

    number: int
    at_s: float
    refs: dict[str, Any]


@dataclass
class _Snapshot:
    """A complete snapshot: the ranks every answering host holds, and the hosts that failed
    (their node, and the error: the actor died, or it did not answer in time)."""

    number: int = 0  # 0: none yet
    polls: dict[RankKey, Poll] = field(default_factory=dict)
    failed: dict[str, BaseException] = field(default_factory=dict)


class RankPolls:
    """Numbered, non-blocking snapshots of the hosts' ranks (module docstring).

    ``ask(node)`` sends one host's ``poll_all`` and returns its ref; ``wait`` and ``get`` are
    Ray's (replaceable in tests). ``forget_host(node)`` is called for a host that died.
    """

    def __init__(self, ask: Callable[[str], Any], forget_host: Callable[[str], None],
                 ttl_s: float, timeout_s: float = 10.0,
                 wait: Callable[..., tuple[list[Any], list[Any]]] = ray.wait,
                 get: Callable[..., Any] = ray.get,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask_host = ask
        self._forget_host = forget_host
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._wait = wait
        self._get = get
        self._clock = clock
        self._asked_n = 0
        self._asked_at_s = float("-inf")
        self._pending: _Asked | None = None
        self._held = _Snapshot()
        self._checked_at_s = float("-inf")
        self._confirmed: dict[tuple[str, int], int] = {}  # run → snapshots asked before start

    def confirm(self, job_id: str, run: int) -> None:
        """The run's ranks have started (their start calls returned): only a snapshot asked
        for from now on may judge them."""
        self._confirmed[(job_id, run)] = self._asked_n

    def forget(self, job_id: str, run: int) -> None:
        self._confirmed.pop((job_id, run), None)

    def polls(self, ranks: list[tuple[str, RankKey]], nodes: Iterable[str]) -> list[Poll]:
        """Each rank's poll, for the ranks of one run given as ``(node, key)``; ``nodes``:
        every node that holds a rank of some run (asked in each snapshot).

        Raises:
            RayActorError: the host of one of the ranks died (it does not hold them).
            GetTimeoutError: that host did not answer in ``timeout_s``.
        """
        now_s = self._clock()
        self._collect(now_s, block=False)
        if self._pending is None and now_s - self._asked_at_s >= self.ttl_s:
            self._ask({*nodes, *(n for n, _k in ranks)}, now_s)
        if not ranks:
            return []
        run = ranks[0][1][:2]
        started_n = self._confirmed.get((run[0], int(run[1])))
        if started_n is not None and self._held.number <= started_n:
            return [RUNNING] * len(ranks)  # no snapshot asked since they started has come
        if started_n is None and (self._held.number == 0 or
                                  any(k not in self._held.polls for _n, k in ranks)):
            if self._pending is None:
                self._ask({*nodes, *(n for n, _k in ranks)}, now_s)
            self._collect(now_s, block=True)
        out = []
        for node, key in ranks:
            got = self._held.polls.get(key)
            if got is None and node in self._held.failed:
                raise self._held.failed[node]
            out.append(got or ABSENT)
        return out

    def _ask(self, nodes: set[str], now_s: float) -> None:
        self._asked_n += 1
        self._asked_at_s = now_s
        self._pending = _Asked(self._asked_n, now_s, {n: self._ask_host(n) for n in nodes})

    def _collect(self, now_s: float, block: bool) -> None:
        """Make the pending snapshot the held one once every host answered (``block``: wait
        for that, up to ``timeout_s`` after it was asked); hosts that have not answered
        ``timeout_s`` after the ask count as failed with a timeout."""
        asked = self._pending
        if asked is None or (not block and now_s - self._checked_at_s < CHECK_S):
            return
        self._checked_at_s = now_s
        refs = list(asked.refs.values())
        wait_s = max(asked.at_s + self.timeout_s - now_s, 0.0) if block else 0.0
        done, _ = self._wait(refs, num_returns=len(refs), timeout=wait_s)
        late = now_s + wait_s - asked.at_s >= self.timeout_s
        if len(done) < len(refs) and not late:
            return
        ready = set(done)
        snap = _Snapshot(asked.number)
        for node, ref in asked.refs.items():
            if ref not in ready:
                snap.failed[node] = ray.exceptions.GetTimeoutError(
                    f"the rank host of node {node} did not answer in {self.timeout_s:g} s")
                continue
            try:
                snap.polls.update(self._get(ref))
            except ray.exceptions.RayActorError as e:
                self._forget_host(node)
                snap.failed[node] = e
        self._held, self._pending = snap, None
