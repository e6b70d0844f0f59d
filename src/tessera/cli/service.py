"""``tessera service``: inference services on MIG slices of a running ``tessera serve``.

The service must run with ``--mig-gpus`` (``nvml``, or ``fake:A100-80GB:2`` without a GPU).
Like the job commands, these talk to ``--server`` / ``TESSERA_SERVER`` with the token of
``--token-file`` or ``TESSERA_TOKEN``; a tenant token sees and changes its own queue's services
only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from tessera.cli.live import _client, _run
from tessera.cli.options import JSON, SERVER, TOKEN, TOKEN_FILE
from tessera.cli.terminal import safe

HELP = (
    "Inference services: a model with a latency SLO and an expected request rate, run on MIG "
    "slices (and MPS shares) that the service plans, and re-plans as the rate changes. "
    "tessera serve must run with --mig-gpus.\n\n"
    "A service file (YAML or JSON):\n\n"
    "\b\n"
    "    name: ranker            # lower-case letters, digits, '-'\n"
    "    model: resnet50         # profiled: bert, densenet*, resnet*, vgg*, ...\n"
    "    slo_ms: 100             # answer within this, at p99\n"
    "    rate_rps: 400           # expected requests per second\n"
    "    command: [python, serve.py]\n"
    "    queue: team-a           # optional: your token's queue\n"
    "    min_replicas: 1         # optional\n\n"
    "Each replica runs its command with CUDA_VISIBLE_DEVICES=MIG-<uuid> of its slice (and "
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when it shares the slice), and is restarted if it "
    "exits. `tessera service rate NAME RPS` re-plans: new slices come first, replicas move "
    "after, old slices go last, so no service has fewer replicas in flight during the change."
)


def register(app: typer.Typer) -> None:
    """Add ``tessera service`` and its subcommands to ``app``."""
    group = typer.Typer(help=HELP, no_args_is_help=True,
                        epilog="Example: tessera service submit ranker.yaml, then tessera "
                        "service rate ranker 800")
    app.add_typer(group, name="service")

    @group.command("submit", epilog="Example: tessera service submit ranker.yaml")
    def submit(path: Path = typer.Argument(..., metavar="PATH", help="Service YAML or JSON."),
               server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
               as_json: bool = JSON) -> None:
        """Submit a service; the service plans its slices and starts its replicas."""

        def go() -> Any:
            import yaml

            from tessera.errors import SpecError
            from tessera.live.inference.spec import parse_service

            try:
                raw = yaml.safe_load(path.read_text())
            except OSError as e:
                raise SpecError(f"cannot read {path}: {e.strerror}") from None
            except yaml.YAMLError as e:
                raise SpecError(f"{path}: not valid YAML: {e}") from None
            parse_service(raw, "default")  # the same checks as the service, here first
            return _client(server, token, token_file).services_call("POST", body=raw)

        out = _run(go)
        typer.echo(json.dumps(out, indent=2) if as_json else
                   safe(f"submitted service {out['name']} to queue {out['queue']}"))

    @group.command("list", epilog="Example: tessera service list")
    def list_cmd(server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
                 as_json: bool = JSON) -> None:
        """The services your token may see, with their slices and replicas."""
        out = _run(lambda: _client(server, token, token_file).services_call("GET"))
        if as_json:
            typer.echo(json.dumps(out, indent=2))
            return
        typer.echo(f"{'SERVICE':<20} {'QUEUE':<12} {'MODEL':<12} {'RATE/S':>8} {'SLO MS':>7} "
                   f"{'SLICES':>6} {'RUNNING':>7}")
        for s in out["services"]:
            running = sum(r["status"] == "running" for r in s["replicas"])
            typer.echo(safe(f"{s['name']:<20} {s['queue']:<12} {s['model']:<12} "
                            f"{s['rate_rps']:>8g} {s['slo_ms']:>7g} {len(s['slices']):>6} "
                            f"{running:>7}"))

    @group.command("show", epilog="Example: tessera service show ranker")
    def show(name: str = typer.Argument(..., help="The service's name."),
             server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
             as_json: bool = JSON) -> None:
        """One service: its slices, replicas (MIG UUIDs, restarts) and events."""
        out = _run(lambda: _client(server, token, token_file).services_call("GET", f"/{name}"))
        if as_json:
            typer.echo(json.dumps(out, indent=2))
            return
        typer.echo(safe(f"{out['name']}: {out['model']} at {out['rate_rps']:g} req/s within "
                        f"{out['slo_ms']:g} ms, queue {out['queue']}"))
        for sl in out["slices"]:
            typer.echo(f"  slice GPU {sl['gpu']} {sl['placement']} ({sl['profile']}): batch "
                       f"{sl['batch']} x {sl['procs']} process(es), "
                       f"{sl['throughput_rps']:g} req/s")
        for r in out["replicas"]:
            typer.echo(safe(f"  replica {r['replica_id']} run {r['run']} {r['status']} on GPU "
                            f"{r['gpu']} {r['placement']} {r['mig_uuid']} (MPS "
                            f"{r['mps_process']}, {r['restarts']} restarts)"))
        for e in out["events"][-20:]:
            typer.echo(safe(f"  {e['ts_s']:.1f} {e['kind']}: {e['detail']}"))

    @group.command("rate", epilog="Example: tessera service rate ranker 800")
    def rate(name: str = typer.Argument(..., help="The service's name."),
             rate_rps: float = typer.Argument(..., metavar="RPS", help="New expected rate "
                                              "(requests per second)."),
             server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
             as_json: bool = JSON) -> None:
        """Change a service's expected rate: the service re-plans its slices."""
        out = _run(lambda: _client(server, token, token_file).services_call(
            "POST", f"/{name}/rate", {"rate_rps": rate_rps}))
        typer.echo(json.dumps(out, indent=2) if as_json else
                   safe(f"{out['name']}: expected rate now {out['rate_rps']:g} req/s; "
                        "re-planning"))

    @group.command("delete", epilog="Example: tessera service delete ranker")
    def delete(name: str = typer.Argument(..., help="The service's name."),
               server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE) -> None:
        """Delete a service: its replicas stop and its slices are destroyed."""
        _run(lambda: _client(server, token, token_file).services_call("DELETE", f"/{name}"))
        typer.echo(safe(f"deleted service {name}"))
