"""Trace readers, one module per format; importing this package registers them all.

Each module defines a ``read_*`` function and registers a
:class:`~tessera.workload.registry.TraceReader` in ``READERS``.
"""

from tessera.workload.readers import fgd, gavel_tsv, itp, philly, sia, synergy_csv

__all__ = ["fgd", "gavel_tsv", "itp", "philly", "sia", "synergy_csv"]
