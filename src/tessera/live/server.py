"""Assemble and run the service: ``tessera serve``.

:func:`build_service` wires the pieces from command-line choices (state directory, work root,
cluster, policy, executor); :func:`serve` adds uvicorn on a loopback address. The cluster and
policy chosen on first start are remembered in the store, so a restart without flags resumes
the same setup.

``serve`` starts in an order that makes every failure cheap and clear:

1. bind the port (``port 8470 is in use …; choose --port``), and the metrics port with
   ``--metrics-port``, before anything is printed;
2. let the executor check what it needs before anything is written (with ``--ray-address``,
   connect to that Ray cluster: one line when it does not answer or refuses the token);
3. create or check the state dir and the work root (modes, owners, not nested);
4. lock the state dir (``… is in use by another tessera serve (pid N)``);
5. open the store, only if it is the one the service left (:mod:`tessera.live.storecheck`:
   missing, empty, truncated, damaged or swapped stores are refused in one line; ``--new-store``
   moves the old files aside first); on first start create the admin token and **print it at
   once**, so a failure after this point (a Ray cluster that does not answer) cannot lose it;
6. start the executor (the embedded Ray head without ``--ray-address``), reconcile, serve.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tessera.errors import SpecError
from tessera.live.executors.base import Executor, check_run_as
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings
from tessera.live.executors.registry import ExecutorSite, executor_plugin, parse_options
from tessera.live.inference.setup import attach
from tessera.live.layout import Layout, StateLock, check_private, prepare
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.storecheck import MarkerKeeper, open_store
from tessera.live.tenancy import ensure_config, load_tenancy
from tessera.live.tenancy_file import load_tenancy_file
from tessera.live.tenancy_yaml import LoadedTenancy
from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.sched.catalog import gavel_loop_only, make_policy, simulator_twin_only
from tessera.sched.core.settings import SchedulerSettings

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

DEFAULT_CLUSTER = "v100:4,t4:4"
DEFAULT_PORT = 8470


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """What ``tessera serve`` was asked for (``None`` = what the state dir remembers).

    ``executor`` names an entry of :data:`~tessera.live.executors.registry.EXECUTORS`;
    ``executor_options`` are its options (the ``--ray-*`` flags for ``ray``: ``{"address":
    "HOST:PORT"}``), checked against its options model: an option it does not take is
    refused with the executor's name.
    """

    state_dir: Path
    cluster: str | None = None
    gpus_per_server: int = 4
    policy: str | None = None
    executor: str = "local"
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    options: ServiceOptions = field(default_factory=ServiceOptions)
    work_dir: Path | None = None
    api_docs: bool = False
    run_as: str | None = None
    new_store: bool = False
    """Move the old store aside and start with an empty one (``--new-store``)."""
    tenancy: Path | None = None
    """A tenancy file or folder, Kueue or Tessera YAML (``--tenancy``): the queues' quotas,
    cohorts, fair sharing, priority classes and local queues (:mod:`tessera.live.tenancy_file`)."""
    mig_gpus: str | None = None
    """The inference services' device layer (``--mig-gpus``: ``nvml`` or ``fake:MODEL:COUNT``,
    :mod:`tessera.live.inference.setup`); ``None``: no inference services."""

    @property
    def layout(self) -> Layout:
        """The state dir and the work root (``None`` work dir: ``<state dir>-work``)."""
        return Layout.of(self.state_dir, self.work_dir)


def build_service(cfg: ServeConfig, on_token: Callable[[str], None] | None = None,
                  ) -> tuple[LiveService, str | None]:
    """Create (or reopen) the state, the executor and the service.

    Args:
        cfg: what was asked for.
        on_token: called with the admin token as soon as it exists (first start only), before
            the executor is built.

    Returns:
        the service (not started) and the admin token if it was created just now.

    Raises:
        SpecError: an unsafe or overlapping layout, a bad cluster or config, or an executor
            that cannot start (one line, whatever the executor raised).
    """
    if cfg.policy is not None:  # a policy the service cannot run is refused before any state
        live_policy(cfg.policy, cfg.executor, cfg.options.scheduler)
    connect_executor(cfg)  # before any state is written: a wrong address changes nothing
    check_run_as(cfg.run_as)
    layout = cfg.layout
    prepare(layout)
    store = open_store(layout.db_path, cfg.new_store)
    try:
        cluster_text = cfg.cluster or store.meta("cluster") or DEFAULT_CLUSTER
        gps = int(store.meta("gpus_per_server") or cfg.gpus_per_server) if not cfg.cluster \
            else cfg.gpus_per_server
        policy = cfg.policy or store.meta("policy") or "fifo"
        cluster = load_cluster(cluster_text, gps)
        first = None if cfg.tenancy is None else list(load_tenancy_file(cfg.tenancy).tree.queues)
        token = ensure_config(layout.state_dir, cluster.total_gpus, first)
        if token is not None and on_token is not None:
            on_token(token)
        store.set_meta("cluster", cluster_text)
        store.set_meta("gpus_per_server", str(gps))
        store.set_meta("policy", policy)
        tenancy = load_tenancy(layout.state_dir, cfg.tenancy)
        LoadedTenancy(tenancy.quota_tree, tenancy.mig_quotas).check(
            list(cluster.gpus_by_flavor()))
        for queue, defaults in tenancy.job_defaults.items():
            check_run_as(defaults.run_as, f"queue {queue}: run_as")
        check_private(layout.state_dir)  # the files just created (state.db-wal too)
        executor = make_executor(cfg, cluster, tenancy.logs)
    except BaseException:
        store.close()
        raise
    options = replace(cfg.options, run_as=cfg.run_as) if cfg.run_as else cfg.options
    svc = LiveService(store, executor, cluster, tenancy, policy, layout.work_dir, options)
    svc.keeper = MarkerKeeper(store)
    if cfg.mig_gpus is not None:
        try:
            attach(svc, cfg.mig_gpus, layout.state_dir)
        except BaseException:
            store.close()
            raise
    return svc, token


def live_policy(name: str, executor: str = "local",
                settings: SchedulerSettings | None = None) -> None:
    """Check that the live service can run policy ``name`` with ``executor``.

    Raises:
        SpecError: an unknown name or bad options, an unknown executor, or a policy only the
            simulator's Gavel loop runs, or a packing policy on an executor that cannot share
            GPUs (:func:`~tessera.sched.catalog.gavel_loop_only`), or Gavel's round mechanism
            in events mode (``settings.mode``).
    """
    policy = make_policy(name)
    in_rounds = (settings or SchedulerSettings()).uses_rounds(policy)
    refusal = gavel_loop_only(policy, executor_plugin(executor).shares_gpus, in_rounds) \
        or simulator_twin_only(policy)
    if refusal is not None:
        raise SpecError(refusal)


def connect_executor(cfg: ServeConfig) -> None:
    """What the executor must check before any state is written (Ray: connect to
    ``--ray-address``, token from ``--ray-token-file``, refusing a cluster that lets in
    clients without a token unless ``--ray-allow-unauthenticated``); one line
    (:class:`SpecError`) when it fails. Unknown executors and options are refused here too."""
    executor_plugin(cfg.executor).connect(parse_options(cfg.executor, cfg.executor_options))


def make_executor(cfg: ServeConfig, cluster: ClusterSpec,
                  logs: LogSettings = DEFAULT_LOGS) -> Executor:
    """The executor ``cfg`` names, built by its plugin with its options, with its run
    directories (and its ranks' logs, capped and kept as ``logs`` says) under the work root.

    Raises:
        SpecError: an unknown executor or option, or an executor that fails to start (a Ray
            address that does not answer, Ray not installed), as one line.
    """
    plugin = executor_plugin(cfg.executor)
    options = parse_options(cfg.executor, cfg.executor_options)
    layout = cfg.layout
    site = ExecutorSite(cluster, layout.state_dir, layout.runs_dir, layout.checkpoints_dir,
                        cfg.options.grace_s, logs)
    try:
        return plugin.build(options, site)
    except SpecError:
        raise
    except Exception as e:  # whatever the executor raises, the user gets one line
        raise SpecError(f"cannot start the {cfg.executor} executor{plugin.where(options)}: "
                        f"{type(e).__name__}: {e}") from None


def reserve_port(host: str, port: int, flag: str = "--port") -> socket.socket:
    """Bind ``host:port`` now (uvicorn listens on this very socket later); ``flag`` is the
    option the error tells the user to change.

    Raises:
        SpecError: the port is taken, or the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SpecError(f"port {port} is in use ({e.strerror}); choose {flag}") from None
        choose = "--host or --port" if flag == "--port" else flag
        raise SpecError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose "
                        f"{choose}") from None
    return sock


