"""``tessera logs``: a job's rank output, read through the service wherever the rank ran.

The service asks its executor (the local run directory, or the rank's Ray actor on its own
node; a finished Ray rank's last 16 KiB are kept in the cluster), so this works without a
shared filesystem. ``--follow`` polls until the run ends.
"""

from __future__ import annotations

import time
from typing import Any

import typer

from tessera.cli.live import JOB_ID, _client, _run
from tessera.cli.options import SERVER, TOKEN

FOLLOW_POLL_S = 0.5


def register(app: typer.Typer) -> None:
    """Add ``logs`` to ``app``."""

    @app.command(epilog="Example: tessera logs j-1a2b3c4d5e --rank 1 --follow")
    def logs(
        job_id: str = JOB_ID,
        rank: int = typer.Option(0, "--rank", min=0, help="Which rank's output (0 = the "
                                 "rank that holds MASTER_ADDR)."),
        run: int = typer.Option(None, "--run", min=1, help="Which run of the job",
                                show_default="the latest launched run"),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new output "
                                    "until the run ends."),
        server: str = SERVER, token: str = TOKEN,
    ) -> None:
        """Print one rank's output (stdout and stderr) of a job's run."""
        client = _client(server, token)
        offset = 0
        while True:
            got: dict[str, Any] = _run(lambda at=offset: client.logs(job_id, rank, run, at))
            if got["run"] is None:
                typer.echo(f"{job_id} has no launched run yet", err=True)
                if not follow:
                    return
            elif offset == 0 and got["skipped_bytes"]:
                typer.echo(f"[first {got['skipped_bytes']} bytes no longer kept]", err=True)
            typer.echo(got["text"], nl=False)
            offset = got["next_offset"]
            ended = got["run"] is not None and not got["running"]
            if not follow or (ended and not got["text"]) or (got["final"] and not got["text"]):
                return
            if not got["text"]:
                time.sleep(FOLLOW_POLL_S)
