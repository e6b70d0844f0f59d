"""GPU sharing for SLO-bound inference: MIG layouts, MPS segments, packing and serving.

Many inference services are too small for a whole A100 or H100. ``tessera.share`` cuts GPUs
into MIG instances, runs a few MPS processes of one model inside each instance (a *segment*),
chooses per service how many segments of which size it needs to meet its request rate under its
latency SLO, and packs the segments onto the fewest GPUs.

Modules, in reading order:

- :mod:`~tessera.share.mig`: the hardware rules (profiles, legal placements, layouts).
- :mod:`~tessera.share.profiles`: measured latency/throughput per (model, profile, batch, MPS
  processes), the batching rule, and services.
- :mod:`~tessera.share.segments`: the per-service segment options and lower bounds.
- :mod:`~tessera.share.packing`: the planner (heuristic and exact integer programme).
- :mod:`~tessera.share.replan`: re-planning after a load change with few instances torn down.
- :mod:`~tessera.share.serving_sim`: request-stream simulation of a plan (SLO attainment).
- :mod:`~tessera.share.p99`: plans checked at p99 by that simulation (the simulation wins).
- :mod:`~tessera.share.parvagpu_deploy`: ParvaGPU's own deployments as plans, side by side.
- :mod:`~tessera.share.traces`: readers of the Alibaba request traces, and their replay.
- :mod:`~tessera.share.reconfig`: re-planning per trace window at the MIG reconfiguration cost.
"""
