"""Which policies were compared, what each does, and which ones are *oracles*.

A simulator knows every job's true duration; a real scheduler does not. A policy that ranks
jobs by it (``hetero_srpt``, ``sjf``, ``srtf``, the finish-time and makespan LPs: each sets
:attr:`tessera.sched.core.policy.Policy.oracle`) shows what a scheduler *could* reach with perfect
knowledge, not what a deployment gets. Wherever results are shown (terminal table, ``--json``,
``report.html``, ``lessons``) such a policy carries :data:`ORACLE_MARK` and one line saying what
it reads, so a reader never takes an oracle's win for a result to expect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.sched.catalog import list_policies, make_policy
from tessera.sim.metrics import SimResult

ORACLE_MARK = "◆"
ORACLE_MEANING = ("oracle: reads what a real scheduler cannot know (true job durations from "
                  "the trace); its numbers are a bound to compare against, not a result to "
                  "expect")


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """One compared policy: its label in the results, what it does, and what it reads that a
    real scheduler could not (``""`` when it is not an oracle)."""

    label: str
    summary: str
    oracle: str

    @property
    def marked(self) -> str:
        """The label with :data:`ORACLE_MARK` when the policy is an oracle."""
        return f"{self.label} {ORACLE_MARK}" if self.oracle else self.label

    def line(self) -> str:
        """``label: what it does`` and, for an oracle, what it reads."""
        text = f"{self.marked}: {self.summary}"
        return text + (f" Oracle: reads {self.oracle}." if self.oracle else "")

    def as_json(self) -> dict[str, object]:
        return {"summary": self.summary, "oracle": self.oracle or None}


def policy_info(label: str) -> PolicyInfo:
    """What ``label`` (a policy spec as results name it, options and ``-agnostic`` included)
    does, from the policy registry."""
    policy = make_policy(label)
    summaries = dict(list_policies())
    summary = summaries.get(policy.name, "")
    if policy.agnostic:
        summary += " Heterogeneity-blind twin: sees every flavor as equally fast."
    return PolicyInfo(label, summary, type(policy).oracle)


def policy_infos(labels: Sequence[str]) -> list[PolicyInfo]:
    """:func:`policy_info` of each label, in order."""
    return [policy_info(label) for label in labels]


def best_without_oracle(results: Sequence[SimResult]) -> SimResult | None:
    """The result with the lowest average JCT among the policies that are not oracles
    (``None`` when every policy is one or none finished a job)."""
    honest = [r for r in results if not policy_info(r.policy).oracle
              and math.isfinite(r.summary.avg_jct_s)]
    return min(honest, key=lambda r: r.summary.avg_jct_s, default=None)


def oracle_note(results: Sequence[SimResult]) -> str | None:
    """One sentence for under the comparison: which winner is an oracle, and the best policy
    a real scheduler could run. ``None`` when no oracle was compared."""
    infos = {r.policy: policy_info(r.policy) for r in results}
    oracles = [label for label, info in infos.items() if info.oracle]
    if not oracles:
        return None
    finished = [r for r in results if math.isfinite(r.summary.avg_jct_s)]
    if not finished:
        return None
    best = min(finished, key=lambda r: r.summary.avg_jct_s)
    honest = best_without_oracle(results)
    text = f"{ORACLE_MARK} {', '.join(oracles)}: {ORACLE_MEANING}."
    if infos[best.policy].oracle and honest is not None:
        ratio = honest.summary.avg_jct_s / best.summary.avg_jct_s
        text += (f" The lowest avg JCT is an oracle's ({best.policy}); the best policy a real "
                 f"scheduler can run here is {honest.policy}, whose avg JCT is {ratio:.2f}× "
                 f"{best.policy}'s.")
    return text
