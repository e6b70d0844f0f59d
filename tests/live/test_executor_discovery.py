"""Adding an executor touches one package (issue 31, part 4).

Built-in executors are the sub-packages of ``tessera.live.executors``, found by walking the
package; an installed package adds one through the ``tessera.executors`` entry-point group.
Both are tried here with executors that exist only in ``tmp_path``: nothing in Tessera names
them, yet ``serve`` knows them, lists them in ``--executor``'s help and in the error for an
unknown name, and takes their options as ``--<executor>-<option>`` flags.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import tessera.live.executors as executors_pkg
from tessera.cli import serve as serve_cli
from tessera.errors import SpecError
from tessera.live.executors.registry import (
    EXECUTORS,
    executor_plugin,
    load_executors,
    parse_options,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "tessera"

#: An executor package, as a new built-in one would be written: registers itself on import.
PACKAGE = '''
from pydantic import BaseModel, ConfigDict, Field

from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin


class MineOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    endpoint: str = Field("http://127.0.0.1:9000", description="Where my cluster listens.")
    dry: bool = Field(False, description="Only pretend.")


@EXECUTORS.register("mine", "Runs jobs on my cluster.")
class MinePlugin(ExecutorPlugin[MineOptions]):
    options_model = MineOptions
'''

#: A module of an installed package, named by an entry point: a plugin class, unregistered.
ENTRY_MODULE = '''
from pydantic import BaseModel, ConfigDict

from tessera.live.executors.registry import ExecutorPlugin


class FarOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FarPlugin(ExecutorPlugin[FarOptions]):
    """Runs jobs far away.

    More words that are not the summary.
    """

    options_model = FarOptions
'''


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry and the discovery cache restored after the test."""
    load_executors()  # the built-in executors, registered before the copy
    monkeypatch.setattr(EXECUTORS, "_entries", dict(EXECUTORS._entries))
    load_executors.cache_clear()
    yield
    load_executors.cache_clear()


@pytest.fixture
def package_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     fresh_registry: None) -> Iterator[None]:
    """``mine``: a sub-package of ``tessera.live.executors`` that exists only in tmp_path."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text(PACKAGE)
    monkeypatch.setattr(executors_pkg, "__path__", [*executors_pkg.__path__, str(tmp_path)])
    yield
    sys.modules.pop("tessera.live.executors.mine", None)


@pytest.fixture
def entry_point_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         fresh_registry: None) -> Iterator[None]:
    """An installed package ``far-exec`` whose entry points add ``far`` (and one broken)."""
    (tmp_path / "far_exec.py").write_text(ENTRY_MODULE)
    info = tmp_path / "far_exec-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: far-exec\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tessera.executors]\nfar = far_exec:FarPlugin\n"
                                           "broken = far_exec_missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("far_exec", None)


def _serve_app() -> typer.Typer:
    """A fresh ``serve`` command: its flags and help are made from the registry now."""
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    serve_cli.register(app)
    return app


def _serve_options() -> dict[str, str]:
    """``serve``'s options as the command line has them: each flag → its help."""
    command = typer.main.get_command(_serve_app()).commands["serve"]  # type: ignore[attr-defined]
    return {opt: p.help or "" for p in command.params for opt in [*p.opts, *p.secondary_opts]}


def test_the_built_in_executors_are_packages_found_without_a_list() -> None:
    found = {p.name for p in (SRC / "live" / "executors").iterdir()
             if (p / "__init__.py").exists()}
    assert found == {"local", "ray"}
    assert set(load_executors().names()) == {"local", "ray"}
    assert not (SRC / "live" / "executors" / "builtin.py").exists()
    assert not list((SRC / "live" / "executors").glob("ray_*.py"))  # one package, not files


def test_an_executor_package_is_found_and_served(package_executor: None,
                                                 tmp_path: Path) -> None:
    assert "mine" in load_executors()
    assert executor_plugin("mine").options_model.__name__ == "MineOptions"
    with pytest.raises(SpecError, match=r"^unknown executor 'mien'; did you mean 'mine'\? "
                       r"\(known: local, ray, mine\)$"):
        executor_plugin("mien")
    options = _serve_options()
    assert "mine: Runs jobs on my cluster" in options["--executor"]
    assert options["--mine-endpoint"] == "Where my cluster listens."
    assert "--mine-dry" in options and "--no-mine-dry" not in options
    app = _serve_app()
    # its flags reach its options model, and another executor's flags are refused
    r = CliRunner().invoke(app, ["serve", "--state", str(tmp_path / "state"), "--mine-dry",
                                 "--executor", "ray"])
    assert r.exit_code == 2
    assert r.output.strip() == ("error: --mine-dry: option(s) of the 'mine' executor, but this "
                                "service runs --executor ray")
    assert not (tmp_path / "state").exists()


def test_an_entry_point_adds_an_executor_and_a_broken_one_is_skipped(
        entry_point_executor: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tessera.live"):
        registry = load_executors()
    assert "far" in registry and "broken" not in registry
    assert [e.summary for e in registry if e.name == "far"] == ["Runs jobs far away."]
    assert type(parse_options("far", {})).__name__ == "FarOptions"
    assert "executor 'broken' (far_exec_missing) was skipped: it failed to load" in caplog.text
    assert "far: Runs jobs far away" in _serve_options()["--executor"]


def test_the_executor_help_lists_the_registered_executors() -> None:
    assert _serve_options()["--executor"].startswith(
        "Where jobs run, one of the registered executors: local: Subprocesses on this machine "
        "(no Ray); ray: Placement groups and detached actors on a Ray cluster")


def test_listing_the_executors_imports_no_ray() -> None:
    """``tessera serve --help`` lists every executor and its flags, without importing Ray."""
    pytest.importorskip("ray")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "tessera.cli", "serve",
                        "--help"], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(SRC.parent), "COLUMNS": "200", "PATH": "/usr/bin"})
    assert r.returncode == 0 and "--ray-address" in r.stdout
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "tessera.live.executors.ray.plugin" in imported
    assert "ray" not in imported and "tessera.live.executors.ray.executor" not in imported


@pytest.mark.parametrize("module", ["cli/live.py", "cli/serve.py",
                                    *[f"live/executors/{p.name}" for p in
                                      sorted((SRC / "live" / "executors").glob("*.py"))],
                                    *[f"live/executors/ray/{p.name}" for p in
                                      sorted((SRC / "live" / "executors" / "ray").glob("*.py"))]])
def test_modules_stay_under_the_guide(module: str) -> None:
    """The house guide: modules of a few hundred lines (~400 at most)."""
    assert len((SRC / module).read_text().splitlines()) <= 400


def test_a_flag_of_an_unsupported_type_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="no command-line flag for an executor option"):
        serve_cli._flag_type(list[str])
