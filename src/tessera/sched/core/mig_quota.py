"""MIG slices as quota resources (Kueue's ``nvidia.com/mig-<g>g.<m>gb``), charged by what a
slice uses.

A queue may hold quota in MIG slices of one GPU flavor instead of (or beside) whole GPUs:
Kueue names each MIG profile as its own resource (``nvidia.com/mig-1g.10gb``), and a
ClusterQueue lists a quota per profile. Counted per profile, a ``1g.10gb`` and a ``7g.80gb``
cost the same one unit, though the second uses 8 times the memory and 7 times the compute.
Kueue #10108 (counter-based quota for partitionable devices, KEP-4815) proposes charging a
slice by the *counters* it consumes on its GPU instead: the compute slices (of 7) and memory
slices (of 8) that NVIDIA's MIG lattice gives each profile
(``tessera/data/mig/mig_profiles.json``).

Here a queue's MIG quota lines (:class:`MigQuota`, one per profile, as Kueue writes them) add
up to a **counter budget** (:class:`MigCharge`): ``nominal_slices`` of profile *p* give
``nominal_slices × counters(p)``. A request for slices is charged its counters
(:func:`mig_charge`) and fits while both counters stay within the budget
(:func:`fits_mig_quota`). So a queue given four ``1g.10gb`` slices (4 compute, 4 memory
counters) cannot run one ``7g.80gb`` (7, 8), while one given a ``7g.80gb`` may run it, or seven
``1g.10gb`` slices in its place.

The live inference services charge their slices here (:mod:`tessera.live.inference.planstate`,
issue 36). The values are read and written by the tenancy readers (Tessera YAML and Kueue YAML)
so that a platform team's quotas survive the round trip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.share.mig import MigLayoutError, mig_gpu

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""Kueue (and the NVIDIA device plugin's ``mixed`` strategy) name a MIG profile's resource
``nvidia.com/mig-<profile>``."""

_PROFILE = re.compile(r"[1-7]g\.[0-9]+gb(\+me)?")


def mig_resource(profile: str) -> str:
    """The Kubernetes resource name of a MIG profile: ``1g.10gb`` -> ``nvidia.com/mig-1g.10gb``."""
    return MIG_RESOURCE_PREFIX + profile


def mig_profile_of(resource: str) -> str | None:
    """The profile a resource name holds (``nvidia.com/mig-1g.10gb`` -> ``1g.10gb``), or
    ``None`` when ``resource`` is not a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource[len(MIG_RESOURCE_PREFIX):]
    return profile if _PROFILE.fullmatch(profile) else None


@dataclass(frozen=True, slots=True)
class MigCharge:
    """What MIG slices use of their GPUs: compute slices (7 per GPU) and memory slices (8 per
    GPU), Kueue #10108's counters."""

    compute_slices: int
    memory_slices: int

    def __add__(self, other: MigCharge) -> MigCharge:
        return MigCharge(self.compute_slices + other.compute_slices,
                         self.memory_slices + other.memory_slices)

    def times(self, n: int) -> MigCharge:
        return MigCharge(self.compute_slices * n, self.memory_slices * n)

    def within(self, budget: MigCharge) -> bool:
        """Whether both counters stay within ``budget``'s."""
        return (self.compute_slices <= budget.compute_slices
                and self.memory_slices <= budget.memory_slices)


NO_CHARGE = MigCharge(0, 0)


def mig_charge(flavor: GpuFlavor, profile: str, count: int = 1) -> MigCharge:
    """The counters ``count`` slices of ``profile`` use on ``flavor``: a ``7g.80gb`` on an
    A100-80GB uses 7 of its 7 compute slices and 8 of its 8 memory slices; a ``1g.10gb`` 1 and 1.

    Raises:
        SpecError: a flavor without MIG, a profile that flavor does not have, or a negative
            count.
    """
    if count < 0:
        raise SpecError(f"MIG {profile} on {flavor.short}: count must be >= 0, got {count}")
    try:
        p = mig_gpu(flavor.name).profile(profile)
    except MigLayoutError as e:
        raise SpecError(str(e)) from None
    return MigCharge(p.compute_slices, p.memory_slices).times(count)


@dataclass(frozen=True, slots=True)
class MigQuota:
    """One quota line in slices of one MIG profile (Kueue's resource ``nvidia.com/mig-<p>``).

    Attributes:
        profile: the MIG profile (``1g.10gb``), a profile of the flavor it is listed under.
        nominal_slices: slices guaranteed.
        borrowing_limit_slices: slices it may borrow beyond nominal (``None``: unlimited).
        lending_limit_slices: of its unused nominal slices, how many others may borrow
            (``None``: all).
    """

    profile: str
    nominal_slices: int
    borrowing_limit_slices: int | None = None
    lending_limit_slices: int | None = None

    def check(self, owner: str, flavor: GpuFlavor) -> None:
        """Refuse a profile ``flavor`` lacks and negative or fractional slice counts."""
        where = f"{owner} flavor {flavor.short!r} MIG {self.profile!r}"
        mig_charge_or_raise(where, flavor, self.profile)
        for name in ("nominal_slices", "borrowing_limit_slices", "lending_limit_slices"):
            value = getattr(self, name)
            if value is None and name != "nominal_slices":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpecError(f"{where}: {name} must be a whole number of slices, "
                                f"got {value!r}")
            if value < 0:
                raise SpecError(f"{where}: {name} must be >= 0, got {value}")
        lend = self.lending_limit_slices
        if lend is not None and lend > self.nominal_slices:
            raise SpecError(f"{where}: lending_limit_slices ({lend}) exceeds nominal_slices "
                            f"({self.nominal_slices})")


def mig_charge_or_raise(where: str, flavor: GpuFlavor, profile: str) -> MigCharge:
    """:func:`mig_charge` of one slice, its error prefixed by ``where``."""
    try:
        return mig_charge(flavor, profile)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


MigQuotas = Mapping[GpuFlavor, Mapping[str, MigQuota]]
"""A queue's MIG quota: per flavor, per profile, one line."""


def mig_budget(flavor: GpuFlavor, lines: Iterable[MigQuota]) -> MigCharge:
    """The counter budget ``lines`` give on ``flavor``: each line's nominal slices times its
    profile's counters (what a slice of that profile uses)."""
    total = NO_CHARGE
    for q in lines:
        total = total + mig_charge(flavor, q.profile, q.nominal_slices)
    return total


def fits_mig_quota(flavor: GpuFlavor, quota: Mapping[str, MigQuota],
                   used: Mapping[str, int], request: Mapping[str, int]) -> bool:
    """Whether ``request`` (slices by profile) fits ``quota`` on ``flavor`` next to ``used``,
    charging every slice by its counters (compute and memory), not by its count."""
    charged = NO_CHARGE
    for profile, n in used.items():
        charged = charged + mig_charge(flavor, profile, n)
    for profile, n in request.items():
        charged = charged + mig_charge(flavor, profile, n)
    return charged.within(mig_budget(flavor, quota.values()))
