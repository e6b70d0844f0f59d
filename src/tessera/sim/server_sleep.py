"""Idle servers powered down, as Slurm's power saving does (issue 34, 3c).

Slurm suspends a node that has been idle for ``SuspendTime`` seconds (its ``SuspendProgram``
powers it off) and, when a job is allocated to it, resumes it (``ResumeProgram``; the job
waits, configuring, until the node is up, at most ``ResumeTimeout``). Here, with
``SimConfig.suspend_after_s`` set, every server (node) of the simulated cluster behaves so,
under every policy and carbon mode alike:

* a server whose GPUs have all been free for ``suspend_after_s`` is suspended from then on: its
  GPUs draw ``off_power_w`` each instead of their idle power (the energy book's
  :meth:`~tessera.sim.energy.EnergyBook.suspended`);
* a job started on a suspended server holds its GPUs at once but progresses only after
  ``resume_s`` (the servers of a gang boot in parallel: one ``resume_s``), before any restore
  of its own; the delay is part of its waiting time. Any other job started on that server
  before it is up (in the same round, or later during the boot) waits for the same boot.
  The resume is booked like a restore: at the job's draw (a booting server draws less; this
  over-counts, the same for every mode).

Not modelled: Slurm's ``SuspendRate``/``ResumeRate`` (nodes suspended or resumed per minute;
unlimited here), and waking a server ahead of a planned start. The first submission is the
moment every server became idle (the energy book's span starts there).

Example (``suspend_after_s=600``, ``resume_s=300``): a server idle from 0 s gets a job at
1,000 s. It was suspended over 600-1,000 s (400 s at ``off_power_w`` per GPU); the job holds
the GPUs from 1,000 s and progresses from 1,300 s.
"""

from __future__ import annotations

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.sim.energy import EnergyBook

__all__ = ["ServerSleep"]


class ServerSleep:
    """Which servers are idle since when; books suspensions and answers resume delays."""

    def __init__(self, cluster: ClusterSpec, book: EnergyBook, suspend_after_s: float,
                 resume_s: float, off_power_w: float, start_s: float) -> None:
        """Every server idle from ``start_s``.

        Raises:
            SpecError: an off power above a server's idle power per GPU.
        """
        self.book = book
        self.suspend_after_s = suspend_after_s
        self.resume_s = resume_s
        self.saved_w: dict[str, float] = {}
        """Per server: watts a suspension saves (``GPUs × (idle − off)``)."""
        for n in cluster.nodes:
            idle_w = book.idle_w.get(n.flavor, 0.0)
            if off_power_w > idle_w:
                raise SpecError(f"off power {off_power_w:g} W per GPU is above the idle power "
                                f"{idle_w:.1f} W of {n.flavor.name} (node {n.node_id})")
            self.saved_w[n.node_id] = n.gpus * (idle_w - off_power_w)
        self.idle_since_s: dict[str, float] = dict.fromkeys(self.saved_w, start_s)
        """Servers with every GPU free, and since when."""
        self.suspensions = 0
        """How many resumes jobs waited for."""
        self.up_at_s: dict[str, float] = {}
        """Servers woken from a suspension, and when they are up again."""

    def woken(self, node_ids: list[str], t_s: float) -> float:
        """A job starts at ``t_s`` on ``node_ids``: the seconds it waits for a resume (0 when
        none was suspended and none is still booting). Each idle one stops being idle; a
        suspended one's suspension is booked up to ``t_s`` and it boots until ``t_s +
        resume_s``; a server still booting (woken by an earlier start) delays this job until
        it is up."""
        delay_s = 0.0
        woke = False
        for node_id in node_ids:
            since = self.idle_since_s.pop(node_id, None)
            if since is not None and t_s >= since + self.suspend_after_s and t_s > since:
                self.book.suspended(since + self.suspend_after_s, t_s, self.saved_w[node_id])
                self.up_at_s[node_id] = t_s + self.resume_s
                woke = True
            delay_s = max(delay_s, self.up_at_s.get(node_id, t_s) - t_s)
        if woke:
            self.suspensions += 1
        return delay_s

    def idle(self, node_id: str, t_s: float) -> None:
        """Every GPU of ``node_id`` is free from ``t_s``."""
        self.idle_since_s.setdefault(node_id, t_s)

    def finish(self, t_s: float) -> None:
        """Book the suspensions still open at the run's end ``t_s``."""
        for node_id, since in self.idle_since_s.items():
            self.book.suspended(since + self.suspend_after_s, t_s, self.saved_w[node_id])
