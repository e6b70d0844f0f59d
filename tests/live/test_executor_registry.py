"""Executors by registry (issue 31, part 4): an executor is a plugin with its own options.

A test-only executor is registered here, in this module alone, and ``tessera serve``'s
machinery builds it with its options: nothing outside this module names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.live.executors.base import Executor
from tessera.live.executors.local import LocalExecutor
from tessera.live.executors.registry import EXECUTORS, ExecutorPlugin, ExecutorSite
from tessera.live.server import ServeConfig, build_service, live_policy


class LabelOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    label: str = "plain"


class LabelledExecutor(LocalExecutor):
    """The local executor under another name, remembering its option."""

    name = "labelled"
    shares_gpus = False

    def __init__(self, runs_dir: Path, label: str) -> None:
        super().__init__(runs_dir)
        self.label = label


BUILT: list[ExecutorSite] = []


class LabelPlugin(ExecutorPlugin[LabelOptions]):
    options_model = LabelOptions

    def build(self, options: LabelOptions, site: ExecutorSite) -> Executor:
        BUILT.append(site)
        return LabelledExecutor(site.runs_dir, options.label)


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register ``labelled`` for one test (the registry is restored afterwards)."""
    monkeypatch.setattr(EXECUTORS, "_entries", dict(EXECUTORS._entries))
    EXECUTORS.register("labelled", "A test-only executor.")(LabelPlugin)
    yield


def test_a_registered_executor_is_built_with_its_own_options(labelled: None,
                                                             tmp_path: Path) -> None:
    cfg = ServeConfig(tmp_path / "state", "v100:2", 2, executor="labelled",
                      executor_options={"label": "blue"})
    svc, _ = build_service(cfg)
    try:
        assert isinstance(svc.executor, LabelledExecutor) and svc.executor.label == "blue"
        assert BUILT[-1].runs_dir == cfg.layout.runs_dir
    finally:
        svc.store.close()


def test_an_option_the_executor_does_not_take_is_refused_with_its_name(
        labelled: None, tmp_path: Path) -> None:
    cfg = ServeConfig(tmp_path / "state", executor="labelled",
                      executor_options={"address": "10.0.0.1:6379"})
    with pytest.raises(SpecError, match=r"^executor 'labelled' has no option 'address'; its "
                       r"options: --labelled-label$"):
        build_service(cfg)
    assert not (tmp_path / "state").exists()  # refused before any state was written
    with pytest.raises(SpecError, match=r"^executor 'labelled': --labelled-label: Input "
                       "should be a valid string"):
        build_service(ServeConfig(tmp_path / "state", executor="labelled",
                                  executor_options={"label": 3}))


def test_sharing_is_the_plugins_word(labelled: None) -> None:
    """A packing policy needs an executor that can share GPUs: the plugin says whether."""
    live_policy("hetero_pack", "local")
    with pytest.raises(SpecError):
        live_policy("hetero_pack", "labelled")


def test_an_unknown_executor_is_refused_before_any_state(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown executor 'rey'; did you mean 'ray'\? "
                       r"\(known: local, ray\)"):
        build_service(ServeConfig(tmp_path / "state", executor="rey"))
    assert not (tmp_path / "state").exists()


def test_ray_flags_with_the_local_executor_are_refused(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["serve", "--state", str(tmp_path / "state"),
                                 "--ray-address", "10.0.0.9:6379"])
    assert r.exit_code == 2
    assert r.output.strip() == ("error: --ray-address: option(s) of the 'ray' executor, but "
                                "this service runs --executor local")
    assert not (tmp_path / "state").exists()


def test_the_ray_options_keep_their_flags(tmp_path: Path) -> None:
    """``--ray-flavor-resource`` is checked by the Ray plugin's options model, before Ray."""
    r = CliRunner().invoke(app, ["serve", "--state", str(tmp_path / "state"), "--executor",
                                 "ray", "--ray-flavor-resource", "gpu_type"])
    assert r.exit_code == 2
    assert r.output.strip().startswith("error: executor 'ray': --ray-flavor-resource: Input "
                                       "should be 'accelerator_type' or 'gpu_flavor'")
    assert not (tmp_path / "state").exists()


def test_synergys_round_twin_is_refused_by_the_live_service() -> None:
    """``repack=round`` moves every gang every round for free: a simulator twin. The live
    service would really restart every gang each round, so it refuses it in one line; the
    resource mode alone runs."""
    live_policy("fifo:resources=tune", "local")
    with pytest.raises(SpecError, match=r"repack=round is Synergy's simulator twin"):
        live_policy("fifo:resources=tune:repack=round", "local")
