"""Strict, columnar CSV reading that points at the exact line and field when input is bad.

Every trace loader in :mod:`tessera.analyze.loaders` reads through :func:`read_table`. The
approach is "read everything as text, then cast column by column":

1. polars reads the file with no type inference, so a stray ``"abc"`` in a numeric column can
   never silently turn the whole column into strings (or crash half-way with an opaque message);
2. each declared column is cast with ``strict=False``; a value that was present but failed to
   cast is a *wrong type*, a value that is absent is *missing* (often a truncated last line);
3. only if something is wrong do we locate the first offending row and translate its row index
   into a 1-based file line (blank lines become all-null rows in polars, so row index and line
   number stay aligned; we drop those rows only after recording the index).

All checks are vectorised expressions; the only Python-level work is building one error message.
Errors are :class:`tessera.errors.TraceFormatError` (file, line, field, message), which the CLI
prints as one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tessera.errors import TraceFormatError

ROW = "__row"
"""Name of the temporary row-index column (0-based data row, before blank rows are dropped)."""


@dataclass(frozen=True, slots=True)
class Column:
    """How to read one column of a trace file.

    Attributes:
        dtype: the polars type to cast to (``pl.Float64``, ``pl.Int64``, ``pl.Utf8`` ...).
        required: a missing value is an error (otherwise it becomes null).
        kind: a human word for the expected content, used in error messages.
    """

    dtype: type[pl.DataType] | pl.DataType
    required: bool = True
    kind: str = "a number"


NUMBER = Column(pl.Float64)
INTEGER = Column(pl.Int64, kind="an integer")
TEXT = Column(pl.Utf8, kind="text")
OPTIONAL_TEXT = Column(pl.Utf8, required=False, kind="text")
OPTIONAL_NUMBER = Column(pl.Float64, required=False)


def read_table(
    path: Path,
    columns: Mapping[str, Column],
    *,
    has_header: bool = True,
    names: Sequence[str] | None = None,
    separator: str = ",",
) -> pl.DataFrame:
    """Read a delimited file into typed columns, raising on the first bad value.

    Args:
        path: the file.
        columns: the columns to keep and how to type them; other columns are dropped.
        has_header: whether line 1 holds column names.
        names: column names for header-less files (in file order).
        separator: the field separator (``","``; ``"\\t"`` for Gavel traces).

    Returns:
        A DataFrame with exactly the declared columns (typed) plus ``__row``, the 0-based data-row
        index, which callers use to report later, semantic errors at the right line.

    Raises:
        TraceFormatError: empty file, missing column, wrong type, missing value (truncation).
    """
    if not path.is_file():
        raise TraceFormatError(str(path), None, None, "no such file")
    if path.stat().st_size == 0:
        raise TraceFormatError(str(path), None, None, "file is empty")
    try:
        raw = pl.read_csv(
            path,
            infer_schema=False,
            has_header=has_header,
            new_columns=list(names) if names is not None else None,
            separator=separator,
            quote_char=None if separator == "\t" else '"',
        )
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceFormatError(str(path), None, None, f"cannot parse as CSV: {first}") from e
    header = list(raw.columns)
    for name in columns:
        if name not in header:
            raise TraceFormatError(
                str(path), 1 if has_header else None, name, f"missing column; header is {header}"
            )
    raw = raw.with_row_index(ROW).filter(~pl.all_horizontal(pl.exclude(ROW).is_null()))
    if raw.height == 0:
        raise TraceFormatError(
            str(path), 2 if has_header else 1, None, "no data rows (empty or truncated file)"
        )
    typed = raw.select(
        ROW, *[pl.col(n).cast(c.dtype, strict=False).alias(n) for n, c in columns.items()]
    )
    _raise_first_bad(path, raw, typed, columns, header_lines=1 if has_header else 0)
    return typed


def _raise_first_bad(
    path: Path,
    raw: pl.DataFrame,
    typed: pl.DataFrame,
    columns: Mapping[str, Column],
    header_lines: int,
) -> None:
    """Raise for the earliest row holding a missing required value or an uncastable value."""
    problems: list[tuple[int, str, str]] = []  # (row, field, message)
    for name, col in columns.items():
        text = raw[name]
        value = typed[name]
        wrong = text.is_not_null() & value.is_null()
        if wrong.any():
            i = int(wrong.arg_true()[0])
            problems.append((i, name, f"expected {col.kind}, got {text[i]!r}"))
        if col.required:
            missing = text.is_null()
            if missing.any():
                i = int(missing.arg_true()[0])
                problems.append((i, name, "missing value"))
    if not problems:
        return
    order = {name: k for k, name in enumerate(raw.columns)}
    i, field, message = min(problems, key=lambda p: (p[0], order[p[1]]))
    row = int(raw[ROW][i])
    line = row + 1 + header_lines
    if message == "missing value" and i == raw.height - 1 and not _ends_with_newline(path):
        n_fields = len(_last_line(path).split(","))
        message = (
            f"file is truncated: last line ends after {n_fields} of {len(raw.columns) - 1} fields"
        )
    raise TraceFormatError(str(path), line, field, message)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def _last_line(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        return f.read().decode("utf-8", "replace").rstrip("\n").rsplit("\n", 1)[-1]


def line_of(df: pl.DataFrame, i: int, header_lines: int = 1) -> int:
    """The 1-based file line of row ``i`` of a frame returned by :func:`read_table`."""
    return int(df[ROW][i]) + 1 + header_lines


def check_non_decreasing(
    path: Path, df: pl.DataFrame, field: str, header_lines: int = 1
) -> None:
    """Raise if ``field`` ever decreases from one row to the next (timestamps out of order).

    Used for formats whose files are documented as sorted by time (ITP, FGD pods, Gavel, Sia,
    the Philly node sequence); a decrease there means a corrupted or hand-edited file.
    """
    drops = (df[field] < df[field].shift(1)).fill_null(False)
    if drops.any():
        i = int(drops.arg_true()[0])
        raise TraceFormatError(
            str(path),
            line_of(df, i, header_lines),
            field,
            f"timestamps out of order: {df[field][i]} comes after {df[field][i - 1]} "
            f"(line {line_of(df, i - 1, header_lines)}); the file must be sorted by {field}",
        )


def _raise_at_first(
    path: Path, df: pl.DataFrame, bad: pl.Series, field: str, header_lines: int,
    message: Callable[[int], str],
) -> None:
    """Raise a TraceFormatError naming the first row where ``bad`` is true, if any."""
    bad = bad.fill_null(False)
    if bad.any():
        i = int(bad.arg_true()[0])
        raise TraceFormatError(str(path), line_of(df, i, header_lines), field, message(i))


def check_not_before(
    path: Path, df: pl.DataFrame, later: str, earlier: str, header_lines: int = 1
) -> None:
    """Raise on the first row where ``later`` < ``earlier`` (both present), e.g. end < start."""
    _raise_at_first(
        path, df, df[later] < df[earlier], later, header_lines,
        lambda i: f"timestamps out of order: {later}={df[later][i]} is before "
                  f"{earlier}={df[earlier][i]}",
    )


def check_min(
    path: Path, df: pl.DataFrame, field: str, minimum: float, header_lines: int = 1
) -> None:
    """Raise on the first row whose ``field`` is below ``minimum`` (negative durations ...)."""
    _raise_at_first(
        path, df, df[field] < minimum, field, header_lines,
        lambda i: f"value {df[field][i]} is below the minimum {minimum}",
    )


def parse_datetime(
    path: Path, df: pl.DataFrame, field: str, fmt: str = "%Y-%m-%d %H:%M:%S", header_lines: int = 1
) -> pl.Series:
    """Parse a text column of local wall-clock timestamps, raising on the first malformed one."""
    parsed = df[field].str.strptime(pl.Datetime("us"), fmt, strict=False)
    bad = parsed.is_null() & df[field].is_not_null()
    if bad.any():
        i = int(bad.arg_true()[0])
        raise TraceFormatError(
            str(path),
            line_of(df, i, header_lines),
            field,
            f"expected a timestamp like 2017-10-03 00:00:00, got {df[field][i]!r}",
        )
    return parsed
