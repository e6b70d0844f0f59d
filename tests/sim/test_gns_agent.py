"""``simulate --goodput reported`` (issue 35 part 5): the simulated Pollux agent."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.model.jobs import JobState
from tessera.perf.efficiency import load_efficiency
from tessera.sched.core.snapshot import Placement
from tessera.sim.gns_agent import reported_gns, with_reported_gns
from tessera.workload.elastic import elastic_range
from tests.builders import make_cluster, make_job, view


def test_the_agent_reports_the_curves_noise_scale_at_its_batch_and_progress() -> None:
    e = elastic_range("cifar10", 1, 512)
    spec = make_job("a", 1, steps=1000, elastic=e)
    prof = load_efficiency("cifar10")
    waiting = view(spec, remaining_steps=500.0)  # half way
    assert reported_gns(waiting, 0.0) == pytest.approx(
        prof.noise_scale_samples(512, e.target_samples / 2))
    node = make_cluster().node("A100-40GB", gpus=4).build().nodes[0]
    held = Placement.of(node.flavor, ((node.node_id, 4),), global_batch_samples=2048)
    running = view(spec, JobState.RUNNING, held, remaining_steps=500.0)
    assert reported_gns(running, 0.0) == pytest.approx(
        prof.noise_scale_samples(2048, e.target_samples / 2))
    # noisier gradients late in training: the report grows
    late = view(spec, remaining_steps=50.0)
    assert reported_gns(late, 0.0) > reported_gns(waiting, 0.0)  # type: ignore[operator]
    rigid = view(make_job("r", 1))
    assert reported_gns(rigid, 0.0) is None
    out = with_reported_gns((rigid, waiting), 0.0)
    assert out[0] is rigid and out[1].noise_scale_samples == reported_gns(waiting, 0.0)


@pytest.mark.slow
def test_simulate_goodput_reported_runs_and_moves_the_decisions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through the command (about 10 s): both sources finish every job, and the reported
    noise scales change Sia's decisions (and so the JCT)."""
    jct = {}
    for goodput in ("table", "reported"):
        r = CliRunner().invoke(app, [
            "simulate", "-t", "sia-philly-1", "--limit", "60", "-c", "sia-64",
            "--throughputs", "sia", "-p", "sia", "--sia-calibration", "--goodput", goodput,
            "--json", "--no-plots", "--out", str(tmp_path / goodput)])
        assert r.exit_code == 0, r.output
        s = json.loads(r.output)["results"]["sia"]
        assert s["succeeded"] == 60
        jct[goodput] = s["avg_jct_s"]
    assert jct["reported"] != jct["table"]


def test_simulate_refuses_an_unknown_goodput_source() -> None:
    r = CliRunner().invoke(app, ["simulate", "-t", "sia-philly-1", "--goodput", "guess"])
    assert isinstance(r.exception, SpecError)
    assert "--goodput 'guess': table, gns or reported" in str(r.exception)


def test_the_agent_fits_the_step_times_it_observed_on_its_flavor() -> None:
    from tessera.perf.goodput import load_step_times
    from tessera.sim.gns_agent import GoodputAgent

    e = elastic_range("cifar10", 1, 512)
    spec = make_job("a", 1, steps=1000, elastic=e)
    node = make_cluster().node("A100-40GB", gpus=4).build().nodes[0]
    agent = GoodputAgent()
    assert agent.fits(view(spec)) == ()  # never ran: nothing observed
    times = load_step_times("cifar10", node.flavor)
    for gpus in (1, 2):
        p = Placement.of(node.flavor, ((node.node_id, gpus),), global_batch_samples=512)
        fits = agent.fits(view(spec, JobState.RUNNING, p))
    assert [f for f, _ in fits] == [node.flavor]
    fit = fits[0][1]
    for gpus in (1, 2):  # the fit reproduces what it saw (within the model's error)
        local = 512 / gpus
        true = times.step_and_sync_s((gpus,), local)[0]
        assert fit.iteration_s(gpus, local) == pytest.approx(true, rel=0.15)
    gns_only = GoodputAgent(fit_steps=False).views((view(spec, JobState.RUNNING, p),), 0.0)
    assert gns_only[0].step_fits == () and gns_only[0].noise_scale_samples is not None
