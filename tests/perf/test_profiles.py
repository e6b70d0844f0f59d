"""Gavel throughput profiles: lookups, provenance of estimates, and clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.profiles import default_throughputs, load_gavel_throughputs
from tests.builders import RECO, RESNET

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "profiles" / "gavel"

_V100, _K80 = resolve_flavor("v100"), resolve_flavor("k80")


def test_bundled_table_matches_the_published_statistics() -> None:
    t = default_throughputs()
    assert len(t.job_types()) == 26
    assert len(t.distributable_types()) == 19
    assert t.flavors() == ("K80", "P100", "V100-16GB")
    assert t.throughput("ResNet-18 (batch size 16)", _V100) == pytest.approx(32.353, abs=1e-3)
    assert t.throughput("ResNet-18 (batch size 16)", _K80) == pytest.approx(4.795, abs=1e-3)


def test_bundled_copy_is_the_shared_file() -> None:
    path = SHARED / "simulation_throughputs.json"
    if not path.exists():
        pytest.skip(f"shared data not present: {path}")
    a, b = default_throughputs(), load_gavel_throughputs(path)
    assert a.isolated == b.isolated


def test_unconsolidated_answers_come_from_the_unconsolidated_measurements() -> None:
    import json
    from importlib import resources

    raw = json.loads(resources.files("tessera.data").joinpath(
        "gavel/simulation_throughputs.json").read_text())
    t = default_throughputs()
    job = "ResNet-50 (batch size 64)"
    key = f"('{job}', 4)"
    spread = raw["v100_unconsolidated"][key]["null"]
    assert t.throughput(job, _V100, 4, consolidated=False) == spread
    assert t.throughput(job, _V100, 4) == raw["v100"][key]["null"]


def test_zero_means_does_not_fit() -> None:
    assert default_throughputs().throughput("ResNet-50 (batch size 128)", _K80, 4) == 0.0


def test_estimates_are_labelled() -> None:
    t = default_throughputs()
    big = t.lookup(RESNET, _V100, 16)
    assert not big.measured and "extrapolated" in big.note
    assert big.steps_per_s == pytest.approx(2 * t.throughput(RESNET, _V100, 8))
    proxy = t.lookup(RESNET, resolve_flavor("p40"), 1)
    assert not proxy.measured and "P100" in proxy.note


@pytest.mark.parametrize(
    ("args", "match"),
    [((RESNET, resolve_flavor("t4"), 1), "no throughput measurements for flavor T4"),
     (("Nope (batch size 1)", _V100, 1), "was not measured"),
     ((RECO, _V100, 2), "single-GPU job type")],
    ids=["unmeasured-flavor", "unknown-type", "not-distributable"],
)
def test_no_data_is_said_clearly(args: tuple[str, GpuFlavor, int], match: str) -> None:
    with pytest.raises(NoProfileError, match=match):
        default_throughputs().lookup(*args)


def test_colocation_pairs() -> None:
    t = default_throughputs()
    a, _b = t.colocated("ResNet-18 (batch size 16)", "ResNet-18 (batch size 32)", _K80)
    assert 0 < a < t.throughput("ResNet-18 (batch size 16)", _K80)
    with pytest.raises(NoProfileError):
        t.colocated("ResNet-18 (batch size 16)", "Nope", _K80)
