"""``--executor ray``: the Ray executor's options and how ``serve`` builds it.

The options are the ``--ray-*`` flags of ``tessera serve`` (generated from :class:`RayOptions`:
its descriptions are the flags' help); this module imports no Ray: every ``tessera`` start
imports it (the CLI lists the executors to build ``serve``'s flags), and ``import ray`` costs
about 250 ms there (``python -X importtime -c "import ray"``: 240 to 290 ms on the 2-core
dev box), so Ray and the executor, which imports Ray at module level, are imported when they
are used. The connection helpers (:mod:`~tessera.live.executors.ray.cluster`) import Ray only
inside their functions, so they are imported here (about 3 ms).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tessera.live.executors.base import Executor
from tessera.live.executors.ray.cluster import connect, use_token_file
from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin, ExecutorSite


class RayOptions(BaseModel):
    """The Ray executor's options (``tessera serve --ray-<option>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str | None = Field(None, description="HOST:PORT of an existing Ray head "
                                "(default: start an embedded one in the state dir).")
    token_file: Path | None = Field(None, description="The Ray head's auth token file (its "
                                    "~/.ray/auth_token), when this host has not got the same "
                                    "one.")
    allow_unauthenticated: bool = Field(False, description="Connect to a --ray-address "
                                        "cluster that lets in clients without a token "
                                        "(refused otherwise: anyone who reaches it runs code "
                                        "as its nodes' user; docs/security.md).")
    flavor_resource: Literal["accelerator_type", "gpu_flavor"] = Field(
        "accelerator_type", description="How ranks ask Ray for their flavor: accelerator_type "
        "(the accelerator_type:<T> resources Ray's GPU detection publishes) or gpu_flavor "
        "(gpu_flavor:<flavor> resources the nodes declare).")


@EXECUTORS.register("ray", "Placement groups and detached actors on a Ray cluster (embedded "
                    "head, or --ray-address).")
class RayPlugin(ExecutorPlugin[RayOptions]):
    """``--executor ray``: :class:`~tessera.live.executors.ray.executor.RayExecutor`."""

    options_model = RayOptions
    shares_gpus = True  # a rider runs in the bundles of its host's placement group

    def connect(self, options: RayOptions) -> None:
        """With an address, connect now (token from ``token_file``) or fail in one line,
        also when the cluster lets in clients without a token (unless
        ``allow_unauthenticated``); the executor then reuses the connection."""
        if options.address is None:
            return
        import ray  # lazy: ~250 ms at every tessera start (module docstring)

        # lazy: the executor imports Ray at module level (module docstring)
        from tessera.live.executors.ray.executor import NAMESPACE

        if ray.is_initialized():  # serve() connected already
            return

        use_token_file(options.token_file)
        connect(options.address, NAMESPACE,
                allow_unauthenticated=options.allow_unauthenticated)

    def build(self, options: RayOptions, site: ExecutorSite) -> Executor:
        # lazy: the executor imports Ray, ~250 ms at every tessera start (module docstring)
        from tessera.live.executors.ray.executor import RayExecutor

        return RayExecutor(site.cluster, options.address, site.runs_dir, grace_s=site.grace_s,
                           flavor_resource=options.flavor_resource, state_dir=site.state_dir,
                           logs=site.logs)

    def where(self, options: RayOptions) -> str:
        return f" at {options.address}" if options.address else ""
