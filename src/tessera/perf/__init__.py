"""Performance knowledge: every number about how fast, how big and how costly.

``perf`` is the only layer that reads measured profiles. Policies, the planner and the simulator
ask it questions ("how many steps per second does this job make on 4 V100s split over two
servers?") and get a number or a clear :class:`~tessera.errors.NoProfileError`.
"""
