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
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import tessera.live.executors as executors_pkg
import tessera.live.executors.registry as registry_mod
from tessera.cli import serve as serve_cli
from tessera.errors import SpecError
from tessera.live.executors.registry import (
    EXECUTORS,
    executor_plugin,
    load_executors,
    option_flag_type,
    outside_package,
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
    monkeypatch.setattr(registry_mod, "_OUTSIDE", dict(registry_mod._OUTSIDE))
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
    assert ("executor 'broken' (package far-exec, far_exec_missing) was skipped: it failed to "
            "load") in caplog.text
    assert outside_package("far") == "far-exec" and outside_package("local") is None
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
        option_flag_type(list[str])


# An executor whose option no flag can carry: from an installed package it is skipped (one
# warning naming the package and the field), never breaking the CLI; built in, it is our bug.

#: Options of a type no command-line flag carries (``hosts: list[str]``).
BAD_OPTIONS = '''
from pydantic import BaseModel, ConfigDict, Field

from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin


class HostsOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    hosts: list[str] = Field(default_factory=list, description="Where to run.")
    port: int = 9000


class HostsPlugin(ExecutorPlugin[HostsOptions]):
    """Runs jobs on a list of hosts."""

    options_model = HostsOptions
'''


def _install(tmp_path: Path, module: str, entry_points: str) -> None:
    """A fake installed package ``hosts-exec`` (a dist-info) with one module on sys.path."""
    (tmp_path / "hosts_exec.py").write_text(module)
    info = tmp_path / "hosts_exec-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hosts-exec\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tessera.executors]\n{entry_points}\n")


@pytest.fixture
def bad_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     fresh_registry: None) -> Iterator[Path]:
    """``hosts-exec``: a plugin class with ``hosts: list[str]`` and a module that registers
    such a plugin itself (both kinds of entry point), beside a good ``far`` (``far-exec``)."""
    _install(tmp_path, BAD_OPTIONS, "hosts = hosts_exec:HostsPlugin\nselfhosts = hosts_self")
    (tmp_path / "hosts_self.py").write_text(
        BAD_OPTIONS + '\n\nEXECUTORS.register("selfhosts", "Registers itself.")(HostsPlugin)\n')
    (tmp_path / "far_exec.py").write_text(ENTRY_MODULE)
    info = tmp_path / "far_exec-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: far-exec\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tessera.executors]\nfar = far_exec:FarPlugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for module in ("hosts_exec", "hosts_self", "far_exec"):
        sys.modules.pop(module, None)


def test_an_outside_executor_whose_option_has_no_flag_is_skipped_with_one_warning(
        bad_entry_points: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tessera.live"):
        registry = load_executors()
        options = _serve_options()
    assert set(registry.names()) == {"local", "ray", "far"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "executor 'hosts' (package hosts-exec, hosts_exec:HostsPlugin) was skipped: option "
        "'hosts' has type list[str], which no command-line flag can carry (use bool, int, "
        "float, str, Path, a Literal, or one of these | None)",
        "executor 'selfhosts' (package hosts-exec, hosts_self) was skipped: option 'hosts' "
        "has type list[str], which no command-line flag can carry (use bool, int, float, "
        "str, Path, a Literal, or one of these | None)"]
    assert "far: Runs jobs far away" in options["--executor"]
    assert "hosts" not in options["--executor"] and "--hosts-port" not in options
    assert "--ray-address" in options


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["serve", "--help"]])
def test_every_command_starts_with_a_broken_outside_executor_installed(
        bad_entry_points: Path, argv: list[str]) -> None:
    """The CLI builds serve's flags whenever it starts: the reviewer's repro, end to end."""
    r = subprocess.run([sys.executable, "-m", "tessera", *argv], capture_output=True,
                       text=True, timeout=120, env={
                           "PYTHONPATH": f"{SRC.parent}:{bad_entry_points}", "COLUMNS": "200",
                           "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("was skipped: option 'hosts' has type list[str]") == 2
    assert "package hosts-exec" in r.stderr


def test_serve_builds_its_flags_per_executor(
        entry_point_executor: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An outside executor that passed the load check but fails when serve reads its options
    (here: its model swapped afterwards) loses its flags, not the command."""
    plugin = load_executors().get("far")
    bad: dict[str, Any] = {}
    exec(BAD_OPTIONS, bad)
    monkeypatch.setattr(plugin, "options_model", bad["HostsOptions"])
    with caplog.at_level(logging.WARNING, logger="tessera.live"):
        options = _serve_options()
    assert "--ray-address" in options and "--far-port" not in options
    assert ("executor 'far' (package far-exec) gets no command-line flags: option 'hosts'"
            in caplog.text)


@pytest.fixture
def bad_package_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         fresh_registry: None) -> Iterator[None]:
    """``hosts``: a built-in executor package (in tmp_path) with ``hosts: list[str]``."""
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "__init__.py").write_text(
        BAD_OPTIONS + '\n\nEXECUTORS.register("hosts", "Hosts.")(HostsPlugin)\n')
    monkeypatch.setattr(executors_pkg, "__path__", [*executors_pkg.__path__, str(tmp_path)])
    yield
    sys.modules.pop("tessera.live.executors.hosts", None)


def test_a_built_in_executor_whose_option_has_no_flag_fails_loudly(
        bad_package_executor: None) -> None:
    with pytest.raises(TypeError, match=r"^built-in executor 'hosts' "
                       r"\(tessera\.live\.executors\.hosts\): option 'hosts' has type "
                       r"list\[str\], which no command-line flag can carry"):
        load_executors()


def test_serve_refuses_a_built_in_executor_whose_option_has_no_flag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the load check too: a built-in executor's bad options are never skipped."""
    plugin = load_executors().get("local")
    bad: dict[str, Any] = {}
    exec(BAD_OPTIONS, bad)
    monkeypatch.setattr(plugin, "options_model", bad["HostsOptions"])
    with pytest.raises(TypeError, match="option 'hosts' has type list"):
        _serve_options()
