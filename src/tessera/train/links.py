"""Emulated slow links between ranks (``tessera train --link-gbps G``).

On this machine the ranks exchange gradients over loopback, many GB/s. To see what a step costs
when the ranks are joined by Ethernet, each step's exchange is made to last as long as it would
on a link of ``G`` gigabits per second with ``latency_us`` per hop:

    modelled_s = Σ over the step's collectives of
                 ring all-reduce:  2(n−1) · latency + 2(n−1)/n · S / (G/8 GB/s)
                 ring all-gather:   (n−1) · latency + (Σ S_i − min S_i) / (G/8 GB/s)

with ``S`` the bytes *actually sent* by each rank for that collective -- the compressed bytes
(:func:`tessera.perf.compression.wire_collectives`, or 3LC's real message sizes), not the fp32
gradient -- the same formulas the planner uses (:mod:`tessera.perf.comm`). After the real gloo
collectives (and the codec work around them) return, the rank sleeps the difference::

    exchange lasts max(measured exchange, modelled_s)

Every rank computes the same ``modelled_s`` (the sizes are known to all), so they leave the
exchange together. One caveat of ``max``: when the modelled wire time is longer than the
measured exchange, the codec's compute overlaps it (as it could with bucketing on real links);
when it is shorter (compressed schemes on a slow link, every scheme on a fast one), the codec's
real cost shows in full.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.perf.comm import RingPath
from tessera.perf.compression import Collective, collectives_time_s

DEFAULT_LATENCY_US = 50.0
"""Per-hop latency of the emulated link: a switched 1-10 Gb/s Ethernet hop with TCP."""


@dataclass(frozen=True, slots=True)
class EmulatedLink:
    """A link of ``gbit_s`` gigabits per second (one direction) and ``latency_us`` per hop."""

    gbit_s: float
    latency_us: float = DEFAULT_LATENCY_US

    def __post_init__(self) -> None:
        if not self.gbit_s > 0:
            raise SpecError(f"--link-gbps must be > 0, got {self.gbit_s}")
        if self.latency_us < 0:
            raise SpecError(f"link latency must be ≥ 0 µs, got {self.latency_us}")

    def ring(self, n_workers: int) -> RingPath:
        """The ring of ``n_workers`` ranks over this link (GB/s = Gb/s ÷ 8)."""
        return RingPath(n_workers, self.gbit_s / 8.0, self.latency_us)

    def time_s(self, wire: Sequence[Collective], n_workers: int) -> float:
        """How long ``wire`` takes on this link (the modelled time of the module docstring)."""
        if n_workers <= 1:
            return 0.0
        return collectives_time_s(wire, self.ring(n_workers))

    def pad(self, wire: Sequence[Collective], n_workers: int, started_s: float) -> float:
        """Sleep until the modelled time since ``started_s`` (a perf_counter value) has passed.

        Returns:
            The emulated exchange time: ``max(measured, modelled)``.
        """
        remaining = started_s + self.time_s(wire, n_workers) - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return time.perf_counter() - started_s
