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

The environment every rank sees follows ``torch.distributed``'s rendezvous convention
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) plus Tessera's own
``TESSERA_*`` variables, so a ``torchrun``-style script runs unchanged.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Literal, Protocol

from tessera.sched.snapshot import Placement

RunState = Literal["absent", "starting", "unplaceable", "running", "exited", "lost"]


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to start one run of a job.

    Attributes:
        job_id / run: the run's identity (the idempotency key).
        argv: the command every rank runs.
        env: extra variables for every rank (the user's ``env``).
        placement: the GPUs the decision gave the run.
        checkpoint_dir: the same directory on every run, so a resumed job finds its checkpoint.
        local_batches: per-rank batch sizes for heterogeneous allocations, or ``None``.
        requires_locality: the gang must sit on one node (Ray: a STRICT_PACK placement group).
    """

    job_id: str
    run: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    placement: Placement
    checkpoint_dir: str
    local_batches: tuple[int, ...] | None = None
    requires_locality: bool = False


@dataclass(frozen=True, slots=True)
class RunStatus:
    """What an executor knows about a run.

    Attributes:
        state: absent | starting | unplaceable | running | exited | lost.
        exit_code: the first non-zero rank status (negative: killed by that signal), or 0.
        stopped: the run exited after a stop request (preemption or cancel).
        detail: a human-readable note (which rank failed, why it was lost).
    """

    state: RunState
    exit_code: int | None = None
    stopped: bool = False
    detail: str = ""


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


def rank_envs(spec: LaunchSpec, master_addr: str, master_port: int) -> list[dict[str, str]]:
    """The environment of each rank, in rank order (node by node, as placed)."""
    world = spec.placement.num_gpus
    out: list[dict[str, str]] = []
    rank = 0
    for node, count, flavor in spec.placement.parts():
        for local in range(count):
            env = dict(spec.env)
            env.update({
                "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
                "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(count), "TESSERA_JOB_ID": spec.job_id,
                "TESSERA_RUN": str(spec.run), "TESSERA_CHECKPOINT_DIR": spec.checkpoint_dir,
                "TESSERA_FLAVOR": flavor, "TESSERA_NODE": node,
                "TESSERA_GANG_FLAVORS": spec.placement.flavor,
            })
            if spec.local_batches is not None:
                env["TESSERA_LOCAL_BATCH"] = str(spec.local_batches[rank])
            out.append(env)
            rank += 1
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for the rendezvous)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
