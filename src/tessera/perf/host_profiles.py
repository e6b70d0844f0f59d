"""Synergy's CPU/memory sensitivity profiles as :class:`ResourceSensitivity` objects.

Synergy (Mohan et al., OSDI'22) profiled 12 models on 1, 2 and 4 V100s: each model's
throughput for every CPU count (1-24) and host-memory size (20.83-250 GB) per GPU, normalised
so that the GPU-proportional allocation of its default server (24 CPUs, 500 GB, 8 GPUs: 3 CPUs
and 62.5 GB per GPU) is 1.0. The bundled ``data/synergy/synergy_tput.csv`` holds those
matrices, one row per point (its NOTICE names the source and licence); this module turns
them into one :class:`~tessera.model.resources.ResourceSensitivity` per ``(model, gpus)``.

Two readings follow Synergy's simulator:

* the CPU and memory axes are **per GPU** (the proportional point of every profile is 3 CPUs
  and 62.5 GB per GPU whatever the GPU count; a job's demand is ``gpus × cpu_per_gpu``);
* the speedup at the job's demand (``best_cpus``, ``best_mem_gb``) is the profile's scalar
  ``speedup`` -- the number Synergy's simulator runs a job at when it gets its demand -- where
  the file gives one (the matrix alone can read lower there, e.g. AlexNet 2.0 vs 2.94);
* a measured matrix may dip by a few percent where more CPUs add contention (profiling
  noise); the profile kept here is its *monotone envelope* -- each point's speedup is the best
  of the points it covers -- because a scheduler may always leave extra CPUs idle, so holding
  more can never be slower. :func:`envelope_lift` says how much was lifted.

A model profiled at 1 GPU but not at the gang size asked for falls back to the nearest
smaller profiled count (Synergy's simulator does the same for its 8-GPU jobs).
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources

from tessera.errors import SpecError
from tessera.model.resources import ResourceSensitivity, SensitivityPoint

#: The task class of each profiled model, as Synergy's model zoo splits its workload.
SYNERGY_CLASSES: dict[str, tuple[str, ...]] = {
    "image": ("alexnet", "res18", "res50", "mobilenet", "shufflenet"),
    "language": ("gnmt", "transformer", "lstm"),
    "speech": ("m5", "deepspeech"),
}

#: CPUs and memory (GB) per GPU of Synergy's default server's proportional share.
PROPORTIONAL_CPUS_PER_GPU = 3.0
PROPORTIONAL_MEM_GIB_PER_GPU = 62.5


@dataclass(frozen=True, slots=True)
class HostProfile:
    """One model's profile at one GPU count.

    Attributes:
        model: Synergy's model name (``res18``).
        gpus: the GPU count it was profiled at.
        sensitivity: throughput vs CPUs and memory per GPU (monotone envelope).
        best_cpus_per_gpu: the CPUs per GPU Synergy's profiler chose as the job's demand.
        best_mem_gib_per_gpu: the memory per GPU it chose.
        lift: the largest amount the envelope raised a measured point (0 when the matrix was
            already monotone).
    """

    model: str
    gpus: int
    sensitivity: ResourceSensitivity
    best_cpus_per_gpu: float
    best_mem_gib_per_gpu: float
    lift: float


def envelope_lift(points: list[tuple[float, float, float]]) -> tuple[list[SensitivityPoint],
                                                                       float]:
    """The monotone envelope of ``(cpus, mem, speedup)`` points, and the largest lift."""
    out: list[SensitivityPoint] = []
    lift = 0.0
    for c, m, s in points:
        best = max(s2 for c2, m2, s2 in points if c2 <= c and m2 <= m)
        lift = max(lift, best - s)
        out.append(SensitivityPoint(c, m, best))
    return out, lift


@functools.cache
def synergy_profiles(cpu_gpu_ratio: int = 3) -> dict[tuple[str, int], HostProfile]:
    """Every bundled profile of one profile set, keyed by ``(model, gpus)``.

    ``cpu_gpu_ratio`` picks the set: 3 is Synergy's default server (the paper's main
    results); 4, 5 and 6 are its CPU:GPU-ratio sweeps, whose proportional points are 4-6 CPUs
    per GPU.

    Raises:
        SpecError: a ratio with no profiles.
    """
    text = resources.files("tessera.data").joinpath("synergy/synergy_tput.csv").read_text()
    rows: dict[tuple[str, int], list[dict[str, str]]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if int(row["cpu_gpu_ratio"]) == cpu_gpu_ratio:
            rows.setdefault((row["model"], int(row["gpus"])), []).append(row)
    if not rows:
        raise SpecError(f"no Synergy profiles for CPU:GPU ratio {cpu_gpu_ratio} (have 3-6)")
    prop_cpus = float(cpu_gpu_ratio)
    out: dict[tuple[str, int], HostProfile] = {}
    for (model, gpus), rs in rows.items():
        pts = [(float(r["cpu_value"]), float(r["mem_value_gb"]), float(r["tput_norm"]))
               for r in rs]
        base = next((s for c, m, s in pts
                     if c == prop_cpus and m == PROPORTIONAL_MEM_GIB_PER_GPU), None)
        if base is None or base <= 0:
            raise SpecError(f"Synergy profile {model}/{gpus} GPUs has no proportional point")
        first = rs[0]
        best_c = float(first["best_cpus"] or prop_cpus)
        best_m = float(first["best_mem_gb"] or PROPORTIONAL_MEM_GIB_PER_GPU)
        scaled = [(c, m, s / base) for c, m, s in pts]
        if first["speedup"]:  # the speedup Synergy's simulator runs a job at when it gets
            scaled.append((best_c, best_m, float(first["speedup"])))  # its whole demand
        env, lift = envelope_lift(scaled)
        sens = ResourceSensitivity(tuple(env), prop_cpus, PROPORTIONAL_MEM_GIB_PER_GPU)
        out[(model, gpus)] = HostProfile(model, gpus, sens, best_c, best_m, lift)
    return out


def synergy_profile(model: str, gpus: int, cpu_gpu_ratio: int = 3) -> HostProfile:
    """The profile of ``model`` at ``gpus`` GPUs (the nearest smaller profiled count when that
    count was not profiled).

    Raises:
        SpecError: a model Synergy did not profile.
    """
    table = synergy_profiles(cpu_gpu_ratio)
    counts = sorted(g for m, g in table if m == model)
    if not counts:
        known = ", ".join(sorted({m for m, _g in table}))
        raise SpecError(f"no Synergy profile for model {model!r} (profiled: {known})")
    fit = [g for g in counts if g <= gpus] or counts[:1]
    return table[(model, fit[-1])]
