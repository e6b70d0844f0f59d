"""Workloads: reading traces, generating synthetic ones, writing Gavel's format.

Everything that enters Tessera as a job list passes through here and leaves as a validated,
immutable :class:`~tessera.model.jobs.Workload`:

* :func:`load_trace` -- any supported trace by path or trace name (``philly`` is bundled; the
  names are shared with ``tessera analyze``, :mod:`tessera.workload.known`; public data is found
  by :mod:`tessera.workload.datadir`);
* :func:`generate_gavel_like` -- Gavel's synthetic generator, seeded;
* :func:`write_gavel_tsv` -- Gavel's 10-column trace, so Gavel can run Tessera's workloads;
* :func:`list_known_traces` -- the named traces and whether their data is present.

See ``docs/workloads.md`` for the formats and every conversion rule.
"""

from tessera.workload.known import KnownTrace, list_known_traces
from tessera.workload.load import TraceLoad, detect_format, load_trace, read_trace
from tessera.workload.readers.gavel_tsv import write_gavel_tsv
from tessera.workload.registry import READERS, TraceReader
from tessera.workload.rows import SkippedRow
from tessera.workload.synth import generate_gavel_like

__all__ = [
    "READERS",
    "KnownTrace",
    "SkippedRow",
    "TraceLoad",
    "TraceReader",
    "detect_format",
    "generate_gavel_like",
    "list_known_traces",
    "load_trace",
    "read_trace",
    "write_gavel_tsv",
]
