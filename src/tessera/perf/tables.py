"""Choosing a throughput table by name: the command line's ``--throughputs`` value.

* ``gavel`` (the default): Gavel's measurements on K80, P100 and V100
  (:func:`tessera.perf.profiles.default_throughputs`);
* ``sia``: the Sia/Pollux profiles on T4, V100, A100 and RTX GPUs
  (:func:`tessera.perf.sia_table.sia_throughputs`);
* anything else: a path to a throughputs JSON in Gavel's layout.
"""

from __future__ import annotations

from pathlib import Path

from tessera.errors import SpecError
from tessera.perf.profiles import ThroughputTable, default_throughputs, load_gavel_throughputs
from tessera.perf.sia_table import sia_throughputs

TABLE_NAMES: tuple[str, ...] = ("gavel", "sia")


def load_throughputs(spec: str | Path | None) -> ThroughputTable:
    """The table named by ``spec`` (see the module docstring); ``None`` means ``gavel``.

    Raises:
        SpecError: ``spec`` is neither a table name nor an existing file, or the file is not
            a Gavel throughputs JSON.
    """
    if spec is None or str(spec) == "gavel":
        return default_throughputs()
    if str(spec) == "sia":
        return sia_throughputs()
    path = Path(spec)
    if not path.is_file():
        raise SpecError(f"throughputs {str(spec)!r}: not a file; built-in tables: "
                        f"{', '.join(TABLE_NAMES)}")
    try:
        return load_gavel_throughputs(path)
    except (UnicodeDecodeError, ValueError, AttributeError, TypeError) as e:  # not its layout
        raise SpecError(f"throughputs {str(spec)!r}: not a Gavel throughputs JSON "
                        f"(simulation_throughputs.json layout): {type(e).__name__}: "
                        f"{str(e)[:200]}") from None
