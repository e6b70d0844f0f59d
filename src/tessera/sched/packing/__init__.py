"""Space sharing: two training jobs on one gang of GPUs.

* :mod:`.pairs` -- which pairs may share and how the core co-locates them;
* :mod:`.slots` -- the per-round programme of solo and pair slots (``hetero_pack``).
"""
