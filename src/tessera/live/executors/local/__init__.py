"""``--executor local``: every run is a runner process and its ranks on this machine, no Ray.

Importing this package registers the executor (:mod:`.executor` holds it, its options and its
plugin). The runner script it starts stays beside the containment code it shares with the Ray
executor (:mod:`tessera.live.executors.runner`, run as ``python -S runner.py``, imports its
sibling ``contain`` by file name).
"""

from __future__ import annotations

from tessera.live.executors.local.executor import LocalExecutor, LocalOptions, LocalPlugin

__all__ = ["LocalExecutor", "LocalOptions", "LocalPlugin"]
