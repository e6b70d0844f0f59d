"""``--executor ray``: placement groups and named detached actors on a Ray cluster, one package.

Importing this package registers the executor (:mod:`.plugin`: its options, the ``--ray-*``
flags) and imports no Ray: the modules below import Ray, and the plugin imports them only when
the service connects to a cluster or builds the executor. So ``tessera --help`` and the
``local`` executor never pay for Ray, and a machine without Ray can list the executors.

==============  ==========================================================================
module          what it holds
==============  ==========================================================================
``plugin``      the options model (:class:`~.plugin.RayOptions`) and how ``serve`` builds
                the executor
``executor``    :class:`~.executor.RayExecutor`: status, stop, release, adoption
``launch``      placement groups and launches, off the scheduling loop
``hosts``       each bundle's GPUs and the warm rank host of every node
``worker``      the rank host actor (:class:`~.worker.RankHost`), which Ray's workers import
``polls``       snapshots of the rank hosts, never waited for
``records``     exit records in Ray's key-value store
``cluster``     connecting (token auth), flavors as Ray resources
``head``        the embedded head, started in the service's state dir
==============  ==========================================================================

Ray's workers import ``tessera.live.executors.ray.worker`` by name to build the rank host
actor; that runs this file first, which is cheap (the plugin and the registry).
"""

from __future__ import annotations

from tessera.live.executors.ray.plugin import RayOptions, RayPlugin

__all__ = ["RayOptions", "RayPlugin"]
