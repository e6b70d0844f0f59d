"""Progress of a simulation on the terminal: policies done, jobs done, simulated time.

A long ``tessera simulate`` (a minute or more for the README's Philly example) must not look
hung, so on a terminal it shows one bar per policy (jobs finished of the trace's, and how far
the simulated clock has come) and a line counting the policies done. It shows nothing when the
output goes to a script: with ``--json``, or when stdout or stderr is not a terminal (piped,
redirected, captured by a test), so files and pipes get only the results.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tessera.report.tables import human_duration


def show_progress(as_json: bool) -> bool:
    """Whether to draw progress: never for ``--json``, only when stdout and stderr are both
    terminals (the bars go to stderr; stdout redirected means a script reads the output)."""
    return not as_json and sys.stdout.isatty() and sys.stderr.isatty()


class SimProgress:
    """Bars for a batch of policies; a context manager whose :meth:`update` is the
    ``progress`` callback of :func:`tessera.sim.batch.run_policies`.

    With ``show=False`` it draws nothing (and :meth:`update` only counts), so callers need
    no second code path.
    """

    def __init__(self, policies: Sequence[str], jobs: int, console: Console, show: bool) -> None:
        self.show = show
        self.finished: set[str] = set()
        self._progress = Progress(
            TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[simulated]}"), TimeElapsedColumn(),
            console=console, disable=not show, transient=False,
        )
        self._all = self._progress.add_task("policies done", total=len(policies),
                                            simulated="")
        self._tasks = {p: self._progress.add_task(p, total=jobs, simulated="jobs done")
                       for p in policies}

    def __enter__(self) -> SimProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.__exit__(kind, exc, tb)

    def update(self, policy: str, done: int, total: int, simulated_s: float) -> None:
        """One report of ``policy``'s run: ``done`` of ``total`` jobs ended, the clock at
        ``simulated_s``."""
        self._progress.update(self._tasks[policy], completed=done, total=total,
                              simulated=f"jobs done, {human_duration(simulated_s)} simulated")
        if done >= total and policy not in self.finished:
            self.finished.add(policy)
            self._progress.update(self._all, completed=len(self.finished))
