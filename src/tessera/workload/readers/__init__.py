"""Trace readers, one module per format; importing this package registers them all.

Each module defines a ``read_*`` function and registers a
:class:`~tessera.workload.registry.TraceReader` in ``READERS``.
"""

from tessera.workload.readers import gavel_tsv, philly

__all__ = ["gavel_tsv", "philly"]
