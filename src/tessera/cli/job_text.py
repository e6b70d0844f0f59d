"""``tessera job ID`` in words: the API's job record made readable.

The API answers with raw values (epoch seconds, ``None`` for "not yet", a list of flavor
names); scripts want those and get them with ``--json``. A person wants local times,
durations such as ``1h 02m``, and no ``None``: a field that does not apply is left out, and a
waiting job says it is not placed. The functions here are pure (``now_s`` is a parameter), so
tests can pin every line. Every value is printed terminal-safe (:func:`tessera.cli.terminal.safe`):
a job's name, command, reason and events are a tenant's text.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Any

from tessera.cli.terminal import safe

LABEL_WIDTH = 10


def local_time(ts_s: float) -> str:
    """Epoch seconds → local ISO-8601 with the UTC offset, e.g. ``2026-12-01T14:32:09+01:00``."""
    return datetime.fromtimestamp(ts_s).astimezone().isoformat(timespec="seconds")


def human_span(seconds: float) -> str:
    """A duration for people, two units at most: ``42s``, ``5m 07s``, ``1h 02m``, ``3d 04h``."""
    s = max(round(seconds), 0)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def flavors_text(flavors: list[str]) -> str:
    """The flavors a job accepts: ``any``, ``T4``, or ``A100-80GB, V100 (in this order)``."""
    if not flavors:
        return "any"
    if len(flavors) == 1:
        return flavors[0]
    return ", ".join(flavors) + " (in this order of preference)"


def _times(job: dict[str, Any], now_s: float) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    submitted, started, finished = job["submitted_s"], job["started_s"], job["finished_s"]
    if submitted is not None:
        rows.append(("submitted", local_time(submitted)))
    if started is not None:
        waited = f" (waited {human_span(started - submitted)})" if submitted is not None else ""
        rows.append(("started", local_time(started) + waited))
    elif finished is None and submitted is not None:
        rows.append(("waiting", human_span(now_s - submitted)))
    if finished is not None:
        ran = f" (ran {human_span(finished - started)})" if started is not None else ""
        rows.append(("finished", local_time(finished) + ran))
    elif started is not None:
        rows.append(("running", human_span(now_s - started) + " since its first start"))
    return rows


def _logs_kept(job: dict[str, Any], now_s: float) -> str:
    """When the job's logs are (or were) removed: ``kept until …``, ``removed …``, or, while
    it runs, how long they are kept after each run."""
    keep_s = job.get("log_retention_s")
    if keep_s is None or not job.get("runs"):
        return ""  # a job that never ran has no logs
    removed_s = job.get("logs_removed_s")
    if removed_s is None:
        return f"kept {human_span(keep_s)} after each run ends"
    if removed_s <= now_s:
        return f"removed {local_time(removed_s)} ({human_span(keep_s)} after the job finished)"
    return (f"kept until {local_time(removed_s)} ({human_span(keep_s)} after the job finished; "
            "earlier runs' sooner)")


def where_or_why(job: dict[str, Any]) -> str | None:
    """The ``placement / reason`` cell of ``tessera jobs``: the GPUs a job holds; for a
    finished job where its last run ran (``ran on …``); else why it waits."""
    last = job.get("last_placement")
    if job.get("placement"):
        return str(job["placement"])
    if last and (job.get("final") or not job.get("reason")):
        return f"ran on {last['text']}"
    return str(job["reason"]) if job.get("reason") else None


def speeds_text(speeds: list[dict[str, Any]]) -> str:
    """``T4 measured 10.1 steps/s (predicted 1); V100-16GB predicted 1 steps/s``."""
    out = []
    for s in speeds:
        pred = f"{s['predicted_steps_per_s']:.3g}"
        m = s.get("measured_steps_per_s")
        out.append(f"{s['flavor']} measured {m:.3g} steps/s (predicted {pred})" if m is not None
                   else f"{s['flavor']} predicted {pred} steps/s (no reports)")
    return "; ".join(out)


def job_lines(job: dict[str, Any], now_s: float) -> list[str]:
    """The lines ``tessera job`` prints for one job of the API (with its ``events``)."""
    rows: list[tuple[str, str]] = [
        ("job", job["job_id"]), ("name", job["name"]), ("queue", job["queue"]),
        ("state", job["state"]),
        ("request", f"{job['gpus']} GPU(s) of {flavors_text(job['flavors'])}"),
    ]
    elastic = job.get("elastic")
    if elastic:
        rows.append(("elastic", f"{elastic['min_gpus']}-{elastic['max_gpus']} GPUs, global batch "
                                f"{elastic['initial_batch']}-{elastic['max_batch']} "
                                f"(efficiency of {elastic['efficiency_model']})"))
    elif job.get("global_batch") is not None:
        rows.append(("batch", f"global batch {job['global_batch']}"))
    last = job.get("last_placement")
    if job.get("placement"):
        rows.append(("placement", job["placement"]))
    elif last:  # where it ran is kept after the run ended
        rows.append(("ran on", f"{last['text']} (run {last['run']}, ended)"))
    elif not job.get("final"):
        rows.append(("placement", "not placed"))
    if job.get("reason"):
        rows.append(("reason", job["reason"]))
    if job.get("command"):
        # shlex.join quotes each word as a shell would need it, so the line can be pasted
        # back (``sh -c 'printf "a b"'``); safe() below still strips terminal controls.
        rows.append(("command", shlex.join(str(word) for word in job["command"])))
    # ``attempts`` counts failed runs (what retries use up), not runs: say so.
    rows.append(("runs", f"{job['runs']}; failed {job['attempts']} (retries allowed: "
                         f"{job['max_retries']})"))
    if elastic and job.get("events") is not None:
        resizes = sum(1 for e in job["events"] if e["kind"] == "resized")
        rows.append(("resizes", str(resizes)))
    if job.get("exit_code") is not None:
        rows.append(("exit code", str(job["exit_code"])))
    if job.get("speeds"):
        rows.append(("speeds", speeds_text(job["speeds"])))
    if job.get("energy"):  # NVML's measure of the runs that held their GPUs alone
        runs = job["energy"]["runs"]
        rows.append(("energy", f"{job['energy']['total_j'] / 1000:.3g} kJ over {len(runs)} "
                               "measured run(s): " + ", ".join(
                                   f"run {r['run']} {r['energy_j'] / 1000:.3g} kJ" for r in runs)))
    rows += _times(job, now_s)
    logs = _logs_kept(job, now_s)
    if logs:
        rows.append(("logs", logs))
    lines = [f"{label:>{LABEL_WIDTH}}: {safe(value)}" for label, value in rows]
    events = job.get("events") or []
    if events:
        lines.append("events:")
    for e in events:
        what = (f"{e['from']} → {e['to']}" if e["from"] else f"→ {e['to']}") if e["to"] \
            else e["kind"]
        lines.append(safe(f"  {local_time(e['ts_s'])}  {what}" + (f"  {e['detail']}"
                                                                  if e["detail"] else "")))
    return lines
