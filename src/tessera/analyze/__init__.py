"""Trace analysis: characterise public GPU-cluster traces and check them against the papers.

``tessera analyze TRACE`` loads a trace into a columnar view (:mod:`.formats`, :mod:`.loaders`),
computes job, arrival, inventory and occupancy statistics (:mod:`.stats`, :mod:`.cluster`),
compares what it measured with the figures the source papers publish (:mod:`.published`), and
renders a terminal summary, PNG plots and a self-contained HTML report.
"""
