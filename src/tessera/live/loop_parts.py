"""What the service loop's helpers read and write of the service: :class:`ServiceParts`.

:class:`~tessera.live.service.LiveService` owns the loop; the steps it delegates --
journaling a decision (:mod:`~tessera.live.journal`), launching and confirming runs
(:mod:`~tessera.live.launches`), reconciling at start (:mod:`~tessera.live.reconcile`) -- take
the service as a :class:`ServiceParts`, a protocol naming just what they use. So they import
this module, not the service, and the service imports them: no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tessera.live.executors.base import Executor
from tessera.live.options import ServiceOptions
from tessera.live.progress import ProgressBook
from tessera.live.run_power import RunPower
from tessera.live.speeds import RunSpeeds
from tessera.live.store import Store
from tessera.live.tenancy import Tenancy
from tessera.model.cluster import ClusterSpec
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy

RunKey = tuple[str, int]


class ServiceParts(Protocol):
    """The service as its loop's helpers see it.

    Attributes:
        store, executor, cluster, tenancy, oracle, policy, opts, speeds, work_dir, clock: the
            service's own (see :class:`~tessera.live.service.LiveService`).
        launching: runs launched and not yet confirmed running (:mod:`.launches`).
        backoff: ``{job: (not before, last delay)}``: jobs an executor could not place, out
            of the rounds until then.
        signalled: stopping runs already sent their stop signal.
        progress: the runs' progress tokens and measured rates (:mod:`.progress`).
    """

    store: Store
    executor: Executor
    cluster: ClusterSpec
    tenancy: Tenancy
    oracle: ThroughputOracle
    policy: Policy
    opts: ServiceOptions
    speeds: RunSpeeds
    work_dir: Path
    clock: Callable[[], float]
    launching: set[RunKey]
    backoff: dict[str, tuple[float, float]]
    signalled: set[RunKey]
    progress: ProgressBook
    power: RunPower

    def poke(self) -> None:
        """Wake the loop."""

    def observe(self, now_s: float) -> bool:
        """Record runs that ended; whether any of that is news for the policy."""
