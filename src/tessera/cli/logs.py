"""``tessera logs``: a job's rank output, read through the service wherever the rank ran.

The service asks its executor (the local run directory, or the rank's Ray actor on its own
node; a finished Ray rank's last 16 KiB are kept in the cluster), so this works without a
shared filesystem. ``--follow`` polls until the run ends.

The output is a tenant's program's, and the reader may be the admin: control characters
(escape sequences, ``\r`` overwrites, bidi overrides) are printed as visible escapes, keeping
line breaks and tabs (:func:`tessera.cli.terminal.safe`). ``--raw`` prints the bytes as the
program wrote them (a progress bar's ``\r``, colours) for a reader who trusts the job.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from tessera.cli.live import JOB_ID, _client, _run
from tessera.cli.options import SERVER, TOKEN, TOKEN_FILE
from tessera.cli.terminal import safe

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
        raw: bool = typer.Option(False, "--raw", help="Print the output as the job wrote it, "
                                 "control characters and terminal escapes included (only for "
                                 "a job you trust: they act on your terminal)."),
        server: str = SERVER, token: str = TOKEN, token_file: Path = TOKEN_FILE,
    ) -> None:
        """Print one rank's output (stdout and stderr) of a job's run.

        Control characters are shown as escapes such as \\x1b unless --raw.
        """
        client = _client(server, token, token_file)
        offset = 0
        while True:
            got: dict[str, Any] = _run(lambda at=offset: client.logs(job_id, rank, run, at))
            if got["run"] is None:
                typer.echo(safe(f"{job_id} has no launched run yet"), err=True)
                if not follow:
                    return
            elif offset == 0 and got["skipped_bytes"]:
                typer.echo(f"[first {got['skipped_bytes']} bytes no longer kept]", err=True)
            # color=True: click would strip colour sequences from raw output to a pipe
            typer.echo(got["text"] if raw else safe(got["text"], keep_lines=True), nl=False,
                       color=True if raw else None)
            offset = got["next_offset"]
            ended = got["run"] is not None and not got["running"]
            if not follow or (ended and not got["text"]) or (got["final"] and not got["text"]):
                return
            if not got["text"]:
                time.sleep(FOLLOW_POLL_S)
