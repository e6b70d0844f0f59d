"""The exact dynamic programme behind :func:`tessera.plan.pipeline.plan_pipeline`.

**What it solves.** For one *flavor order* (the flavors in the order their stages appear along
the pipeline, each as one contiguous run of stages, any of them possibly unused) and two caps —
every stage's per-micro-batch time ``t_s ≤ τ`` and gradient sync ``A_s ≤ α`` — it finds the
pipeline with the smallest sum of stage times ``Σ t_s`` among those that fit in memory.

**Why the stage count is a state.** Under the 1F1B schedule the stage at position s of p holds
``min(p − s, M)`` micro-batches in flight, so whether a stage fits depends on how many stages
come *after* it. The DP therefore builds pipelines back to front and layers its states by k,
the number of stages placed so far: ``V_k[q][r, h]`` is the least ``Σ t`` of a k-stage suffix
that starts at layer h, whose front stage runs on the q-th flavor of the order, with r GPUs of
that flavor still unused. A new front stage [h, i) on w GPUs holds ``min(k + 1, M)``
micro-batches and either stays on flavor q (r → r − w) or opens an earlier flavor q' < q of
the order with all its GPUs. Each layer k → k + 1 is a handful of min-plus products over
(layers × layers) matrices per (flavor, width), done with numpy.

The cheapest option for a span (tensor-parallel degree, recomputation, ZeRO level; see
:mod:`tessera.plan.stages`) at a given in-flight count and caps is chosen per span before the
DP runs, so recomputation and sharding are per-stage choices, not fallbacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tessera.plan.stages import Stage, StageCosts, StageOption

#: Stage widths (GPUs per stage) the search may use: 1–8, then powers of two and multiples of 8.
#: The set does not depend on how many GPUs are offered, so offering more never removes a
#: choice (the planner's results are monotone in the devices).
SMALL_WIDTHS = tuple(range(1, 9))


def widths_up_to(count: int) -> tuple[int, ...]:
    """Stage widths available when ``count`` GPUs of a flavor are offered.

    >>> widths_up_to(20)
    (1, 2, 3, 4, 5, 6, 7, 8, 16)
    """
    out = [w for w in SMALL_WIDTHS if w <= count]
    w = 16
    while w <= count:
        out.append(w)
        w = w + 8 if w < 64 else w * 2
    return tuple(out)


@dataclass
class RoundCaps:
    """Caps of one DP round and the per-(group, width, in-flight) cheapest-option matrices.

    With ``sync_weight`` w > 0 a span's price is ``t + w·A`` instead of ``t`` (the option
    chosen per span is the one with the least such price): the bottleneck DP then minimises
    ``max_s (t_s + w·A_s)``, which with w = 1/(M − 1) is the part ``(M−1)·max t + max A`` of
    the step time stage by stage: its least value W bounds every plan
    (``(M−1)·W ≤ (M−1)·max t + max A``), and its plan is a first guess of a good one.
    """

    tau_s: float
    alpha_s: float
    sync_weight: float = 0.0
    cache: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict)
    stacked: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def cheapest(self, sc: StageCosts, gi: int, width: int, in_flight: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(time, option index) per span: the fastest option that fits and meets the caps."""
        key = (gi, width, in_flight)
        if key not in self.cache:
            times, fmax = self._capped(sc, gi, width)
            t = np.where(fmax >= in_flight, times, np.inf)
            self.cache[key] = (t.min(axis=0), t.argmin(axis=0))
        return self.cache[key]

    def cheapest_widths(self, sc: StageCosts, gi: int, widths: tuple[int, ...], in_flight: int
                        ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`cheapest` for every width at once: (widths × spans) time and option index."""
        key = (gi, -len(widths), in_flight)
        if key not in self.cache:
            parts = [self.cheapest(sc, gi, w, in_flight) for w in widths]
            self.cache[key] = (np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]))
        return self.cache[key]

    def _capped(self, sc: StageCosts, gi: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Stacked (options × spans) times with the caps applied, and each option's fmax."""
        key = (gi, width)
        if key not in self.stacked:
            t, a, f = sc.stacked(gi, width)
            price = t + self.sync_weight * a if self.sync_weight else t
            self.stacked[key] = (np.where((t <= self.tau_s) & (a <= self.alpha_s), price,
                                          np.inf), f)
        return self.stacked[key]


@dataclass(frozen=True, slots=True)
class OrderResult:
    """The best pipeline of one round for one flavor order."""

    sum_time_s: float
    stages: tuple[Stage, ...]


#: Radix of the packed parent code (end layer, width, option, source flavor, source GPUs left).
_RADIX = 4096


def _pack(end: np.ndarray | int, width: np.ndarray | int, opt: np.ndarray,
          src_q: np.ndarray | int, src_r: np.ndarray | int) -> np.ndarray:
    code = (np.asarray(end, dtype=np.int64) * _RADIX + width) * 64 + opt
    return (code * 16 + (np.asarray(src_q) + 1)) * _RADIX + (np.asarray(src_r) + 1)


def _unpack(code: int) -> tuple[int, int, int, int, int]:
    code, r = divmod(code, _RADIX)
    code, q = divmod(code, 16)
    code, opt = divmod(code, 64)
    end, width = divmod(code, _RADIX)
    return end, width, opt, q - 1, r - 1


@dataclass
class _Layer:
    """DP values and parents of all k-stage suffixes whose front stage is on one flavor.

    ``value[r, h]`` is the least Σt (or max t) of such a suffix starting at layer h with r GPUs
    of the flavor left; ``parent[r, h]`` packs its front stage's end layer, width and option
    and where the rest of the suffix starts (:func:`_pack`).
    """

    value: np.ndarray
    parent: np.ndarray

    @classmethod
    def empty(cls, count: int, n: int) -> _Layer:
        shape = (count + 1, n + 1)
        return cls(np.full(shape, np.inf), np.zeros(shape, dtype=np.int64))

    def offer(self, rows: slice | np.ndarray, val: np.ndarray, end: np.ndarray | int,
              width: np.ndarray | int, opt: np.ndarray, src_q: np.ndarray | int,
              src_r: np.ndarray | int) -> None:
        """Keep, per (row, layer), whichever of the current and the offered suffix is cheaper."""
        cur = self.value[rows]
        better = val < cur
        if not better.any():
            return
        self.value[rows] = np.where(better, val, cur)
        self.parent[rows] = np.where(better, _pack(end, width, opt, src_q, src_r),
                                     self.parent[rows])


def solve_order(sc: StageCosts, order: Sequence[int], caps: RoundCaps, *,
                bottleneck: bool = False) -> OrderResult | None:
    """Least-Σt pipeline under ``caps`` for one flavor order (``None`` if nothing fits).

    With ``bottleneck`` the DP minimises ``max t_s`` instead (the same recursion with max in
    place of +): the smallest bottleneck any plan can have, a lower bound for the search.
    """
    n, m_micro = sc.n, sc.config.n_micro
    join = np.maximum if bottleneck else np.add
    counts = [sc.groups[g].count for g in order]
    widths = [widths_up_to(c) for c in counts]
    k_max = min(n, sum(counts))
    history: list[list[_Layer]] = []
    seen = [np.full((c + 1, n + 1), np.inf) for c in counts]
    best: tuple[float, int, int, int] | None = None    # (value, k, q, r)
    for k in range(1, k_max + 1):
        f = min(k, m_micro)
        layer = [_Layer.empty(c, n) for c in counts]
        prev = history[-1] if history else None
        if prev is not None:
            rest_val, rest_q, rest_r = _best_rest(prev, len(order), n)
        for q, gi in enumerate(order):
            ws = np.array(widths[q])
            t, oi = caps.cheapest_widths(sc, gi, widths[q], f)      # (widths × spans)
            top = counts[q] - ws                                   # rows of a fresh flavor
            if prev is None:                                       # the last stage: [h, n)
                layer[q].offer(top, t[:, :, n], n, ws[:, None], oi[:, :, n], -1, -1)
                continue
            _extend(layer[q], prev[q].value, t, oi, ws, q, join)
            if q + 1 < len(order) and np.isfinite(rest_val[q]).any():
                cand = join(t, rest_val[q][None, None, :])         # (widths, h, i)
                arg = cand.argmin(axis=2)
                wi, hi = np.indices(arg.shape)
                layer[q].offer(top, cand.min(axis=2), arg, ws[:, None], oi[wi, hi, arg],
                               rest_q[q][arg], rest_r[q][arg])
        for q in range(len(order)):
            _prune_dominated(layer[q], seen[q])
        history.append(layer)
        finite = False
        for q in range(len(order)):
            col = layer[q].value[:, 0]
            finite = finite or bool(np.isfinite(layer[q].value).any())
            r = int(col.argmin())
            if np.isfinite(col[r]) and (best is None or col[r] < best[0]):
                best = (float(col[r]), k, q, r)
        if not finite:
            break
    if best is None:
        return None
    return OrderResult(best[0], _rebuild(sc, order, history, best[1:]))


def _extend(layer: _Layer, src: np.ndarray, t: np.ndarray, oi: np.ndarray, ws: np.ndarray,
            q: int, join: np.ufunc) -> None:
    """Offer every suffix that puts one more stage of flavor q in front of a q-suffix.

    A front stage [h, i) on w GPUs before a suffix starting at i with r + w GPUs left leaves
    r; one min-plus product over (widths × rows × h × i) does every width at once.
    """
    c = src.shape[0] - 1
    live = np.flatnonzero(np.isfinite(src).any(axis=1))
    if live.size == 0:
        return
    r0, r1 = max(0, int(live[0]) - int(ws.max())), int(live[-1]) - int(ws.min())
    if r1 < r0:
        return
    rows = np.arange(r0, r1 + 1)
    idx = rows[None, :] + ws[:, None]                              # source rows (widths × rows)
    shifted = np.where((idx <= c)[:, :, None], src[np.minimum(idx, c)], np.inf)
    cand = join(t[:, None, :, :], shifted[:, :, None, :])          # (widths, rows, h, i)
    arg_i = cand.argmin(axis=3)
    by_w = cand.min(axis=3)
    arg_w = by_w.argmin(axis=0)                                    # (rows, h)
    val = by_w.min(axis=0)
    h = np.arange(t.shape[1])[None, :]
    end = arg_i[arg_w, np.arange(rows.size)[:, None], h]
    layer.offer(slice(r0, r1 + 1), val, end, ws[arg_w], oi[arg_w, h, end], q,
                rows[:, None] + ws[arg_w])


def _prune_dominated(layer: _Layer, seen: np.ndarray) -> None:
    """Drop suffixes another one beats on every count (exact pruning).

    A suffix with no more stages (its front stages hold no more micro-batches in flight), no
    fewer GPUs of its flavor left, and no larger Σt can be completed by every front that
    completes this one, at no larger cost. ``seen[r, h]`` is the least value over earlier
    layers (fewer stages) with at least r GPUs left; it is updated with this layer's values.
    """
    best_more_left = np.minimum.accumulate(layer.value[::-1], axis=0)[::-1]   # min over r' ≥ r
    shifted = np.vstack([best_more_left[1:], np.full((1, layer.value.shape[1]), np.inf)])
    dominated = (seen <= layer.value) | (shifted <= layer.value)
    layer.value[dominated] = np.inf
    np.minimum(seen, np.minimum.accumulate(layer.value[::-1], axis=0)[::-1], out=seen)


def _best_rest(prev: list[_Layer], m: int, n: int
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """For each order position q: the best suffix starting with a *later* flavor, per layer."""
    vals: list[np.ndarray] = [np.full(n + 1, np.inf)] * m
    qs: list[np.ndarray] = [np.full(n + 1, -1, dtype=np.int64)] * m
    rs: list[np.ndarray] = [np.full(n + 1, -1, dtype=np.int64)] * m
    run_v, run_q, run_r = np.full(n + 1, np.inf), np.full(n + 1, -1), np.full(n + 1, -1)
    for q in range(m - 1, -1, -1):
        vals[q], qs[q], rs[q] = run_v, run_q, run_r
        r = prev[q].value.argmin(axis=0)
        v = prev[q].value[r, np.arange(n + 1)]
        better = v < run_v
        run_v = np.where(better, v, run_v)
        run_q = np.where(better, q, run_q)
        run_r = np.where(better, r, run_r)
    return vals, qs, rs


def _rebuild(sc: StageCosts, order: Sequence[int], history: list[list[_Layer]],
             at: tuple[int, int, int]) -> tuple[Stage, ...]:
    k, q, r = at
    h = 0
    stages: list[Stage] = []
    m_micro = sc.config.n_micro
    while k >= 1:
        i, w, oi, src_q, src_r = _unpack(int(history[k - 1][q].parent[r, h]))
        opt: StageOption = sc.options(order[q], w)[oi]
        stages.append(sc.stage(order[q], opt, h, i, min(k, m_micro)))
        q, r = src_q, src_r
        h, k = i, k - 1
    return tuple(stages)
