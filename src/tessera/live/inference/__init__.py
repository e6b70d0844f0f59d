"""Live inference services in ``tessera serve``: MIG slices and MPS shares of real GPUs.

A *service* (:mod:`.spec`) is a model with a latency SLO, an expected request rate and the
command that serves it. The service's planner (:mod:`tessera.share`) turns every stored
service into a layout of MIG instances; :mod:`.manager` applies that layout to the GPUs through
a device layer (:mod:`.devices`: real NVML, or a fake kept in a file) and runs each replica as
a run of the executor on its slice (``CUDA_VISIBLE_DEVICES=MIG-<uuid>``). Modules:

- :mod:`.spec`: what a client submits, validated at the edge;
- :mod:`.devices`: the device layer's interface and its fake; :mod:`.nvml` the real one;
- :mod:`.book`: the services, their replicas and the applied plan in the SQLite store;
- :mod:`.planstate`: a plan as stored, and what its slices cost a queue's MIG quota;
- :mod:`.manager`: plan, apply, run replicas, restart them, re-plan on rate changes;
- :mod:`.routes`: the ``/api/services`` routes.
"""
