"""Issue 30, item 6 under Ray: a job's own device variables never replace the GPUs Ray gave it.

Opt-in like the other Ray tests (``-m ray``): it starts an embedded Ray head.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tests.live.helpers import wait_for
from tests.live.test_ray import ADMIN, ray_service  # noqa: F401  (the fixture)

pytestmark = pytest.mark.ray

DUMP = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
        "('CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES')}, open(sys.argv[1], 'w'))")


def test_a_stored_jobs_own_devices_never_replace_rays(ray_service: LiveService,  # noqa: F811
                                                      tmp_path: Path) -> None:
    """Finding: under Ray a job's own ``CUDA_VISIBLE_DEVICES`` replaced the one it was given.
    Submission refuses it now; a job stored before that rule (its env written straight into
    the request here, past validation) still runs on the GPU Ray assigned."""
    out = tmp_path / "devices.json"
    req = parse_request(f"name: greedy\nqueue: team-a\nflavors: [t4]\n"
                        f"command: [{sys.executable}, -c, \"{DUMP}\", {out}]")
    req = req.model_copy(update={"env": {"CUDA_VISIBLE_DEVICES": "7,8,9",
                                         "NVIDIA_VISIBLE_DEVICES": "all"}})
    jid = ray_service.submit(req, ADMIN).job_id
    wait_for(lambda: out.exists() and out.stat().st_size > 0, 60, "the job to report")
    seen = json.loads(out.read_text())
    assert seen["CUDA_VISIBLE_DEVICES"] in ("0", "1"), seen  # the fake node's two GPUs
    assert seen["NVIDIA_VISIBLE_DEVICES"] is None, seen
    wait_for(lambda: ray_service.store.get(jid).final, 30, "the job")  # type: ignore[union-attr]
