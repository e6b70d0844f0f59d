"""Heterogeneous data-parallel training on ``torch.distributed``.

One job runs one process (rank) per GPU, on GPUs of different speeds. Instead of giving every
rank the same share of the global batch and letting the fast ones wait for the slowest (plain
DDP), each rank gets a local batch proportional to its measured speed, and gradients are averaged
with weights ``b_i/B`` so that one update equals single-process training on the whole batch.

Modules, from the bottom up:

* :mod:`~tessera.train.devices` -- device lists (``A100:1,T4:2``), relative speeds, precision;
* :mod:`~tessera.train.balancer` -- the online split from measured step times (pure Python);
* :mod:`~tessera.train.emulation` -- heterogeneity on a CPU-only machine;
* :mod:`~tessera.train.prior` -- the split of step 0: the planner's, or catalog speeds;
* :mod:`~tessera.train.config` -- one validated :class:`TrainConfig` per run;
* :mod:`~tessera.train.examples` -- small models on deterministic synthetic data (torch);
* :mod:`~tessera.train.ddp` -- the weighted gradient all-reduce (torch);
* :mod:`~tessera.train.checkpoint` -- atomic checkpoints for exact resume (torch);
* :mod:`~tessera.train.resize` -- resuming at another world size and global batch (torch);
* :mod:`~tessera.train.worker` -- the per-rank loop, also a ``torchrun`` entry point (torch);
* :mod:`~tessera.train.launcher` -- local processes, restarts and results (torch).
* :mod:`~tessera.train.stragglers` -- injected transient stragglers, their options (pure Python);
* :mod:`~tessera.train.coded` / :mod:`~tessera.train.coded_step` -- gradient coding, any k of n
  ranks decide a step exactly (torch);
* :mod:`~tessera.train.staleness` -- bounded-staleness steps (torch); shared pieces in
  :mod:`~tessera.train.p2p_step`, mode choice in :mod:`~tessera.train.step_modes`.

This package imports nothing heavy itself; torch is imported by the modules that need it.
"""
