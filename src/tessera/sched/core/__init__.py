"""The decision core: ``decide(snapshot, policy, ctx, options) -> Decision`` and what it reads.

* :mod:`.snapshot` -- the cluster and its active jobs, frozen for one decision;
* :mod:`.policy` -- what a policy is (:class:`~.policy.Policy`, :class:`~.policy.Ranking`);
* :mod:`.decide` -- the round: admit → order → place → preempt, with a reason per pending job;
* :mod:`.placement`, :mod:`.free_book`, :mod:`.strategies` -- where gangs go;
* :mod:`.oracle`, :mod:`.plans` -- how fast a job runs on a gang;
* :mod:`.context` -- what one driver keeps between decisions (caches, the LP solver);
* :mod:`.settings`, :mod:`.options` -- the knobs the simulator and the live service share;
* :mod:`.reasons`, :mod:`.feasibility` -- why a job waits, whether it can ever run;
* :mod:`.cadence` -- when to decide (now, next round, wait) and the swap lease, for both clocks.
"""
