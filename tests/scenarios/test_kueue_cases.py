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
