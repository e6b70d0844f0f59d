"""Grid carbon intensity traces: how many grams of CO2-equivalent a kWh costs, over time.

``tessera simulate --carbon gb|fr|de|FILE`` reads one. The named regions are the 2020 traces
of *Let's Wait Awhile* (Wiesner et al., Middleware'21): Great Britain, France and Germany in
30-minute (Germany: 15-minute) steps. They are research data that may not be bundled, so they
are read from the public data folder (``<data folder>/carbon/{gb,fr,ger}_ci.csv``, found as
:mod:`tessera.workload.datadir` says); a missing file is a clear error naming the folders
searched. ``FILE`` is any CSV of the same shape: a header, then ``time,gCO2eq/kWh`` rows, time
as ``YYYY-MM-DD HH:MM[:SS]`` (or ISO 8601), strictly increasing.

A trace is a step function: row ``i``'s intensity holds from its time until the next row's
(the last row holds for the median step). Simulated time ``0`` is the trace's first time,
and a run longer than the trace wraps around to its start (a year of grid data repeats).

Bad traces are refused, each with a one-line error naming the value: an unparseable time, a
negative or non-numeric intensity, times that do not increase, a gap (two rows more than
:data:`MAX_STEP_S` apart).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from tessera.errors import SpecError
from tessera.workload.datadir import find_data, missing_data_message

__all__ = ["MAX_STEP_S", "REGIONS", "CarbonTrace", "load_carbon"]

REGIONS: dict[str, str] = {
    "gb": "carbon/gb_ci.csv", "fr": "carbon/fr_ci.csv", "de": "carbon/ger_ci.csv",
}
"""Named regions and their files in the public data folder."""

MAX_STEP_S = 3600.0
"""Two rows further apart than this (one hour) are a gap in the trace, and refused."""


@dataclass(frozen=True, slots=True, eq=False)
class CarbonTrace:
    """A carbon-intensity step function.

    Attributes:
        name: the region or file it came from.
        start: wall-clock time of the first row (simulated time 0).
        times_s: each row's time in seconds from ``start`` (``times_s[0] == 0``), increasing.
        g_per_kwh: each row's intensity, held until the next row.
        period_s: the trace's length (last row's time plus one step): where it wraps.
    """

    name: str
    start: datetime
    times_s: np.ndarray
    g_per_kwh: np.ndarray
    period_s: float
    cum_g_s_per_kwh: np.ndarray = field(init=False, repr=False)
    """Integral of intensity over time up to each row (and to the period's end)."""

    def __post_init__(self) -> None:
        ends = np.append(self.times_s[1:], self.period_s)
        cum = np.concatenate(([0.0], np.cumsum(self.g_per_kwh * (ends - self.times_s))))
        object.__setattr__(self, "cum_g_s_per_kwh", cum)

    def integral(self, t_s: np.ndarray) -> np.ndarray:
        """``∫_0^t intensity dt`` in g·s/kWh at each time of ``t_s`` (wrapping around)."""
        t = np.asarray(t_s, dtype=float)
        cum = self.cum_g_s_per_kwh
        laps, rest = np.divmod(t, self.period_s)
        i = np.clip(np.searchsorted(self.times_s, rest, side="right") - 1, 0, None)
        return laps * cum[-1] + cum[i] + self.g_per_kwh[i] * (rest - self.times_s[i])

    def at(self, t_s: float) -> float:
        """Intensity at simulated time ``t_s`` (seconds), in gCO2eq/kWh."""
        rest = t_s % self.period_s
        return float(self.g_per_kwh[int(np.searchsorted(self.times_s, rest, side="right")) - 1])

    def mean_g_per_kwh(self, t0_s: float, t1_s: float) -> float:
        """Average intensity over ``[t0_s, t1_s)``."""
        if t1_s <= t0_s:
            return self.at(t0_s)
        a, b = self.integral(np.array([t0_s, t1_s]))
        return float((b - a) / (t1_s - t0_s))

    def carbon_g(self, times_s: np.ndarray, power_w: np.ndarray) -> float:
        """Grams of CO2eq of a power step function: ``power_w[i]`` from ``times_s[i]`` to
        ``times_s[i + 1]`` (the last value is not used: it has no end)."""
        if len(times_s) < 2:
            return 0.0
        ci = np.diff(self.integral(times_s))  # g·s/kWh over each segment
        return float(np.sum(power_w[:-1] * ci) / 3.6e6)  # W·s = J; 1 kWh = 3.6e6 J


def _parse_time(text: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise SpecError(f"carbon trace {where}: unparseable time {text!r}") from None


def _parse_value(text: str, where: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"carbon trace {where}: intensity {text!r} is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise SpecError(f"carbon trace {where}: intensity {text.strip()} gCO2eq/kWh is negative "
                        "or not finite")
    return v


def parse_carbon(path: Path, name: str) -> CarbonTrace:
    """Read and check a carbon CSV (see the module docstring for the rules)."""
    times: list[datetime] = []
    values: list[float] = []
    try:  # (a binary file would otherwise end in a UnicodeDecodeError traceback mid-read)
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"carbon trace {path.name}: not a UTF-8 text file (byte {e.start}: "
                        f"{e.reason}); expected a CSV of time,gCO2eq/kWh rows") from None
    with path.open(newline="", encoding="utf-8") as fh:
        rows = csv.reader(fh)
        next(rows, None)  # (the header)
        for lineno, row in enumerate(rows, start=2):
            if not row or not "".join(row).strip():
                continue
            where = f"{path.name} line {lineno}"
            if len(row) < 2:
                raise SpecError(f"carbon trace {where}: expected 'time,intensity', got {row!r}")
            t = _parse_time(row[0], where)
            if times and (t.tzinfo is None) != (times[0].tzinfo is None):
                raise SpecError(f"carbon trace {where}: time {row[0].strip()!r} and the first "
                                f"time {times[0].isoformat()!r} differ in having a UTC "
                                "offset; give every time with one, or none")
            if times:
                step_s = (t - times[-1]).total_seconds()
                if step_s <= 0:
                    raise SpecError(f"carbon trace {where}: time {row[0]} is not after "
                                    f"{times[-1]}")
                if step_s > MAX_STEP_S:
                    raise SpecError(f"carbon trace {where}: gap of {step_s / 3600:g} h from "
                                    f"{times[-1]} to {row[0]} (at most {MAX_STEP_S / 3600:g} h)")
            times.append(t)
            values.append(_parse_value(row[1], where))
    if len(times) < 2:
        raise SpecError(f"carbon trace {path.name}: needs at least two rows, has {len(times)}")
    t_s = np.array([(t - times[0]).total_seconds() for t in times])
    step = float(np.median(np.diff(t_s)))
    return CarbonTrace(name, times[0], t_s, np.array(values), float(t_s[-1] + step))


def load_carbon(spec: str) -> CarbonTrace:
    """The trace ``--carbon`` names: a region (``gb``, ``fr``, ``de``) or a CSV file.

    Raises:
        SpecError: the region's file is not in the data folder, the file does not exist, or
            the trace is bad (see the module docstring).
    """
    key = spec.strip().lower()
    if key in REGIONS:
        path = find_data(REGIONS[key])
        if path is None:
            raise SpecError(missing_data_message(f"carbon region {key!r}", REGIONS[key]))
        return parse_carbon(path, key)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise SpecError(f"--carbon {spec!r}: not a region ({', '.join(REGIONS)}) nor a file")
    return parse_carbon(path, path.name)
