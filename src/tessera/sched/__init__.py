"""The decision core: a pure ``decide(snapshot, policy, ctx, options) -> Decision`` shared by
the simulator and the live service, with the settings both run it with
(:class:`~tessera.sched.core.settings.SchedulerSettings`).

A round runs as named, timed phases -- admit → order → place → preempt -- and every job left
pending carries a reason a person can act on.
"""
