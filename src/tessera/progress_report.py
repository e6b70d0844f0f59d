"""``tessera.progress(...)``: a job tells the live service how fast it goes.

A job launched by ``tessera serve`` finds two variables in its environment:

* ``TESSERA_PROGRESS_URL`` -- the service's report endpoint (``POST /api/progress``);
* ``TESSERA_PROGRESS_TOKEN`` -- a secret that names this run, and this run only.

:func:`progress` posts ``{"steps", "samples", "gns", "local_batch"}`` (those given)
with the token as its bearer. It never raises into the job and never blocks it for long
(a 2 s timeout): a report that cannot be sent is dropped and ``False`` returned, with one
line on stderr the first time. Outside the service (no variables) it does nothing and returns
``False``, so a script may call it unconditionally. It sends at most one report per
``min_interval_s`` (1 s, the service's own rate limit); calls in between are dropped locally,
the last values win at the next send.

``steps`` is the job's cumulative optimizer steps (the unit of its ``total_steps``),
``samples`` its cumulative samples, ``gns`` its gradient noise scale, when it knows it,
``local_batch`` the samples per GPU of each step (``tessera.train`` sends all but ``gns``).

This module imports nothing beyond the standard library (no torch, no live extra).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

URL_VAR = "TESSERA_PROGRESS_URL"
TOKEN_VAR = "TESSERA_PROGRESS_TOKEN"
MIN_INTERVAL_S = 1.0

_last_sent_s = float("-inf")
_warned = False


def progress(steps: float | None = None, samples: float | None = None,
             gns: float | None = None, local_batch: float | None = None, *,
             min_interval_s: float = MIN_INTERVAL_S,
             timeout_s: float = 2.0) -> bool:
    """Report cumulative progress to the service; ``True`` when the service accepted it.

    Args:
        steps: optimizer steps done so far (cumulative, never decreasing).
        samples: samples processed so far (cumulative).
        gns: the gradient noise scale, if the job estimates it.
        local_batch: samples per GPU in each optimizer step now (Pollux's agent reports it):
            with the run's gang size the service learns the job's step times and fits its
            throughput model from them.
        min_interval_s: drop calls closer together than this (the service counts one report
            a second per run and answers 429 to the rest).
        timeout_s: how long to wait for the service.
    """
    global _last_sent_s, _warned
    url, token = os.environ.get(URL_VAR), os.environ.get(TOKEN_VAR)
    if not url or not token:
        return False
    now = time.monotonic()
    if now - _last_sent_s < min_interval_s:
        return False
    _last_sent_s = now
    pairs = (("steps", steps), ("samples", samples), ("gns", gns), ("local_batch", local_batch))
    body: dict[str, object] = {k: v for k, v in pairs if v is not None}
    # NaN and infinities as strings (JSON has none): the service says what is wrong
    body = {k: v if not isinstance(v, float) or math.isfinite(v) else str(v)
            for k, v in body.items()}
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError) as e:
        if not _warned:
            _warned = True
            detail = _detail(e)
            print(f"tessera.progress: report not accepted: {detail}", file=sys.stderr)
        return False


def _detail(e: Exception) -> str:
    """The service's one-line reason (``{"detail": ...}``), else the error itself."""
    if isinstance(e, urllib.error.HTTPError):
        try:
            return f"{e.code}: {json.loads(e.read())['detail']}"
        except (ValueError, KeyError, TypeError, OSError):
            return f"{e.code}"
    return str(e)
