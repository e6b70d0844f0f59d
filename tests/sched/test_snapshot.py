"""Placement identity: what co-location counts as "the same GPUs"."""

from __future__ import annotations

from dataclasses import replace

from tessera.sched.snapshot import Placement


def test_same_gpus_ignores_the_partner_and_the_batch_but_not_the_gpus() -> None:
    p = Placement("V100-16GB", (("v100-0000", 2),))
    assert p.same_gpus(replace(p, colocated_with=("b",), global_batch_samples=64))
    assert not p.same_gpus(Placement("V100-16GB", (("v100-0001", 2),)))
    assert not p.same_gpus(Placement("K80", (("v100-0000", 2),)))
    assert not p.same_gpus(Placement("V100-16GB", (("v100-0000", 1),)))
