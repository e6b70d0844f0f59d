"""The trace-format registry: every reader registers here with a one-line summary.

A reader is a :class:`TraceReader`: a name, a ``read`` function that turns one file into a
:class:`~tessera.model.jobs.Workload`, and a ``sniff`` function that says whether a file looks
like its format (by file name, header or shape) so :func:`tessera.workload.load_trace` can
detect the format. ``tessera traces`` and error messages list ``READERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tessera.model.jobs import Workload
from tessera.registry import Registry
from tessera.workload.rows import ReadContext


@dataclass(frozen=True, slots=True)
class TraceReader:
    """One trace format.

    Attributes:
        name: the format's registry name (``gavel``, ``philly`` ...).
        read: ``read(path, ctx, name) -> Workload``; errors go through ``ctx``.
        sniff: ``sniff(path, header)`` -- whether the file looks like this format; ``header``
            is the stripped CSV header, or ``None`` for a file that is not a CSV.
        multi_file: whether a directory of such files forms one workload (ITP clusters).
    """

    name: str
    read: Callable[[Path, ReadContext, str], Workload]
    sniff: Callable[[Path, list[str] | None], bool]
    multi_file: bool = False


READERS: Registry[TraceReader] = Registry[TraceReader]("trace format")


def register_reader(reader: TraceReader, summary: str) -> TraceReader:
    """Register ``reader`` under its name (call once per reader module)."""
    return READERS.register(reader.name, summary)(reader)
