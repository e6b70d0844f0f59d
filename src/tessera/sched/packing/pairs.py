"""Space sharing (co-location): two training jobs on one gang of GPUs.

A policy that packs (``Policy.packs``) ranks *hosts* as usual and names, in
``Ranking.colocate``, a *partner* for some of them: ``{partner: host}``. After the core has
placed the hosts, :func:`colocate` puts each partner on its host's GPUs, so both jobs hold the
same GPUs and run at the pair speeds Gavel measured (:mod:`tessera.perf.colocation`). The rules,
each refusal with its reason:

1. **Both jobs allow sharing.** ``JobSpec.exclusive`` forbids it (default ``False`` for
   simulated traces; the live service sets it unless the queue allows sharing).
2. **Same gang size, homogeneous gang.** A gang shares with a gang of the same size on the
   same GPUs; mixed-flavor gangs never share.
3. **Measured pair.** The pair has a positive measurement on that flavor at that gang size;
   nothing is guessed.
4. **Memory fits.** When both jobs declare a memory estimate (``JobSpec.memory_gib``, per
   GPU) the two must fit in the GPU's memory together. Without estimates, the measurement is
   the evidence: Gavel's profiler ran the pair on that GPU, so it fit.
5. **Pairs only.** A host shares with one partner (that is all that was measured).

A refused partner is left waiting; its note says why. An accepted pair gets a note on both
jobs with both speeds.

**Pairs that already run** (Tessera's own drivers, where a round sees running jobs): the two
jobs hold one set of GPUs, so the placement strategies must see them once. :func:`unpair` hands
the strategies the pair's *host* as the holder and its *rider* without GPUs; :func:`colocate`
then rebuilds every pair from the policy's wish (a preemptive round: the policy's word is final)
or keeps the running pairs (a round that may not stop running jobs, e.g. a fill between rounds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.colocation import PairRates, PairRefusal, pair_rates
from tessera.perf.profiles import ThroughputTable
from tessera.sched.core.snapshot import JobView, Placement

if TYPE_CHECKING:
    from tessera.sched.core.policy import Ranking

@dataclass(frozen=True, slots=True)
class Packed:
    """The outcome of :func:`colocate`: every placement after packing, and a note per job
    whose packing was decided (accepted or refused)."""

    placements: dict[JobId, Placement]
    notes: dict[JobId, str]


def may_share(
    table: ThroughputTable, cluster: ClusterSpec, host: JobSpec, partner: JobSpec,
    flavor: GpuFlavor,
) -> PairRates | PairRefusal:
    """Whether ``host`` and ``partner`` may share a gang of ``flavor`` (rules 1-4 of the module
    docstring), and at what speeds (host first)."""
    for spec in (host, partner):
        if spec.exclusive:
            return PairRefusal(f"job {spec.job_id} is exclusive: it does not share its GPUs")
    for spec in (host, partner):
        if spec.flavors and flavor not in spec.flavors:
            return PairRefusal(f"job {spec.job_id} does not accept {flavor} GPUs")
    rates = pair_rates(table, host, partner, flavor)
    if isinstance(rates, PairRefusal):
        return rates
    mem_h, mem_p = host.memory_gib, partner.memory_gib
    if mem_h is not None and mem_p is not None:
        cap = flavor.mem_gib
        if mem_h + mem_p > cap:
            return PairRefusal(
                f"jobs {host.job_id} and {partner.job_id} need {mem_h:g} + {mem_p:g} GiB per "
                f"GPU together, more than a {flavor}'s {cap:g} GiB"
            )
    return rates


def check_pair(
    table: ThroughputTable, cluster: ClusterSpec, host: JobSpec, partner: JobSpec,
    placement: Placement,
) -> PairRates | PairRefusal:
    """Whether ``partner`` may share ``host``'s ``placement`` (every rule), and at what speeds
    (host first)."""
    if placement.is_mixed:
        return PairRefusal(f"job {host.job_id} runs on a mixed gang: mixed gangs never share")
    if placement.colocated_with:
        return PairRefusal(
            f"job {host.job_id} already shares its GPUs with "
            f"{', '.join(str(j) for j in placement.colocated_with)}: only pairs were measured"
        )
    if partner.requires_locality and not placement.consolidated:
        return PairRefusal(f"job {partner.job_id} requires one node; job {host.job_id}'s "
                           "gang spans several")
    return may_share(table, cluster, host, partner, placement.flavor)


def colocate(
    run: Mapping[JobId, Placement],
    partners: Mapping[JobId, JobId],
    by_id: Mapping[JobId, JobView],
    table: ThroughputTable,
    cluster: ClusterSpec,
) -> Packed:
    """Put each partner of ``partners`` (``{partner: host}``) on its host's GPUs.

    Args:
        run: the placements the core chose (hosts included, partners not).
        partners: the policy's wish.
        by_id: the round's jobs.
        table: the measured pair speeds.
        cluster: the inventory (GPU memory per flavor).
    """
    # Labels of last round's pairs are rebuilt below from ``partners``, never carried over.
    out = {jid: replace(p, colocated_with=()) if p.colocated_with else p
           for jid, p in run.items()}
    notes: dict[JobId, str] = {}
    for partner, host in partners.items():
        p = out.get(host)
        if partner in out or p is None or partner not in by_id or host not in by_id:
            why = "is not running this round" if p is None else "was placed on its own"
            if partner in by_id:
                notes[partner] = f"not co-located with job {host}: job {host} {why}"
            continue
        h_spec, p_spec = by_id[host].spec, by_id[partner].spec
        check = check_pair(table, cluster, h_spec, p_spec, p)
        if isinstance(check, PairRefusal):
            notes[partner] = f"not co-located with job {host}: {check}"
            continue
        out[host] = replace(p, colocated_with=(partner,))
        out[partner] = replace(p, colocated_with=(host,))
        where = f"{p.num_gpus}×{p.flavor}"
        notes[host] = (f"shares {where} with job {partner} at {check.first_steps_per_s:g} "
                       f"steps/s (job {partner}: {check.second_steps_per_s:g})")
        notes[partner] = (f"shares {where} with job {host} at {check.second_steps_per_s:g} "
                          f"steps/s (job {host}: {check.first_steps_per_s:g})")
    return Packed(out, notes)


@dataclass(frozen=True, slots=True)
class Unpaired:
    """The round's jobs as the placement strategies must see them (see :func:`unpair`).

    Attributes:
        jobs: the admitted jobs, each running pair's rider either shown waiting (no GPUs) or
            left out (``keep``).
        riders: ``{rider: host}`` of every running pair.
    """

    jobs: Sequence[JobView]
    riders: dict[JobId, JobId]


def unpair(admitted: Sequence[JobView], ranking: Ranking, keep: bool) -> Unpaired:
    """Show each running pair's GPUs once to the placement strategies.

    The *rider* of a pair is the job the policy names as a partner this round, else the one it
    ranks lower (later in its candidates, then the larger id): it gives up its claim on the
    GPUs, so the host's gang is kept, moved or stopped like any gang. With ``keep`` (a round
    that may not stop running jobs) riders are left out and rejoin their hosts; otherwise they
    are shown waiting, free to be paired again, run alone or wait.
    """
    by_id = {j.job_id: j for j in admitted}
    rank: dict[JobId, int] = {}
    for jid, _fl in ranking.candidates:
        rank.setdefault(jid, len(rank))
    last = len(rank)
    riders: dict[JobId, JobId] = {}
    for j in admitted:
        p = j.placement
        if not (j.running and p is not None and p.colocated_with) or j.job_id in riders:
            continue
        mate = by_id.get(p.colocated_with[0])
        if mate is None or not mate.running or mate.placement is None or mate.job_id in riders:
            continue
        if j.job_id in ranking.colocate:
            rider = j
        elif mate.job_id in ranking.colocate:
            rider = mate
        else:
            order = sorted((j, mate), key=lambda v: (rank.get(v.job_id, last), str(v.job_id)))
            rider = order[1]
        host = mate if rider is j else j
        riders[rider.job_id] = host.job_id
    if not riders:
        return Unpaired(admitted, riders)
    if keep:
        jobs = [j for j in admitted if j.job_id not in riders]
    else:
        jobs = [replace(j, state=JobState.PENDING, placement=None) if j.job_id in riders else j
                for j in admitted]
    return Unpaired(jobs, riders)


def partners_for(ranking: Ranking, riders: dict[JobId, JobId], keep: bool
                 ) -> dict[JobId, JobId]:
    """The ``{partner: host}`` wish :func:`colocate` carries out: the policy's, and with
    ``keep`` the running pairs first (they are not to be broken by this round)."""
    if not keep:
        return dict(ranking.colocate)
    out = dict(riders)
    hosts = set(riders.values())
    for partner, host in ranking.colocate.items():
        if partner not in out and host not in hosts:
            out[partner] = host
    return out
