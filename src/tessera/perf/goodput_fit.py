"""Pollux's agent: a job's goodput model fitted online from what the job reports.

The bundled efficiency table (:mod:`tessera.perf.efficiency`) knows the gradient statistics of
seven models at every batch and epoch. A job the table does not know -- or one that trains
differently from the table's run -- can still tell the scheduler two things as it runs, as
Pollux's agent does inside each job (Qiao et al., OSDI'21, section 3.1):

**Its gradient noise scale** ``phi`` (samples, measured at the initial batch ``M0``). With it
the statistical efficiency of any batch ``M`` is Pollux's closed form::

    efficiency(M) = (phi + M0) / (phi + M)          (1 at M0, towards M0 / M for large M)

:class:`GnsEfficiency` is that form with the interface the goodput search uses
(:func:`tessera.perf.goodput.best_of`), so a fitted job is valued exactly as a tabled one,
only with its own noise scale. The reported value is kept to 3 significant digits
(:func:`quantize_gns`): a change smaller than 0.5 % moves no decision, and a goodput row
is recomputed only when the value moves more than that.

**Its step times** at the sizes it has run on (one optimizer step, no accumulation). Pollux
models one iteration on ``N`` GPUs with a local batch ``m`` as::

    t_grad = alpha_grad + beta_grad * m
    t_sync = 0 if N == 1 else alpha_sync + beta_sync * (N - 2)
    t_iter = (t_grad ** gamma + t_sync ** gamma) ** (1 / gamma)   (gamma >= 1: overlap)

:func:`fit_throughput` fits the five parameters to the observed ``(N, m, seconds)`` by least
squares on the relative error (bounded: every parameter >= 0, ``1 <= gamma <= 10``). Until
the job has run on more than one GPU the sync terms are unobserved and stay 0 (Pollux's
optimistic prior: perfect scaling, which is why a job's range grows by doubling).

Bad reports are refused with a one-line reason (:func:`check_gns`): a noise scale that is not a
finite number, or negative.

>>> eff = GnsEfficiency(noise_scale_samples=1000.0, initial_batch_samples=128)
>>> round(eff.efficiency(1256, 0.0), 3)   # (1000 + 128) / (1000 + 1256)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.optimize import least_squares, nnls

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor

GAMMA_MAX = 10.0


class EfficiencyFn(Protocol):
    """What :func:`best_of` needs of a statistical-efficiency model: the table's
    (:class:`~tessera.perf.efficiency.EfficiencyProfile`) or one fitted from a job's reported
    noise scale (:class:`~tessera.perf.goodput_fit.GnsEfficiency`)."""

    def efficiency(self, batch_samples: float, progress_samples: float) -> float: ...


def check_gns(value: object) -> str | None:
    """Why a reported gradient noise scale is refused, or ``None`` when it is usable."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"gns must be a number, got {value!r:.40}"
    if not math.isfinite(value):
        return f"gns must be finite, got {value}"
    if value < 0:
        return f"gns must be >= 0 (a noise scale in samples), got {value:g}"
    return None


def fit_noise_scale(reports: Sequence[float]) -> float | None:
    """A job's noise scale from its latest reports: their median (one noisy estimate, a
    gradient measured on one odd batch, does not move it), ``None`` with none."""
    if not reports:
        return None
    ordered = sorted(reports)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def quantize_gns(value: float) -> float:
    """``value`` to 3 significant digits (the precision decisions are cached at)."""
    if value <= 0:
        return 0.0
    digits = 2 - math.floor(math.log10(value))
    return round(value, digits)


