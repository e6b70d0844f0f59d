"""The client commands of the live service (``tessera serve`` itself: :mod:`tessera.cli.serve`).

Client commands talk to a running service: ``--server`` / ``TESSERA_SERVER`` (default
``http://127.0.0.1:8470``) and a token: the admin token that the first ``tessera serve``
printed, or a tenant token from ``tessera token-add``, read from ``--token-file PATH`` or the
``TESSERA_TOKEN`` variable (``--token TOKEN`` works too, with a warning: a command line is
visible to every user of the machine in ``ps``). ``--json`` prints the API's answer as JSON for
scripts. A refused token or an unreachable service ends in one error line plus a hint on what
to do. Every string of the service's answers is printed through
:func:`tessera.cli.terminal.safe`, so a tenant's job cannot send escape sequences to the
reader's terminal. Heavy imports (httpx, FastAPI, Ray) happen inside the commands.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import typer

from tessera.cli.job_text import where_or_why
from tessera.cli.options import (
    CLUSTER_HELP,
    GPUS_PER_SERVER,
    JSON,
    SERVER,
    STATE,
    TENANCY,
    TOKEN,
    TOKEN_FILE,
)
from tessera.cli.terminal import safe
from tessera.model.jobs import JobState

JOB_ID = typer.Argument(..., metavar="JOB_ID", help="Job id, as `tessera submit` or "
                        "`tessera jobs` shows it (j-…).")
STATES = ", ".join(s.value for s in JobState)

NO_TOKEN_HINT = ("set TESSERA_TOKEN or pass --token-file PATH (--token TOKEN works but shows "
                 "it in `ps`): the first `tessera serve` printed the admin token once, and "
                 "`tessera token-add NAME --queue QUEUE` makes tenant tokens")
UNKNOWN_TOKEN_HINT = ("this service does not know the token from --token-file / TESSERA_TOKEN / "
                      "--token; a token from `tessera token-add` counts once the service "
                      "restarts")
TOKEN_IN_PS_WARNING = ("warning: --token shows the token to every user of this machine (`ps`); "
                       "use --token-file PATH or TESSERA_TOKEN")
UNREACHABLE_HINT = "is `tessera serve` running there? Point --server or TESSERA_SERVER at it"


def _client(server: str | None, token: str | None, token_file: Path | None = None) -> Any:
    from tessera.live.client import Client

    return Client(server, _run(lambda: resolve_token(token, token_file)))


def resolve_token(token: str | None, token_file: Path | None) -> str | None:
    """The token a client command uses: ``--token-file``'s, else ``--token``'s (with a warning
    on stderr), else ``TESSERA_TOKEN``'s (``None``: no token at all).

    Raises:
        SpecError: both flags, or a token file that cannot be read or is empty.
    """
    import os

    from tessera.errors import SpecError

    if token is not None and token_file is not None:
        raise SpecError("give --token-file or --token, not both")
    if token_file is not None:
        try:
            text = token_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"cannot read the token file {token_file}: "
                            f"{getattr(e, 'strerror', None) or e}") from None
        if not text:
            raise SpecError(f"the token file {token_file} is empty")
        return text
    if token is not None:
        typer.secho(TOKEN_IN_PS_WARNING, err=True, fg=typer.colors.YELLOW)
        return token
    return os.environ.get("TESSERA_TOKEN")


def hint_for(error: Exception) -> str | None:
    """What the user can do about an error from the service, if we know."""
    from tessera.live.client import ApiError, ServiceUnreachable

    if isinstance(error, ServiceUnreachable):
        return UNREACHABLE_HINT
    if isinstance(error, ApiError) and error.status == 401:
        return UNKNOWN_TOKEN_HINT if "unknown" in str(error) else NO_TOKEN_HINT
    return None


def _run(fn: Any) -> Any:
    """Call ``fn``; print a user error as one line (plus a hint when there is one), exit 2."""
    from tessera.errors import TesseraError

    try:
        return fn()
    except TesseraError as e:
        typer.secho(f"error: {safe(e)}", err=True, fg=typer.colors.RED)
        hint = hint_for(e)
        if hint:
            typer.secho(f"hint: {hint}", err=True)
        raise typer.Exit(2) from None


def _of(used: float | None, nominal: float | None) -> str:
    """``8/12``: what a queue's CPU-only jobs hold of its cpus or memory quota (``∞``: none)."""
    return f"{used or 0:g}/{'∞' if nominal is None else f'{nominal:g}'}"


