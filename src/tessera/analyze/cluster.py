"""Cluster-side statistics: GPU inventory, occupancy over time, and FGD's GPU-sharing mix.

* **Inventory** (PAI 2020, FGD, spot 2026): machines and GPUs per GPU type, and how many GPUs a
  machine of each type holds. This is what a simulated heterogeneous cluster should look like.
* **Occupancy** (Philly node sequence): nodes with at least one running job vs nodes available,
  per minute. Its mean ratio (~0.74) is a ceiling check for any simulator replaying Philly.
* **Sharing mix** (FGD only): tasks asking for no GPU, a *fraction* of one GPU (``gpu_milli``
  < 1000), or whole GPUs; the share of GPU *requests* (a 0.5-GPU task counts 0.5); how many GPU
  tasks constrain the GPU type; QoS classes. FGD's Table 1 is exactly this breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tessera.analyze.trace import Trace

TASK_CLASSES: tuple[str, ...] = ("0", "fractional", "1", "2", "4", "8")
"""FGD Table 1 columns: GPU request per task."""


@dataclass(frozen=True, slots=True)
class InventoryRow:
    """Machines of one GPU type (``CPU`` for machines without GPUs)."""

    gpu_type: str
    nodes: int
    gpus: int
    gpus_per_node: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Inventory:
    """Machines and GPUs by type."""

    nodes: int
    gpu_nodes: int
    gpus: int
    by_type: tuple[InventoryRow, ...]

    def metrics(self) -> dict[str, float]:
        m = {
            "inventory.nodes": float(self.nodes),
            "inventory.gpu_nodes": float(self.gpu_nodes),
            "inventory.gpus": float(self.gpus),
        }
        for r in self.by_type:
            m[f"inventory.nodes.{r.gpu_type}"] = float(r.nodes)
            m[f"inventory.gpus.{r.gpu_type}"] = float(r.gpus)
        return m


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Active vs available nodes over time, with a daily-mean series for plotting."""

    samples: int
    start: str
    end: str
    active_mean: float
    active_p50: float
    active_max: int
    total_p50: float
    total_max: int
    ratio_mean: float
    daily: tuple[tuple[str, float, float], ...]  # (date, mean active, mean total)

    def metrics(self) -> dict[str, float]:
        return {
            "occupancy.active_mean": self.active_mean,
            "occupancy.active_p50": self.active_p50,
            "occupancy.active_max": float(self.active_max),
            "occupancy.total_p50": self.total_p50,
            "occupancy.total_max": float(self.total_max),
            "occupancy.ratio_mean": self.ratio_mean,
        }


@dataclass(frozen=True, slots=True)
class SharingMix:
    """FGD's task mix (Table 1) plus type constraints, QoS and sharing-task GPU shares."""

    tasks_pct: dict[str, float]
    gpu_requests_pct: dict[str, float]
    gpu_tasks: int
    constrained_gpu_tasks_pct: float
    sharing_gpu_milli_p50: float | None
    qos_pct: dict[str, float]
    constraint_types: dict[str, int]

    def metrics(self) -> dict[str, float]:
        m = {f"fgd.tasks_pct.{k}": v for k, v in self.tasks_pct.items()}
        m |= {f"fgd.gpu_requests_pct.{k}": v for k, v in self.gpu_requests_pct.items()}
        m["fgd.constrained_gpu_tasks_pct"] = self.constrained_gpu_tasks_pct
        if self.sharing_gpu_milli_p50 is not None:
            m["fgd.sharing_gpu_milli_p50"] = self.sharing_gpu_milli_p50
        m |= {f"qos.pct.{k}": v for k, v in self.qos_pct.items()}
        return m


def inventory(trace: Trace) -> Inventory | None:
    """GPU inventory by type; None when the trace has no node table."""
    nodes = trace.nodes
    if nodes is None:
        return None
    typed = nodes.with_columns(
        gpu_type=pl.when(pl.col("num_gpus") > 0).then(pl.col("gpu_type")).otherwise(pl.lit("CPU"))
    ).with_columns(pl.col("gpu_type").fill_null("unknown"))
    g = (
        typed.group_by("gpu_type")
        .agg(
            nodes=pl.len(),
            gpus=pl.col("num_gpus").sum(),
            per_node=pl.col("num_gpus").unique().sort(),
        )
        .sort(["gpus", "gpu_type"], descending=[True, False])
    )
    rows = tuple(
        InventoryRow(str(r["gpu_type"]), int(r["nodes"]), int(r["gpus"]), tuple(r["per_node"]))
        for r in g.iter_rows(named=True)
    )
    return Inventory(
        nodes=nodes.height,
        gpu_nodes=int((nodes["num_gpus"] > 0).sum()),
        gpus=int(nodes["num_gpus"].sum()),
        by_type=rows,
    )


