"""What the service's loop needs of the inference manager, as a protocol: the loop imports
this, not :mod:`.manager` (which imports the service), so the imports stay free of circles."""

from __future__ import annotations

from typing import Protocol

from tessera.model.cluster import ClusterSpec


class InferenceHook(Protocol):
    """:class:`~tessera.live.inference.manager.InferenceManager`, as the loop sees it."""

    def tick(self, now_s: float) -> None:
        """Plan and apply; called by the loop thread (the only one that calls the executor)."""

    def training_cluster(self) -> ClusterSpec:
        """The cluster less the GPUs the services hold: what training is offered."""
