"""Executors turn an allocation (a run of a job on some GPUs) into running processes.

Each executor is a sub-package here, found by :func:`~tessera.live.executors.registry.
load_executors` without a list: :mod:`~tessera.live.executors.local` (plain subprocesses, no
Ray: tests and laptops) and :mod:`~tessera.live.executors.ray` (placement groups and named
detached actors). They share the :class:`~tessera.live.executors.base.Executor` protocol and
the modules beside them (the registry, logs, the rank guardian and its containment, GPU
sharing, the local runner script).
"""
