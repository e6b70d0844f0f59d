"""Per-node counts read in C: one cached :func:`operator.itemgetter` per tuple of node ids.

A placement search reads the free GPUs of every node of a flavor (or of a domain) at each
gang it places; ``tuple(free[n] for n in nodes)`` does that in Python, node by node, while an
``itemgetter(*nodes)`` does it in C. Building the getter costs as much as one read, so it is
kept per node tuple -- a layout's or a domain map's, which live as long as their cluster --
keyed by the tuple's identity (the table is emptied past 4,096 entries).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

_GETTERS: dict[int, tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Any]]] = {}


def counts_of(free: Mapping[str, int], nodes: tuple[str, ...]) -> tuple[int, ...]:
    """``tuple(free[n] for n in nodes)``, read in C (``nodes`` must be a long-lived tuple)."""
    if len(nodes) < 2:
        return (free[nodes[0]],) if nodes else ()
    hit = _GETTERS.get(id(nodes))
    if hit is None or hit[0] is not nodes:
        if len(_GETTERS) >= 4096:
            _GETTERS.clear()
        hit = (nodes, operator.itemgetter(*nodes))
        _GETTERS[id(nodes)] = hit
    out: tuple[int, ...] = hit[1](free)
    return out