def _table(title: str, cols: list[str], rows: list[list[Any]]) -> None:
    """A table of the service's values: each cell terminal-safe, and plain text (a ``[red]``
    in a job's reason is not rich markup)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(safe(title)))
    for c in cols:
        t.add_column(Text(safe(c)))
    for r in rows:
        t.add_row(*[Text("" if v is None else safe(v)) for v in r])
    Console(width=160).print(t)


def _status(value: str | None) -> str | None:
    if value is not None and value not in {s.value for s in JobState}:
        raise typer.BadParameter(f"{value!r} is not a job state; use one of {STATES}")
    return value


def register(app: typer.Typer) -> None:
    """Add the live service's client commands to ``app`` (``serve`` itself:
    :mod:`tessera.cli.serve`)."""
    _submit_command(app)
    _job_commands(app)
    _cluster_commands(app)
    _admin_commands(app)


def _submit_command(app: typer.Typer) -> None:
    """``tessera submit``."""

    @app.command(epilog="Example: tessera submit examples/job-resnet.yaml")
    def submit(
        path: Path = typer.Argument(..., metavar="PATH", help="Job YAML file (fields in "
                                    "docs/live.md; examples/job-resnet.yaml is one)."),
        server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
        as_json: bool = JSON,
        priority_class: str = typer.Option(None, "--priority-class", metavar="NAME",
                                           help="A WorkloadPriorityClass of the service's "
                                           "tenancy (overrides the file's priority_class)."),
    ) -> None:
        """Submit a job YAML (validated here first, then by the service).

        Each submission carries a new random Idempotency-Key; when the connection fails it is
        sent once more with the same key, so a retry never stores the job twice.
        """
        from tessera.live.spec import parse_request

        def go() -> dict[str, Any]:
            from tessera.errors import SpecError

            try:
                text = path.read_text()
            except OSError as e:
                raise SpecError(f"cannot read {path}: {e.strerror}") from None
            if priority_class is not None:
                text = with_priority_class(parse_request(text), priority_class)
            parse_request(text)
            return _client(server, token, token_file).submit_yaml(text, str(uuid.uuid4()))

        job = _run(go)
        again = " (already stored by the first try)" if job.get("replayed") else ""
        typer.echo(json.dumps(job, indent=2) if as_json else
                   safe(f"submitted {job['job_id']} ({job['name']}) to queue "
                        f"{job['queue']}{again}"))


def with_priority_class(req: Any, name: str) -> str:
    """The request ``req`` as YAML with ``priority_class: name``."""
    import yaml

    raw = req.model_dump(mode="json", exclude_unset=True)
    return yaml.safe_dump({**raw, "priority_class": name}, sort_keys=False)


def _job_commands(app: typer.Typer) -> None:
    """``tessera jobs``, ``job``, ``cancel`` and ``explain``."""

    @app.command("jobs", epilog="Example: tessera jobs --status pending")
    def jobs_cmd(status: str = typer.Option(None, "--status", callback=_status,
                                            help=f"Only jobs in this state: {STATES}."),
                 server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
                 as_json: bool = JSON) -> None:
        """List jobs (a tenant sees its own queue; the admin sees all)."""
        rows = _run(lambda: _client(server, token, token_file).jobs(status))
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        _table("jobs", ["id", "name", "queue", "state", "gpus", "placement / reason"],
               [[j["job_id"], j["name"], j["queue"], j["state"], j["gpus"],
                 where_or_why(j)] for j in rows])

    @app.command(epilog="Example: tessera job j-1a2b3c4d5e")
    def job(job_id: str = JOB_ID, server: str = SERVER, token: str = TOKEN,
            token_file: Path = TOKEN_FILE, as_json: bool = JSON) -> None:
        """Show one job and its event history (local times; --json keeps the raw values)."""
        from tessera.cli.job_text import job_lines

        j = _run(lambda: _client(server, token, token_file).job(job_id))
        if as_json:
            typer.echo(json.dumps(j, indent=2))
            return
        for line in job_lines(j, time.time()):
            typer.echo(line)

    @app.command(epilog="Example: tessera cancel j-1a2b3c4d5e")
    def cancel(job_id: str = JOB_ID, server: str = SERVER, token: str = TOKEN,
               token_file: Path = TOKEN_FILE, as_json: bool = JSON) -> None:
        """Cancel a job (a running gang is stopped with SIGTERM, then killed after grace)."""
        j = _run(lambda: _client(server, token, token_file).cancel(job_id))
        typer.echo(json.dumps(j, indent=2) if as_json else
                   safe(f"cancelled {j['job_id']} (was {j['was']})"))

    @app.command(epilog="Example: tessera explain j-1a2b3c4d5e")
    def explain(job_id: str = JOB_ID, server: str = SERVER, token: str = TOKEN,
                token_file: Path = TOKEN_FILE, as_json: bool = JSON) -> None:
        """Why a job waits and where it would go."""
        e = _run(lambda: _client(server, token, token_file).explain(job_id))
        if as_json:
            typer.echo(json.dumps(e, indent=2))
            return
        typer.echo(safe(f"{e['job_id']} ({e['name']}): {e['state']}, {e['gpus']} GPU(s) of "
                        f"{'/'.join(e['flavors']) or 'any flavor'}"))
        for line in e["lines"]:
            typer.echo(f"  - {safe(line)}")


def _cluster_commands(app: typer.Typer) -> None:
    """``tessera queues`` and ``cluster``."""

    @app.command(epilog="Example: tessera queues --json")
    def queues(server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
               as_json: bool = JSON) -> None:
        """Tenant queues: GPU quota and use, jobs waiting and running (a tenant: its own);
        where a queue has a cpus/memory quota or runs CPU-only jobs, what its CPU-only jobs
        hold of it (CPUs, GiB of host memory; "∞": no limit)."""
        qs = _run(lambda: _client(server, token, token_file).queues())
        if as_json:
            typer.echo(json.dumps(qs, indent=2))
            return
        host = any(q.get("nominal_cpus") is not None or q.get("nominal_memory_gib") is not None
                   or q.get("used_cpus") for q in qs)  # (older servers: no such fields)
        _table("queues", ["queue", "nominal", "borrow limit", "used", "pending", "running",
                          *(["CPU-only CPUs", "CPU-only GiB"] if host else [])],
               [[q["name"], q["nominal_gpus"], q["borrowing_limit_gpus"] if
                 q["borrowing_limit_gpus"] is not None else "∞", q["used_gpus"], q["pending"],
                 q["running"], *([_of(q.get("used_cpus"), q.get("nominal_cpus")),
                                  _of(q.get("used_memory_gib"), q.get("nominal_memory_gib"))]
                                 if host else [])] for q in qs])

    @app.command("cluster", epilog="Example: tessera cluster --json")
    def cluster_cmd(server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
                    as_json: bool = JSON) -> None:
        """GPU flavors of the cluster and how many are in use (for a tenant: by its queue)."""
        c = _run(lambda: _client(server, token, token_file).cluster())
        if as_json:
            typer.echo(json.dumps(c, indent=2))
            return
        everyone = c.get("view") != "queue"  # a tenant sees only its own queue's GPUs
        key = "used_gpus" if everyone else "queue_used_gpus"
        _table(f"{c['name']} ({c['policy']}, {c['executor']} executor)",
               ["flavor", "nodes", "GPUs", "in use" if everyone else f"used by {c['queue']}"],
               [[f["flavor"], f["nodes"], f["total_gpus"], f[key]] for f in c["flavors"]])

    @app.command("slow-nodes", epilog="Example: tessera slow-nodes --clear v100-16gb-0002")
    def slow_nodes(clear: str = typer.Option(None, "--clear", metavar="NODE", help="Clear "
                                             "this node's mark: gangs may be placed there "
                                             "again."),
                   server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
                   as_json: bool = JSON) -> None:
        """Nodes the service avoids because every job there ran persistently slow (admin)."""
        client = _client(server, token, token_file)
        if clear is not None:
            out = _run(lambda: client.clear_slow_node(clear))
            typer.echo(json.dumps(out) if as_json else safe(f"cleared {out['cleared']}"))
            return
        rows = _run(client.slow_nodes)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        _table("slow nodes", ["node", "last slow (s ago)"],
               [[r["node"], f"{time.time() - r['last_slow_s']:.0f}"] for r in rows])


def _admin_commands(app: typer.Typer) -> None:
    """``tessera token-add`` and ``export kueue`` (on the state dir's files)."""

    @app.command("token-add", epilog="Example: tessera token-add ci --queue vision "
                 "--nominal-gpus 4, then restart `tessera serve`")
    def token_add(
        name: str = typer.Argument(..., metavar="NAME", help="Who holds the token (a person "
                                   "or a robot); recorded with what it does."),
        queue: str = typer.Option(None, "--queue", show_default=False,
                                  help="Tenant queue the token submits to and sees; created "
                                  "if new."),
        admin: bool = typer.Option(False, "--admin", help="Make an admin token instead (sees "
                                   "and cancels every job): how an admin who lost the token "
                                   "gets a new one."),
        nominal_gpus: int = typer.Option(0, "--nominal-gpus", min=0,
                                         help="GPU quota of the queue if it is new."),
        state: Path = STATE,
    ) -> None:
        """Create a token NAME, for the queue --queue or --admin, and print it (once).

        Works on the state dir's files, with or without a running service; the service
        loads new tokens when it restarts. Only the token's hash is stored.
        """
        from tessera.errors import SpecError
        from tessera.live.tenancy import add_token

        def go() -> str:
            if admin == (queue is not None):
                raise SpecError("token-add needs exactly one of --queue QUEUE (a tenant token) "
                                "and --admin")
            return add_token(state, name, None if admin else queue, nominal_gpus)

        typer.echo(_run(go))
        who = "an admin token" if admin else f"a token for queue {queue!r}"
        typer.echo(f"{who} (shown once, stored hashed); a running `tessera serve` loads it "
                   "when it restarts", err=True)

    export = typer.Typer(help="Export Tessera's tenancy for other systems.",
                         epilog="Example: tessera export kueue --out kueue/",
                         no_args_is_help=True)
    app.add_typer(export, name="export")

    @export.command("kueue", epilog="Example: tessera export kueue --out kueue/ "
                    "--namespace ml")
    def export_kueue(
        out: Path = typer.Option(Path("kueue"), "--out", help="Folder for the manifests."),
        state: Path = STATE,
        cluster: str = typer.Option(None, "--cluster", "-c", help=CLUSTER_HELP,
                                    show_default="the one --state remembers, else v100:4,t4:4"),
        gpus_per_server: int = GPUS_PER_SERVER,
        namespace: str = typer.Option("default", "--namespace", help="Kubernetes namespace of "
                                      "the LocalQueues."),
        tenancy: Path = TENANCY,
    ) -> None:
        """Write Kueue manifests (v1beta2): ResourceFlavors, Cohorts, ClusterQueues,
        LocalQueues, WorkloadPriorityClasses, and Kueue's Configuration for fair sharing."""
        from tessera.live.kueue import export_from_state, write_manifests

        exported = _run(lambda: export_from_state(state, cluster, gpus_per_server, namespace,
                                                  tenancy))
        for queue, name in exported.renamed.items():
            typer.echo(f"queue {queue!r} is exported as {name!r} (Kueue names are DNS-1123 "
                       "labels of at most 63 characters)")
        for p in _run(lambda: write_manifests(out, exported)):
            typer.echo(f"wrote {p}")
