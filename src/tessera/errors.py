"""Exception types shared across Tessera.

Every error a user can cause by bad input derives from :class:`TesseraError`, so the CLI can
print it as one clear line (no traceback) and exit with status 2.
"""

from __future__ import annotations


class TesseraError(Exception):
    """Base class for errors caused by input or configuration, shown to users verbatim."""


class UnknownFlavorError(TesseraError, KeyError):
    """A GPU flavor name that is not in the catalog."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else "unknown flavor"


class SpecError(TesseraError, ValueError):
    """A cluster, job or service specification that is malformed or impossible."""


class TraceFormatError(TesseraError, ValueError):
    """A trace file that cannot be parsed; names the file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = path
        if line is not None:
            where += f":{line}"
        if field is not None:
            where += f" (field {field!r})"
        super().__init__(f"{where}: {message}")


class NoProfileError(TesseraError, KeyError):
    """Performance data was asked for something that was never measured."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no profile"
