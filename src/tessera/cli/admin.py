"""``tessera admin``: the operator's commands that work on the state dir's files.

``backup`` copies the job store while the service runs (SQLite's online backup API);
``restore`` puts a backup back in place while it is stopped, keeping the old store aside.
What each checks is in :mod:`tessera.live.backup` and ``docs/security.md``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tessera.cli.options import STATE


def register(app: typer.Typer) -> None:
    """Add ``tessera admin backup`` and ``tessera admin restore`` to ``app``."""
    from tessera.cli.live import _run

    admin = typer.Typer(help="Operator commands on the live service's state dir (backups).",
                        epilog="Example: tessera admin backup --state ~/.tessera "
                               "/backups/tessera.db",
                        no_args_is_help=True)
    app.add_typer(admin, name="admin")

    @admin.command("backup", epilog="Example: tessera admin backup --state ~/.tessera "
                   "/backups/tessera-$(date +%F).db")
    def backup_cmd(
        out: Path = typer.Argument(..., metavar="OUT", help="File to write the copy to (new; "
                                   "created 0600: it holds every tenant's jobs and env)."),
        state: Path = STATE,
    ) -> None:
        """Copy the job store to OUT, consistently, while `tessera serve` runs or not.

        The copy is checked with SQLite's integrity_check before it is named OUT. Copy
        tessera-live.yaml (queues, token hashes) beside it: it is not in the store.
        """
        from tessera.live.backup import backup

        done = _run(lambda: backup(state, out))
        typer.echo(f"backed up {done.jobs} job(s) of store {done.store_id or '(no id)'} to "
                   f"{done.path} ({done.size_bytes} bytes)")

    @admin.command("restore", epilog="Example: tessera admin restore --state ~/.tessera "
                   "/backups/tessera-2026-12-01.db")
    def restore_cmd(
        backup_file: Path = typer.Argument(..., metavar="IN", help="A file written by "
                                           "`tessera admin backup`."),
        state: Path = STATE,
    ) -> None:
        """Replace the job store by the backup IN (stop `tessera serve` first).

        Refuses while a service holds the state dir, and a backup that fails SQLite's
        integrity_check. The store it replaces is moved to store-aside-<time>/ in the state
        dir, never deleted. Then start `tessera serve` as usual.
        """
        from tessera.live.backup import restore

        done = _run(lambda: restore(state, backup_file))
        kept = f"; the old store is in {done.aside}" if done.aside else ""
        typer.echo(f"restored {done.jobs} job(s) of store {done.store_id} from {backup_file} "
                   f"to {done.path}{kept}")
