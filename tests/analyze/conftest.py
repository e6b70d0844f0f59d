"""Shared fixtures for the trace-analysis tests: the shared data folder and a CLI loader."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TRACES = DATA / "traces"


@pytest.fixture(scope="session")
def traces() -> Path:
    """``../shared/data/traces`` next to the repository; skip when it is not there."""
    if not TRACES.is_dir():
        pytest.skip(f"shared trace data not found at {TRACES}")
    return TRACES


@pytest.fixture(scope="session")
def cli_module() -> ModuleType:
    """``tessera.cli.analyze``, loaded by file if the CLI package cannot be imported yet.

    ``tessera/cli/__init__.py`` imports every registered command module at import time; while a
    sibling command is still being written that import can fail, and it is not this module's
    concern. Loading the file directly tests exactly our ``register``.
    """
    try:
        return importlib.import_module("tessera.cli.analyze")
    except ImportError:
        path = Path(__file__).resolve().parents[2] / "src" / "tessera" / "cli" / "analyze.py"
        spec = importlib.util.spec_from_file_location("_tessera_cli_analyze", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
