"""``tessera serve`` and the client commands of the live service.

Client commands talk to a running service: ``--server`` / ``TESSERA_SERVER`` (default
``http://127.0.0.1:8470``) and ``--token`` / ``TESSERA_TOKEN``. ``--json`` prints the API's
answer as JSON for scripts. Heavy imports (httpx, FastAPI, Ray) happen inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from tessera.cli.settings_flags import settings_flags
from tessera.sched.settings import SchedulerSettings

_SERVER = typer.Option(None, "--server", envvar="TESSERA_SERVER",
                       help="Service URL (default http://127.0.0.1:8470).")
_TOKEN = typer.Option(None, "--token", envvar="TESSERA_TOKEN", help="Bearer token.")
_JSON = typer.Option(False, "--json", help="Print the raw JSON answer.")
_STATE = typer.Option(Path.home() / ".tessera", "--state", help="State directory.")


def _client(server: str | None, token: str | None) -> Any:
    from tessera.live.client import Client

    return Client(server, token)


def _run(fn: Any) -> Any:
    """Call ``fn``; print a user error as one line and exit 2."""
    from tessera.errors import TesseraError

    try:
        return fn()
    except TesseraError as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None


def _table(title: str, cols: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    Console(width=160).print(t)


def register(app: typer.Typer) -> None:
    """Add the live-service commands to ``app``."""

    @app.command()
    @settings_flags(SchedulerSettings)
    def serve(
        state: Path = _STATE,
        ray_address: str = typer.Option(None, "--ray-address", help="Existing Ray cluster."),
        port: int = typer.Option(8470, "--port", help="HTTP port on 127.0.0.1."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        cluster: str = typer.Option(None, "--cluster", help="Preset, YAML file or v100:4,t4:4."),
        gpus_per_server: int = typer.Option(4, "--gpus-per-server"),
        policy: str = typer.Option(None, "--policy", help="Scheduling policy (default fifo)."),
        executor: str = typer.Option("local", "--executor", help="ray or local."),
        grace_s: float = typer.Option(10.0, "--grace-s", help="Checkpoint grace on preemption."),
        period_s: float = typer.Option(1.0, "--period-s", help="In events mode, decide at "
                                       "least this often even when nothing happened (s)."),
        settings: SchedulerSettings = SchedulerSettings(),
    ) -> None:
        """Run the scheduler service, its HTTP API and dashboard.

        The Scheduler options are the same settings `tessera simulate` runs with; with
        --mixed-gangs each rank gets its own TESSERA_FLAVOR.
        """
        from tessera.live.server import ServeConfig
        from tessera.live.server import serve as run_serve
        from tessera.live.service import ServiceOptions

        cfg = ServeConfig(state, cluster, gpus_per_server, policy, executor, ray_address,
                          ServiceOptions(scheduler=settings, period_s=period_s,
                                         grace_s=grace_s))
        _run(lambda: run_serve(cfg, host, port))

    @app.command()
    def submit(path: Path, server: str = _SERVER, token: str = _TOKEN,
               as_json: bool = _JSON) -> None:
        """Submit a job YAML (validated here first, then by the service)."""
        from tessera.live.spec import parse_request

        def go() -> dict[str, Any]:
            from tessera.errors import SpecError

            try:
                text = path.read_text()
            except OSError as e:
                raise SpecError(f"cannot read {path}: {e.strerror}") from None
            parse_request(text)
            return _client(server, token).submit_yaml(text)

        job = _run(go)
        typer.echo(json.dumps(job, indent=2) if as_json else
                   f"submitted {job['job_id']} ({job['name']}) to queue {job['queue']}")

    @app.command("jobs")
    def jobs_cmd(state: str = typer.Option(None, "--state", help="Only jobs in this state."),
                 server: str = _SERVER, token: str = _TOKEN, as_json: bool = _JSON) -> None:
        """List jobs (a tenant sees its own queue; the admin sees all)."""
        rows = _run(lambda: _client(server, token).jobs(state))
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        _table("jobs", ["id", "name", "queue", "state", "gpus", "placement / reason"],
               [[j["job_id"], j["name"], j["queue"], j["state"], j["gpus"],
                 j["placement"] or j["reason"]] for j in rows])

    @app.command()
    def job(job_id: str, server: str = _SERVER, token: str = _TOKEN,
            as_json: bool = _JSON) -> None:
        """Show one job and its event history."""
        j = _run(lambda: _client(server, token).job(job_id))
        if as_json:
            typer.echo(json.dumps(j, indent=2))
            return
        for k in ("job_id", "name", "queue", "state", "gpus", "flavors", "placement", "reason",
                  "attempts", "runs", "exit_code"):
            typer.echo(f"{k:>10}: {j[k]}")
        for e in j["events"]:
            arrow = f"{e['from'] or ''} → {e['to']}" if e["to"] else e["kind"]
            typer.echo(f"  {e['ts_s']:.3f}  {arrow}  {e['detail']}")

    @app.command()
    def cancel(job_id: str, server: str = _SERVER, token: str = _TOKEN) -> None:
        """Cancel a job (a running gang is stopped with SIGTERM, then killed after grace)."""
        j = _run(lambda: _client(server, token).cancel(job_id))
        typer.echo(f"cancelled {j['job_id']} (was {j['was']})")

    @app.command()
    def explain(job_id: str, server: str = _SERVER, token: str = _TOKEN,
                as_json: bool = _JSON) -> None:
        """Why a job waits and where it would go."""
        e = _run(lambda: _client(server, token).explain(job_id))
        if as_json:
            typer.echo(json.dumps(e, indent=2))
            return
        typer.echo(f"{e['job_id']} ({e['name']}): {e['state']}, {e['gpus']} GPU(s) of "
                   f"{'/'.join(e['flavors'])}")
        for line in e["lines"]:
            typer.echo(f"  - {line}")

    @app.command()
    def queues(server: str = _SERVER, token: str = _TOKEN, as_json: bool = _JSON) -> None:
        """Tenant queues: quota, GPUs in use, jobs waiting and running."""
        qs = _run(lambda: _client(server, token).queues())
        if as_json:
            typer.echo(json.dumps(qs, indent=2))
            return
        _table("queues", ["queue", "nominal", "borrow limit", "used", "pending", "running"],
               [[q["name"], q["nominal_gpus"], q["borrowing_limit_gpus"] if
                 q["borrowing_limit_gpus"] is not None else "∞", q["used_gpus"], q["pending"],
                 q["running"]] for q in qs])

    @app.command("cluster")
    def cluster_cmd(server: str = _SERVER, token: str = _TOKEN, as_json: bool = _JSON) -> None:
        """GPU flavors of the service's cluster and how many are in use."""
        c = _run(lambda: _client(server, token).cluster())
        if as_json:
            typer.echo(json.dumps(c, indent=2))
            return
        _table(f"{c['name']} ({c['policy']}, {c['executor']} executor)",
               ["flavor", "nodes", "GPUs", "in use"],
               [[f["flavor"], f["nodes"], f["total_gpus"], f["used_gpus"]] for f in c["flavors"]])

    @app.command("token-add")
    def token_add(name: str, queue: str = typer.Option(..., "--queue"),
                  nominal_gpus: int = typer.Option(0, "--nominal-gpus",
                                                   help="Quota if the queue is new."),
                  state: Path = _STATE) -> None:
        """Create a tenant token for QUEUE (printed once); restart the service to load it."""
        from tessera.live.tenancy import add_token

        tok = _run(lambda: add_token(state, name, queue, nominal_gpus))
        typer.echo(tok)

    export = typer.Typer(help="Export Tessera's tenancy for other systems.")
    app.add_typer(export, name="export")

    @export.command("kueue")
    def export_kueue(
        out: Path = typer.Option(Path("kueue"), "--out", help="Directory for the manifests."),
        state: Path = _STATE,
        cluster: str = typer.Option(None, "--cluster", help="Default: the service's cluster."),
        gpus_per_server: int = typer.Option(4, "--gpus-per-server"),
        namespace: str = typer.Option("default", "--namespace", help="LocalQueue namespace."),
    ) -> None:
        """Write Kueue ResourceFlavor, ClusterQueue and LocalQueue manifests (v1beta2)."""
        from tessera.live.kueue import export_from_state, write_manifests

        exported = _run(lambda: export_from_state(state, cluster, gpus_per_server, namespace))
        for queue, name in exported.renamed.items():
            typer.echo(f"queue {queue!r} is exported as {name!r} (Kueue names are DNS-1123 "
                       "labels of at most 63 characters)")
        for p in _run(lambda: write_manifests(out, exported)):
            typer.echo(f"wrote {p}")
