"""The cost of ``simulate --goodput reported`` (issue 35 part 5): an observation the job's
fit already predicts leaves the published fit -- the policies' cache key -- as it was."""

from __future__ import annotations

from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import Placement
from tessera.sim.gns_agent import GoodputAgent
from tessera.workload.elastic import elastic_range
from tests.builders import make_cluster, make_job, view


def test_a_predicted_observation_keeps_the_same_fit_object() -> None:
    spec = make_job("a", 1, steps=1000, elastic=elastic_range("cifar10", 1, 2048))
    node = make_cluster().node("A100-40GB", gpus=4).build().nodes[0]
    agent = GoodputAgent()

    def fits(gpus: int, batch: int):  # type: ignore[no-untyped-def]
        p = Placement.of(node.flavor, ((node.node_id, gpus),), global_batch_samples=batch)
        return agent.fits(view(spec, JobState.RUNNING, p))

    fits(1, 512)
    first = fits(1, 256)  # two local batches: compute time fitted
    assert fits(1, 1024) is first  # a third batch on one GPU it predicts: same object
    two = fits(2, 512)  # a gang: sync time, a new fit
    assert two is not first
    assert fits(2, 1024) is two  # predicted: same object, the caches keyed on it still hit
