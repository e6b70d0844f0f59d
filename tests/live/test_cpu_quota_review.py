"""Hostile review of the CPU-only quota additions (issue 33): torn Kueue annotations and what
a tenant's pending reason may say about other queues."""

from __future__ import annotations

from typing import Any

import pytest

from tessera.errors import SpecError
from tessera.live.kueue_read import tenancy_from_kueue
from tests.live.test_kueue_read import base_docs


@pytest.mark.parametrize("torn", [["24"], {"cpus": 24}, True, "nan", "inf", "-4"])
def test_a_torn_cpu_only_annotation_is_one_line_naming_the_key(torn: Any) -> None:
    """A list or a mapping raised TypeError (a traceback), ``true`` was read as 1 CPU, and
    nan/inf/-4 were refused without naming the annotation."""
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-cpus": torn}
    with pytest.raises(SpecError, match=r"metadata\.annotations\.tessera\.io/cpu-only-cpus: "
                                        r"not a number of CPUs \(>= 0\)") as e:
        tenancy_from_kueue([("t.yaml", d) for d in docs])
    assert "\n" not in str(e.value)


def test_a_plain_yaml_number_annotation_still_reads() -> None:
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-memory-gib": 64}
    q = tenancy_from_kueue([("t.yaml", d) for d in docs]).tree.queues[cq["metadata"]["name"]]
    assert q.nominal_mem_gib == 64.0
