"""Services, measured inference profiles, and the batching rule that turns an SLO into a budget.

A *service* is a model, a request rate and a latency SLO ("serve resnet50 at 800 req/s with
p99 under 100 ms"). Whether a piece of GPU can carry it is an empirical question: throughput
and latency depend non-linearly on the MIG profile, the batch size and how many MPS processes of
the model share the instance. So Tessera plans from a *profile table*: one measured point per
(model, MIG profile, batch size, MPS processes) with the batch's execution latency and the
instance's total throughput.

The bundled table is ParvaGPU's A100-80GB data (SC'24; MIT, see ``data/parvagpu/NOTICE.txt``):
11 CNN/BERT models, instances of 1/2/3/4/7 compute slices, batches 1..256, 1..5 processes. Its
CSV stores throughput *per process* and latency in *seconds per batch*; we store the total
throughput of the instance (``procs x per-process``) and ``latency_ms``. Batch sizes between the
measured powers of two are interpolated linearly (the serving simulator needs the latency of a
partial batch; the planner may optionally use interpolated batch sizes).

**Batching rule.** With dynamic batching a request may wait for its batch to fill and then for
the batch to run, so a batch must execute within a fraction of the SLO: ``latency_ms <=
latency_fraction x slo_ms``. The default fraction is 1/2 (Nexus); ParvaGPU uses 0.45.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from tessera.errors import NoProfileError, SpecError

KIND_BY_COMPUTE_SLICES: tuple[tuple[int, str], ...] = (
    (1, "1g"), (2, "2g"), (3, "3g"), (4, "4g"), (7, "7g"),
)
PARVAGPU_GPU = "A100-80GB"


@dataclass(frozen=True, slots=True)
class Service:
    """An inference service: ``rate_rps`` requests per second of ``model`` within ``slo_ms``."""

    name: str
    model: str
    rate_rps: float
    slo_ms: float

    def __post_init__(self) -> None:
        if not self.rate_rps > 0:
            raise SpecError(f"service {self.name!r}: rate_rps must be > 0, got {self.rate_rps}")
        if not self.slo_ms > 0:
            raise SpecError(f"service {self.name!r}: slo_ms must be > 0, got {self.slo_ms}")


@dataclass(frozen=True, slots=True)
class BatchingRule:
    """How an SLO becomes a per-batch latency budget, and which configurations are allowed.

    Attributes:
        latency_fraction: a batch must execute within ``latency_fraction * slo_ms``.
        max_procs: most MPS processes of one model inside one MIG instance.
        interpolate_batches: also consider batch sizes between the measured ones.
        max_utilization: plan capacity so that ``rate <= max_utilization * capacity``; the
            headroom absorbs bursts (a segment loaded to 100 % queues without bound).
    """

    latency_fraction: float = 0.5
    max_procs: int = 3
    interpolate_batches: bool = False
    max_utilization: float = 0.9

    def __post_init__(self) -> None:
        if not 0 < self.latency_fraction <= 1:
            raise SpecError(f"latency_fraction must be in (0, 1], got {self.latency_fraction}")
        if not 0 < self.max_utilization <= 1:
            raise SpecError(f"max_utilization must be in (0, 1], got {self.max_utilization}")
        if self.max_procs < 1:
            raise SpecError(f"max_procs must be >= 1, got {self.max_procs}")

    def budget_ms(self, slo_ms: float) -> float:
        return self.latency_fraction * slo_ms

    def required_rps(self, rate_rps: float) -> float:
        """Capacity a service must be given: its rate plus the utilisation headroom."""
        return rate_rps / self.max_utilization


PARVAGPU_RULE = BatchingRule(latency_fraction=0.45, max_procs=3, max_utilization=1.0)
"""ParvaGPU's admission exactly: batch latency below 0.9 x SLO/2, at most three MPS processes,
capacity equal to the rate (no headroom)."""


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    """One configuration of a model on a MIG profile, measured or interpolated."""

    model: str
    kind: str
    batch: int
    procs: int
    latency_ms: float
    throughput_rps: float  # whole instance: all processes together


@dataclass(frozen=True, slots=True)
class Curve:
    """Measured points of one (model, kind, procs) over batch size, runnable points only."""

    model: str
    kind: str
    procs: int
    batches: tuple[int, ...]
    latency_ms: tuple[float, ...]
    throughput_rps: tuple[float, ...]

    def point(self, i: int) -> ProfilePoint:
        return ProfilePoint(
            self.model, self.kind, self.batches[i], self.procs,
            self.latency_ms[i], self.throughput_rps[i],
        )

    def at(self, batch: int) -> ProfilePoint:
        """The point at ``batch``, interpolated linearly between measured neighbours."""
        i = bisect_left(self.batches, batch)
        if i < len(self.batches) and self.batches[i] == batch:
            return self.point(i)
        if i == 0 or i == len(self.batches):
            lo, hi = self.batches[0], self.batches[-1]
            raise NoProfileError(
                f"{self.model} on {self.kind} with {self.procs} process(es): batch {batch} is "
                f"outside the runnable measured range {lo}..{hi}"
            )
        b0, b1 = self.batches[i - 1], self.batches[i]
        w = (batch - b0) / (b1 - b0)
        lat = self.latency_ms[i - 1] + w * (self.latency_ms[i] - self.latency_ms[i - 1])
        thr = self.throughput_rps[i - 1] + w * (self.throughput_rps[i] - self.throughput_rps[i - 1])
        return ProfilePoint(self.model, self.kind, batch, self.procs, lat, thr)

    def max_batch(self) -> int:
        return self.batches[-1]


@dataclass(frozen=True, slots=True)
class ProfileTable:
    """All curves of one GPU model. Look-ups go through :meth:`curve`."""

    gpu: str
    curves: tuple[Curve, ...]
    _index: dict[tuple[str, str, int], Curve] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {(c.model, c.kind, c.procs): c for c in self.curves})

    def models(self) -> tuple[str, ...]:
        return tuple(sorted({c.model for c in self.curves}))

    def curves_of(self, model: str) -> tuple[Curve, ...]:
        found = tuple(c for c in self.curves if c.model == model)
        if not found:
            raise SpecError(
                f"no profile for model {model!r} on {self.gpu}; profiled models: "
                f"{', '.join(self.models())}"
            )
        return found

    def curve(self, model: str, kind: str, procs: int) -> Curve:
        try:
            return self._index[(model, kind, procs)]
        except KeyError:
            self.curves_of(model)
            raise NoProfileError(
                f"{model} was not profiled on {kind} with {procs} process(es) on {self.gpu}"
            ) from None

    def point(self, model: str, kind: str, batch: int, procs: int) -> ProfilePoint:
        return self.curve(model, kind, procs).at(batch)


def _read_parvagpu_model(model: str, text: str) -> list[Curve]:
    kinds = dict(KIND_BY_COMPUTE_SLICES)
    rows: dict[tuple[str, int], list[tuple[int, float, float]]] = {}
    for rec in csv.DictReader(text.splitlines()):
        thr_per_proc = float(rec["Throughput"])
        lat_s = float(rec["Latency"])
        if thr_per_proc <= 0 or lat_s <= 0:
            continue  # 0,0 marks an out-of-memory configuration
        size = int(rec["Mig instance"])
        if size not in kinds:
            raise SpecError(f"{model}: unknown MIG instance size {size} in profile data")
        procs = int(rec["Workload Number"])
        rows.setdefault((kinds[size], procs), []).append(
            (int(rec["Batch size"]), lat_s * 1000.0, thr_per_proc * procs)
        )
    curves = []
    for (kind, procs), pts in sorted(rows.items()):
        pts.sort()
        curves.append(
            Curve(
                model, kind, procs,
                tuple(p[0] for p in pts), tuple(p[1] for p in pts), tuple(p[2] for p in pts),
            )
        )
    return curves


def load_parvagpu_profiles(directory: Path | None = None) -> ProfileTable:
    """Read ParvaGPU-format profiles (``prof_data/<model>.csv``); bundled data by default."""
    if directory is None:
        return _bundled_parvagpu()
    prof = directory / "prof_data" if (directory / "prof_data").is_dir() else directory
    files = sorted(prof.glob("*.csv"))
    if not files:
        raise SpecError(f"{directory}: no profile CSVs (expected prof_data/<model>.csv)")
    curves: list[Curve] = []
    for f in files:
        curves.extend(_read_parvagpu_model(f.stem, f.read_text()))
    return ProfileTable(PARVAGPU_GPU, tuple(curves))


@cache
def _bundled_parvagpu() -> ProfileTable:
    root = resources.files("tessera.data").joinpath("parvagpu/prof_data")
    curves: list[Curve] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".csv"):
            curves.extend(_read_parvagpu_model(entry.name[:-4], entry.read_text()))
    return ProfileTable(PARVAGPU_GPU, tuple(curves))


def _csv_rows(text: str) -> list[list[str]]:
    return [row for row in csv.reader(text.splitlines()) if row]


def parvagpu_scenario(
    scenario: int, directory: Path | None = None, models: tuple[str, ...] | None = None
) -> tuple[Service, ...]:
    """Services of ParvaGPU SLO scenario ``scenario`` (1-based): one per model with a rate.

    Columns of ``SLO_req_rate.csv`` / ``SLO_latency.csv`` are the models in alphabetical order.
    """
    if directory is None:
        base = resources.files("tessera.data").joinpath("parvagpu/SLO")
        rate_text = base.joinpath("SLO_req_rate.csv").read_text()
        lat_text = base.joinpath("SLO_latency.csv").read_text()
        names = models or _bundled_parvagpu().models()
    else:
        slo = directory / "SLO"
        if not (slo / "SLO_req_rate.csv").exists():
            raise SpecError(f"{directory}: missing SLO/SLO_req_rate.csv")
        rate_text = (slo / "SLO_req_rate.csv").read_text()
        lat_text = (slo / "SLO_latency.csv").read_text()
        names = models or load_parvagpu_profiles(directory).models()
    rates, lats = _csv_rows(rate_text), _csv_rows(lat_text)
    if not 1 <= scenario <= len(rates):
        raise SpecError(f"scenario must be 1..{len(rates)}, got {scenario}")
    rate_row, lat_row = rates[scenario - 1], lats[scenario - 1]
    if len(rate_row) != len(names) or len(lat_row) != len(names):
        raise SpecError(f"scenario {scenario}: {len(rate_row)} columns but {len(names)} models")
    out = []
    for name, rate, lat in zip(names, rate_row, lat_row, strict=True):
        if rate.strip().upper() == "N/A" or lat.strip().upper() == "N/A":
            continue
        out.append(Service(name, name, float(rate), float(lat)))
    return tuple(out)


def best_latency(table: ProfileTable, model: str, max_procs: int) -> ProfilePoint:
    """The fastest runnable configuration of a model (for 'SLO unreachable' messages)."""
    best: ProfilePoint | None = None
    for c in table.curves_of(model):
        if c.procs > max_procs:
            continue
        for i in range(len(c.batches)):
            p = c.point(i)
            if best is None or p.latency_ms < best.latency_ms:
                best = p
    if best is None:
        raise SpecError(f"{model}: no runnable configuration with <= {max_procs} processes")
    return best


def candidate_points(curve: Curve, rule: BatchingRule, budget_ms: float) -> list[ProfilePoint]:
    """Points of a curve within the latency budget (plus the largest interpolated batch)."""
    pts = [curve.point(i) for i in range(len(curve.batches)) if curve.latency_ms[i] <= budget_ms]
    if rule.interpolate_batches and pts and pts[-1].batch < curve.max_batch():
        lo = pts[-1].batch
        hi = curve.batches[curve.batches.index(lo) + 1]
        # latency is linear between lo and hi: solve for the largest batch within budget
        lat_lo, lat_hi = curve.latency_ms[curve.batches.index(lo)], curve.latency_ms[
            curve.batches.index(hi)
        ]
        if lat_hi > lat_lo:
            b = lo + math.floor((budget_ms - lat_lo) / (lat_hi - lat_lo) * (hi - lo))
            if lo < b < hi:
                pts.append(curve.at(b))
    return pts
