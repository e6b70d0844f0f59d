"""What the Ray executor keeps in Ray's internal KV, so a restarted service can read it.

Two kinds of record, in the ``tessera`` KV namespace, both JSON:

* ``run:<job>:<run>`` -- written by ``launch``: ``{"world": <ranks>}``;
* ``exit:<job>:<run>:<rank>`` -- written by the rank's actor when its command ends:
  ``{"rc": <status>, "stopped": <asked to stop>, "tail": <last bytes of the log>, "size": <log
  length>}``.

A run whose every rank has an exit record ended as those records say, even if its actors are
gone (a node restarted, the service released them); its ranks' output stays readable through
the tails. The records live as long as the Ray cluster (the GCS), not the service.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ray.experimental import internal_kv

from tessera.live.executors.base import LogChunk, RunStatus, read_log_file

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


def log_from_record(job_id: str, run: int, rank: int, offset: int,
                    limit_bytes: int) -> LogChunk | None:
    """The rank's output from ``offset``, as far as its exit record's tail still holds it."""
    rec = get(exit_key(job_id, run, rank))
    if rec is None:
        return None
    data = str(rec["tail"]).encode()
    size = int(rec["size"])
    start = size - len(data)
    piece = data[max(offset - start, 0):][:limit_bytes]
    return LogChunk(piece.decode(errors="replace"), max(offset, start) + len(piece), size,
                    max(start - offset, 0))
