"""Measured training throughputs per job type and GPU flavor (Gavel's profiles).

Gavel measured 26 job templates (ResNet-18/50, Transformer, LM, Recommendation, A3C, CycleGAN at
several batch sizes) on K80, P100 and V100, at gang sizes 1, 2, 4 and 8, both *consolidated*
(all GPUs in one server) and *unconsolidated* (spread over servers), alone and space-shared in
pairs. Throughput is in training steps per second for the whole gang.

:class:`ThroughputTable` answers ``throughput(job_type, flavor, num_gpus, consolidated)``:

* a measured value when there is one;
* for a gang size that was not measured (3, 16, 64 GPUs ...) of a job type that was measured
  on several GPUs, the per-GPU throughput of the largest measured size not above it, times the
  gang size -- an *estimate*, reported as such by :meth:`ThroughputTable.lookup` (a type only
  ever measured on one GPU is not distributable and gets no estimate);
* for a flavor without measurements, the measurements of a declared *proxy* flavor of the same
  generation (P40 → P100), also reported;
* otherwise :class:`~tessera.errors.NoProfileError`, naming what does exist.

A measured throughput of zero means the job cannot run there (it does not fit in memory).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor, resolve_flavor

_KEY_RE = re.compile(r"^\('(?P<type>.+)',\s*(?P<sf>\d+)\)$")

_V100_16GB = resolve_flavor("V100-16GB")
"""Gavel's reference flavor: trace durations are measured on it."""

#: Flavors answered from another flavor's measurements, and why.
PROXY_FLAVORS: Mapping[str, str] = {
    "P40": "P100",  # Pascal, 24 GB; similar FP32 peak (11.8 vs 9.3 TFLOPS)
    "V100-32GB": "V100-16GB",  # same chip, more memory
}


@dataclass(frozen=True, slots=True)
class Lookup:
    """A throughput answer and how it was obtained."""

    steps_per_s: float
    measured: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    """Isolated and co-located throughputs keyed by flavor short name, job type and gang size.

    Attributes:
        source: where the numbers came from (file path or description).
        isolated: ``{(flavor_short, consolidated): {(job_type, num_gpus): steps_per_s}}``.
        pairs: ``{flavor_short: {((type_a, sf), (type_b, sf)): (steps_a, steps_b)}}``.
        reference_flavor: the flavor trace durations are measured on (V100 for Gavel).
    """

    source: str
    isolated: Mapping[tuple[str, bool], Mapping[tuple[str, int], float]]
    pairs: Mapping[str, Mapping[tuple[tuple[str, int], tuple[str, int]], tuple[float, float]]]
    reference_flavor: GpuFlavor = _V100_16GB

    # -- catalogue ----------------------------------------------------------------------------

    def job_types(self) -> tuple[str, ...]:
        """Every job type measured on at least one flavor, sorted."""
        types = {t for table in self.isolated.values() for (t, _sf) in table}
        return tuple(sorted(types))

    def scale_factors(self, job_type: str) -> tuple[int, ...]:
        """Gang sizes measured for a job type (on any flavor)."""
        sfs = {sf for table in self.isolated.values() for (t, sf) in table if t == job_type}
        return tuple(sorted(sfs))

    def distributable_types(self) -> tuple[str, ...]:
        """Job types measured at more than one GPU."""
        return tuple(t for t in self.job_types() if max(self.scale_factors(t)) > 1)

    def flavors(self) -> tuple[str, ...]:
        """Flavors with measurements (short names)."""
        return tuple(sorted({f for (f, _c) in self.isolated}))

    def covers(self, flavor: GpuFlavor) -> bool:
        """Whether questions about ``flavor`` can be answered (directly or by proxy)."""
        return self._data_flavor(flavor) is not None

    def _data_flavor(self, flavor: GpuFlavor) -> str | None:
        measured = {f for (f, _c) in self.isolated}
        if flavor.short in measured:
            return flavor.short
        proxy = PROXY_FLAVORS.get(flavor.short)
        return proxy if proxy in measured else None

    # -- questions ------------------------------------------------------------------------------

    def lookup(
        self, job_type: str, flavor: GpuFlavor, num_gpus: int = 1, consolidated: bool = True
    ) -> Lookup:
        """Throughput of ``job_type`` on ``num_gpus`` GPUs of ``flavor``, with provenance.

        Raises:
            NoProfileError: the job type or flavor has no measurements to answer from.
        """
        f = flavor
        data_flavor = self._data_flavor(f)
        if data_flavor is None:
            raise NoProfileError(
                f"{self.source}: no throughput measurements for flavor {f.short}; "
                f"measured flavors: {', '.join(self.flavors())}"
            )
        notes = []
        if data_flavor != f.short:
            notes.append(f"{f.short} answered from {data_flavor} measurements")
        table = self.isolated.get((data_flavor, consolidated))
        if table is None or (not consolidated and num_gpus == 1):
            table = self.isolated[(data_flavor, True)]
        value = table.get((job_type, num_gpus))
        if value is not None:
            return Lookup(value, not notes, "; ".join(notes))
        measured_sfs = sorted(sf for (t, sf) in table if t == job_type)
        if not measured_sfs:
            raise NoProfileError(
                f"{self.source}: job type {job_type!r} was not measured on {data_flavor}"
                + ("" if consolidated else " (unconsolidated)")
                + f"; {len(self.job_types())} job types exist, e.g. {self.job_types()[0]!r}"
            )
        if measured_sfs == [1]:
            raise NoProfileError(
                f"{self.source}: {job_type!r} is a single-GPU job type (never measured on "
                f"more than one GPU); it cannot run as a {num_gpus}-GPU gang"
            )
        below = [sf for sf in measured_sfs if sf <= num_gpus]
        if not below:
            raise NoProfileError(
                f"{self.source}: {job_type!r} has no measurement at {num_gpus} GPUs or fewer"
            )
        base = below[-1]
        per_gpu = table[(job_type, base)] / base
        notes.append(f"{num_gpus} GPUs extrapolated linearly from {base}")
        return Lookup(per_gpu * num_gpus, False, "; ".join(notes))

    def throughput(
        self, job_type: str, flavor: GpuFlavor, num_gpus: int = 1, consolidated: bool = True
    ) -> float:
        """Steps per second (0.0 when the job does not fit on that flavor)."""
        return self.lookup(job_type, flavor, num_gpus, consolidated).steps_per_s

    def colocated(
        self, type_a: str, type_b: str, flavor: GpuFlavor, num_gpus: int = 1
    ) -> tuple[float, float]:
        """Throughputs of two jobs space-sharing the same GPUs; (0, 0) when not runnable.

        Raises:
            NoProfileError: the pair was never measured on that flavor.
        """
        f = flavor
        data_flavor = self._data_flavor(f)
        table = self.pairs.get(data_flavor or "", {})
        key = ((type_a, num_gpus), (type_b, num_gpus))
        if key not in table:
            raise NoProfileError(
                f"{self.source}: no co-location measurement for {type_a!r} with {type_b!r} "
                f"on {num_gpus}×{f.short}"
            )
        return table[key]


