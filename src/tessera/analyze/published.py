"""Published characterisation figures, as typed reference data, and how we compare against them.

Each :class:`PublishedFigure` is one number a paper, an artifact or a data README states about a
trace, with its source and evidence level (see ``docs/reference/traces.md`` §4):

* ``V`` — verified quote from the paper or the authors' own artifact/data;
* ``T`` — transcribed by third parties, not checked against the PDF;
* ``C`` — computed from the stored files by whoever curated them (their README).

A figure names the :mod:`metric <tessera.analyze.stats>` that measures it, or explains in
``why_not`` why the stored data cannot (no status column, a filtered subset, logs not stored).
:func:`compare` never invents a value: a figure is *reproduced* when the measured metric lies
within ``tolerance`` (in the figure's unit), *differs* otherwise (with the signed difference),
and is *not reproducible* when the metric is absent. These numbers are **inputs to a
comparison**, never outputs of the analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Evidence(StrEnum):
    """How much to trust a published value (traces.md §4)."""

    VERIFIED = "V"
    TRANSCRIBED = "T"
    COMPUTED = "C"


class Outcome(StrEnum):
    """Result of comparing one figure with what the stored data gives."""

    REPRODUCED = "reproduced"
    DIFFERS = "differs"
    NOT_REPRODUCIBLE = "not reproducible"


@dataclass(frozen=True, slots=True)
class PublishedFigure:
    """One published number and how to measure it.

    Attributes:
        formats: trace formats the figure is about (see :data:`.formats.FORMATS`).
        quantity: what the number is, in words.
        value: the published value, in ``unit``.
        unit: ``%``, ``s``, ``min``, ``h``, ``jobs``, ``GPUs``, ``GPU-h`` ...
        source: paper / artifact and location.
        evidence: :class:`Evidence` level.
        metric: key into the measured metrics, or None when the stored data cannot give it.
        tolerance: largest absolute difference (in ``unit``) still called reproduced.
        scale: factor from the metric's unit to ``unit`` (e.g. 1/60 for seconds → minutes).
        why_not: why it is not reproducible (required when ``metric`` is None).
        variant: trace name the figure needs (e.g. a resampled FGD file); others report why_not.
    """

    formats: tuple[str, ...]
    quantity: str
    value: float
    unit: str
    source: str
    evidence: Evidence
    metric: str | None
    tolerance: float = 0.0
    scale: float = 1.0
    why_not: str = ""
    variant: str | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    """A figure next to what we measured."""

    figure: PublishedFigure
    outcome: Outcome
    measured: float | None
    difference: float | None
    note: str

    def describe(self) -> str:
        """``reproduced`` / ``differs by +1.2 %`` / ``not reproducible: <why>``."""
        if self.outcome is Outcome.DIFFERS and self.difference is not None:
            text = f"differs by {self.difference:+,.4g} {self.figure.unit}"
            return f"{text} ({self.note})" if self.note else text
        if self.outcome is Outcome.NOT_REPRODUCIBLE:
            return f"not reproducible: {self.note}"
        return str(self.outcome)


def compare(
    figures: tuple[PublishedFigure, ...],
    metrics: Mapping[str, float],
    trace_format: str,
    trace_name: str,
) -> tuple[Comparison, ...]:
    """Compare every figure about ``trace_format`` with ``metrics``."""
    out = []
    for f in figures:
        if trace_format not in f.formats:
            continue
        if f.metric is None or (f.variant is not None and f.variant != trace_name):
            out.append(Comparison(f, Outcome.NOT_REPRODUCIBLE, None, None, f.why_not))
            continue
        if f.metric not in metrics:
            note = f.why_not or f"this input has no {f.metric!r} (a file of the trace is missing?)"
            out.append(Comparison(f, Outcome.NOT_REPRODUCIBLE, None, None, note))
            continue
        measured = metrics[f.metric] * f.scale
        diff = measured - f.value
        ok = abs(diff) <= f.tolerance + 1e-9 * max(1.0, abs(f.value))
        out.append(
            Comparison(f, Outcome.REPRODUCED if ok else Outcome.DIFFERS, measured, diff, f.why_not)
        )
    return tuple(out)
