"""The one list of scheduling policies: every built-in policy, its name and its one-line summary.

Nothing registers itself: a policy module only defines its class, and this module -- which the
command line, the simulator and the live service import -- lists them, in the order ``tessera
policies`` shows them (Gavel's own, ``--compat gavel``-only policies are listed last by
:func:`list_policies`). Adding a policy is one import and one line in :data:`_BUILT_IN`.

Building a policy from its spec (``hetero_pack:short_first=0.1``, ``fifo-agnostic``) is
:func:`make_policy`; the text rules of a spec are in :mod:`tessera.sched.core.policy`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tessera.errors import SpecError
from tessera.registry import Registry
from tessera.sched.core.policy import (
    AGNOSTIC_SUFFIX,
    OPTION_SEPARATOR,
    Policy,
    parse_policy_spec,
)
from tessera.sched.gavel.compat import GAVEL_ONLY
from tessera.sched.gavel.completion import GavelAllox, GavelMinTotalDuration
from tessera.sched.gavel.gandiva import GavelGandiva
from tessera.sched.gavel.lp_policy import (
    FinishTimeFairness,
    MaxMinFairness,
    MaxSumThroughput,
    MinMakespan,
)
from tessera.sched.gavel.packed_policy import GavelFifoPacked, GavelMaxMinFairnessPacked
from tessera.sched.policies.fifo import Fifo
from tessera.sched.policies.goodput_srpt import GoodputSrpt
from tessera.sched.policies.hetero_gittins import HeteroGittins
from tessera.sched.policies.hetero_host import HeteroHost
from tessera.sched.policies.hetero_pack import HeteroPack
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sched.policies.las import LeastAttainedService
from tessera.sched.policies.pollux import Pollux
from tessera.sched.policies.shortest import ShortestJobFirst, ShortestRemainingTimeFirst
from tessera.sched.policies.sia import Sia
from tessera.sched.policies.synergy_baselines import DominantResourceFairness, Tetris
from tessera.sched.resources.allocate import HostMode, check_mode
from tessera.sched.resources.repack import Repack, check_repack

#: ``(name, one-line summary, class)`` of every built-in policy, in registration order.
_BUILT_IN: tuple[tuple[str, str, type[Policy]], ...] = (
    ("fifo", "First come, first served; backfills; no preemption.", Fifo),
    ("max_min_fairness_packed",
     "Gavel's max_min_fairness_packed (Gavel's numbers under --compat gavel; without it, "
     "Tessera's costs and rounds): max-min fairness over jobs and measured pairs sharing GPUs.",
     GavelMaxMinFairnessPacked),
    ("fifo_packed",
     "Gavel's fifo_packed (Gavel's numbers under --compat gavel; without it, Tessera's costs "
     "and rounds): fifo_perf, then queued jobs share the GPUs of an assigned job when the "
     "measured pair gains > 1.5×.", GavelFifoPacked),
    ("min_total_duration",
     "Gavel's min_total_duration_perf (--compat gavel only): the shortest horizon by which "
     "every job can finish, by bisection over feasibility LPs.", GavelMinTotalDuration),
    ("allox",
     "Gavel's allox (--compat gavel only): min-cost assignment of waiting one-GPU jobs to free "
     "GPUs by remaining time plus waiting time.", GavelAllox),
    ("gandiva",
     "Gavel's gandiva (Gavel's numbers under --compat gavel; without it, Tessera's costs and "
     "rounds): random pairs of jobs share GPUs; pairs that do not gain are split at the next "
     "recompute.", GavelGandiva),
    ("max_min_fairness",
     "Gavel LAS: max-min fairness over effective throughput (HiGHS LP; settle=ridge: the "
     "most total throughput among its optima, stabler under speed errors).", MaxMinFairness),
    ("finish_time_fairness",
     "Themis finish-time fairness: minimise the worst ρ (LP bisection).", FinishTimeFairness),
    ("min_makespan", "Minimise makespan: a common progress rate for all (LP).", MinMakespan),
    ("max_sum_throughput",
     "Gavel max-sum throughput: maximise the total steps/s (LP); unfair, slow jobs can starve.",
     MaxSumThroughput),
    ("goodput_srpt",
     "Tessera (no oracle): per round, one (flavor, GPU count) per job maximising total "
     "completion rate = goodput / estimated work left, restart-damped, starvation guard. "
     "Use 60 s rounds.", GoodputSrpt),
    ("hetero_srpt",
     "Tessera (oracle durations): SRPT per GPU, completion-rate flavor matching, whole nodes "
     "for gangs.", HeteroSrpt),
    ("hetero_gittins",
     "Tessera, no oracle: hetero_srpt with remaining time from a Gittins index over attained "
     "service.", HeteroGittins),
    ("hetero_pack",
     "Tessera, no oracle: hetero_gittins plus space sharing at measured pair speeds, flavors "
     "and pairs chosen together by one small integer programme a round.", HeteroPack),
    ("las", "Tiresias 2D-LAS: least attained GPU-service first; preemptive.",
     LeastAttainedService),
    ("pollux",
     "Pollux (OSDI'21): per round, GPU count and batch per job maximising the p=-1 power mean of "
     "goodput speed-ups with restart damping; heterogeneity-unaware; exact ILP for its GA. "
     "Use 60 s rounds.", Pollux),
    ("sjf", "Shortest job first (oracle durations); no preemption.", ShortestJobFirst),
    ("srtf", "Shortest remaining time first (oracle durations); preemptive.",
     ShortestRemainingTimeFirst),
    ("sia",
     "Sia (SOSP'23): per round, one (flavor, GPU count) per job by an ILP over normalised goodput "
     "^ p with restart penalties (HiGHS); elastic jobs resized, batch tuned. Use 60 s rounds.",
     Sia),
    ("drf",
     "DRF (Synergy's baseline): smallest dominant share of GPUs, CPUs and memory demanded "
     "first; preemptive. Pair with resources=greedy|tune.", DominantResourceFairness),
    ("tetris",
     "TETRIS as Synergy runs it (oracle durations): smallest remaining time × summed demand "
     "fractions first; preemptive. Pair with resources=greedy|tune.", Tetris),
    ("hetero_host",
     "Tessera (issue 33 ours, oracle durations): hetero_srpt on predicted speeds = GPU rate × "
     "the job's CPU/memory speedup on that type's servers now; CPUs by TUNE.", HeteroHost),
)


def _registry() -> Registry[type[Policy]]:
    registry: Registry[type[Policy]] = Registry("policy")
    for name, summary, cls in _BUILT_IN:
        registry.register(name, summary)(cls)
    return registry


#: Name → policy class, with summaries (``POLICIES.get`` suggests the closest name on a typo).
POLICIES: Registry[type[Policy]] = _registry()


def make_policy(name: str, options: Mapping[str, Any] | None = None) -> Policy:
    """Build a policy from its spec: a registry name, e.g. ``max_min_fairness-agnostic``,
    optionally with options, e.g. ``hetero_pack:short_first=0.1`` (see the module docstring).
    ``options`` add to those of the spec; the policy's ``display_name`` names them all, and
    builds the same policy again.

    Raises:
        SpecError: unknown name, unknown option (naming the policy's options) or a bad value.
    """
    bare, given = parse_policy_spec(name)
    base, agnostic = _registry_name(bare)
    cls = POLICIES.get(base)
    given = {**given, **(options or {})}
    host_mode = _host_mode(name, cls, given.get(HOST_OPTION))
    repack = _repack(name, cls, host_mode, given.get(REPACK_OPTION))
    try:
        config = cls.Config(**{k: v for k, v in given.items()
                               if k not in (HOST_OPTION, REPACK_OPTION)})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        if first["type"] == "extra_forbidden":
            known = ", ".join(cls.Config.model_fields) or "none"
            raise SpecError(f"policy {name!r}: unknown option {where!r} (its options: {known}; "
                            f"tessera policies {base} describes them)") from None
        raise SpecError(f"policy {name!r}: option {where!r}: {first['msg']}") from None
    policy = cls(config, agnostic=agnostic, name=base)
    if host_mode is not None:  # (else the class's own default: None, or hetero_host's tune)
        policy.host_mode = host_mode
    policy.host_repack = repack
    policy.spec_options = "".join(f"{OPTION_SEPARATOR}{k}={_text(v)}"
                                  for k, v in given.items())
    return policy


#: The option every policy takes: Synergy's CPU/memory allocation
#: (:mod:`tessera.sched.resources.allocate`).
HOST_OPTION = "resources"
#: Synergy's round as a twin setting (:mod:`tessera.sched.resources.repack`).
REPACK_OPTION = "repack"


def _host_mode(name: str, cls: type[Policy], mode: object) -> HostMode | None:
    """The ``resources=`` mode of a spec, or ``None`` when it gives none.

    Raises:
        SpecError: an unknown mode, or a policy that shares GPUs or resizes jobs (their gangs
            change under them; CPUs follow GPUs there).
    """
    if mode is None:
        return None
    if cls.packs or cls.elastic:
        raise SpecError(f"policy {name!r}: resources= works with policies that neither share "
                        "GPUs nor resize jobs")
    try:
        return check_mode(mode)
    except SpecError as e:
        raise SpecError(f"policy {name!r}: {e}") from None


def _repack(name: str, cls: type[Policy], mode: HostMode | None, value: object) -> Repack:
    """The ``repack=`` choice of a spec (``none`` when it gives none).

    Raises:
        SpecError: an unknown choice, or ``round`` without a ``resources=`` mode it can deal
            (proportional, greedy or tune).
    """
    if value is None:
        return "none"
    try:
        repack = check_repack(value)
    except SpecError as e:
        raise SpecError(f"policy {name!r}: {e}") from None
    mode = mode if mode is not None else cls.host_mode
    if repack == "round" and mode not in ("proportional", "greedy", "tune"):
        raise SpecError(f"policy {name!r}: repack=round needs resources=proportional, greedy "
                        "or tune")
    return repack


def _registry_name(bare: str) -> tuple[str, bool]:
    """``(registry name, agnostic)`` of a policy name without options."""
    agnostic = bare.endswith(AGNOSTIC_SUFFIX)
    return (bare[: -len(AGNOSTIC_SUFFIX)] if agnostic else bare), agnostic


def _text(value: Any) -> str:
    """A value as a spec writes it: JSON, or bare text where that reads back as the same text."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def policy_options(name: str) -> list[tuple[str, str, str]]:
    """``(option, default, description)`` for every option of the policy ``name`` (its
    ``Config``; the ``resources=`` mode every policy takes is listed by ``tessera policies``)."""
    config = POLICIES.get(_registry_name(parse_policy_spec(name)[0])[0]).Config
    return [(key, _text(field.default), field.description or "")
            for key, field in config.model_fields.items()]


def simulator_twin_only(policy: Policy) -> str | None:
    """Why the live service must not run ``policy``, or ``None``: ``repack=round`` is
    Synergy's simulator twin (every gang released and dealt again each round, moves free),
    which a real cluster would pay for by checkpointing and restarting every gang every round."""
    if policy.host_repack == "round":
        return (f"{policy.display_name}: repack=round is Synergy's simulator twin (every gang "
                "moved each round, free); the live service would restart every gang every "
                "round: drop repack=round (resources=MODE alone moves a gang only where it gains)")
    return None


def gavel_loop_only(policy: Policy, shares_gpus: bool = False,
                    in_rounds: bool = True) -> str | None:
    """Why ``policy`` cannot run outside the simulator's Gavel loop here, or ``None``.

    Gavel's own policies (``GAVEL_ONLY``) reproduce Gavel's simulator and need its loop
    (``--compat gavel``). A policy that packs (space-shares GPUs) needs a world that books
    shared GPUs and can launch two jobs on one GPU set (``shares_gpus=True``): the simulator's
    drivers (:mod:`tessera.sim.sharing`) and the live service with an executor that shares
    (the local executor: both runs get the same ``CUDA_VISIBLE_DEVICES``); the live service
    refuses such a policy with this reason on an executor that cannot, rather than run it with
    GPUs counted wrong. Gavel's packing policies (``max_min_fairness_packed``, ``fifo_packed``,
    ``gandiva``) only rank and pair jobs, so those worlds run them too, with Tessera's costs;
    the rest of Gavel's own set keeps its loop. Gavel's policies are round mechanisms (their
    shares change only at round boundaries), so they are refused outside rounds
    (``in_rounds=False``: the settings' ``mode`` is ``events``) by the simulator and the live
    service alike.
    """
    if policy.name in GAVEL_ONLY and not (policy.packs and shares_gpus):
        return (f"policy {policy.display_name!r} is Gavel's own and reproduces Gavel's "
                "simulator: run it with tessera simulate --compat gavel")
    if policy.packs and not shares_gpus:
        return (f"policy {policy.display_name!r} co-locates jobs on shared GPUs, which the live "
                "service cannot run on this executor (it launches one job per GPU): serve it "
                "with --executor local, or simulate it with tessera simulate")
    if policy.name in GAVEL_ONLY and not in_rounds:
        return (f"policy {policy.display_name!r} is Gavel's round mechanism (its shares change "
                "only at round boundaries): run it in rounds mode, not events")
    return None


def list_policies() -> list[tuple[str, str]]:
    """(name, one-line summary) for every registered policy, in registration order except
    that Gavel's own policies (``--compat gavel`` only) come last."""
    return [(e.name, e.summary) for e in sorted(POLICIES, key=lambda e: e.name in GAVEL_ONLY)]