def print_token(state_dir: Path) -> Callable[[str], None]:
    def show(token: str) -> None:
        print(f"admin token (shown once; stored hashed in {state_dir}): {token}\n"
              f"  clients: export TESSERA_TOKEN={token}  (or save it in a file for "
              "--token-file); "
              "`tessera token-add` makes tenant tokens", flush=True)
    return show


def progress_base_url(host: str, port: int) -> str:
    """The URL jobs on this machine reach the API at (``TESSERA_PROGRESS_URL``'s base): a
    wildcard address is reached on loopback."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def check_url(url: str | None) -> str | None:
    """``--progress-url``: an ``http(s)://host[:port]`` base, or ``None``.

    Raises:
        SpecError: anything else, in one line.
    """
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") \
            or parts.query:
        raise SpecError(f"--progress-url {url!r}: give the API's base URL, e.g. "
                        "http://10.0.0.5:8470")
    return url.rstrip("/")


def serve(cfg: ServeConfig, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          metrics_at: tuple[str, int] | None = None) -> None:
    """Run the service and its HTTP API until interrupted (SIGINT/SIGTERM).

    The start sequence is in the module docstring. ``metrics_at``: a loopback ``(host,
    port)`` that serves ``/metrics`` without a token (``--metrics-port``,
    :mod:`tessera.live.metrics_port`), bound together with the API's port.
    """
    from tessera.live.api import create_app  # lazy: FastAPI, the optional live extra (+0.25 s)
    from tessera.live.metrics import ServiceMetrics  # lazy: prometheus_client, the live extra
    from tessera.live.metrics_port import MetricsServer  # lazy: uvicorn, the live extra

    if cfg.tenancy is not None:  # a bad tenancy is refused before the port is opened
        cluster = None if cfg.cluster is None else load_cluster(cfg.cluster, cfg.gpus_per_server)
        load_tenancy_file(cfg.tenancy, None if cluster is None
                          else list(cluster.gpus_by_flavor()))
    sock = reserve_port(host, port)
    metrics_sock = reserve_port(*metrics_at, "--metrics-port") if metrics_at is not None else None
    try:
        if cfg.policy is not None:  # a policy the service cannot run changes nothing either
            live_policy(cfg.policy, cfg.executor, cfg.options.scheduler)
        connect_executor(cfg)  # before any state is written: a wrong address changes nothing
        layout = cfg.layout
        prepare(layout)
        lock = StateLock(layout.state_dir)
        lock.acquire()
        try:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
            svc, token = build_service(cfg, print_token(layout.state_dir))
            svc.opts = replace(svc.opts, progress_url=svc.opts.progress_url
                               or progress_base_url(host, port))
            svc.start()
            url = f"http://{host}:{port}"
            print(f"tessera serving {svc.cluster.describe()} with policy "
                  f"{svc.policy.display_name} ({svc.executor.name} executor)\n"
                  f"  pid:       {os.getpid()}  (SIGTERM or Ctrl-C stops the service; "
                  f"runs keep going)\n"
                  f"  state:     {layout.state_dir} (private)  jobs' files: {layout.work_dir}\n"
                  f"  API:       {url}  (clients: --server or TESSERA_SERVER)\n"
                  f"  dashboard: {url}/dashboard#token={token or '<your token>'}", flush=True)
            metrics = ServiceMetrics(svc)
            side = MetricsServer(metrics, metrics_sock) if metrics_sock is not None else None
            try:
                if side is not None and metrics_at is not None:
                    side.start()
                    print(f"  metrics:   http://{_netloc(*metrics_at)}/metrics  (no token; "
                          "this host only)", flush=True)
                stop_signal = run_http(create_app(svc, api_docs=cfg.api_docs,
                                                  metrics=metrics), sock)
                if stop_signal is not None:
                    print(stopping_line(stop_signal), flush=True)
            finally:
                if side is not None:
                    side.stop()
                svc.stop()
        finally:
            lock.release()
    finally:
        sock.close()
        if metrics_sock is not None:
            metrics_sock.close()


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def uvicorn_config(app: FastAPI, **kwargs: Any) -> uvicorn.Config:
    """How ``serve`` runs uvicorn (``benchmarks/bench_live.py`` measures this very setup).

    uvicorn's C HTTP parser (``httptools``) and libuv event loop (``uvloop``), the ``live``
    extra's dependencies, when installed: they take about a third less CPU per request than
    the pure-Python ``h11`` parser and asyncio loop, which remain the fallback. No access log
    (the service logs what it does, not every poll) and no proxy headers: the API listens on a
    loopback address for local clients, so no ``X-Forwarded-*`` header is trusted -- and
    neither costs a pass over every request's headers.
    """
    import uvicorn  # lazy: the optional live extra; only to serve HTTP

    fast = {"http": "httptools" if _importable("httptools") else "h11",
            "loop": "uvloop" if _importable("uvloop") else "asyncio"}
    return uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False,
                          **{**fast, **kwargs})


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def stopping_line(sig: int) -> str:
    """The one line ``serve`` prints when a signal stops it."""
    return (f"tessera serve (pid {os.getpid()}) stopping on {signal.Signals(sig).name}; "
            "runs keep going and are adopted at the next start")


def run_http(app: FastAPI, sock: socket.socket) -> int | None:
    """Serve ``app`` with uvicorn on the already-bound ``sock`` until a signal stops it.

    Returns the signal (SIGTERM, SIGINT) that stopped it, or ``None``. uvicorn (since 0.29)
    raises a signal it caught once more after shutting down, which would end the process
    before :meth:`LiveService.stop` and the state lock's release ran, and without a word;
    here the signal is recorded instead, so ``serve`` says why it stops and stops in order.
    """
    import uvicorn  # lazy: the optional live extra; only to serve HTTP

    class _Server(uvicorn.Server):
        stop_signal: int | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.stop_signal is None:
                self.stop_signal = sig
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()  # not raised again after shutdown: serve() returns

    server = _Server(uvicorn_config(app))
    server.run(sockets=[sock])
    return server.stop_signal
