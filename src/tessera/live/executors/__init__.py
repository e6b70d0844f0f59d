"""Executors turn an allocation (a run of a job on some GPUs) into running processes.

Two implementations share the :class:`~tessera.live.executors.base.Executor` protocol:
:mod:`~tessera.live.executors.local` (plain subprocesses, no Ray: tests and laptops) and
:mod:`~tessera.live.executors.ray` (placement groups and named detached actors).
"""
