"""Snapshots of the Ray rank hosts, taken without waiting (``ray.polls.RankPolls``).

No Ray cluster needed: the hosts are fakes whose ``poll_all`` answers when the test says, so
the interleavings a loaded machine produces can be written down one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from tessera.live.executors.ray.polls import ABSENT, RUNNING, Poll, RankPolls  # noqa: E402
from tessera.live.executors.ray.worker import RankKey  # noqa: E402


@dataclass(eq=False)
class _Ref:
    node: str
    value: dict[RankKey, Poll] | None = None
    error: BaseException | None = None

    @property
    def answered(self) -> bool:
        return self.value is not None or self.error is not None


@dataclass
class _Hosts:
    """What each node's host holds; a ``poll_all`` sees it as it is when the host answers."""

    held: dict[str, dict[RankKey, Poll]] = field(default_factory=dict)
    sent: list[_Ref] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)
    silent: set[str] = field(default_factory=set)
    forgotten: list[str] = field(default_factory=list)
    now_s: float = 0.0

    def ask(self, node: str) -> _Ref:
        ref = _Ref(node)
        self.sent.append(ref)
        return ref

    def answer(self) -> None:
        """Every host answers the polls sent to it so far."""
        for ref in self.sent:
            if ref.answered or ref.node in self.silent:
                continue
            if ref.node in self.dead:
                ref.error = ray.exceptions.RayActorError(error_msg="host died")
            else:
                ref.value = dict(self.held.get(ref.node, {}))

    def wait(self, refs: list[_Ref], num_returns: int, timeout: float) -> tuple[list[_Ref],
                                                                              list[_Ref]]:
        if timeout > 0:  # a blocking wait: the hosts answer meanwhile
            self.answer()
            self.now_s += timeout if any(not r.answered for r in refs) else 0.0
        done = [r for r in refs if r.answered]
        return done, [r for r in refs if not r.answered]

    @staticmethod
    def get(ref: _Ref) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value


def _polls(hosts: _Hosts) -> RankPolls:
    return RankPolls(hosts.ask, hosts.forgotten.append, ttl_s=0.2, timeout_s=10.0,
                     wait=hosts.wait, get=hosts.get, clock=lambda: hosts.now_s)


def test_a_snapshot_asked_before_a_rank_started_never_calls_it_absent() -> None:
    """The race that lost runs: a ``poll_all`` that ran before a rank's start, answering
    after the executor saw the start return, must not make a running run "absent"."""
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}})
    polls = _polls(hosts)
    polls.confirm("a", 1)
    assert polls.polls([("n1", ("a", 1, 0))], {"n1"}) == [RUNNING]  # snapshot 1 asked
    hosts.answer()  # snapshot 1 is taken on the host before run b's rank starts there
    hosts.held["n1"][("b", 1, 0)] = RUNNING
    polls.confirm("b", 1)  # the executor saw b's start call return
    hosts.now_s += 0.05
    assert polls.polls([("n1", ("b", 1, 0))], {"n1"}) == [RUNNING]  # not ABSENT
    assert polls.polls([("n1", ("a", 1, 0))], {"n1"}) == [RUNNING]
    # A snapshot asked after b started judges it: here, it has ended.
    hosts.held["n1"][("b", 1, 0)] = ("exited", 0, False)
    hosts.now_s += 0.25
    assert polls.polls([("n1", ("b", 1, 0))], {"n1"}) == [RUNNING]  # snapshot 2 asked
    hosts.answer()
    hosts.now_s += 0.05
    assert polls.polls([("n1", ("b", 1, 0))], {"n1"}) == [("exited", 0, False)]


def test_a_rank_half_started_when_its_host_answered_is_not_absent() -> None:
    """What the reverted non-blocking polls (commit 495eb96) got wrong: they kept a rank that
    started after the ask as running only when the snapshot *lacked* it, but a host answering
    while ``start`` was half done (rank registered, no guardian yet) reports it ``absent``."""
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}})
    polls = _polls(hosts)
    polls.confirm("a", 1)
    polls.polls([("n1", ("a", 1, 0))], {"n1"})  # snapshot 1 asked
    hosts.held["n1"][("b", 1, 0)] = ABSENT  # b's start is under way on the host
    hosts.answer()
    hosts.held["n1"][("b", 1, 0)] = RUNNING
    polls.confirm("b", 1)
    hosts.now_s += 0.05
    assert polls.polls([("n1", ("b", 1, 0))], {"n1"}) == [RUNNING]


def test_a_rank_missing_from_a_snapshot_asked_after_it_started_is_absent() -> None:
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}})
    polls = _polls(hosts)
    polls.confirm("a", 1)
    polls.polls([("n1", ("a", 1, 0))], {"n1"})
    del hosts.held["n1"][("a", 1, 0)]  # the host forgot it (a new host after a restart)
    hosts.answer()
    hosts.now_s += 0.05
    assert polls.polls([("n1", ("a", 1, 0))], {"n1"}) == [ABSENT]


def test_the_loop_never_waits_for_a_snapshot_of_runs_it_started() -> None:
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}}, silent={"n1"})
    polls = _polls(hosts)
    polls.confirm("a", 1)
    for _ in range(3):
        assert polls.polls([("n1", ("a", 1, 0))], {"n1"}) == [RUNNING]
        hosts.now_s += 0.05
    assert len(hosts.sent) == 1 and hosts.now_s == pytest.approx(0.15)  # one ask, no wait


def test_an_adopted_run_missing_from_the_snapshot_in_hand_is_asked_afresh() -> None:
    """A run the executor did not start (adopted after a restart) needs a definite answer:
    one missing from the snapshot in hand is polled again, waiting."""
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}})
    polls = _polls(hosts)
    assert polls.polls([("n1", ("a", 1, 0))], {"n1"}) == [RUNNING]  # the first: waited for
    hosts.held["n1"][("old", 3, 0)] = RUNNING
    assert polls.polls([("n1", ("old", 3, 0))], {"n1"}) == [RUNNING]
    assert len(hosts.sent) == 2
    assert polls.polls([("n1", ("gone", 2, 0))], {"n1"}) == [ABSENT]


def test_a_dead_host_fails_its_ranks_and_is_forgotten() -> None:
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}, "n2": {("b", 1, 0): RUNNING}}, dead={"n2"})
    polls = _polls(hosts)
    assert polls.polls([("n1", ("a", 1, 0))], {"n1", "n2"}) == [RUNNING]
    assert hosts.forgotten == ["n2"]
    with pytest.raises(ray.exceptions.RayActorError):
        polls.polls([("n2", ("b", 1, 0))], {"n1", "n2"})


def test_a_host_that_does_not_answer_in_time_is_a_timeout() -> None:
    hosts = _Hosts({"n1": {("a", 1, 0): RUNNING}}, silent={"n1"})
    polls = _polls(hosts)
    with pytest.raises(ray.exceptions.GetTimeoutError, match="did not answer in 10 s"):
        polls.polls([("n1", ("a", 1, 0))], {"n1"})
