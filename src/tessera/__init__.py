"""Tessera: scheduling, planning, GPU sharing and simulation for DL on mixed-GPU clusters.

The package is layered (imports point down only):

* ``model`` / ``workload`` -- typed domain objects, trace readers and generators;
* ``perf`` -- every number about speed, memory and communication;
* ``sched`` / ``plan`` / ``share`` -- pure decisions over a snapshot;
* ``sim`` / ``live`` -- the two clocks that drive those decisions;
* ``cli`` / ``report`` -- what people see.

``import tessera`` stays light: solver, Ray and torch imports live inside the subpackages
that need them.
"""

__version__ = "0.1.0"
