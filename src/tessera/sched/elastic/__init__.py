"""Elastic allocations: policies that choose a job's GPU count and batch (Pollux, Sia,
``goodput_srpt``), and how the core places the sizes they choose.

* :mod:`.sizes` -- the core's half: resized views, batches, quotas;
* :mod:`.goodput` -- the goodput model of a job on a configuration;
* :mod:`.ilp` -- the one-configuration-per-job programme;
* :mod:`.policy` -- what the elastic policies share (configurations, memory, the answer).
"""
