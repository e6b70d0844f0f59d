"""The slow-node rule (issue 37 part 2, live): every job on a node persistently slower than
the same jobs elsewhere marks it slow; normal speed there clears it."""

from __future__ import annotations

from tessera.live.progress import RunRate
from tessera.live.slownodes import SlowNodes
from tessera.model.gpus import resolve_flavor


def _rr(run: int, node: str, rate: float, since_s: float = 0.0, updated_s: float = 1000.0,
        flavor: str = "v100") -> RunRate:
    return RunRate(run, resolve_flavor(flavor), (node,), rate, 10, since_s, updated_s)


def _no_prior(_j: str, _f: str) -> float | None:
    return None


def _own_queue(job_id: str) -> str:
    """Each job in a queue of its own (the rule wants two queues' evidence)."""
    return "q-" + job_id


def test_every_job_slower_than_elsewhere_for_the_hold_time_marks_the_node() -> None:
    rule = SlowNodes()
    runs = {"j-a": [_rr(1, "n1", 10.0), _rr(2, "n3", 5.0)],
            "j-b": [_rr(1, "n2", 20.0), _rr(2, "n3", 12.0)]}
    ev = rule.evidence(runs, 1000.0, _no_prior, _own_queue)
    assert sorted(e.job_id for e in ev["n3"]) == ["j-a", "j-b"]
    (text,) = rule.update(ev, 1000.0)
    assert text.startswith("node n3 marked slow: every job there runs more than 30% slower")
    assert "j-a 5 vs 10 steps/s (50% slower)" in text and "j-b 12 vs 20" in text
    assert set(rule.marked) == {"n3"}
    # speed comes back on n3 (a fresh run at 95 % of elsewhere): cleared, with an event
    runs["j-a"].append(_rr(3, "n3", 9.5, 1100.0, 1200.0))
    (cleared,) = rule.update(rule.evidence(runs, 1200.0, _no_prior, _own_queue), 1200.0)
    assert cleared.startswith("node n3 no longer slow") and not rule.marked


def test_one_job_one_fast_job_or_a_short_spell_marks_nothing() -> None:
    rule = SlowNodes()
    one = {"j-a": [_rr(1, "n1", 10.0), _rr(2, "n3", 5.0)]}
    assert rule.update(rule.evidence(one, 1000.0, _no_prior, _own_queue), 1000.0) == []
    mixed = {**one, "j-b": [_rr(1, "n2", 20.0), _rr(2, "n3", 19.0)]}
    assert rule.update(rule.evidence(mixed, 1000.0, _no_prior, _own_queue), 1000.0) == []
    short = {**one, "j-b": [_rr(1, "n2", 20.0), _rr(2, "n3", 10.0, since_s=900.0)]}
    # 100 s < 300
    assert rule.update(rule.evidence(short, 1000.0, _no_prior, _own_queue), 1000.0) == []
    assert not rule.marked


def test_a_job_that_ran_nowhere_else_is_compared_with_its_table_prior() -> None:
    rule = SlowNodes(hold_s=0.0)
    runs = {"j-a": [_rr(1, "n3", 5.0)], "j-b": [_rr(1, "n3", 6.0)]}
    # an arbitrary prior: no evidence
    assert rule.evidence(runs, 1000.0, _no_prior, _own_queue) == {}
    assert rule.update(rule.evidence(runs, 1000.0, lambda _j, _f: 10.0, _own_queue), 1000.0)
    assert set(rule.marked) == {"n3"}
    stale = rule.evidence(runs, 1000.0 + rule.fresh_s + 1, lambda _j, _f: 10.0, _own_queue)
    assert stale == {}
    (gone,) = rule.update({}, 1000.0 + rule.expire_s + 1)
    assert "no longer avoided" in gone and not rule.marked


def test_one_queues_jobs_alone_never_mark_a_node() -> None:
    """A job's reports are its tenant's word: two jobs of one queue both reporting slow on a node
    (a hostile tenant closing the node to the others) mark nothing; a second queue's job that
    agrees does."""
    rule = SlowNodes()
    runs = {"j-a": [_rr(1, "n1", 10.0), _rr(2, "n3", 5.0)],
            "j-b": [_rr(1, "n2", 20.0), _rr(2, "n3", 12.0)]}
    assert rule.update(rule.evidence(runs, 1000.0, _no_prior, lambda _j: "team-a"),
                       1000.0) == []
    assert not rule.marked
    assert rule.update(rule.evidence(runs, 1000.0, _no_prior,
                                     {"j-a": "team-a", "j-b": "team-b"}.__getitem__), 1000.0)
    assert set(rule.marked) == {"n3"}
