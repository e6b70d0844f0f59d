"""The executor protocol and what every executor hands a job's ranks.

An executor is asked five things, always about one *run* ``(job_id, run)``:

* ``launch`` -- start it; **idempotent**: launching a run that was already started (perhaps by
  a previous service process that crashed) starts nothing new. It must not block: an executor
  that needs time (Ray reserving a placement group) reports ``starting`` until the run runs;
* ``status`` -- is it absent (never started), starting, unplaceable (the executor cannot place
  it; ``detail`` says what no node offers), running, exited (with its status) or lost
  (started, then vanished without an exit status);
* ``read_log`` -- a piece of one rank's output, wherever that rank ran;
* ``stop`` -- ask it to checkpoint and exit (SIGTERM), killing it after a grace period;
* ``release`` -- forget it and free what it held (Ray placement groups, actors).

The environment every rank sees is built from three layers, later ones winning, and never
from the service's own environment (which may hold tokens or cloud credentials):

1. a minimal **base** (:func:`base_env`): ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``
   and the locale/timezone/temp variables in :data:`PASSED_THROUGH`;
2. the job's own ``env``;
3. the **rendezvous** variables of ``torch.distributed`` (``MASTER_ADDR``, ``MASTER_PORT``,
   ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) plus Tessera's ``TESSERA_*``
   variables (:func:`rank_envs`), so a ``torchrun``-style script runs unchanged.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from tessera.errors import SpecError
from tessera.sched.core.snapshot import Placement

if TYPE_CHECKING:
    from tessera.live.executors.gpu_sharing import Mechanism

RunState = Literal["absent", "starting", "unplaceable", "running", "exited", "lost"]

#: Directories on every rank's ``PATH``, after the service's own Python's ``bin`` directory.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Variables a rank inherits from the service when they are set there: locale, time zone and
#: temporary directory -- nothing that could carry a secret.
#: ``CUDA_VISIBLE_DEVICES`` too: the GPUs the launcher itself was given, which the rank must keep
#: to use its own GPU and no other (a Ray rank host passes each rank's own GPU instead).
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "CUDA_VISIBLE_DEVICES")
#: Variables that name the GPUs a rank may use. Only the executor sets them (the GPUs it was
#: given); a job's own ``env`` may not (refused at submission, and dropped by :func:`rank_envs`
#: for a job stored before that rule). They steer the CUDA runtime; they are no fence: a job
#: that unsets them in its own process can open every GPU device node (docs/security.md, Jobs).
DEVICE_VARS = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
#: Read by the launcher (local runner or Ray rank host), not passed on to the command: the user
#: to run the command as.
RUN_AS_VAR = "TESSERA_RUN_AS"
#: Read by the Ray rank host, not passed on: the service's checkpoints root (a default
#: checkpoint directory under it is created for the run-as user; see prepare_checkpoint_dir).
CHECKPOINTS_ROOT_VAR = "TESSERA_CHECKPOINTS_ROOT"
LAUNCHER_VARS = (RUN_AS_VAR, CHECKPOINTS_ROOT_VAR)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to start one run of a job.

    Attributes:
        job_id / run: the run's identity (the idempotency key).
        argv: the command every rank runs.
        env: extra variables for every rank (the user's ``env``).
        placement: the GPUs the decision gave the run.
        checkpoint_dir: the same directory on every run, so a resumed job finds its checkpoint.
        local_batches: each rank's samples per step (``TESSERA_LOCAL_BATCH``), split from the
            job's ``global_batch`` by :mod:`tessera.live.batches`; ``None`` without one.
        rank_env: per rank, extra ``TESSERA_*`` variables: a 3-D plan's stage/TP/DP role
            (:func:`tessera.live.batches.plan_rank_roles`); ``None`` for data-parallel jobs.
        requires_locality: the gang must sit on one node (Ray: a STRICT_PACK placement group).
        run_as: run every rank as this user (the service must be root), or ``None`` for the
            service's own user.
        max_runtime_s: a run still going after this long is stopped (SIGTERM, then SIGKILL
            after ``grace_s``) and fails for good; ``None`` = no limit.
        grace_s: how long a stopped rank may take to checkpoint before it is killed.
        share_with: ``(job_id, run)`` of the run whose GPUs this one joins (co-location,
            :mod:`tessera.live.sharing`): its ranks get that run's devices, rank by rank;
            ``None`` for a run on GPUs of its own.
        host_by_node: ``((node_id, cpus, mem_gib), ...)``: the CPUs and host memory the run
            holds on each node (:func:`tessera.model.host_need.gang_host_by_node`), which the
            executor enforces (local: :mod:`~tessera.live.executors.host_limits`; Ray: the
            bundles' ``CPU`` and ``memory``); empty when the job declares none.
        progress: ``(url, token)`` where the run reports its progress
            (``TESSERA_PROGRESS_URL``, ``TESSERA_PROGRESS_TOKEN``: :mod:`tessera.progress_report`),
            ``None``: the service takes no reports.
        visible_devices: the ``CUDA_VISIBLE_DEVICES`` every rank gets (an inference replica's
            ``MIG-<uuid>`` slice, :mod:`tessera.live.inference`); ``None``: the executor's
            own choice. Only the service sets it, never a job's ``env``.
        measure_power / power_limit_w: measure each rank's GPU energy and hold its GPUs at
            ``power_limit_w`` watts (``None``: leave the limit) for the run's life -- asked by
            the service (:mod:`tessera.live.run_power_ray`) only for a run that holds its GPUs
            alone, and done by executors whose ranks have GPUs of their own (Ray's rank hosts,
            :mod:`tessera.live.executors.ray.rank_power`); others ignore them.
    """

    job_id: str
    run: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    placement: Placement
    checkpoint_dir: str
    local_batches: tuple[int, ...] | None = None
    rank_env: tuple[tuple[tuple[str, str], ...], ...] | None = None
    requires_locality: bool = False
    run_as: str | None = None
    max_runtime_s: float | None = None
    grace_s: float = 10.0
    share_with: tuple[str, int] | None = None
    progress: tuple[str, str] | None = field(default=None, repr=False)
    visible_devices: str | None = None
    host_by_node: tuple[tuple[str, float, float], ...] = ()
    measure_power: bool = False
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class RunStatus:
    """What an executor knows about a run.

    Attributes:
        state: absent | starting | unplaceable | running | exited | lost.
        exit_code: the first non-zero rank status (negative: killed by that signal), or 0.
        stopped: the run exited after a stop request (preemption or cancel).
        detail: a human-readable note (which rank failed, why it was lost, why it could not
            start).
        timed_out: the run was stopped because it exceeded its ``max_runtime_s``.
    """

    state: RunState
    exit_code: int | None = None
    stopped: bool = False
    detail: str = ""
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class LogChunk:
    """A piece of one rank's output.

    Attributes:
        text: the bytes from ``offset`` on, decoded (invalid UTF-8 replaced).
        next_offset: where the next read continues (``offset`` + bytes returned).
        size_bytes: the log's length when read.
        skipped_bytes: bytes before the returned text that are no longer kept (a finished Ray
            rank keeps only the tail of its log).
    """

    text: str
    next_offset: int
    size_bytes: int
    skipped_bytes: int = 0


