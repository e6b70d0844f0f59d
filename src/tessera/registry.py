"""One registry mechanism for every pluggable part (policies, trace readers ...).

A plugin registers itself with one decorator next to its implementation, with a one-line
summary that feeds ``--help``, ``tessera policies`` and error messages::

    POLICIES = Registry[type[Policy]]("policy")

    @POLICIES.register("fifo", "First come, first served.")
    class Fifo(Policy): ...

    POLICIES.get("fifo")        # -> Fifo
    POLICIES.get("fofo")        # SpecError: unknown policy 'fofo'; did you mean 'fifo'? ...
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from tessera.errors import SpecError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Entry(Generic[T]):
    """A registered plugin: its name, one-line summary and the object itself."""

    name: str
    summary: str
    obj: T


class Registry(Generic[T]):
    """Name → plugin, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, summary: str) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name``; a duplicate name is a programming error."""

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = Entry(name, summary, obj)
            return obj

        return deco

    def get(self, name: str) -> T:
        """The plugin called ``name``.

        Raises:
            SpecError: naming the closest match and every known name.
        """
        entry = self._entries.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(self._entries)
            raise SpecError(f"unknown {self.kind} {name!r}{hint} (known: {known})")
        return entry.obj

    def discard(self, name: str) -> None:
        """Forget ``name`` (if registered): a plugin found unusable after it registered."""
        self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries
