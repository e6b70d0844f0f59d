"""A ClusterQueue whose ``metadata.annotations`` is not a mapping (a list, or a string from a
lost indent) had its Tessera annotations silently dropped: its ``cpus``/``memory`` quota for
CPU-only jobs vanished (no limit) and its ``min_admitted_s`` with it. Kubernetes refuses such an
object; the reader now says so in one line."""

from __future__ import annotations

from typing import Any

import pytest

from tessera.errors import SpecError
from tessera.live.kueue_read import tenancy_from_kueue
from tests.live.test_kueue_read import base_docs


@pytest.mark.parametrize("block", [["tessera.io/cpu-only-cpus: 8"],
                                   "tessera.io/cpu-only-cpus: 8", 8])
def test_annotations_that_are_not_a_mapping_are_refused(block: Any) -> None:
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = block
    with pytest.raises(SpecError, match=r"ClusterQueue '.*': metadata\.annotations: not a "
                                        r"mapping of strings") as e:
        tenancy_from_kueue([("t.yaml", d) for d in docs])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("block", [None, {}])
def test_absent_or_empty_annotations_still_read(block: Any) -> None:
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = block
    q = tenancy_from_kueue([("t.yaml", d) for d in docs]).tree.queues[cq["metadata"]["name"]]
    assert q.nominal_cpus is None and q.min_admitted_s is None
