"""An unknown ``tessera.io/`` annotation on a Kueue object is refused (review4, item 4): a
platform engineer's typo (``tessera.io/cpu-only-cpu``) or a quota put on the wrong object (a
Cohort, a LocalQueue) was skipped like the cluster's own annotations, so the queue's CPU-only
jobs ran with no limit and nothing said so. Tessera owns the prefix; other prefixes are still
skipped."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.live.kueue_read import tenancy_from_kueue
from tests.live.test_kueue_read import base_docs


def _load_with(kind: str, notes: dict[str, str]) -> None:
    docs = base_docs()
    obj = next(d for d in docs if d["kind"] == kind)
    obj["metadata"]["annotations"] = notes
    tenancy_from_kueue([("t.yaml", d) for d in docs])


@pytest.mark.parametrize("key", ["tessera.io/cpu-only-cpu", "tessera.io/min-admitted",
                                 "tessera.io/cpu-only-memory"])
def test_a_misspelt_tessera_annotation_on_a_cluster_queue_is_one_line_naming_the_known_keys(
        key: str) -> None:
    with pytest.raises(SpecError) as e:
        _load_with("ClusterQueue", {key: "8"})
    msg = str(e.value)
    assert "\n" not in msg
    assert f"metadata.annotations.{key}: unknown Tessera annotation" in msg
    assert ("known: tessera.io/min-admitted-s, tessera.io/cpu-only-cpus, "
            "tessera.io/cpu-only-memory-gib") in msg


@pytest.mark.parametrize("kind", ["Cohort", "LocalQueue", "ResourceFlavor"])
def test_a_tessera_quota_annotation_on_another_kind_is_refused(kind: str) -> None:
    with pytest.raises(SpecError, match=rf"^{kind} '.*': metadata\.annotations\."
                                        r"tessera\.io/cpu-only-cpus: unknown Tessera "
                                        r"annotation \(this kind carries none; they go on a "
                                        r"ClusterQueue\)$"):
        _load_with(kind, {"tessera.io/cpu-only-cpus": "8"})


def test_known_keys_and_other_prefixes_still_read() -> None:
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-cpus": "8",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                     "example.com/tessera.io/x": "1"}
    q = tenancy_from_kueue([("t.yaml", d) for d in docs]).tree.queues[cq["metadata"]["name"]]
    assert q.nominal_cpus == 8