@dataclass(frozen=True, slots=True)
class GnsEfficiency:
    """Pollux's statistical efficiency from a reported noise scale.

    Attributes:
        noise_scale_samples: ``phi``, the gradient noise scale at ``M0`` (samples, >= 0).
        initial_batch_samples: ``M0``, the batch progress is counted at.
    """

    noise_scale_samples: float
    initial_batch_samples: float

    def __post_init__(self) -> None:
        why = check_gns(self.noise_scale_samples)
        if why is not None:
            raise SpecError(why)
        if not self.initial_batch_samples > 0:
            raise SpecError(f"initial batch must be > 0, got {self.initial_batch_samples:g}")

    def efficiency(self, batch_samples: float, progress_samples: float = 0.0) -> float:
        """``(phi + M0) / (phi + M)``, in (0, 1] for ``M >= M0`` (``progress_samples`` is
        unused: the report already is the noise scale at the job's point of training)."""
        phi, m0 = self.noise_scale_samples, self.initial_batch_samples
        return (phi + m0) / (phi + batch_samples)


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """Pollux's iteration-time model (see the module docstring); times in seconds."""

    alpha_grad_s: float
    beta_grad_s_per_sample: float
    alpha_sync_s: float = 0.0
    beta_sync_s_per_gpu: float = 0.0
    gamma: float = 1.0

    def iteration_s(self, num_gpus: int, local_batch_samples: float,
                    accumulation_steps: int = 1) -> float:
        """Seconds per iteration of ``num_gpus`` GPUs at ``local_batch_samples`` each; with
        ``k`` accumulation passes, ``k - 1`` passes of ``t_grad`` before the last one, which
        overlaps the synchronisation."""
        last = float(_iter_s(self.as_array(), np.array([num_gpus], dtype=float),
                             np.array([local_batch_samples], dtype=float))[0])
        grad = self.alpha_grad_s + self.beta_grad_s_per_sample * local_batch_samples
        return (accumulation_steps - 1) * grad + last

    def iteration_times_s(self, num_gpus: int, local_batches_samples: Sequence[float],
                          accumulation_steps: Sequence[int]) -> list[float]:
        """:meth:`iteration_s` of ``num_gpus`` GPUs at each local batch (with its accumulation
        passes), in one vectorised evaluation (a goodput row prices dozens of batches)."""
        m = np.asarray(local_batches_samples, dtype=float)
        k = np.asarray(accumulation_steps, dtype=float)
        p = self.as_array()
        last = _iter_s(p, np.full_like(m, float(num_gpus)), m)
        grad = p[0] + p[1] * m
        return [float(v) for v in (k - 1) * grad + last]

    def throughput_samples_per_s(self, num_gpus: int, local_batch_samples: float) -> float:
        """Samples per second of the whole gang."""
        return num_gpus * local_batch_samples / self.iteration_s(num_gpus, local_batch_samples)

    def as_array(self) -> np.ndarray:
        return np.array([self.alpha_grad_s, self.beta_grad_s_per_sample, self.alpha_sync_s,
                         self.beta_sync_s_per_gpu, self.gamma])


StepFits = tuple[tuple[GpuFlavor, ThroughputParams], ...]
"""A job's fitted throughput model per flavor it has run on (``JobView.step_fits``)."""


def fit_on(fits: StepFits, flavor: GpuFlavor) -> ThroughputParams | None:
    """The fit on ``flavor``, ``None`` where the job has none."""
    for f, p in fits:
        if f == flavor:
            return p
    return None