def read_log_file(path: str | None, offset: int, limit_bytes: int) -> LogChunk | None:
    """Read up to ``limit_bytes`` of the file at ``path`` from ``offset`` (``None``: no file)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(min(offset, size))
            data = f.read(limit_bytes)
    except FileNotFoundError:
        return None
    return LogChunk(data.decode(errors="replace"), min(offset, size) + len(data), size)


class Executor(Protocol):
    """What the service needs from an executor (see the module docstring)."""

    name: str

    def launch(self, spec: LaunchSpec) -> None: ...

    def status(self, job_id: str, run: int) -> RunStatus: ...

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        """Signal the run; ``False`` when it is still starting and must be asked again."""

    def release(self, job_id: str, run: int) -> None: ...

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> LogChunk | None:
        """Rank ``rank``'s output from byte ``offset``; ``None`` when there is none."""

    def close(self) -> None: ...


@runtime_checkable
class SharingExecutor(Executor, Protocol):
    """An executor that can start a run on GPUs another run holds (co-location).

    ``sharing_mechanism(host)`` says how the two processes will share the host run's GPUs on
    that run's node: MPS when its control daemon runs there, time-slicing otherwise.
    """

    shares_gpus: bool

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism: ...


@runtime_checkable
class ExpiringExecutor(Executor, Protocol):
    """An executor that removes finished runs' files (logs, launch and exit records) once
    they are older than its retention period (:mod:`~tessera.live.executors.logs`).

    ``remove_expired(now_s)`` is called by the service now and then; it never touches a run
    that may still be running, and returns how many run directories it removed itself.
    """

    def remove_expired(self, now_s: float) -> int: ...


