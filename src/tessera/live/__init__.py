"""The live scheduler service: the simulator's decisions, run on a wall clock against real jobs.

Pieces, each in its own module:

* :mod:`~tessera.live.spec` -- the job request (YAML/JSON, validated strictly) and its
  conversion to the core's :class:`~tessera.model.jobs.JobSpec`;
* :mod:`~tessera.live.tenancy` -- queues, quotas and bearer tokens (the config file in the state
  directory);
* :mod:`~tessera.live.store` -- SQLite (WAL): jobs, queues, allocations (the idempotent launch
  records) and an append-only event log; every state change goes through the one lifecycle
  table in :mod:`tessera.model.jobs`;
* :mod:`~tessera.live.service` -- the decision loop: snapshot → ``decide()`` → journal → act;
* :mod:`~tessera.live.reconcile` -- what happens on restart;
* :mod:`~tessera.live.executors` -- local subprocesses or Ray actors;
* :mod:`~tessera.live.api` -- the HTTP API and the dashboard page;
* :mod:`~tessera.live.kueue` -- export of flavors and queues as Kueue manifests.

Nothing here is imported by ``import tessera``; FastAPI, uvicorn and Ray are imported only by
the modules that need them.
"""
