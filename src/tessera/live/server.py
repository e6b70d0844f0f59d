"""Assemble and run the service: ``tessera serve``.

:func:`build_service` wires the pieces from command-line choices (state directory, cluster,
policy, executor); :func:`serve` adds uvicorn on a loopback address. The cluster and policy
chosen on first start are remembered in the store, so a restart without flags resumes the
same setup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tessera.errors import SpecError
from tessera.live.executors.base import Executor
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.store import Store
from tessera.live.tenancy import ensure_config, load_tenancy
from tessera.model.cluster import ClusterSpec, load_cluster

DEFAULT_CLUSTER = "v100:4,t4:4"
DEFAULT_PORT = 8470


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """What ``tessera serve`` was asked for (``None`` = what the state dir remembers)."""

    state_dir: Path
    cluster: str | None = None
    gpus_per_server: int = 4
    policy: str | None = None
    executor: str = "local"
    ray_address: str | None = None
    options: ServiceOptions = field(default_factory=ServiceOptions)
    ray_token_file: Path | None = None
    ray_flavor_resource: str = "accelerator_type"


def build_service(cfg: ServeConfig) -> tuple[LiveService, str | None]:
    """Create (or reopen) the state, the executor and the service.

    Returns:
        the service (not started) and the admin token if it was created just now.
    """
    connect_ray(cfg)  # before any state is written: a wrong address changes nothing
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(cfg.state_dir / "state.db")
    cluster_text = cfg.cluster or store.meta("cluster") or DEFAULT_CLUSTER
    gps = int(store.meta("gpus_per_server") or cfg.gpus_per_server) if not cfg.cluster \
        else cfg.gpus_per_server
    policy = cfg.policy or store.meta("policy") or "fifo"
    cluster = load_cluster(cluster_text, gps)
    store.set_meta("cluster", cluster_text)
    store.set_meta("gpus_per_server", str(gps))
    store.set_meta("policy", policy)
    token = ensure_config(cfg.state_dir, cluster.total_gpus)
    tenancy = load_tenancy(cfg.state_dir)
    executor = make_executor(cfg, cluster)
    svc = LiveService(store, executor, cluster, tenancy, policy, cfg.state_dir, cfg.options)
    return svc, token


def connect_ray(cfg: ServeConfig) -> None:
    """With ``--ray-address``, connect now (token from ``--ray-token-file``) or fail in one
    line (:class:`SpecError`); the executor then reuses the connection."""
    if cfg.executor != "ray" or cfg.ray_address is None:
        return
    from tessera.live.executors.ray import NAMESPACE
    from tessera.live.executors.ray_cluster import connect, use_token_file

    use_token_file(cfg.ray_token_file)
    connect(cfg.ray_address, NAMESPACE)


def make_executor(cfg: ServeConfig, cluster: ClusterSpec) -> Executor:
    if cfg.executor == "local":
        from tessera.live.executors.local import LocalExecutor

        return LocalExecutor(cfg.state_dir / "runs", grace_s=cfg.options.grace_s)
    if cfg.executor == "ray":
        from tessera.live.executors.ray import RayExecutor
        from tessera.live.executors.ray_cluster import FlavorResource

        if cfg.ray_flavor_resource not in ("accelerator_type", "gpu_flavor"):
            raise SpecError(f"unknown --ray-flavor-resource {cfg.ray_flavor_resource!r}; use "
                            "'accelerator_type' or 'gpu_flavor'")
        kind: FlavorResource = "gpu_flavor" if cfg.ray_flavor_resource == "gpu_flavor" \
            else "accelerator_type"
        return RayExecutor(cluster, cfg.ray_address, cfg.state_dir / "runs",
                           grace_s=cfg.options.grace_s, flavor_resource=kind,
                           state_dir=cfg.state_dir)
    raise SpecError(f"unknown executor {cfg.executor!r}; use 'local' or 'ray'")


def serve(cfg: ServeConfig, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
    """Run the service and its HTTP API until interrupted (SIGINT/SIGTERM)."""
    import uvicorn

    from tessera.live.api import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    svc, token = build_service(cfg)
    if token is not None:
        print(f"admin token (shown once; stored hashed in {cfg.state_dir}): {token}\n"
              f"  clients: export TESSERA_TOKEN={token}  (or --token); "
              "`tessera token-add` makes tenant tokens", flush=True)
    svc.start()
    url = f"http://{host}:{port}"
    print(f"tessera serving {svc.cluster.describe()} with policy {svc.policy.display_name} "
          f"({svc.executor.name} executor)\n"
          f"  API:       {url}  (clients: --server or TESSERA_SERVER)\n"
          f"  dashboard: {url}/dashboard#token={token or '<your token>'}", flush=True)
    try:
        uvicorn.run(create_app(svc), host=host, port=port, log_level="warning")
    finally:
        svc.stop()
