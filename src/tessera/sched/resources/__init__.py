"""CPUs and host memory besides GPUs: Synergy's allocations (``-p fifo:resources=tune``).

* :mod:`~tessera.sched.resources.speed` -- what a gang holds and the speed that gives it;
* :mod:`~tessera.sched.resources.allocate` -- the proportional, GREEDY and TUNE modes;
* :mod:`~tessera.sched.resources.opt` -- Synergy-OPT's LP.
"""
