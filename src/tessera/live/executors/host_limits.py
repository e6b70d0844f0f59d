"""CPU pinning and memory limits for a local run's ranks (standard library only).

A job asks for CPU *amounts* and memory (``JobSpec.host``); the decision core books them per
node; this module makes a run live within them on the machine. The executor, never the job,
chooses which CPU ids a run gets (:func:`choose_cpus`): a request can hold no CPU id, cpuset or
NUMA node (``docs/security.md``), so a tenant cannot widen its own pinning through its spec.

Two mechanisms, best first, chosen per machine by :func:`mechanism`:

* **cgroup v2** -- where the service may write a cgroup v2 hierarchy with the ``cpuset`` and
  ``memory`` controllers (``/sys/fs/cgroup/cgroup.controllers``), each rank's guardian makes
  ``tessera/<job>-<run>-<rank>`` under the service's own cgroup, writes ``cpuset.cpus`` and
  ``memory.max`` and moves itself in before it starts the command, so the command and every
  descendant are held by the kernel: a process cannot leave its cgroup or widen its cpuset
  without write access to the hierarchy, which the job (run as another user) lacks.
* **affinity + RLIMIT_AS** -- otherwise (cgroup v1 machines, containers without cgroup
  write access): the command is pinned with ``sched_setaffinity`` (what ``taskset`` does) and
  its address space capped with ``RLIMIT_AS`` (soft and hard), both set in the command's own
  process after its user was set. The memory cap binds a job that runs as another user (it
  cannot raise a hard limit); the pinning is *advisory*: a process may call
  ``sched_setaffinity`` itself. The job's events say which mechanism applied.

The guardian (:mod:`~tessera.live.executors.guardian`) imports this module as a sibling, so it
must import nothing outside the standard library.
"""

import errno
import math
import os
import resource
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"
#: The file naming this process's cgroup (``0::/path`` on a v2 hierarchy).
PROC_SELF_CGROUP = "/proc/self/cgroup"
_GIB = 1 << 30


def allowed_cpus() -> list[int]:
    """The CPU ids this process may run on (``os.sched_getaffinity``), sorted."""
    return sorted(os.sched_getaffinity(0))