@runtime_checkable
class HostEnforcingExecutor(Executor, Protocol):
    """An executor that enforces a run's CPUs and host memory (``LaunchSpec.host_by_node``)
    and says how: ``host_enforcement(job_id, run)`` is one line for the job's events after
    ``launch`` ("... enforced by a cgroup v2 cpuset and memory.max"), ``None`` when the run
    holds none."""

    def host_enforcement(self, job_id: str, run: int) -> str | None: ...


@runtime_checkable
class HostReportingExecutor(Executor, Protocol):
    """An executor whose machines report their CPUs and memory: ``host_capacity()`` is
    ``{machine: (CPUs, memory GiB)}`` as the machines see themselves (the service logs it at
    start beside what its cluster declares, :mod:`tessera.live.host_report`)."""

    def host_capacity(self) -> dict[str, tuple[float, float]]: ...


def base_env(user: str | None = None, visible_devices: str | None = None) -> dict[str, str]:
    """The minimal environment a rank starts from (layer 1 in the module docstring).

    ``PATH`` puts this Python's ``bin`` directory first, so ``python`` in a job is the
    interpreter the service runs with; ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL`` are those
    of ``user`` (default: the user this process runs as). ``visible_devices``, when given, is
    the rank's ``CUDA_VISIBLE_DEVICES`` (the GPUs Ray assigned to it), instead of the
    launcher's own.

    Raises:
        KeyError: ``user`` does not exist.
    """
    pw = pwd.getpwnam(user) if user else pwd.getpwuid(os.geteuid())
    env = {"PATH": f"{os.path.dirname(sys.executable)}:{DEFAULT_PATH}", "HOME": pw.pw_dir,
           "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": pw.pw_shell or "/bin/sh"}
    env.update({k: os.environ[k] for k in PASSED_THROUGH if k in os.environ})
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    return env


def launch_env(rank_env: dict[str, str],
               visible_devices: str | None = None) -> tuple[dict[str, str], str | None]:
    """What a launcher runs a rank with: the full environment (base below the rank's own
    variables, :data:`LAUNCHER_VARS` removed) and the user to run it as (``None``: unchanged).
    ``visible_devices``: the rank's GPUs, as :func:`base_env` takes them."""
    user = rank_env.get(RUN_AS_VAR)
    env = base_env(user, visible_devices)
    env.update((k, v) for k, v in rank_env.items() if k not in LAUNCHER_VARS)
    if visible_devices is not None:  # the GPUs the executor assigned win over anything else
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    return env, user


def check_run_as(user: str | None, what: str = "--run-as") -> None:
    """Refuse a run-as user that does not exist, or one a non-root service cannot become.

    Raises:
        SpecError: one line naming ``what`` (the flag or the queue that asked for ``user``).
    """
    if user is None:
        return
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise SpecError(f"{what} {user}: no such user on this machine") from None
    if os.geteuid() != 0 and uid != os.geteuid():
        raise SpecError(f"{what} {user}: only a service running as root can run jobs as "
                        f"another user (this one runs as uid {os.geteuid()})")


