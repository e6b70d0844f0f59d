"""What the Ray executor keeps in Ray's internal KV, so a restarted service can read it.

Two kinds of record, in the ``tessera`` KV namespace, both JSON:

* ``run:<job>:<run>`` -- written by ``launch``: ``{"world": <ranks>}``, and once the ranks'
  nodes are known (before any rank starts) also ``"nodes": [<node id of each rank>]``;
* ``exit:<job>:<run>:<rank>`` -- written by the rank's host when its command ends:
  ``{"rc": <status>, "stopped": <asked to stop>, "tail": <last bytes of the log>, "size": <log
  length>}``.

A run whose every rank has an exit record ended as those records say, even if its host is gone
(a node restarted) or the service was down when it ended; its ranks' output stays readable
through the tails. The records live in the Ray cluster (the GCS), not the service, until the
service has recorded the run's end in its own store: then ``release`` copies the exit records
into the service's runs directory (:func:`save_exit`, so ``tessera logs`` still shows a finished
rank's tail) and deletes them from the KV (:func:`prune`), so the KV does not grow with every
run ever started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ray.experimental import internal_kv

from tessera.live.executors.base import LogChunk, RunStatus, read_log_file
from tessera.live.executors.contain import private_file
from tessera.live.executors.logs import private_run_dir

NAMESPACE = "tessera"
EXIT_TAIL_BYTES = 16384


def run_key(job_id: str, run: int) -> str:
    return f"run:{job_id}:{run}"


def exit_key(job_id: str, run: int, rank: int) -> str:
    return f"exit:{job_id}:{run}:{rank}"


def put(key: str, value: dict[str, Any]) -> None:
    internal_kv._internal_kv_put(key, json.dumps(value), namespace=NAMESPACE)


def get(key: str) -> dict[str, Any] | None:
    raw = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
    return None if raw is None else dict(json.loads(raw))


def delete(key: str) -> None:
    internal_kv._internal_kv_del(key, namespace=NAMESPACE)


def keys(prefix: str) -> list[str]:
    """Every key of the namespace starting with ``prefix``."""
    return [k.decode() for k in internal_kv._internal_kv_list(prefix, namespace=NAMESPACE)]


def prune(job_id: str, run: int, world: int) -> None:
    """Delete the run's records from the KV (only once the service's store holds its end)."""
    for rank in range(world):
        delete(exit_key(job_id, run, rank))
    delete(run_key(job_id, run))


def saved_path(runs_dir: Path, job_id: str, run: int, rank: int) -> Path:
    """Where the service keeps a rank's exit record once it is pruned from the KV."""
    return runs_dir / job_id / str(run) / f"rank-{rank}.exit.json"


def save_exit(runs_dir: Path, job_id: str, run: int, rank: int, rec: dict[str, Any]) -> None:
    """Keep a rank's exit record in the service's runs directory (atomically; the directories
    ``0700``, the file ``0600``: it holds the tail of the rank's log)."""
    path = private_run_dir(runs_dir, job_id, run) / saved_path(runs_dir, job_id, run, rank).name
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(private_file(str(tmp)), "w") as f:
        f.write(json.dumps(rec))
    os.replace(tmp, path)


def saved_exit(runs_dir: Path, job_id: str, run: int, rank: int) -> dict[str, Any] | None:
    try:
        return dict(json.loads(saved_path(runs_dir, job_id, run, rank).read_text()))
    except (FileNotFoundError, ValueError):
        return None


def exit_record(rc: int, stopped: bool, log_path: str | None, detail: str = "",
                timed_out: bool = False) -> dict[str, Any]:
    """A rank's exit record: its status, why it ended as its guardian saw it (``exec failed:
    ...``, ``exceeded max_runtime_s=...``) and the last :data:`EXIT_TAIL_BYTES` of its log."""
    size = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    chunk = read_log_file(log_path, max(size - EXIT_TAIL_BYTES, 0), EXIT_TAIL_BYTES)
    return {"rc": rc, "stopped": stopped, "tail": chunk.text if chunk else "", "size": size,
            "detail": detail, "timed_out": timed_out}


def status_from_records(job_id: str, run: int) -> RunStatus | None:
    """How the run ended, when every rank has an exit record; ``None`` otherwise."""
    meta = get(run_key(job_id, run))
    if meta is None:
        return None
    recs = [get(exit_key(job_id, run, r)) for r in range(int(meta["world"]))]
    if any(r is None for r in recs):
        return None
    done = [r for r in recs if r is not None]
    bad = [(i, int(r["rc"])) for i, r in enumerate(done) if r["rc"]]
    stopped = any(bool(r["stopped"]) for r in done)
    timed_out = any(bool(r.get("timed_out")) for r in done)
    detail = f"rank {bad[0][0]} exited with {bad[0][1]}" if bad else ""
    why = next((str(r["detail"]) for r in done if r.get("detail")), "")
    if why:
        detail = f"{detail}: {why}" if detail else why
    return RunStatus("exited", bad[0][1] if bad else 0, stopped, detail, timed_out)


def log_from_record(rec: dict[str, Any] | None, offset: int,
                    limit_bytes: int) -> LogChunk | None:
    """The rank's output from ``offset``, as far as its exit record's tail still holds it."""
    if rec is None:
        return None
    data = str(rec["tail"]).encode()
    size = int(rec["size"])
    start = size - len(data)
    piece = data[max(offset - start, 0):][:limit_bytes]
    return LogChunk(piece.decode(errors="replace"), max(offset, start) + len(piece), size,
                    max(start - offset, 0))
