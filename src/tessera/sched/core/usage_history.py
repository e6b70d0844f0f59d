"""Usage history for admission fair sharing: each queue's GPU usage decayed with a half-life.

Kueue's admission fair sharing (KEP #9737, ``usageHalfLifeTime``) orders queues not by what
they hold now but by what they have used recently, so a queue that ran a burst yesterday waits
behind one that ran nothing. The history is state that must outlive a round: it lives in the
driver's :class:`~tessera.sched.core.context.DecisionContext` (the simulator's and the live
service's contexts both last the whole run), and each round advances it to its own clock.

Between two rounds ``dt_s`` apart the decayed usage ``u`` of a queue that held ``g`` GPUs
becomes ``u * a + g * (1 - a)`` with ``a = 2 ** (-dt_s / half_life_s)``: an exponential moving
average of held GPUs whose weight halves every half-life. A round at the same instant (or an
earlier one, as a preview from a forked context may be) leaves it unchanged, so the same state
always gives the same order.
"""

from __future__ import annotations

from collections.abc import Mapping


class UsageHistory:
    """Decayed GPU usage per queue, advanced once per round."""

    def __init__(self) -> None:
        self._usage: dict[str, float] = {}
        self._at_s: float | None = None

    def advance(self, now_s: float, half_life_s: float, held_gpus: Mapping[str, int]) -> None:
        """Fold in the usage held since the last round (``held_gpus`` by queue, as it was
        during the interval: the running jobs at the start of this round)."""
        at = self._at_s
        if at is not None and now_s <= at:
            return
        self._at_s = now_s
        if at is None:
            self._usage = {q: float(g) for q, g in held_gpus.items() if g}
            return
        keep = 2.0 ** (-(now_s - at) / half_life_s)
        out: dict[str, float] = {}
        for q in set(self._usage) | set(held_gpus):
            u = self._usage.get(q, 0.0) * keep + held_gpus.get(q, 0) * (1.0 - keep)
            if u > 1e-9:
                out[q] = u
        self._usage = out

    def usage(self, queue: str) -> float:
        """The queue's decayed usage in GPUs (0 when it never held any)."""
        return self._usage.get(queue, 0.0)

    def as_dict(self) -> dict[str, float]:
        return dict(self._usage)
