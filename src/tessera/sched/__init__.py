"""The decision core: a pure ``decide(snapshot, policy, rng) -> Decision`` shared by the
simulator and the live service.

A round runs as named, timed phases -- admit → order → place → preempt -- and every job left
pending carries a reason a person can act on.
"""
