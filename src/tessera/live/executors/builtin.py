"""The executors that come with Tessera, registered in :data:`~.registry.EXECUTORS`.

Importing this module registers them: ``local`` (:mod:`.local`) and ``ray`` (:mod:`.ray_plugin`,
which imports Ray only when the executor is built). ``tessera serve`` imports it; a test or a
plugin outside Tessera registers its own executor from its own module the same way.
"""

from __future__ import annotations

from tessera.live.executors import local, ray_plugin
from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin, executor_plugin

#: The built-in executors' modules (each registered itself when imported).
MODULES = (local, ray_plugin)

__all__ = ["EXECUTORS", "MODULES", "ExecutorPlugin", "executor_plugin"]
