"""Review of stop 42's power restore records (issue 34, part 5): what a torn, foreign or
planted record or folder does to a restore, and what a failing counter does to a run's end.

Each test but the last (a guard that sound records still sum) failed on the code before the
review (``a512321``): a record that is valid JSON but
not an object, or names a GPU that is not an index, raised out of :meth:`GpuPower.recover` (a
Ray rank host that calls it at start would never start on that node); a torn record vanished
without a word; a ``ray-power`` folder planted as a symlink, or another user's, was written
through and its records restored; a counter read that failed at a run's end skipped the
restore; a counter that went back gave a negative energy; a forged ``exit:`` or ``powerleft:``
record in Ray's KV (``energy_j`` not a number, ``power`` not a list) raised out of
:func:`gather`, so the run's records were never pruned and its events never written.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from tessera.live.executors.ray.rank_power import FAKE_NVML_VAR, RankPower
from tessera.live.nvml_power import GpuPower
from tests.live import fake_nvml_file as fake
from tests.live.test_nvml_power import FakeNvml, NVMLError

STATE_VAR = "TESSERA_TEST_NVML_STATE"


@pytest.fixture
def boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "nvml.json"
    fake.reset(state, n=2)
    monkeypatch.setenv(FAKE_NVML_VAR, str(Path(fake.__file__)))
    monkeypatch.setenv(STATE_VAR, str(state))
    return state


def _records(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, mode=0o700)
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o600)


def test_a_corrupt_restore_record_is_reported_and_the_others_still_restored(
        tmp_path: Path) -> None:
    nv = FakeNvml(n=2)
    nv.limit_mw[1] = 120_000  # capped by the run whose record is sound
    _records(tmp_path / "power", {
        "a.1.json": "null",  # valid JSON, not an object
        "b.1.json": json.dumps({"previous_mw": {"x": 250_000}}),  # not a GPU index
        "c.1.json": json.dumps({"start_mj": {}, "previous_mw": {"1": 250_000}}),
        "d.1.json": '{"start_mj": {}, "previous_mw": {"0": 25',  # torn
    })
    lines = GpuPower(tmp_path / "power", nv).recover()
    assert nv.limit_mw == {0: 250_000, 1: 250_000}
    assert "c.1: power limit restored: GPU 1 250 W" in lines
    for stem in ("a.1", "b.1", "d.1"):
        [line] = [x for x in lines if x.startswith(f"{stem}: ")]
        assert "power limit NOT restored: restore record" in line and "unreadable" in line
    assert not list((tmp_path / "power").iterdir())


def test_a_rank_host_starts_past_a_corrupt_record(tmp_path: Path, boards: Path) -> None:
    _records(tmp_path / "ray-power" / "node-a", {"j-1.1.0.json": "[]"})
    (tmp_path / "ray-power").chmod(0o700)
    left = RankPower(str(tmp_path / "ray-power"), "node-a").recover()
    [notes] = left.values()
    assert list(left) == [("j-1", 1, 0)] and "NOT restored" in notes[0]


def test_a_planted_symlink_folder_is_refused_and_never_written_through(
        tmp_path: Path, boards: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    state = tmp_path / "state"
    state.mkdir()
    (state / "ray-power").symlink_to(theirs)
    notes = RankPower(str(state / "ray-power"), "node-a").begin(
        ("j-1", 1, 0), "0", 150.0, "node-a")
    assert len(notes) == 1 and "folder is not private to the rank host" in notes[0]
    assert notes[0].endswith("the rank runs unchanged")
    assert fake.read(boards)["sets"] == [] and not list(theirs.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another user")
def test_records_in_another_users_folder_are_neither_used_nor_restored(
        tmp_path: Path, boards: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    root = tmp_path / "ray-power"
    root.mkdir(mode=0o700)
    forged = json.dumps({"start_mj": {}, "previous_mw": {"0": 100_000}})
    _records(root / "node-a", {"j-9.1.0.json": forged})
    os.chown(root / "node-a", nobody, -1)
    assert RankPower(str(root), "node-a").recover() == {}
    assert fake.read(boards)["sets"] == []  # the forged 100 W was not "restored"
    notes = RankPower(str(root), "node-a").begin(("j-1", 1, 0), "0", 150.0, "node-a")
    assert "folder is not private to the rank host" in notes[0]
    assert fake.read(boards)["sets"] == []


def test_a_failed_counter_read_at_the_end_still_restores_the_limit(tmp_path: Path) -> None:
    nv = FakeNvml(n=1)
    p = GpuPower(tmp_path / "power", nv)
    p.begin("job-1", 1, [0], 200.0)
    assert nv.limit_mw[0] == 200_000

    def gone(_h: int) -> int:
        raise NVMLError("GPU is lost")

    nv.nvmlDeviceGetTotalEnergyConsumption = gone  # type: ignore[method-assign]
    end = p.end("job-1", 1)
    assert nv.limit_mw[0] == 250_000 and end.energy_j is None
    assert end.notes == ("energy unknown: NVML failed (NVMLError: GPU is lost)",
                         "power limit restored: GPU 0 250 W")


def test_a_counter_that_went_back_gives_no_energy_not_a_negative_one(tmp_path: Path) -> None:
    nv = FakeNvml(n=1)
    p = GpuPower(tmp_path / "power", nv)
    p.begin("job-1", 1, [0], None)
    nv.energy_mj[0] = 7_000  # the driver was reloaded: the counter starts again near zero
    end = p.end("job-1", 1)
    assert end.energy_j is None
    assert end.notes == ("energy unknown: a GPU's energy counter went back during the run "
                         "(the driver was reloaded)",)


def _kv(monkeypatch: pytest.MonkeyPatch, kv: dict[str, Any]) -> None:
    from tessera.live.executors.ray import power_reports

    def get(key: str) -> dict[str, Any] | None:
        raw = kv.get(key)
        return None if raw is None else dict(json.loads(raw))  # as records.get reads the KV

    monkeypatch.setattr(power_reports, "get", get)
    monkeypatch.setattr(power_reports, "delete", lambda key: kv.pop(key, None))


def test_forged_kv_power_records_give_no_energy_and_never_stop_the_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.live.executors.ray.power_reports import gather
    kv = {"exit:j-1:1:0": json.dumps({"rc": 0, "energy_j": "lots", "power": 5}),
          "exit:j-1:1:1": json.dumps({"rc": 0, "energy_j": float("nan"), "power": ["ok"]}),
          "exit:j-1:1:2": json.dumps({"rc": 0, "energy_j": -3.0, "power": ["x" * 10_000]}),
          "powerleft:j-1:1:0": "[1, 2]"}
    _kv(monkeypatch, kv)
    got: list[Any] = []
    gather("j-1", 1, 3, {}, got)
    [rep] = got
    assert [(r.rank, r.energy_j) for r in rep.ranks] == [(0, None), (1, None), (2, None)]
    assert rep.energy_j is None and "powerleft:j-1:1:0" not in kv
    assert rep.ranks[0].notes == ("power notes unreadable: not a list",
                                  "power notes of a dead rank host unreadable")
    assert rep.ranks[1].notes == ("ok",) and len(rep.ranks[2].notes[0]) == 500


def test_sound_kv_power_records_still_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.live.executors.ray.power_reports import gather
    _kv(monkeypatch, {"exit:j-1:1:1": json.dumps({"rc": 0, "energy_j": 2, "power": []})})
    got: list[Any] = []
    gather("j-1", 1, 2, {0: {"rc": 0, "energy_j": 1.5, "power": ["a"]}}, got)
    assert got[0].energy_j == 3.5


def test_a_record_torn_before_the_end_is_said_at_the_end(tmp_path: Path) -> None:
    nv = FakeNvml(n=1)
    p = GpuPower(tmp_path / "power", nv)
    p.begin("job-1", 1, [0], 200.0)
    record = tmp_path / "power" / "job-1.1.json"
    record.write_text(record.read_text()[:20])  # torn
    end = p.end("job-1", 1)
    assert end.energy_j is None and len(end.notes) == 1
    assert end.notes[0].startswith("power limit NOT restored, energy unknown: restore record ")
    assert "unreadable (JSONDecodeError" in end.notes[0] and not record.exists()
