"""Kueue's own table-driven preemption cases, translated to Tessera's objects (issue 32, part 8).

Each file under ``cases/kueue/`` is one case of ``pkg/scheduler/preemption/preemption_test.go``
or ``preemption_fair_test.go`` (its ``source:`` names the test), with Kueue's expected admission
and victims. A case runs one FIFO decision over its snapshot; Tessera must admit exactly the
jobs Kueue admits, on the same flavor, and preempt exactly Kueue's victims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.model import Case, case_files, load_case
from tests.scenarios.runner import check_case

FILES = case_files("kueue")


def test_at_least_thirty_kueue_cases_each_naming_its_source() -> None:
    cases = [load_case(p) for p in FILES]
    assert len(cases) >= 30
    for c in cases:
        assert c.source.startswith("pkg/scheduler/"), c.name
        assert "/" in c.source.split(" ", 1)[1], f"{c.name}: source must name Test/case"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_kueue_case(path: Path) -> None:
    case: Case = load_case(path)
    check_case(case)


@pytest.mark.parametrize("path", [*FILES, *case_files("threads")],
                         ids=[p.stem for p in [*FILES, *case_files("threads")]])
def test_expected_outcome_is_consistent(path: Path) -> None:
    """The expectation itself (no engine involved): victims were running, admitted jobs were
    waiting, and after the expected decision every flavor holds what it has and every queue
    stays within nominal + borrowing limit on each flavor, so a typo in a translation shows
    here rather than as a puzzling engine failure."""
    case = load_case(path)
    e = case.expect
    running = {j.name: j for j in case.running}
    pending = {j.name: j for j in case.pending}
    assert e.preempted <= set(running), "a victim that was not running"
    assert set(e.admitted) <= set(pending), "an admitted job that was not waiting"
    capacity: dict[str, int] = {}
    for p in case.cluster:
        capacity[p.flavor.short] = capacity.get(p.flavor.short, 0) + p.nodes * p.gpus_per_node
    used: dict[tuple[str, str], int] = {}
    for j in running.values():
        if j.name not in e.preempted:
            used[(j.queue, j.flavor.short)] = used.get((j.queue, j.flavor.short), 0) + j.gpus
    for name, flavor in e.admitted.items():
        if flavor is not None:
            key = (pending[name].queue, flavor.short)
            used[key] = used.get(key, 0) + pending[name].gpus
    for f, cap in capacity.items():
        assert sum(n for (_q, g), n in used.items() if g == f) <= cap, f
    for (queue, f), n in used.items():
        q = case.tenancy.queues[queue]
        line = next((fq for fl, fq in q.flavors.items() if fl.short == f), None)
        assert line is not None, f"{queue} runs on {f}, which it does not list"
        if line.borrowing_limit_gpus is not None:
            assert n <= line.nominal_gpus + line.borrowing_limit_gpus, (queue, f, n)
