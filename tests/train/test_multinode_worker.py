"""The worker on a gang spread over nodes: devices counted per node, the service's batches.

A rank of a two-node gang sees only its own node's GPUs, so it must count ranks per node
(``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``), not against ``WORLD_SIZE``; and when the service sets
``TESSERA_LOCAL_BATCH`` on each rank the run starts from exactly those batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.live.executors.base import free_port

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"


def test_device_index_counts_ranks_per_node() -> None:
    from tessera.train.worker import local_device_index

    assert local_device_index(4, 3, 4) == 3          # rank 3 of 4 on this node
    assert local_device_index(1, 2, 4) == 0          # isolated: CUDA_VISIBLE_DEVICES=<one id>
    assert local_device_index(2, 1, 4) is None       # 4 ranks here, 2 GPUs: cannot
    assert local_device_index(0, 0, 1) is None


def test_a_node_with_its_own_share_of_gpus_does_not_emulate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.train.config import TrainConfig
    from tessera.train.worker import use_emulation

    cfg = TrainConfig("cnn", "V100:4,T4:4", global_batch=64)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("RANK", "6")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert not use_emulation(cfg)  # 4 GPUs on this node for its 4 ranks: real devices
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert use_emulation(cfg)


def test_two_node_gang_trains_with_the_launched_batches(tmp_path: Path) -> None:
    from tessera.train.config import TrainConfig

    cfg = TrainConfig("cnn", "V100:1,T4:1", global_batch=24, steps=2,
                      checkpoint_dir=str(tmp_path / "ckpt"))
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    port = str(free_port())
    procs = []
    for rank, batch in ((0, 17), (1, 7)):  # one rank per "node", as the service launches
        env = {**os.environ, "PYTHONPATH": str(SRC), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "TESSERA_LOCAL_BATCH": str(batch)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tessera.train.worker", "--config",
             str(tmp_path / "cfg.json"), "--run-dir", str(tmp_path / "run")], env=env))
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["log"][0]["split"] == [17, 7]
