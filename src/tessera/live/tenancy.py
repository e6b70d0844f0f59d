"""Tenants, queues and bearer tokens: the service's config file ``tessera-live.yaml``.

Every API call carries ``Authorization: Bearer <token>``. A token belongs either to one tenant
queue (the tenant sees, submits to and cancels only that queue's jobs) or to the admin (sees
everything). Queues carry Kueue-style quotas that the decision core enforces::

    queues:
      - {name: vision, nominal_gpus: 8, borrowing_limit_gpus: 4, weight: 1.0}
      - {name: nlp, nominal_gpus: 8, borrowing_limit_gpus: 0}
    tokens:
      - {name: admin, sha256: 9f2c..., queue: null}       # null queue = admin
      - {name: vision-ci, sha256: 41ab..., queue: vision}
    tenants_see_all: false   # true: tenants also see every queue's quota and use, and the
                             # cluster's use (never other queues' jobs)
    limits: {body_bytes: 1048576}   # optional: the API's ceilings (tessera.live.limits)
    logs: {cap_bytes: 104857600, retention_s: 604800}   # optional: rank logs' cap and how
                             # long a finished run's files are kept (executors/logs.py)

A queue's quota may instead be given per GPU flavor, with a cohort, preemption rules and the
rest of Kueue's tenancy, and the file may hold ``cohorts:``, ``fair_sharing:``,
``priority_classes:`` and ``local_queues:`` (:mod:`tessera.live.tenancy_yaml`; docs/tenancy.md).
``tessera serve --tenancy PATH`` takes all of that from a Kueue or Tessera YAML file instead
(:func:`load_tenancy`). The whole tree is :attr:`Tenancy.quota_tree`.

Only SHA-256 hashes of tokens are stored, so reading the file leaks no token; but whoever can
*write* it can add a hash of their own and hold an admin token after the next restart, so the
file is created 0600 in the private state dir (:mod:`tessera.live.layout`). A new token is
printed once, when it is made (on first start for the admin, or by :func:`add_token`, which
makes admin tokens too, offline, for an admin who lost theirs).

A queue may also say how its jobs run: ``run_as: USER`` (jobs run as that user; overrides
``tessera serve --run-as``) and ``max_runtime_s`` (the default runtime limit of its jobs); and
how much it may keep: ``max_queued_jobs``, ``max_stored_jobs`` and ``max_stored_bytes``
(defaults in ``limits:``; :mod:`tessera.live.totals`).

**Sharing GPUs.** ``sharing: true`` lets a packing policy put the queue's jobs on GPUs another
job holds (co-location: two training jobs on one GPU, by MPS or time-slicing; docs/live.md).
Off by default: a live job is *exclusive* unless its queue shares, because a job on a shared
GPU runs slower, shares the GPU's memory, and can see its partner's process through the driver
(``nvidia-smi``). Like every queue setting it is the admin's (whoever may write this file); a
tenant may only opt a job *out* (``exclusive: true`` in the job spec).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tessera.errors import SpecError
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings
from tessera.live.layout import CONFIG_FILE, check_private, write_private
from tessera.live.limits import DEFAULT_LIMITS, ApiLimits
from tessera.live.tenancy_file import load_tenancy_file
from tessera.live.tenancy_yaml import (
    LoadedTenancy,
    QueueQuotaEntry,
    TenancyFields,
    build_tenancy,
    describe_error,
)
from tessera.live.totals import QueueCaps
from tessera.sched.core.mig_quota import MigQuotas
from tessera.sched.core.snapshot import QueueQuota
from tessera.sched.core.tenancy import Tenancy as QuotaTree

CONFIG_NAME = CONFIG_FILE


class _QueueEntry(QueueQuotaEntry):
    """A queue: its quota fields (:class:`~tessera.live.tenancy_yaml.QueueQuotaEntry`: one
    number or per flavor, cohort, preemption ...) and how its jobs run."""

    run_as: str | None = Field(None, min_length=1)
    max_runtime_s: float | None = Field(None, gt=0)
    sharing: bool = Field(False, strict=True)
    max_stored_jobs: int | None = Field(None, ge=1)
    max_queued_jobs: int | None = Field(None, ge=1)
    max_stored_bytes: int | None = Field(None, ge=1024)


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    queue: str | None = None


class _ConfigFile(TenancyFields):
    """The whole file: queues, tokens, settings, and the tenancy's top-level keys (cohorts,
    fair_sharing, priority_classes, local_queues: :mod:`tessera.live.tenancy_yaml`)."""

    queues: list[_QueueEntry] = Field(min_length=1)
    tokens: list[_TokenEntry] = Field(min_length=1)
    tenants_see_all: bool = False
    limits: ApiLimits = DEFAULT_LIMITS
    logs: LogSettings = DEFAULT_LOGS


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token's name and its queue (``None`` for the admin)."""

    name: str
    queue: str | None

    @property
    def admin(self) -> bool:
        return self.queue is None

    def may_see(self, queue: str) -> bool:
        return self.admin or self.queue == queue