# ---------------------------------------------------------------------------------------------
# Loading

_GAVEL_WORKER = {"k80": "K80", "p100": "P100", "v100": "V100-16GB"}


def _parse_key(key: str, path: str) -> tuple[str, int]:
    m = _KEY_RE.match(key)
    if not m:
        raise NoProfileError(f"{path}: cannot parse job key {key!r}")
    return m.group("type"), int(m.group("sf"))


def load_gavel_throughputs(path: str | Path | None = None) -> ThroughputTable:
    """Read a Gavel throughputs JSON (``simulation_throughputs.json`` layout).

    Args:
        path: the file; ``None`` reads the copy bundled with Tessera.
    """
    if path is None:
        text = resources.files("tessera.data").joinpath("gavel/simulation_throughputs.json")
        raw = json.loads(text.read_text())
        source = "gavel (bundled)"
    else:
        raw = json.loads(Path(path).read_text())
        source = str(path)
    isolated: dict[tuple[str, bool], dict[tuple[str, int], float]] = {}
    pairs: dict[str, dict[tuple[tuple[str, int], tuple[str, int]], tuple[float, float]]] = {}
    for worker, jobs in raw.items():
        base, _, suffix = worker.partition("_")
        if base not in _GAVEL_WORKER:
            continue
        flavor = resolve_flavor(_GAVEL_WORKER[base]).short
        consolidated = suffix != "unconsolidated"
        iso = isolated.setdefault((flavor, consolidated), {})
        pair_table = pairs.setdefault(flavor, {}) if consolidated else None
        for key, entry in jobs.items():
            jk = _parse_key(key, source)
            iso[jk] = float(entry["null"])
            if pair_table is None:
                continue
            for other, vals in entry.items():
                if other != "null":
                    pair_table[(jk, _parse_key(other, source))] = (float(vals[0]), float(vals[1]))
    return ThroughputTable(source, isolated, pairs, reference_flavor=_V100_16GB)


@cache
def default_throughputs() -> ThroughputTable:
    """The bundled Gavel table, loaded once per process."""
    return load_gavel_throughputs()
