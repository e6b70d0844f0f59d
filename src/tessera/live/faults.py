"""Crash points for durability tests (off unless ``TESSERA_LIVE_CRASH`` is set).

``TESSERA_LIVE_CRASH=after-launch:3`` makes the service exit hard (``os._exit``, like SIGKILL:
no cleanup, no flush beyond what SQLite already committed) the 3rd time it passes the named
point. The points sit exactly between "written to the store" and "acted on", where a crash is
most likely to lose or duplicate a job:

* ``after-journal`` -- a decision is committed, nothing launched yet;
* ``after-launch`` -- a run was started, its start not yet recorded;
* ``before-exit-recorded`` -- a run's exit was seen, not yet recorded;
* ``after-submit`` -- a submission is committed, its client not yet answered (what an
  ``Idempotency-Key`` retry is for).
"""

from __future__ import annotations

import os

_spec = os.environ.get("TESSERA_LIVE_CRASH", "")
_point, _, _count = _spec.partition(":")
_left = int(_count or 1) if _point else 0


def crash_point(name: str) -> None:
    """Exit hard here if the environment asked for a crash at ``name``."""
    global _left
    if _point == name and _left > 0:
        _left -= 1
        if _left == 0:
            os._exit(137)
