"""The CPUs and host memory per GPU Synergy's *simulator* asks for each model (its demand).

Synergy's profiles (:mod:`tessera.perf.host_profiles`) say how fast a model trains at every CPU
and memory point; its simulator, though, runs a job at exactly two points: its *demand* (the
model file's ``cpus``/``mem`` of ``simulator/models/<model>_1.py`` in github.com/msr-fiddle/
synergy, read, not copied), at which it trains ``speedup`` times faster, or the GPU-proportional
share, at 1.0. The memory of that demand is not the least memory at which the profile is
fastest: AlexNet and ShuffleNet ask for 125 GB per GPU, M5 for 187.5 GB, the language models for
20 GB (Synergy writes ``int(62.5 / 3)``). A scheduler that packs by demand (GREEDY, TUNE) packs
by these numbers, so a job drawn by :func:`tessera.workload.synergy.generate_synergy_like`
(marked by its ``synergy_class`` extra) asks for them.
"""

from __future__ import annotations

from tessera.model.jobs import JobSpec

#: ``model -> (cpus per GPU, GB of host memory per GPU)`` of Synergy's 1-GPU model files.
#: Synergy's GB are taken as Tessera's GiB one for one, as the ``synergy-128`` preset takes its
#: servers' 500 GB, so the demand and the server keep Synergy's ratio (the unit cancels).
SIM_DEMAND_PER_GPU: dict[str, tuple[float, float]] = {
    "alexnet": (12.0, 125.0),
    "res18": (9.0, 62.5),
    "res50": (4.0, 62.5),
    "mobilenet": (6.0, 62.5),
    "shufflenet": (12.0, 125.0),
    "gnmt": (1.0, 20.0),
    "transformer": (1.0, 20.0),
    "lstm": (1.0, 20.0),
    "m5": (6.0, 187.5),
    "deepspeech": (3.0, 62.5),
}


def synergy_sim_demand(spec: JobSpec) -> tuple[float, float] | None:
    """``(cpus, mem_gib)`` per GPU Synergy's simulator would ask for ``spec``, or ``None`` when
    ``spec`` is not a job of Synergy's workload (no ``synergy_class`` extra, or a model it
    does not list)."""
    if "synergy_class" not in spec.extra or spec.model is None:
        return None
    return SIM_DEMAND_PER_GPU.get(spec.model)
