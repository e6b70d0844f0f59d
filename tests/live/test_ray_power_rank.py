"""Power limits and energy of Ray ranks, on the rank host's side and the service's decision
(issue 34, part 5 on Ray), without Ray: :class:`RankPower` over the file-backed fake NVML
(``tests/live/fake_nvml_file.py``, reached through the rank host's test seam) and
:func:`run_power_ray.ask` / :class:`RunPowerReport`. The same paths through a real local Ray
cluster: ``tests/live/test_ray_power.py``."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tessera.live.executors.ray.rank_power import FAKE_NVML_VAR, RankPower
from tessera.live.run_power_ray import RankPowerReport, RunPowerReport, ask
from tests.live import fake_nvml_file as fake

STATE_VAR = "TESSERA_TEST_NVML_STATE"


@pytest.fixture
def boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "nvml.json"
    fake.reset(state, n=2)
    monkeypatch.setenv(FAKE_NVML_VAR, str(Path(fake.__file__)))
    monkeypatch.setenv(STATE_VAR, str(state))
    return state


def test_a_rank_sets_the_limit_on_its_own_gpu_restores_it_and_measures(
        tmp_path: Path, boards: Path) -> None:
    p = RankPower(str(tmp_path / "ray-power"), "node-a")
    notes = p.begin(("j-1", 1, 1), "1", 150.0, "node-a")
    assert notes == ["power limit 150 W set on GPU 1 (node node-a)"]
    assert fake.read(boards)["limit_mw"] == {"0": 250_000, "1": 150_000}  # GPU 0 untouched
    folder = tmp_path / "ray-power" / "node-a"
    assert stat.S_IMODE((tmp_path / "ray-power").stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()] == [0o600]
    energy_j, end = p.end(("j-1", 1, 1))
    assert energy_j == 5.0 and end == ["power limit restored: GPU 1 250 W"]
    assert fake.read(boards)["limit_mw"]["1"] == 250_000 and not list(folder.iterdir())


def test_a_gpu_another_run_measures_on_this_node_is_left_unchanged(
        tmp_path: Path, boards: Path) -> None:
    p = RankPower(str(tmp_path / "ray-power"), "node-a")
    p.begin(("j-1", 1, 0), "0", None, "node-a")
    notes = p.begin(("j-2", 1, 0), "0", 150.0, "node-a")
    assert notes == ["power limit not set, energy not measured: GPU 0 on node node-a is also "
                     "used by run 1 of j-1; the rank runs unchanged"]
    assert fake.read(boards)["sets"] == []
    assert p.end(("j-2", 1, 0)) == (None, [])  # nothing was begun for it


def test_a_mig_slice_or_a_node_without_nvml_runs_unchanged(
        tmp_path: Path, boards: Path) -> None:
    p = RankPower(str(tmp_path / "ray-power"), "node-a")
    assert "are not NVML indices" in p.begin(("j-1", 1, 0), "MIG-abc", 150.0, "node-a")[0]
    fake.reset(boards, absent=True)
    assert p.begin(("j-1", 1, 1), "0", 150.0, "node-a") == [
        "power limit not set, energy not measured: NVML unavailable on node node-a "
        "(NVMLError: Driver Not Loaded); the rank runs unchanged"]
    assert p.begin(("j-1", 1, 2), "0", None, "node-a") == []  # no limit asked: no news
    assert p.begin(("j-1", 1, 3), "", 150.0, "node-a") == [
        "power limit 150 W not set: the rank holds no GPU"]


def test_a_new_host_restores_what_a_dead_host_left_on_its_node_only(
        tmp_path: Path, boards: Path) -> None:
    root = str(tmp_path / "ray-power")
    RankPower(root, "node-a").begin(("j-1", 3, 1), "1", 120.0, "node-a")  # then it "dies"
    RankPower(root, "node-b").begin(("j-2", 1, 0), "0", 110.0, "node-b")  # still alive
    assert fake.read(boards)["limit_mw"] == {"0": 110_000, "1": 120_000}
    left = RankPower(root, "node-a").recover()
    assert left == {("j-1", 3, 1): ["power limit restored: GPU 1 250 W (left by a rank host "
                                    "that died)"]}
    assert fake.read(boards)["limit_mw"] == {"0": 110_000, "1": 250_000}  # node-b's stays


def test_the_service_passes_a_limit_only_to_a_run_that_holds_its_gpus_alone() -> None:
    a: Any = SimpleNamespace(placement=SimpleNamespace(colocated_with=()))
    assert ask(a, 200.0, False, None, packs=False) == (True, 200.0, None)
    assert ask(a, 200.0, True, None, packs=True) == (True, 200.0, None)
    measure, limit, note = ask(a, 200.0, False, None, packs=True)
    assert (measure, limit) == (False, None) and note is not None and "not exclusive" in note
    measure, limit, note = ask(a, 200.0, True, ("j-0", 1), packs=True)
    assert (measure, limit) == (False, None) and note is not None and "shares its GPUs" in note
    rider: Any = SimpleNamespace(placement=SimpleNamespace(colocated_with=("j-0",)))
    measure, limit, note = ask(rider, 200.0, True, None, packs=True)
    assert (measure, limit) == (False, None) and note is not None and "shares its GPUs" in note


def test_a_runs_energy_is_the_sum_of_every_ranks_or_unknown() -> None:
    ranks = (RankPowerReport(0, 5.0, ()), RankPowerReport(1, 7.5, ()))
    assert RunPowerReport("j", 1, 2, ranks).energy_j == 12.5
    assert RunPowerReport("j", 1, 3, ranks).energy_j is None  # rank 2's host died
    assert RunPowerReport("j", 1, 2, (ranks[0], RankPowerReport(1, None, ()))).energy_j is None


def test_a_job_id_with_unsafe_characters_is_restored_at_its_end(
        tmp_path: Path, boards: Path) -> None:
    """The record is written under a cleaned name; the end looked for it under the raw id, so
    it found nothing and left the limit set (ids are minted ``j-<hex>`` today)."""
    p = RankPower(str(tmp_path / "ray-power"), "node-a")
    p.begin(("team/a b", 2, 0), "0", 140.0, "node-a")
    assert fake.read(boards)["limit_mw"]["0"] == 140_000
    energy_j, end = p.end(("team/a b", 2, 0))
    assert end == ["power limit restored: GPU 0 250 W"] and energy_j is not None
    assert fake.read(boards)["limit_mw"]["0"] == 250_000
