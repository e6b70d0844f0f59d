"""Statistical efficiency: how much a sample is worth at a given batch size (Pollux, OSDI'21).

Doubling the global batch doubles the samples a step processes, but not the progress it makes:
a step averages the gradient over the batch, and once the batch is large enough that the average
is already a good estimate, more samples in the same step add little. Pollux measures this with
the **gradient noise scale** and defines the *statistical efficiency* of a batch ``M`` relative
to the job's initial batch ``M0``::

    phi          = M0 * grad_var / grad_sqr     (gradient noise scale, in samples)
    efficiency   = (phi + M0) / (phi + M)       (1 at M = M0, falling towards M0 / M)

``grad_sqr`` is the squared norm of the mean gradient and ``grad_var`` the variance of the
gradient estimate, both as measured by the training run (adaptdl reports them at the scale of
``M0``). A sample processed at batch ``M`` is worth ``efficiency`` samples processed at ``M0``;
so a job's **progress** is counted in *samples at the initial batch's efficiency*, and a job at a
larger batch needs more raw samples to finish. The noise scale grows as training advances
(gradients get noisier relative to their mean), which is why large batches pay off late in
training; the efficiency is therefore a function of the progress made so far.

The data are the ``validation-<B>.csv`` files of the Sia/Pollux artifact: one training run per
global batch ``B``, one row per epoch with ``progress``, ``iteration``, ``metric``, ``grad_sqr``
and ``grad_var``. ``progress`` is in units of *initial-batch steps*: ``progress × M0`` is the
statistical progress in samples (cifar10: 391 per epoch × 128 = its 50,000 images), and it is the
same at the end of every file of a model (within 0.1 %): each file is one run of the same training
schedule. ``iteration`` is the number of steps the run at ``B`` took, so a *rigid* job at batch
``B`` needs exactly that many steps to reach the curve's end.

**The target.** The files carry no target metric; a job is done when it has made the statistical
progress of its curve's last row (``target_samples``): the end of the recorded training schedule
(cifar10 100 epochs to 94 % accuracy, imagenet 90 epochs to 75 % top-1, …). That is Pollux's
definition of a job's length, in samples at the initial batch's efficiency.

The files are bundled under ``tessera/data/sia/<model>/`` (see its NOTICE.txt).
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tessera.errors import NoProfileError, SpecError, TraceFormatError
from tessera.perf.sia import model_dir

_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


class NoEfficiencyDataError(NoProfileError):
    """A model has no validation curves, so its statistical efficiency is unknown."""


@dataclass(frozen=True, slots=True)
class ValidationCurve:
    """One training run of a model at a fixed global batch, one entry per epoch.

    Attributes:
        batch_samples: the run's global batch ``B``.
        progress_steps: statistical progress after each epoch, in initial-batch steps.
        iterations: steps taken at ``B`` by the end of each epoch.
        metric: validation metric after each epoch (accuracy, F1, WER or loss: model-specific).
        grad_sqr: squared norm of the mean gradient during each epoch.
        grad_var: gradient variance during each epoch.
    """

    batch_samples: int
    progress_steps: tuple[float, ...]
    iterations: tuple[int, ...]
    metric: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]

    def epoch_at(self, progress_steps: float) -> int:
        """Index of the epoch under way at ``progress_steps`` (the last one past the end)."""
        i = bisect.bisect_right(self.progress_steps, progress_steps)
        return min(i, len(self.progress_steps) - 1)


@dataclass(frozen=True, slots=True)
class EfficiencyProfile:
    """All validation curves of one model, and what follows from them.

    Attributes:
        model: Sia's model folder name (``cifar10`` …).
        curves: one curve per measured global batch, smallest batch first.
    """

    model: str
    curves: tuple[ValidationCurve, ...]

    @property
    def initial_batch_samples(self) -> int:
        """``M0``: the smallest measured batch, the one progress is counted at."""
        return self.curves[0].batch_samples

    @property
    def max_batch_samples(self) -> int:
        """The largest measured global batch: no efficiency is known above it."""
        return self.curves[-1].batch_samples

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(c.batch_samples for c in self.curves)

    @property
    def target_samples(self) -> float:
        """Statistical progress (samples at ``M0``'s efficiency) a job needs to finish."""
        return self.curves[0].progress_steps[-1] * self.initial_batch_samples

    def rigid_steps(self, batch_samples: int) -> float:
        """Steps a job that keeps ``batch_samples`` throughout needs to reach the target.

        Exactly the last ``iteration`` of the run at that batch when one was measured; between
        two measured runs, the raw samples needed (steps × batch) are interpolated linearly in
        the batch.

        Raises:
            SpecError: ``batch_samples`` is outside the measured range.
        """
        self.check_batch(batch_samples)
        hi = bisect.bisect_left(self.batches, batch_samples)
        upper = self.curves[hi]
        if upper.batch_samples == batch_samples:
            return float(upper.iterations[-1])
        lower = self.curves[hi - 1]
        s0 = lower.iterations[-1] * lower.batch_samples
        s1 = upper.iterations[-1] * upper.batch_samples
        w = (batch_samples - lower.batch_samples) / (upper.batch_samples - lower.batch_samples)
        return (s0 + w * (s1 - s0)) / batch_samples

    def check_batch(self, batch_samples: float) -> None:
        """Raise SpecError unless ``batch_samples`` lies in the measured batch range."""
        lo, hi = self.initial_batch_samples, self.max_batch_samples
        if not lo <= batch_samples <= hi:
            raise SpecError(
                f"{self.model}: global batch {batch_samples:g} is outside the profiled range "
                f"{lo}-{hi} (no statistical efficiency is known there)"
            )

    def grad_stats(self, batch_samples: float, progress_samples: float) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` at a batch and a point of training.

        The statistics of the epoch under way at ``progress_samples``, interpolated linearly in
        the batch between the two measured runs around ``batch_samples`` (the runs differ: a
        large-batch run's gradients are measured on its own trajectory).
        """
        self.check_batch(batch_samples)
        steps = progress_samples / self.initial_batch_samples
        hi = bisect.bisect_left(self.batches, batch_samples)
        upper = self.curves[hi]
        lower = self.curves[hi - 1] if hi > 0 else upper
        eu, el = upper.epoch_at(steps), lower.epoch_at(steps)
        if upper is lower:
            return upper.grad_sqr[eu], upper.grad_var[eu]
        w = (batch_samples - lower.batch_samples) / (upper.batch_samples - lower.batch_samples)
        sqr = lower.grad_sqr[el] + w * (upper.grad_sqr[eu] - lower.grad_sqr[el])
        var = lower.grad_var[el] + w * (upper.grad_var[eu] - lower.grad_var[el])
        return sqr, var

    def noise_scale_samples(self, batch_samples: float, progress_samples: float) -> float:
        """``phi = M0 × grad_var / grad_sqr``: the gradient noise scale, in samples."""
        sqr, var = self.grad_stats(batch_samples, progress_samples)
        return self.initial_batch_samples * var / sqr if sqr > 0 else math.inf

    def efficiency(self, batch_samples: float, progress_samples: float) -> float:
        """Pollux's statistical efficiency of ``batch_samples`` relative to ``M0``, in (0, 1].

        Computed in the README's gain form, ``gain / s`` with ``s = M / M0`` and ``gain =
        (grad_var + grad_sqr) / (grad_var / s + grad_sqr)``: the same value as ``(phi + M0) /
        (phi + M)``, and defined where a run measured ``grad_sqr = 0`` (deepspeech2 late in
        training; infinite noise scale, efficiency 1).
        """
        sqr, var = self.grad_stats(batch_samples, progress_samples)
        scale = batch_samples / self.initial_batch_samples
        gain = (var + sqr) / (var / scale + sqr)
        return gain / scale


def load_efficiency(model: str, root: str | Path | None = None) -> EfficiencyProfile:
    """The validation curves of ``model`` (bundled copy by default).

    Raises:
        NoProfileError: the model is not profiled at all.
        NoEfficiencyDataError: the model is profiled but has no validation curves (gpt_pmp).
        TraceFormatError: a malformed file (named, with its line).
    """
    return _load_cached(model, None if root is None else str(root))


@lru_cache(maxsize=32)
def _load_cached(model: str, root: str | None) -> EfficiencyProfile:
    d = model_dir(model, root)
    curves = []
    for f in d.iterdir():
        name = f.name
        if not (name.startswith("validation-") and name.endswith(".csv")):
            continue
        src = f"{model}/{name}"
        try:
            batch = int(name[len("validation-"):-len(".csv")])
        except ValueError:
            raise TraceFormatError(src, 0, None, "file name does not end in -<batch>.csv") from None
        curves.append(_read_curve(f.read_text(), src, batch))
    if not curves:
        raise NoEfficiencyDataError(
            f"no statistical-efficiency data (validation-*.csv) for model {model!r}"
        )
    curves.sort(key=lambda c: c.batch_samples)
    return EfficiencyProfile(model, tuple(curves))


def _read_curve(text: str, src: str, batch: int) -> ValidationCurve:
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceFormatError(src, 1, missing[0], "missing column")
    cols: dict[str, list[float]] = {c: [] for c in _COLUMNS}
    for line, row in enumerate(reader, start=2):
        for c in _COLUMNS:
            try:
                value = float(row[c])
            except (TypeError, ValueError):
                raise TraceFormatError(src, line, c, f"not a number: {row[c]!r}") from None
            if (c == "progress" and not value > 0) or (c.startswith("grad") and value < 0):
                raise TraceFormatError(src, line, c, f"out of range: {value:g}")
            cols[c].append(value)
        if cols["grad_sqr"][-1] + cols["grad_var"][-1] <= 0:
            raise TraceFormatError(src, line, "grad_var", "grad_sqr and grad_var are both 0")
    if not cols["progress"]:
        raise TraceFormatError(src, 1, None, "no data rows")
    if any(b < a for a, b in zip(cols["progress"], cols["progress"][1:], strict=False)):
        raise TraceFormatError(src, 0, "progress", "progress must not decrease")
    return ValidationCurve(
        batch, tuple(cols["progress"]), tuple(int(x) for x in cols["iteration"]),
        tuple(cols["metric"]), tuple(cols["grad_sqr"]), tuple(cols["grad_var"]),
    )
