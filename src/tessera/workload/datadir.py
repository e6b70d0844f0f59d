"""Where Tessera looks for the public data that does not ship with the package.

Most named traces (``philly-full``, ``itp``, ``fgd`` ...) and the serving request traces are
public data sets too large, or licensed too loosely, to bundle. They live in a *data folder*
laid out like the team's ``shared/data``: ``<folder>/traces/philly/philly_jobs_pollux.csv`` and
so on. Every command finds that folder by the same rule:

1. If ``$TESSERA_DATA_DIR`` is set, it is the data folder, and the only place looked. Pointing
   it somewhere pins exactly which files a run reads (tests point it at an empty folder to see
   what a user without the data sees).
2. Otherwise Tessera tries, in order, ``shared/data`` beside the source checkout
   (``<checkout>/../shared/data``, only when running from a checkout), then ``shared/data`` and
   ``../shared/data`` under the current directory. Each folder is listed once, even when two
   of these name the same place.

``$TESSERA_DATA`` is the old name ``tessera analyze`` used; it is still read when
``TESSERA_DATA_DIR`` is unset, with a :class:`FutureWarning`.

A missing file is reported by :func:`missing_data_message`, which names the file, every folder
searched and the variable to set, so all commands fail the same way.
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

DATA_DIR_ENV = "TESSERA_DATA_DIR"
"""The environment variable naming the data folder (the folder that holds ``traces/``)."""
DEPRECATED_DATA_ENV = "TESSERA_DATA"
"""Old name of :data:`DATA_DIR_ENV`; read only when the new one is unset."""
DOCS_HINT = 'docs/workloads.md, "Public data"'
"""Where the data layout and its sources are described (named in error messages)."""


@functools.cache
def _warn_deprecated(value: str) -> None:
    """Warn once per process (and value) that the old variable is in use."""
    warnings.warn(
        f"{DEPRECATED_DATA_ENV} is deprecated; set {DATA_DIR_ENV} instead (same meaning: the "
        "folder that holds traces/)",
        FutureWarning,
        stacklevel=4,
    )


def _env_dir() -> tuple[str, Path] | None:
    """``(variable, folder)`` when the data folder is set in the environment."""
    value = os.environ.get(DATA_DIR_ENV)
    if value:
        return DATA_DIR_ENV, Path(value).expanduser().resolve()
    old = os.environ.get(DEPRECATED_DATA_ENV)
    if old:
        _warn_deprecated(old)
        return DEPRECATED_DATA_ENV, Path(old).expanduser().resolve()
    return None


def _checkout_dir() -> Path | None:
    """The source checkout this module runs from (``<checkout>/src/tessera/workload``)."""
    here = Path(__file__).resolve()
    src = here.parents[2]
    return src.parent if src.name == "src" else None


def data_dirs() -> tuple[Path, ...]:
    """The folders searched for public data, in order, each once (see the module docstring)."""
    env = _env_dir()
    if env is not None:
        return (env[1],)
    candidates: list[Path] = []
    checkout = _checkout_dir()
    if checkout is not None:
        candidates.append(checkout.parent / "shared" / "data")
    cwd = Path.cwd()
    candidates += [cwd / "shared" / "data", cwd.parent / "shared" / "data"]
    unique: list[Path] = []
    for c in candidates:
        resolved = c.resolve()
        if resolved not in unique:
            unique.append(resolved)
    return tuple(unique)


def find_data(relative: str) -> Path | None:
    """The first existing ``<data folder>/<relative>``, or ``None``."""
    for folder in data_dirs():
        path = folder / relative
        if path.exists():
            return path
    return None


def search_description() -> str:
    """One line saying where public data is looked for, for listings and errors."""
    env = _env_dir()
    if env is not None:
        return f"${env[0]} = {env[1]}"
    folders = ", ".join(str(d) for d in data_dirs())
    return f"{folders} (${DATA_DIR_ENV} not set)"


def missing_data_message(what: str, relative: str) -> str:
    """The error text for public data that is not there.

    Args:
        what: the thing that needs it, e.g. ``"trace 'philly-full'"``.
        relative: the file or folder it needs, relative to the data folder.
    """
    return (
        f"{what} needs {relative} from the public data, not found in "
        f"{search_description()}; set {DATA_DIR_ENV} to the folder that holds traces/ "
        f"({DOCS_HINT})"
    )
