"""What cannot use learned speeds, said in the run's notes (``--speeds learned``).

Under learned speeds the policies read estimates (:mod:`tessera.sched.core.learned`) through
the oracle's per-flavor rates. Three kinds of decision read something else, so a learned run
of them is partly a table run; :func:`cannot_learn` names each one that applies to a run:

* a policy that **packs** (``hetero_pack``, Gavel's packed policies) prices co-located pairs
  from the true pair table (:mod:`tessera.perf.colocation`), which has no estimate;
* an **elastic** policy (``sia``, ``pollux``, ``goodput_srpt``) prices the workload's elastic
  jobs with its goodput model and Sia's bundled profiles (only its rigid jobs read the
  estimates);
* **3-D** (``parallelism``) jobs are priced by the planner's cost model, as with the table.
"""

from __future__ import annotations

from tessera.model.jobs import Workload
from tessera.sched.core.policy import Policy


def cannot_learn(policy: Policy, workload: Workload) -> tuple[str, ...]:
    """One note per part of this run that does not read learned speeds (empty if none)."""
    notes = []
    if policy.packs:
        notes.append(f"--speeds learned: {policy.display_name} prices co-located pairs from "
                     "the true pair table (no estimate exists for a pair); only its "
                     "single-job rates are learned")
    elastic = sum(1 for j in workload.jobs if j.elastic is not None)
    if policy.elastic and elastic:
        notes.append(f"--speeds learned: {policy.display_name} prices its {elastic} elastic "
                     "jobs with its goodput model and the bundled profiles, not the "
                     "estimates; only its rigid jobs read learned speeds")
    planned = sum(1 for j in workload.jobs if j.parallelism is not None)
    if planned:
        notes.append(f"--speeds learned: {planned} 3-D jobs are priced by the planner's cost "
                     "model, not learned")
    return tuple(notes)