def occupancy(trace: Trace) -> Occupancy | None:
    """Summary and daily means of the per-minute node occupancy; None when absent."""
    occ = trace.occupancy
    if occ is None or occ.height == 0:
        return None
    s = occ.select(
        n=pl.len(),
        start=pl.col("time").min(),
        end=pl.col("time").max(),
        a_mean=pl.col("active_nodes").mean(),
        a_p50=pl.col("active_nodes").quantile(0.5, "linear"),
        a_max=pl.col("active_nodes").max(),
        t_p50=pl.col("total_nodes").quantile(0.5, "linear"),
        t_max=pl.col("total_nodes").max(),
        ratio=(pl.col("active_nodes") / pl.col("total_nodes")).mean(),
    ).row(0, named=True)
    daily = (
        occ.group_by(pl.col("time").dt.date().alias("date"))
        .agg(pl.col("active_nodes").mean(), pl.col("total_nodes").mean())
        .sort("date")
    )
    return Occupancy(
        samples=int(s["n"]),
        start=str(s["start"]),
        end=str(s["end"]),
        active_mean=float(s["a_mean"]),
        active_p50=float(s["a_p50"]),
        active_max=int(s["a_max"]),
        total_p50=float(s["t_p50"]),
        total_max=int(s["t_max"]),
        ratio_mean=float(s["ratio"]),
        daily=tuple((str(d), float(a), float(t)) for d, a, t in daily.iter_rows()),
    )


def sharing_mix(trace: Trace) -> SharingMix | None:
    """FGD Table 1 and related shares; None unless the trace has ``gpu_milli``."""
    jobs = trace.jobs
    if jobs is None or "gpu_milli" not in jobs.columns:
        return None
    cls = (
        pl.when(pl.col("gpu_request") == 0)
        .then(pl.lit("0"))
        .when(pl.col("gpu_request") < 1)
        .then(pl.lit("fractional"))
        .otherwise(pl.col("num_gpus").cast(pl.Utf8))
    )
    g = jobs.group_by(cls.alias("c")).agg(n=pl.len(), req=pl.col("gpu_request").sum())
    n_total, req_total = float(g["n"].sum()), float(g["req"].sum())
    by = {str(c): (int(n), float(r)) for c, n, r in g.iter_rows()}
    classes = [*TASK_CLASSES, *sorted(set(by) - set(TASK_CLASSES), key=float)]
    gpu = jobs.filter(pl.col("gpu_request") > 0)
    constrained = (
        gpu["gpu_type"].is_not_null() & (gpu["gpu_type"] != "")
        if "gpu_type" in gpu.columns
        else pl.Series([False] * gpu.height)
    )
    sharing = jobs.filter((pl.col("gpu_request") > 0) & (pl.col("gpu_request") < 1))
    types: dict[str, int] = {}
    if "gpu_type" in gpu.columns:
        exploded = gpu.select(pl.col("gpu_type").str.split("|")).explode("gpu_type").drop_nulls()
        types = dict(sorted(exploded.group_by("gpu_type").len().iter_rows(), key=lambda r: -r[1]))
    qos: dict[str, float] = {}
    if "qos" in jobs.columns:
        q = jobs.group_by(pl.col("qos").fill_null("unknown")).len().sort("len", descending=True)
        qos = {str(k): 100 * v / jobs.height for k, v in q.iter_rows()}
    return SharingMix(
        tasks_pct={c: 100 * by.get(c, (0, 0.0))[0] / n_total for c in classes},
        gpu_requests_pct={c: 100 * by.get(c, (0, 0.0))[1] / req_total for c in classes},
        gpu_tasks=gpu.height,
        constrained_gpu_tasks_pct=100 * int(constrained.sum()) / max(gpu.height, 1),
        sharing_gpu_milli_p50=float(sharing.select(pl.col("gpu_milli").median()).item())
        if sharing.height
        else None,
        qos_pct=qos,
        constraint_types=types,
    )