def host_memory_gib() -> float:
    """The machine's memory in GiB (``MemTotal`` of ``/proc/meminfo``)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    raise OSError("no MemTotal in /proc/meminfo")


def cgroup_v2_base(root: str = CGROUP_ROOT, own_cgroup: str = PROC_SELF_CGROUP) -> str | None:
    """The directory under the service's own cgroup v2 that holds its runs' cgroups
    (``<root>/<own>/tessera``) when it can hold children with ``cpuset`` and ``memory``
    (controllers available and the service's directory writable), else ``None``.

    ``root`` (the hierarchy's mount) and ``own_cgroup`` (the file naming this process's
    cgroup, ``0::/path``) can be pointed at a directory laid out like a v2 hierarchy (tests).
    """
    try:
        with open(os.path.join(root, "cgroup.controllers")) as f:
            controllers = set(f.read().split())
        with open(own_cgroup) as f:
            own = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None
    if own is None or not {"cpuset", "memory"} <= controllers:
        return None
    base = os.path.join(root, own.lstrip("/"), "tessera")
    parent = os.path.dirname(base)
    if not os.access(parent, os.W_OK):
        return None
    return base


def mechanism(root: str = CGROUP_ROOT, own_cgroup: str = PROC_SELF_CGROUP) -> str:
    """``"cgroup"`` or ``"affinity"`` (see the module docstring)."""
    return "cgroup" if cgroup_v2_base(root, own_cgroup) is not None else "affinity"


def choose_cpus(cpus: float, allowed: list[int], busy: set[int]) -> list[int]:
    """``ceil(cpus)`` CPU ids for a run: free ones (not in ``busy``) first, lowest ids first,
    then, when the machine has too few free, busy ones (shared) -- never more than exist."""
    want = min(max(1, math.ceil(cpus - 1e-9)), len(allowed))
    free = [c for c in allowed if c not in busy]
    return (free + [c for c in allowed if c in busy])[:want]


def rank_limits(cpu_ids: list[int], mem_gib: float, ranks: int, how: str,
                cgroup: str | None) -> list[dict[str, Any]]:
    """Each rank's share of the run's CPUs (a contiguous slice; all of them if there are fewer
    CPUs than ranks) and memory (an equal part), as the guardian reads it."""
    out = []
    n = len(cpu_ids)
    for i in range(ranks):
        if n >= ranks:
            lo, hi = i * n // ranks, (i + 1) * n // ranks
            ids = cpu_ids[lo:hi]
        else:
            ids = list(cpu_ids)
        out.append({"cpus": ids, "mem_bytes": int(mem_gib * _GIB / max(ranks, 1)) or None,
                    "how": how, "cgroup": f"{cgroup}-{i}" if cgroup else None})
    return out


def describe(limits: list[dict[str, Any]], cpus: float, mem_gib: float) -> str:
    """One line for the job's events: what was asked and how it is enforced."""
    ids = sorted({c for lim in limits for c in lim["cpus"]})
    how = limits[0]["how"] if limits else "none"
    mem = f"{mem_gib:g} GiB" if mem_gib > 0 else "no memory limit"
    if how == "cgroup":
        return (f"host: {cpus:g} CPUs on CPU ids {_ranges(ids)} and {mem}, enforced by a "
                "cgroup v2 cpuset and memory.max")
    return (f"host: {cpus:g} CPUs on CPU ids {_ranges(ids)} and {mem}, enforced by CPU "
            "affinity (advisory: a process may widen its own) and RLIMIT_AS (no writable "
            "cgroup v2 cpuset/memory here)")


def _ranges(ids: list[int]) -> str:
    parts: list[str] = []
    for c in ids:
        if parts and parts[-1].split("-")[-1] == str(c - 1):
            parts[-1] = parts[-1].split("-")[0] + f"-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts) or "none"


def enter_cgroup(lim: dict[str, Any]) -> None:
    """In the guardian, before it starts the command: make the rank's cgroup, set its cpuset
    and memory.max, and move this process into it (the command inherits it).

    Raises:
        OSError: the cgroup could not be made or joined (the rank then fails to start rather
            than run unlimited).
    """
    path = lim["cgroup"]
    parent = os.path.dirname(path)
    os.makedirs(path, exist_ok=True)
    _write(os.path.join(parent, "cgroup.subtree_control"), "+cpuset +memory")
    _write(os.path.join(path, "cpuset.cpus"), ",".join(str(c) for c in lim["cpus"]))
    if lim.get("mem_bytes"):
        _write(os.path.join(path, "memory.max"), str(lim["mem_bytes"]))
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def apply_in_child(lim: dict[str, Any]) -> None:
    """In the command's process, after its user was set: pin it and cap its address space
    (the affinity mechanism; with a cgroup the kernel already holds it)."""
    if lim.get("how") == "cgroup":
        return
    if lim.get("cpus"):
        os.sched_setaffinity(0, lim["cpus"])
    mem = lim.get("mem_bytes")
    if mem:
        resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))


def cgroups_of(launch: dict[str, Any]) -> list[str]:
    """The rank cgroups a run's launch record names (empty for the affinity mechanism)."""
    return [str(lim["cgroup"]) for lim in launch.get("host") or ()
            if lim.get("how") == "cgroup" and lim.get("cgroup")]


def remove_cgroup(path: str, base: str) -> bool:
    """Remove the rank cgroup ``path`` (a directory right under ``base``) once no process is
    left in it; returns whether it is gone (``False``: still in use, or not ours to remove).

    On a cgroup v2 mount the kernel lists only live processes in ``cgroup.procs`` and a
    cgroup's interface files never keep ``rmdir`` from removing it (a populated one answers
    ``EBUSY``). A plain directory laid out like one (tests) keeps the pids written to it, so
    each listed pid is checked for life, and the files are removed before the directory.
    """
    if os.path.dirname(os.path.normpath(path)) != os.path.normpath(base):
        return False  # (only a run's own cgroup right under the service's, never elsewhere)
    if not os.path.isdir(path):
        return True
    if any(_alive(pid) for pid in _procs(path)):
        return False
    try:
        os.rmdir(path)
        return True
    except OSError as err:
        if err.errno != errno.ENOTEMPTY:
            return False  # (EBUSY: the kernel still counts a process in it)
    with os.scandir(path) as entries:  # (a plain directory: its files, never a sub-cgroup)
        found = list(entries)
    if any(f.is_dir(follow_symlinks=False) for f in found):
        return False
    for f in found:
        os.unlink(f.path)
    os.rmdir(path)
    return True


def _procs(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(w) for w in f.read().split() if w.isdigit()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
