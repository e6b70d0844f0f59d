"""Run the ``tessera`` command in-process, as a user would from the shell."""

from __future__ import annotations

import sys

import pytest

from tessera.cli import main


def run_tessera(args: list[str], capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """``tessera ARGS`` through :func:`tessera.cli.main` (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["tessera", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err