def _iter_s(p: np.ndarray, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    grad = p[0] + p[1] * m
    sync = np.where(n > 1, p[2] + p[3] * np.maximum(n - 2, 0), 0.0)
    g = p[4]
    with np.errstate(over="ignore"):  # a trial step of the fit may overflow: inf, rejected
        return np.asarray((grad ** g + sync ** g) ** (1.0 / g))


def _iter_jac(p: np.ndarray, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``d t_iter / d p`` for the five parameters, one row per observation (analytic: the
    fit's cost is a few Jacobians, not hundreds of finite differences)."""
    grad = p[0] + p[1] * m
    many = (n > 1).astype(float)
    sync = many * (p[2] + p[3] * np.maximum(n - 2, 0))
    g = p[4]
    f = np.maximum(_iter_s(p, n, m), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_grad = (grad / f) ** (g - 1)  # 0 ** 0 = 1: at gamma 1 the sum is linear
        d_sync = many * (sync / f) ** (g - 1)
        s = grad ** g + sync ** g
        xlogx = np.where(grad > 0, grad ** g * np.log(np.where(grad > 0, grad, 1.0)), 0.0) + \
            np.where(sync > 0, sync ** g * np.log(np.where(sync > 0, sync, 1.0)), 0.0)
        d_g = f * (-np.log(np.maximum(s, 1e-300)) / g ** 2 + xlogx / (g * np.maximum(s, 1e-300)))
    return np.stack([d_grad, d_grad * m, d_sync, d_sync * np.maximum(n - 2, 0), d_g], axis=1)


def _fit_compute(n: np.ndarray, m: np.ndarray, t: np.ndarray,
                 several_batches: bool) -> tuple[float, float]:
    """``(alpha_grad, beta_grad)`` of one-GPU step times: a linear least squares on the
    relative error, both terms >= 0 (``alpha_grad`` 0 with one local batch)."""
    if several_batches:
        got, _res = nnls(np.stack([1.0 / t, m / t], axis=1), np.ones_like(t))
        return float(got[0]), float(got[1])
    x = m / t
    return 0.0, float(x.sum() / (x * x).sum())


def fit_throughput(observations: Sequence[tuple[int, float, float]],
                   start: ThroughputParams | None = None) -> ThroughputParams:
    """Pollux's throughput parameters from ``(num_gpus, local_batch_samples, iteration_s)``.

    Least squares on the relative error, every parameter >= 0 and ``1 <= gamma <= 10``. With
    one local batch only, ``alpha_grad`` and ``beta_grad`` cannot be told apart and the fit
    puts all of the compute time in ``beta_grad`` (time proportional to the batch: the
    cautious prior, under which a larger local batch buys no throughput until one is
    observed); observations on one GPU only leave the sync terms at 0 (and ``gamma`` at 1:
    the fit is then a linear one, solved directly), and on at most two GPUs ``beta_sync`` (it
    multiplies ``N - 2``). Only the parameters the observations can tell are fitted, with
    the analytic Jacobian. ``start`` (the job's previous fit) is where the search starts:
    where the observations leave the model some freedom (``gamma`` against the sync terms), a
    refit then stays near the fit the policies already use, and converges in a few steps.

    Raises:
        SpecError: no observations, or one that is not positive and finite.
    """
    if not observations:
        raise SpecError("no step-time observations to fit a throughput model to")
    for gpus, local, secs in observations:
        if not (gpus >= 1 and local > 0 and secs > 0 and math.isfinite(local)
                and math.isfinite(secs)):
            raise SpecError(f"bad step-time observation (gpus={gpus}, local batch={local}, "
                            f"s={secs}): all must be positive and finite")
    arr = np.array(observations, dtype=float)
    n, m, t = arr[:, 0], arr[:, 1], arr[:, 2]
    multi = bool((n > 1).any())
    beyond_two = bool((n > 2).any())  # beta_sync multiplies N - 2: unseen up to two GPUs
    several_batches = len(set(m.tolist())) > 1
    if not multi:
        a, b = _fit_compute(n, m, t, several_batches)
        return ThroughputParams(a, b)
    free = np.array([several_batches, True, True, beyond_two, True])
    a0, b0 = (float(t.min()) / 2 if several_batches else 0.0), float(t.min() / m.max()) / 2
    full = np.array([a0, b0, float(t.min()) / 10, 0.0, 1.0])
    lo = np.array([0.0, 0.0, 0.0, 0.0, 1.0])[free]
    hi = np.array([np.inf, np.inf, np.inf, np.inf, GAMMA_MAX])[free]
    if start is not None:
        full = np.where(free, start.as_array(), full)
        if not several_batches:
            full[0] = 0.0
    x0 = np.clip(full[free], lo, hi)

    def params(x: np.ndarray) -> np.ndarray:
        p = full.copy()
        p[free] = x
        return p

    def residual(x: np.ndarray) -> np.ndarray:
        return np.asarray(_iter_s(params(x), n, m) / t - 1.0)

    def jac(x: np.ndarray) -> np.ndarray:
        return np.asarray(_iter_jac(params(x), n, m)[:, free] / t[:, None])

    got = least_squares(residual, x0, jac=jac, bounds=(lo, hi), x_scale="jac", xtol=1e-10,
                        ftol=1e-10, gtol=1e-10, max_nfev=500)
    a, b, c, d, g = (float(v) for v in params(got.x))
    if not beyond_two:
        d = 0.0
    return ThroughputParams(a if several_batches else 0.0, b, c, d, g)
