"""``tessera serve``: the scheduler service, its HTTP API and dashboard.

The command's flags come from three places: its own (state, port, cluster, policy ...), the
scheduler's settings (:func:`~tessera.cli.settings_flags.settings_flags`, shared with
``tessera simulate``), and every registered executor's options (:func:`executor_flags`: one
flag ``--<executor>-<option>`` per field of the executor's options model, its description the
help). So an executor added to the registry brings its flags, its line in ``--executor``'s help
and its name in the error for an unknown one, and nothing here names it. The client commands
of the service are :mod:`tessera.cli.live`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from tessera.cli.live import _run
from tessera.cli.options import CLUSTER_HELP, GPUS_PER_SERVER, POLICY_HELP, STATE, TENANCY
from tessera.cli.settings_flags import settings_flags
from tessera.live.executors.registry import (
    ExecutorPlugin,
    executors_help,
    flag_of,
    load_executors,
    option_flag_types,
    outside_package,
)
from tessera.sched.core.settings import SchedulerSettings

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("tessera.live")


def _executor_options() -> tuple[list[inspect.Parameter], dict[str, tuple[str, str]]]:
    """One keyword parameter per option of every registered executor, and, per parameter,
    (executor, option). Each defaults to "not given" (``None``; ``False`` for a switch), so
    only the flags on the command line reach the executor, which fills in its own defaults.

    Built per executor: an executor from an installed package whose options cannot be made
    into flags gets none (one warning names it and its package) and never breaks the CLI; a
    built-in one raises, since that is a bug in Tessera."""
    params: list[inspect.Parameter] = []
    owner: dict[str, tuple[str, str]] = {}
    for entry in load_executors():
        try:
            mine = _one_executor_options(entry.name, entry.obj)
        except Exception as e:  # a third-party plugin may fail in any way when inspected
            package = outside_package(entry.name)
            if package is None:
                raise
            log.warning("executor %r (package %s) gets no command-line flags: %s",
                        entry.name, package, e)
            continue
        params.extend(p for p, _ in mine)
        owner.update((p.name, (entry.name, option)) for p, option in mine)
    return params, owner


def _one_executor_options(executor: str, plugin: type[ExecutorPlugin[Any]]
                          ) -> list[tuple[inspect.Parameter, str]]:
    """The keyword parameters of one executor's options, each with its option's name."""
    out: list[tuple[inspect.Parameter, str]] = []
    fields = plugin.options_model.model_fields
    for option, kind in option_flag_types(plugin).items():
        field = fields[option]
        name = f"{executor}_{option}".replace("-", "_")
        shown = field.default if field.default not in (None, False) else False
        decl = typer.Option(False if kind is bool else None, flag_of(executor, option),
                            help=field.description, show_default=shown,
                            rich_help_panel=f"Executor {executor}")
        out.append((inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=decl,
                                      annotation=kind), option))
    return out


def executor_flags(fn: F) -> F:
    """Decorate a typer command taking ``executor_options: dict[str, dict[str, Any]]``: it
    gets the flags of every registered executor and is called with the ones given, per
    executor (``{"ray": {"address": "10.0.0.9:6379"}}``)."""
    params, owner = _executor_options()
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in sig.parameters.values() if p.name != "executor_options"]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        given: dict[str, dict[str, Any]] = {}
        for name, (executor, option) in owner.items():
            value = kwargs.pop(name)
            if value is not None and value is not False:
                given.setdefault(executor, {})[option] = value
        return fn(executor_options=given, **kwargs)

    del command.__wrapped__  # typer must see the generated signature, not fn's
    everything = own + params
    command.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=everything, return_annotation=None)
    command.__annotations__ = {p.name: p.annotation for p in everything}
    return command  # type: ignore[return-value]


def register(app: typer.Typer) -> None:
    """Add ``tessera serve`` to ``app``."""

    @app.command(epilog="Example: tessera serve -c v100:8,t4:8 -p fifo, then "
                 "export TESSERA_TOKEN=<the admin token it prints> and tessera submit job.yaml")
    @settings_flags(SchedulerSettings)
    @executor_flags
    def serve(
        state: Path = STATE,
        port: int = typer.Option(8470, "--port", help="HTTP port for the API and dashboard."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        cluster: str = typer.Option(None, "--cluster", "-c", help=CLUSTER_HELP,
                                    show_default="the one --state remembers, else v100:4,t4:4"),
        gpus_per_server: int = GPUS_PER_SERVER,
        policy: str = typer.Option(None, "--policy", "-p", help=POLICY_HELP,
                                   show_default="the one --state remembers, else fifo"),
        executor: str = typer.Option("local", "--executor", help="Where jobs run, one of the "
                                     f"registered executors: {executors_help()}."),
        grace_s: float = typer.Option(10.0, "--grace-s", help="Time a stopped job gets to "
                                      "checkpoint and exit before it is killed (s)."),
        period_s: float = typer.Option(1.0, "--period-s", help="In events mode, decide at "
                                       "least this often even when nothing happened (s)."),
        work_dir: Path = typer.Option(None, "--work-dir", show_default="--state's path + "
                                      "'-work', e.g. ~/.tessera-work",
                                      help="Work root for the jobs' run folders and default "
                                      "checkpoints; never inside --state, which only the "
                                      "service may read."),
        api_docs: bool = typer.Option(False, "--api-docs", help="Serve the API's schema "
                                      "pages /docs, /redoc and /openapi.json (no token "
                                      "needed; they hold no data)."),
        run_as: str = typer.Option(None, "--run-as", metavar="USER", help="Run every job as "
                                   "this user (the service must run as root); a queue's "
                                   "run_as in tessera-live.yaml overrides it.",
                                   show_default="the service's own user"),
        new_store: bool = typer.Option(False, "--new-store", help="Start with an empty job "
                                       "store on purpose: the old one (if any) is moved to "
                                       "store-aside-<time>/ in --state, never deleted. Without "
                                       "it, a missing, empty or damaged store stops serve."),
        metrics_port: str = typer.Option(None, "--metrics-port", metavar="[HOST:]PORT",
                                         help="Also serve /metrics without a token on this "
                                         "port of a loopback address (default host "
                                         "127.0.0.1; any other address is refused). The API's "
                                         "/metrics needs the admin token.",
                                         show_default="off"),
        tenancy: Path = TENANCY,
        mig_gpus: str = typer.Option(
            None, "--mig-gpus", metavar="nvml|fake:MODEL:COUNT", help="Run inference "
            "services (tessera service --help) on MIG slices of this machine's GPUs: nvml "
            "uses the real ones (root, MIG mode on, pip install nvidia-ml-py); "
            "fake:A100-80GB:2 plays two GPUs in a file of --state, to try services without "
            "one. Their GPUs are taken from the cluster's node of that model.",
            show_default="no inference services"),
        progress_url: str = typer.Option(
            None, "--progress-url", metavar="URL", help="Where jobs post progress reports "
            "(TESSERA_PROGRESS_URL's base): this API as the ranks reach it. Ray ranks on other "
            "nodes cannot reach the default loopback address: give the service's address on "
            "the cluster network, e.g. http://10.0.0.5:8470, and --host to listen there.",
            show_default="http://127.0.0.1:<--port>"),
        settings: SchedulerSettings = SchedulerSettings(),
        executor_options: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Run the scheduler service, its HTTP API and dashboard.

        The first start prints the admin token once; clients pass it as --token or TESSERA_TOKEN.

        --state must be the service user's alone (0700; files 0600): serve creates it so and
        refuses one that others can read or write. Limits and tenant views are set in
        tessera-live.yaml there (docs/security.md).

        The Scheduler options are the settings `tessera simulate` runs with; an executor's
        options (--<executor>-<option>) are refused with another --executor.

        With --mixed-gangs each rank gets its own TESSERA_FLAVOR.
        """
        from tessera.live.executors.registry import options_from_flags
        from tessera.live.metrics_port import parse_metrics_address
        from tessera.live.server import ServeConfig, check_url
        from tessera.live.server import serve as run_serve
        from tessera.live.service import ServiceOptions

        given = executor_options or {}
        metrics_at = _run(lambda: parse_metrics_address(metrics_port)) if metrics_port else None
        cfg = ServeConfig(state, cluster, gpus_per_server, policy, executor,
                          _run(lambda: options_from_flags(executor, given)),
                          ServiceOptions(scheduler=settings, period_s=period_s,
                                         grace_s=grace_s,
                                         progress_url=_run(lambda: check_url(progress_url))),
                          work_dir, api_docs,
                          run_as=run_as, new_store=new_store, tenancy=tenancy,
                          mig_gpus=mig_gpus)
        _run(lambda: run_serve(cfg, host, port, metrics_at))
