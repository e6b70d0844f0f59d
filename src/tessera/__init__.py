"""Tessera: scheduling, planning, GPU sharing and simulation for DL on mixed-GPU clusters.

The package is layered (imports point down only; ``tests/test_layers.py`` enforces it):

* ``errors`` / ``registry`` -- exceptions and the plugin registry, under everything;
* ``model`` -- typed domain objects;
* ``perf`` -- every number about speed, memory and communication;
* ``workload`` -- trace readers and generators;
* ``sched`` / ``plan`` / ``share`` -- pure decisions over a snapshot;
* ``sim`` / ``live`` / ``train`` -- the clocks and processes that drive those decisions;
* ``report`` / ``analyze`` / ``lessons`` -- tables, plots and studies of their results;
* ``cli`` -- what people type.

``import tessera`` stays light: solver, Ray and torch imports live inside the subpackages
that need them.
"""

__version__ = "0.1.0"

from tessera.progress_report import progress  # light: the standard library only

__all__ = ["__version__", "progress"]
