"""Mixed gangs: one job on GPUs of several flavors (Sia/Cannikin style).

* :mod:`.rates` -- how fast a mixed gang runs (the planner's uneven batch split);
* :mod:`.placement` -- where a mixed gang goes when no single flavor can hold it.
"""
