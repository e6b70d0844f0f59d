"""Planner entry points that speak in models and flavors rather than cost objects.

These glue the cost model (:class:`tessera.perf.steptime.CostModel`) to the split in
:mod:`tessera.plan.dp`:

* :func:`parse_devices` reads a command-line device list ``A100:2,V100:4,T4:2``;
* :func:`nodes_for` lays a flavor → count mapping out on servers (one flavor per server,
  ``gpus_per_node`` GPUs each, the catalog's default links);
* :func:`plan_data_parallel` plans one job;
* :func:`predict_mixed_throughput` is the one-number answer (samples/s) for a job given GPUs of
  several flavors; the scheduler's mixed gangs (:mod:`tessera.sched.mixed`) plan with the same
  :func:`~tessera.plan.dp.split_batch`, on the job's own servers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tessera.errors import SpecError
from tessera.model.cluster import Node, make_nodes
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.steptime import CostModel
from tessera.plan.dp import (
    DEFAULT_MAX_MICRO_STEPS,
    DpDevice,
    DpPlan,
    split_batch,
)

_DEFAULT_COST_MODEL: CostModel | None = None


def default_cost_model() -> CostModel:
    """A process-wide cost model over the bundled profiles (fits are cached inside)."""
    global _DEFAULT_COST_MODEL
    if _DEFAULT_COST_MODEL is None:
        _DEFAULT_COST_MODEL = CostModel()
    return _DEFAULT_COST_MODEL


def parse_devices(text: str) -> dict[GpuFlavor, int]:
    """Parse ``flavor:count[,flavor:count…]``; repeated flavors add up.

    Raises:
        SpecError: an entry is not ``flavor:count`` or the count is not a positive integer.
        UnknownFlavorError: a flavor name is not in the catalog.

    >>> {f.short: n for f, n in parse_devices("a100:2, T4:1").items()}
    {'A100-80GB': 2, 'T4': 1}
    """
    out: dict[GpuFlavor, int] = {}
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise SpecError(f"device list {text!r}: expected flavor:count[,flavor:count...]")
    for part in parts:
        name, sep, cnt = part.partition(":")
        if not sep or not name.strip():
            raise SpecError(f"device list {text!r}: expected flavor:count, got {part!r}")
        try:
            n = int(cnt)
        except ValueError:
            raise SpecError(f"device list {text!r}: count {cnt!r} is not an integer") from None
        if n <= 0:
            raise SpecError(f"device list {text!r}: count for {name.strip()!r} must be positive")
        f = resolve_flavor(name)
        out[f] = out.get(f, 0) + n
    return out


def nodes_for(devices_by_flavor: Mapping[GpuFlavor, int], gpus_per_node: int = 8
              ) -> tuple[Node, ...]:
    """Servers holding the given GPUs: per flavor, full ``gpus_per_node`` boxes then the rest."""
    if gpus_per_node < 1:
        raise SpecError("gpus_per_node must be at least 1")
    nodes: list[Node] = []
    for f, n in devices_by_flavor.items():
        full, rest = divmod(n, gpus_per_node)
        nodes += make_nodes(f, full, gpus_per_node)
        if rest:
            nodes += make_nodes(f, 1, rest, start=full)
    return tuple(nodes)


def dp_devices(model: str, nodes: Sequence[Node], cost_model: CostModel | None = None
               ) -> list[DpDevice]:
    """One :class:`DpDevice` per GPU on ``nodes``, costed for ``model``."""
    cm = cost_model or default_cost_model()
    out: list[DpDevice] = []
    for node in nodes:
        cost = cm.device_cost(model, node.flavor)
        out += [DpDevice(cost, node)] * node.gpus
    return out


def plan_data_parallel(
    model: str, devices: Mapping[GpuFlavor, int] | Sequence[Node], global_bsz: int, *,
    cost_model: CostModel | None = None, gpus_per_node: int = 8,
    max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS,
) -> DpPlan:
    """Plan data-parallel training of ``model`` with ``global_bsz`` samples per step.

    Args:
        model: a model the cost model knows (``imagenet``, ``bert`` …).
        devices: flavor → GPU count (laid out with :func:`nodes_for`), or explicit nodes.
        global_bsz: samples per step.
        cost_model: defaults to the bundled Sia profiles.
        gpus_per_node: server size when ``devices`` is a mapping.
        max_micro_steps: gradient-accumulation limit per device.
    """
    cm = cost_model or default_cost_model()
    nodes = nodes_for(devices, gpus_per_node) if isinstance(devices, Mapping) else tuple(devices)
    return split_batch(dp_devices(model, nodes, cm), global_bsz, cm.gradient_bytes(model),
                       max_micro_steps=max_micro_steps)


def predict_mixed_throughput(
    model: str, devices_by_flavor: Mapping[str, int] | Mapping[GpuFlavor, int],
    global_bsz: int | None = None, *, cost_model: CostModel | None = None,
    gpus_per_node: int = 8, max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS,
) -> float:
    """Samples per second of ``model`` trained data-parallel on a mix of flavors.

    The split is the planner's (balanced, capped, devices dropped when they slow the job).

    Args:
        model: a model the cost model knows.
        devices_by_flavor: flavor (name or object) → GPU count.
        global_bsz: samples per step; by default the most the devices hold in one pass
            (every device at its memory cap), which is where a linear step time is fastest.
        cost_model: defaults to the bundled Sia profiles.
        gpus_per_node: server size used to lay the GPUs out.
        max_micro_steps: gradient-accumulation limit per device.
    """
    cm = cost_model or default_cost_model()
    counts: dict[GpuFlavor, int] = {}
    for f, n in devices_by_flavor.items():
        fl = resolve_flavor(f) if isinstance(f, str) else f
        if n < 0:
            raise SpecError(f"negative GPU count for {fl.short}")
        if n:
            counts[fl] = counts.get(fl, 0) + n
    if not counts:
        return 0.0
    if global_bsz is None:
        global_bsz = sum(n * cm.fit(model, f).max_local_bsz for f, n in counts.items())
    plan = plan_data_parallel(model, counts, global_bsz, cost_model=cm,
                              gpus_per_node=gpus_per_node, max_micro_steps=max_micro_steps)
    tput = plan.throughput_samples_per_s
    return tput if math.isfinite(tput) else 0.0
