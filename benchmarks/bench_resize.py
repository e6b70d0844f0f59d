"""What one resize of an elastic ``tessera.train`` job costs in the live service.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_resize.py [--resizes N]``

One elastic job (``mlp``, CPU emulation, gloo) runs under ``tessera serve``'s local executor;
the benchmark hands the service decisions that alternate it between 1 GPU at global batch 128
and 2 GPUs at 256, each once the job has made progress at its current size. Per resize:

* **drain** -- the stop request to the old run's exit (SIGTERM → the ranks agree to stop after
  the current step → rank 0 checkpoints → exit 143);
* **relaunch** -- that exit to the new run's ``running`` event (the service plans the local
  batches and the executor starts the ranks);
* **to first step** -- the new run's ``running`` event to the end of its first step (Python and
  torch imports, the gloo process group, the checkpoint load, one step);
* **lost** -- wall time between the stop request and the first step at the new size, minus
  one step: the time the job made no progress.

Every step in the emulation lasts ~50 ms, so the cost is dominated by process start. The
machine is shared and noisy: read the order of magnitude.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tessera.live.executors.local import LocalExecutor
from tessera.live.journal import journal
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import CONFIG_NAME, Principal, hash_token, load_tenancy
from tessera.model.cluster import load_cluster
from tessera.model.jobs import JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.snapshot import Placement
from tessera.train.checkpoint import load_checkpoint
from tessera.train.config import TrainConfig
from tessera.train.emulation import EmulationConfig

SRC = Path(__file__).resolve().parents[1] / "src"
ADMIN = Principal("admin", None)
STEP_S = 0.05


def _service(state: Path) -> LiveService:
    state.mkdir(parents=True)
    (state / CONFIG_NAME).write_text(
        "queues:\n- {name: bench, nominal_gpus: 64}\n"
        f"tokens:\n- {{name: admin, sha256: {hash_token('t')}, queue: null}}\n")
    work = default_work_dir(state)
    svc = LiveService(Store(state / "state.db"), LocalExecutor(work / "runs", grace_s=30.0),
                      load_cluster("v100:4", 4), load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=1.0, poll_s=0.05, grace_s=30.0))
    svc.start()
    return svc


def _wait(pred, timeout_s: float = 300.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("the job did not get there in time")
        time.sleep(0.02)


def _log(ckpt: Path) -> list[dict[str, Any]]:
    state = load_checkpoint(ckpt)
    return [] if state is None else state.log


def _resizes(ckpt: Path) -> list[dict[str, Any]]:
    """The first step record of every resized run, in order."""
    return [r for r in _log(ckpt) if r.get("resize")]


def _steps_since_resize(ckpt: Path) -> int:
    log = _log(ckpt)
    starts = [i for i, r in enumerate(log) if r.get("resize")]
    return len(log) - (starts[-1] if starts else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resizes", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tessera-bench-resize-"))
    steps = 100_000  # never reached: the benchmark cancels the job
    cfg = TrainConfig("mlp", "V100:1", global_batch=128, steps=steps, split="equal",
                      checkpoint_every=1,
                      emulation=EmulationConfig(overhead_s=STEP_S, per_sample_s=1e-6))
    (tmp / "cfg.json").write_text(cfg.to_json())
    ckpt, run_dir = tmp / "ckpt", tmp / "run"
    svc = _service(tmp / "state")
    try:
        jid = svc.submit(parse_request(
            f"name: bench\nqueue: bench\nmodel: cifar10\ncheckpoint_dir: {ckpt}\n"
            f"gpus: {{min: 1, max: 2}}\nglobal_batch: {{initial: 128, max: 512}}\n"
            f"env: {{PYTHONPATH: {SRC}}}\n"
            f"command: [{sys.executable}, -m, tessera.train.worker, --config, "
            f"{tmp / 'cfg.json'}, --run-dir, {run_dir}]\n"), ADMIN).job_id
        rows = []
        for i in range(args.resizes):
            _wait(lambda: svc.store.get(jid).state is JobState.RUNNING)  # type: ignore[union-attr]
            run = svc.store.get(jid).runs  # type: ignore[union-attr]
            _wait(lambda n=i: len(_resizes(ckpt)) == n and _steps_since_resize(ckpt) >= 2)
            held = svc.store.allocations(("running",), job_id=jid)[0].placement
            gpus, batch = (2, 256) if held.num_gpus == 1 else (1, 128)
            asked_s = time.time()
            moved = Placement.of(held.flavor, ((held.gpus_by_node[0][0], gpus),),
                                 global_batch_samples=batch)
            journal(svc, Decision({jid: moved}, (jid,), (), {}), asked_s)
            svc.poke()
            _wait(lambda n=i + 1: len(_resizes(ckpt)) == n)
            first = _resizes(ckpt)[-1]
            events = svc.store.events(jid)
            exited = next(e.ts_s for e in events if e.to_state == "preempted"
                          and e.detail.startswith(f"run {run}:"))
            launched = next(e.ts_s for e in events if e.to_state == "running"
                            and e.detail == f"run {run + 1} launched")
            rows.append({"to": f"{gpus} GPU(s) @ {batch}", "drain_s": exited - asked_s,
                         "relaunch_s": launched - exited,
                         "first_step_s": first["end_s"] - launched,
                         "lost_s": first["end_s"] - asked_s - first["wall_s"]})
        svc.cancel(jid, ADMIN)
    finally:
        svc.stop()
    print(f"{'resize to':<16} {'drain':>8} {'relaunch':>9} {'1st step':>9} {'lost':>8}")
    for r in rows:
        print(f"{r['to']:<16} {r['drain_s']:8.2f} {r['relaunch_s']:9.2f} "
              f"{r['first_step_s']:9.2f} {r['lost_s']:8.2f}")
    for key in ("drain_s", "relaunch_s", "first_step_s", "lost_s"):
        print(f"median {key}: {statistics.median(r[key] for r in rows):.2f} s")


if __name__ == "__main__":
    main()
