"""Live power limits and energy through NVML (issue 34, part 5), against a fake NVML."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from tessera.live.nvml_power import GpuPower


class NVMLError(Exception):
    pass


class FakeNvml:
    """The NVML calls :mod:`tessera.live.nvml_power` makes, over ``n`` boards of 100-300 W
    (limit 250 W) whose energy counters advance by ``burn_mj`` at every read."""

    def __init__(self, n: int = 2, may_set: bool = True, counters: bool = True,
                 burn_mj: int = 5_000) -> None:
        self.limit_mw = {i: 250_000 for i in range(n)}
        self.energy_mj = {i: 1_000_000 * (i + 1) for i in range(n)}
        self.may_set, self.counters, self.burn_mj = may_set, counters, burn_mj
        self.sets: list[tuple[int, int]] = []

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.counters:
            raise NVMLError("Not Supported")
        self.energy_mj[h] += self.burn_mj
        return self.energy_mj[h]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: int) -> tuple[int, int]:
        return 100_000, 300_000

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self.limit_mw[h]

    def nvmlDeviceSetPowerManagementLimit(self, h: int, mw: int) -> None:
        if not self.may_set:
            raise NVMLError("Insufficient Permissions")
        assert 100_000 <= mw <= 300_000
        self.sets.append((h, mw))
        self.limit_mw[h] = mw


def _power(tmp_path: Path, nv: Any) -> GpuPower:
    return GpuPower(tmp_path / "power", nv)


def test_limit_set_at_launch_restored_after_and_energy_read(tmp_path: Path) -> None:
    nv = FakeNvml()
    p = _power(tmp_path, nv)
    start = p.begin("job-1", 1, [0, 1], 200.0)
    assert start.limit_w == 200.0 and nv.limit_mw == {0: 200_000, 1: 200_000}
    assert "power limit 200 W set on GPU 0,1" in start.notes
    end = p.end("job-1", 1)
    assert nv.limit_mw == {0: 250_000, 1: 250_000}
    assert end.energy_j == pytest.approx(2 * 5.0)  # one counter step per GPU, in J
    assert any("restored" in n for n in end.notes)
    assert list((tmp_path / "power").iterdir()) == []


def test_a_limit_outside_the_range_is_refused_and_the_run_unchanged(tmp_path: Path) -> None:
    nv = FakeNvml()
    p = _power(tmp_path, nv)
    for bad in (1000.0, 50.0, float("nan")):
        start = p.begin("t", 1, [0], bad)
        assert start.limit_w is None and nv.sets == []
        assert "refused" in start.notes[0]
        p.end("t", 1)
    assert "outside GPU 0's range 100-300 W" in p.begin("t", 2, [0], 1000.0).notes[0]


def test_restore_after_a_crash(tmp_path: Path) -> None:
    nv = FakeNvml()
    _power(tmp_path, nv).begin("job-2", 3, [1], 150.0)
    assert nv.limit_mw[1] == 150_000
    # the service dies; a new one starts and recovers before launching anything
    lines = _power(tmp_path, nv).recover()
    assert nv.limit_mw[1] == 250_000
    assert lines and "GPU 1 250 W" in lines[0]
    assert _power(tmp_path, nv).recover() == []


def test_no_permission_runs_unchanged_and_says_so(tmp_path: Path) -> None:
    nv = FakeNvml(may_set=False)
    p = _power(tmp_path, nv)
    start = p.begin("j", 1, [0], 200.0)
    assert start.limit_w is None and nv.limit_mw[0] == 250_000
    assert "may not set limits" in start.notes[0]
    assert p.end("j", 1).energy_j is not None  # energy is still measured


def test_no_nvml_or_no_gpu_runs_unchanged_and_says_so(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import tessera.live.nvml_power as mod

    monkeypatch.setattr(mod, "load_nvml", lambda: (None, "no GPU"))
    p = GpuPower(tmp_path / "power")
    start = p.begin("j", 1, [0], 200.0)
    assert start.limit_w is None
    assert start.notes == ("power limit not set, energy not measured: NVML unavailable "
                           "(no GPU); the run runs unchanged",)
    assert p.end("j", 1).energy_j is None


def test_a_board_without_an_energy_counter(tmp_path: Path) -> None:
    p = _power(tmp_path, FakeNvml(counters=False))
    assert "no energy counter" in p.begin("j", 1, [0], None).notes[0]
    assert p.end("j", 1).energy_j is None


def test_the_restore_records_are_the_services_alone(tmp_path: Path) -> None:
    """A hostile job running as another user must not rewrite the limits the service restores
    (it could have the service "restore" a board to a value of its choosing): the records'
    folder is 0700 and each record 0600."""
    nv = FakeNvml()
    p = _power(tmp_path, nv)
    p.begin("job-3", 1, [0], 150.0)
    folder = tmp_path / "power"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    records = list(folder.iterdir())
    assert records and all(stat.S_IMODE(r.stat().st_mode) == 0o600 for r in records)
