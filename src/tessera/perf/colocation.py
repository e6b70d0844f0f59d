"""Measured speeds of two training jobs space-sharing the same GPUs (co-location).

Two jobs can share a GPU set: both processes hold memory on every GPU of the gang and the
device interleaves their kernels (MPS where the node has it, time-slicing otherwise). Each job
then runs slower than alone, but the pair often does more work per GPU-second than either job
alone, because one job's idle gaps (data loading, communication, small kernels) are filled by
the other's. Gavel (OSDI'20) measured this for every pair of its 26 job templates at the same
gang size on K80, P100 and V100: a pair entry gives both jobs' steps/s while sharing.

The rule here is strict: **a pair runs only at measured speeds.** A pair with no measurement,
or with a measurement of zero for either job (Gavel's ``[0, 0]``: it did not fit or was not
run), is not allowed -- never guessed from the isolated speeds. Gangs of different sizes never
share (Gavel measured none).

:func:`pair_rates` is the one lookup; it answers with a :class:`PairRates` or a
:class:`PairRefusal` saying why not, in words.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.perf.profiles import ThroughputTable


@dataclass(frozen=True, slots=True)
class PairRates:
    """Both jobs' speeds while sharing one gang of GPUs (steps/s of each whole gang).

    Attributes:
        first_steps_per_s: the first job's speed (in the order the pair was asked about).
        second_steps_per_s: the second job's speed.
    """

    first_steps_per_s: float
    second_steps_per_s: float

    def normalized_sum(self, first_alone: float, second_alone: float) -> float:
        """Work done per unit time relative to running each job alone (Gavel's packing gain:
        ``> 1`` means sharing does more work than time-slicing the two jobs)."""
        total = 0.0
        if first_alone > 0:
            total += self.first_steps_per_s / first_alone
        if second_alone > 0:
            total += self.second_steps_per_s / second_alone
        return total


@dataclass(frozen=True, slots=True)
class PairRefusal:
    """Why two jobs may not share GPUs of one flavor (shown as a scheduling reason)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def pair_rates(
    table: ThroughputTable, first: JobSpec, second: JobSpec, flavor: GpuFlavor
) -> PairRates | PairRefusal:
    """The measured speeds of ``first`` and ``second`` sharing one gang of ``flavor``.

    Refused (with the reason) when the gangs differ in size, or the pair was never measured on
    that flavor, or the measurement says it cannot run (a zero for either job).
    """
    short = flavor.short
    if first.num_gpus != second.num_gpus:
        return PairRefusal(
            f"jobs {first.job_id} and {second.job_id} have different gang sizes "
            f"({first.num_gpus} and {second.num_gpus} GPUs): only equal gangs share"
        )
    try:
        a, b = table.colocated(first.job_type, second.job_type, flavor, first.num_gpus)
    except NoProfileError:
        return PairRefusal(
            f"no co-location measurement for {first.job_type!r} with {second.job_type!r} on "
            f"{first.num_gpus}×{short}: the pair is not allowed"
        )
    if a <= 0 or b <= 0:
        return PairRefusal(
            f"{first.job_type!r} with {second.job_type!r} on {first.num_gpus}×{short} was "
            f"measured not to run together ({a:g}, {b:g} steps/s)"
        )
    return PairRates(a, b)