def prepare_checkpoint_dir(path: str, user: str | None, checkpoints_root: Path) -> None:
    """Create a run's checkpoint directory so that the user its ranks run as can write it.

    Without ``user`` the directory is simply created. With one, only the service's default
    directory (``<checkpoints_root>/<job id>``) is created here and handed to ``user``, and the
    way to it opened for search (``--x``: no listing); a ``checkpoint_dir`` the job named
    elsewhere is left for the job's own user to create (the guardian does it after dropping
    privileges), so a job can never make root create or hand over a directory of its choosing.
    """
    ckpt = Path(path)
    if user is None:
        ckpt.mkdir(parents=True, exist_ok=True)
        return
    if ckpt.parent != checkpoints_root:
        return
    pw = pwd.getpwnam(user)
    ckpt.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chown(ckpt, pw.pw_uid, pw.pw_gid)
    for up in (checkpoints_root, checkpoints_root.parent):
        up.chmod(up.stat().st_mode | 0o111)


CPU_ONLY_FLAVOR = "cpu"
"""``TESSERA_FLAVOR`` (and ``TESSERA_GANG_FLAVORS``) of a CPU-only run's ranks: no GPU flavor's
short name is ``cpu``, so a job tells the two apart without reading ``CUDA_VISIBLE_DEVICES``."""


def rank_envs(spec: LaunchSpec, master_addr: str, master_port: int) -> list[dict[str, str]]:
    """The job's and the rendezvous variables of each rank, in rank order (node by node, as
    placed); the launcher adds :func:`base_env` below them and removes :data:`LAUNCHER_VARS`.

    ``TESSERA_GRACE_S`` tells the job how long it has after SIGTERM, and
    ``TESSERA_MAX_RUNTIME_S`` (set only with a limit) how long its run may last. The job's
    :data:`DEVICE_VARS` are dropped: which GPUs a rank uses is the executor's to say. A
    CPU-only run (no GPUs) has one rank per node, with ``CUDA_VISIBLE_DEVICES`` empty and
    ``TESSERA_FLAVOR`` / ``TESSERA_GANG_FLAVORS`` set to :data:`CPU_ONLY_FLAVOR` (``cpu``), never
    the flavor of a GPU it does not hold.
    """
    cpu_only = spec.placement.num_gpus == 0  # (a CPU-only job: one rank a node, no GPUs)
    world = len(spec.placement.gpus_by_node) if cpu_only else spec.placement.num_gpus
    out: list[dict[str, str]] = []
    rank = 0
    reserved = (RUN_AS_VAR, "TESSERA_MAX_RUNTIME_S", "TESSERA_GRACE_S", "TESSERA_PROGRESS_URL",
                "TESSERA_PROGRESS_TOKEN")
    for node, count, flavor in spec.placement.parts():
        for local in range(1 if cpu_only else count):
            env = {k: v for k, v in spec.env if k not in reserved and k not in DEVICE_VARS}
            if cpu_only:
                env["CUDA_VISIBLE_DEVICES"] = ""
            env.update({
                "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
                "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(max(count, 1)), "TESSERA_JOB_ID": spec.job_id,
                "TESSERA_RUN": str(spec.run), "TESSERA_CHECKPOINT_DIR": spec.checkpoint_dir,
                "TESSERA_FLAVOR": CPU_ONLY_FLAVOR if cpu_only else flavor.short,
                "TESSERA_NODE": node,
                "TESSERA_GANG_FLAVORS": CPU_ONLY_FLAVOR if cpu_only else spec.placement.label,
                "TESSERA_GRACE_S": f"{spec.grace_s:g}",
            })
            if spec.max_runtime_s is not None:
                env["TESSERA_MAX_RUNTIME_S"] = f"{spec.max_runtime_s:g}"
            if spec.run_as is not None:
                env[RUN_AS_VAR] = spec.run_as
            if spec.local_batches is not None:
                env["TESSERA_LOCAL_BATCH"] = str(spec.local_batches[rank])
            if spec.rank_env is not None:
                env.update(spec.rank_env[rank])
            if spec.progress is not None:
                env["TESSERA_PROGRESS_URL"], env["TESSERA_PROGRESS_TOKEN"] = spec.progress
            out.append(env)
            rank += 1
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for the rendezvous)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different TCP ports nobody listens on right now: each stays bound until all
    are chosen, so the kernel never hands the same one out twice (Ray refuses to start a node
    whose components were given one port twice)."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(count):
            s = held.enter_context(socket.socket())
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
        return ports