@dataclass(frozen=True, slots=True)
class JobDefaults:
    """How a queue's jobs run: as which user (``None``: the service's choice) and with which
    runtime limit when the job sets none (``None``: no limit)."""

    run_as: str | None = None
    max_runtime_s: float | None = None


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The loaded config: quotas by queue, token hashes, what tenants see, the API's limits,
    and each queue's job defaults.

    Attributes:
        tenants_see_all: tenants see every queue in ``/api/queues`` and the cluster's use in
            ``/api/cluster`` (off: only their own queue and the cluster's capacity).
        job_defaults: how each queue's jobs run (user, runtime limit), where the queue says.
        sharing_queues: the queues whose jobs may share GPUs (``sharing: true``).
        queue_caps: each queue's caps on stored and unfinished jobs and stored bytes, where
            it sets one (:meth:`caps` fills in the ``limits:`` defaults).
        logs: the rank logs' size cap and the retention of finished runs' files.
        quota_tree: the whole tenancy the decision core enforces (queues with per-flavor
            quotas, cohorts, fair sharing, priority classes, local queues); ``quotas`` is its
            ``queues``.
        mig_quotas: per queue, its quota in MIG slices (charged by inference services).
    """

    quotas: dict[str, QueueQuota]
    tokens: dict[str, Principal]  # sha256 hex -> principal
    tenants_see_all: bool = False
    limits: ApiLimits = DEFAULT_LIMITS
    job_defaults: dict[str, JobDefaults] = field(default_factory=dict)
    sharing_queues: frozenset[str] = frozenset()
    queue_caps: dict[str, QueueCaps] = field(default_factory=dict)
    logs: LogSettings = DEFAULT_LOGS
    mig_quotas: dict[str, MigQuotas] = field(default_factory=dict)
    tree: QuotaTree | None = None
    """The whole tenancy the core enforces (per-flavor quotas, cohorts, fair sharing) when the
    config gives one; ``None``: the ``queues:`` entries alone (see :attr:`quota_tree`)."""

    @property
    def quota_tree(self) -> QuotaTree:
        """What the decision core enforces (``Snapshot.tenancy``): :attr:`tree`, or a tenancy
        of today's ``queues:`` entries (one-number quotas, no cohort: their meaning unchanged)."""
        return self.tree if self.tree is not None else QuotaTree(queues=self.quotas)

    def caps(self, queue: str) -> QueueCaps:
        """``queue``'s caps (:mod:`tessera.live.totals`): its own, else ``limits:``'s."""
        own = self.queue_caps.get(queue)
        if own is not None:
            return own
        lim = self.limits
        return QueueCaps(lim.queue_stored_jobs, lim.queue_queued_jobs, lim.queue_stored_bytes)

    def shares(self, queue: str) -> bool:
        """Whether ``queue``'s jobs may share GPUs with other jobs."""
        return queue in self.sharing_queues

    def sees_all(self, who: Principal) -> bool:
        """Whether ``who`` gets the cluster-wide views (queues, use, job counts)."""
        return who.admin or self.tenants_see_all

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal owning ``token``, or ``None`` (compared in constant time)."""
        if not token:
            return None
        digest = hash_token(token)
        for known, who in self.tokens.items():
            if hmac.compare_digest(known, digest):
                return who
        return None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tenancy(state_dir: Path, tenancy_path: Path | None = None) -> Tenancy:
    """Read the config file from ``state_dir``; with ``tenancy_path`` (``--tenancy``), the
    queues' quotas, cohorts, fair sharing, priority classes and local queues come from that
    file (Kueue or Tessera YAML, :mod:`tessera.live.tenancy_file`) instead, and the config's
    ``queues:`` give only how each queue's jobs run (its quota fields are not used).

    Raises:
        SpecError: missing file, malformed YAML, unknown fields, a bad tenancy (naming the
            object and the field), or a token or config queue naming an unknown queue.
    """
    path = state_dir / CONFIG_NAME
    raw: Any = None
    try:
        raw = yaml.safe_load(path.read_text())
        cfg = _ConfigFile.model_validate(raw)
    except FileNotFoundError:
        raise SpecError(f"{path} does not exist; start `tessera serve` once to create it") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    except ValidationError as e:
        raise SpecError(describe_error(e, raw, str(path))) from None
    loaded = _quota_tree(path, cfg, tenancy_path)
    quotas = dict(loaded.tree.queues)
    tokens: dict[str, Principal] = {}
    for t in cfg.tokens:
        if t.queue is not None and t.queue not in quotas:
            raise SpecError(f"{path}: token {t.name!r} names unknown queue {t.queue!r}")
        tokens[t.sha256] = Principal(t.name, t.queue)
    defaults = {q.name: JobDefaults(q.run_as, q.max_runtime_s) for q in cfg.queues
                if q.run_as is not None or q.max_runtime_s is not None}
    sharing = frozenset(q.name for q in cfg.queues if q.sharing)
    lim = cfg.limits
    caps = {q.name: QueueCaps(q.max_stored_jobs or lim.queue_stored_jobs,
                              q.max_queued_jobs or lim.queue_queued_jobs,
                              q.max_stored_bytes or lim.queue_stored_bytes)
            for q in cfg.queues}
    return Tenancy(quotas, tokens, cfg.tenants_see_all, cfg.limits, defaults, sharing, caps,
                   logs=cfg.logs, tree=loaded.tree, mig_quotas=dict(loaded.mig))


def _quota_tree(path: Path, cfg: _ConfigFile, tenancy_path: Path | None) -> LoadedTenancy:
    """The config's own tenancy, or ``tenancy_path``'s (then every config queue must be one
    of its queues)."""
    if tenancy_path is None:
        try:
            return build_tenancy(cfg.queues, cfg)
        except SpecError as e:
            raise SpecError(f"{path}: {e}") from None
    own = cfg.model_dump(exclude_defaults=True)
    mixed = sorted(k for k in ("cohorts", "fair_sharing", "priority_classes", "local_queues")
                   if k in own)
    if mixed:
        raise SpecError(f"{path}: {', '.join(mixed)}: give the tenancy in one place: here or "
                        f"in --tenancy {tenancy_path}, not both")
    loaded = load_tenancy_file(tenancy_path)
    for q in cfg.queues:
        if q.name not in loaded.tree.queues:
            raise SpecError(f"{path}: queue {q.name!r} is not a queue of --tenancy "
                            f"{tenancy_path} (its queues: {', '.join(loaded.tree.queues)})")
    return loaded


def ensure_config(state_dir: Path, total_gpus: int,
                  queues: Sequence[str] | None = None) -> str | None:
    """Create the config on first start: one ``default`` queue (or, with ``queues``, the
    queues of a ``--tenancy`` file, whose quotas come from that file) and an admin token.

    Returns:
        the new admin token (to print once), or ``None`` when the file already existed.
    """
    path = state_dir / CONFIG_NAME
    if path.exists():
        return None
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(24)
    cfg = {
        "queues": ([{"name": "default", "nominal_gpus": total_gpus,
                     "borrowing_limit_gpus": None, "weight": 1.0}] if queues is None
                   else [{"name": q, "nominal_gpus": 0} for q in queues]),
        "tokens": [{"name": "admin", "sha256": hash_token(token), "queue": None}],
    }
    _write(path, cfg)
    return token


def add_token(state_dir: Path, name: str, queue: str | None, nominal_gpus: int = 0) -> str:
    """Add a token for ``queue`` (``None``: an admin token; a new queue gets ``nominal_gpus``).

    Works offline, on the files: the running service loads the token when it restarts.

    Returns:
        the token, to print once (only its hash is stored).

    Raises:
        SpecError: a state dir or config that others could read or write, or an invalid one.
    """
    path = state_dir / CONFIG_NAME
    if state_dir.exists():
        check_private(state_dir)
    load_tenancy(state_dir)  # validate first
    raw = yaml.safe_load(path.read_text())
    if queue is not None and all(q["name"] != queue for q in raw["queues"]):
        _QueueEntry(name=queue, nominal_gpus=nominal_gpus)  # validates the name
        raw["queues"].append({"name": queue, "nominal_gpus": nominal_gpus,
                              "borrowing_limit_gpus": None, "weight": 1.0})
    token = secrets.token_urlsafe(24)
    raw["tokens"].append({"name": name, "sha256": hash_token(token), "queue": queue})
    _write(path, raw)
    return token


def _write(path: Path, cfg: dict[str, object]) -> None:
    """Replace ``path`` atomically by a file that is mode 0600 from its first byte."""
    write_private(path, yaml.safe_dump(cfg, sort_keys=False))
