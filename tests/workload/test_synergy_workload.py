"""Issue 33, part 2: Synergy's cluster preset and its Philly-derived workload generator."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.workload import load_trace
from tessera.workload.synergy import generate_synergy_like, parse_split

runner = CliRunner()


def test_synergy_128_is_sixteen_v100_servers_with_24_cpus_and_500_gb() -> None:
    c = load_cluster("synergy-128")
    assert c.total_gpus == 128 and len(c.nodes) == 16
    assert {(n.flavor.short, n.gpus, n.cpu_cores, n.mem_gib) for n in c.nodes} == {
        ("V100-16GB", 8, 24, 500)}


def test_generator_meets_the_class_split_exactly_and_is_seeded() -> None:
    w = generate_synergy_like(1000, 9, 0)
    classes = Counter(j.extra["synergy_class"] for j in w.jobs)
    assert classes == {"image": 200, "language": 700, "speech": 100}
    models = Counter(j.model for j in w.jobs)
    assert models["res18"] == 40 and models["gnmt"] in (233, 234) and models["m5"] == 50
    assert all(j.num_gpus == 1 and j.sensitivity is not None for j in w.jobs)
    assert w == generate_synergy_like(1000, 9, 0)
    assert w.jobs != generate_synergy_like(1000, 9, 1).jobs


def test_generator_draws_synergy_s_arrivals_and_durations() -> None:
    w = generate_synergy_like(4000, 9, 0)
    gaps_h = (w.jobs[-1].submit_time_s - w.jobs[0].submit_time_s) / 3600 / 3999
    assert gaps_h == pytest.approx(1 / 9, rel=0.05)
    assert w.jobs[0].submit_time_s > 0  # one gap after t = 0, whole seconds
    assert all(s.submit_time_s == int(s.submit_time_s) for s in w.jobs)
    hours = [j.duration_hint_s / 3600 for j in w.jobs]  # type: ignore[operator]
    assert min(hours) >= 60 * 10**1.5 / 3600 and max(hours) <= 60 * 10**4 / 3600
    short = sum(h < 1000 / 60 for h in hours) / len(hours)
    assert short == pytest.approx(0.8, abs=0.03)


def test_multi_gpu_gangs_follow_synergy_s_sizes() -> None:
    sizes = Counter(j.num_gpus for j in generate_synergy_like(4000, 9, 0, multi_gpu=True).jobs)
    assert set(sizes) == {1, 2, 4, 8}
    assert sizes[1] / 4000 == pytest.approx(0.70, abs=0.03)


@pytest.mark.parametrize("text", ["20,70", "20,70,11", "a,b,c", "-10,100,10"])
def test_a_bad_split_is_a_one_line_error(text: str) -> None:
    with pytest.raises(SpecError, match="split"):
        parse_split(text)


def test_cli_writes_a_synergy_csv_that_reads_back_as_the_same_jobs(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    r = runner.invoke(app, ["traces", "generate", "--style", "synergy", "--jobs-per-hour", "9",
                            "--split", "20,70,10", "--jobs", "50", "--seed", "4",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    back = load_trace(str(out))
    drawn = generate_synergy_like(50, 9, 4)
    assert [(j.job_id, j.model, j.num_gpus, j.submit_time_s) for j in back.jobs] == [
        (j.job_id, j.model, j.num_gpus, j.submit_time_s) for j in drawn.jobs]
    assert all(j.sensitivity == d.sensitivity for j, d in zip(back.jobs, drawn.jobs, strict=True))
    multi = runner.invoke(app, ["traces", "generate", "--style", "synergy", "--multi-gpu",
                                "--jobs", "200", "--out", str(tmp_path / "m.csv")])
    assert multi.exit_code == 0
    assert {j.num_gpus for j in load_trace(str(tmp_path / "m.csv")).jobs} > {1}


def test_cli_refuses_a_bad_split_and_style(tmp_path: Path) -> None:
    r = runner.invoke(app, ["traces", "generate", "--style", "synergy", "--split", "1,2,3",
                            "--out", str(tmp_path / "x.csv")])
    assert r.exit_code != 0 and "adding up to 100" in r.output
    r = runner.invoke(app, ["traces", "generate", "--style", "borg",
                            "--out", str(tmp_path / "x.csv")])
    assert r.exit_code != 0 and "choose gavel or synergy" in r.output
