"""The policy's memory, kept across service restarts.

A policy may remember things between two decisions: Gavel's LP policies the last allocation
and each job's time on each flavor since it was computed (``RoundState``), Tiresias with
starvation promotion the attained service at which a job was promoted. ``decide()`` returns
that memory as :attr:`~tessera.sched.core.decide.Decision.policy_state` and takes it back in the
next snapshot; the simulator simply holds it. The live service must also survive a restart, so it
writes the memory into the state database **in the same transaction as the decision that
produced it**: after a crash the journal and the memory always belong to the same round.

The memory is an arbitrary value of the policy's own types (frozen dataclasses, numpy arrays,
read-only mappings), so it is stored with :mod:`pickle`. Loading a pickle runs code chosen by
whoever wrote it; two rules keep that safe:

* the state database lives in the service's private state directory (0700, files 0600; see
  ``docs/security.md``), which no job and no tenant can write;
* loading goes through :class:`_MemoryUnpickler`, which resolves only Tessera's own classes,
  numpy's array reconstruction and a short list of standard-library value types, so even a
  tampered row cannot name ``os.system`` or any other function.

A memory that cannot be loaded (the service was upgraded and a class changed or the memory
format moved on, see :data:`MEMORY_FORMAT`; or the policy was switched) is dropped with a
warning: the policy starts afresh, as it did before this module existed, and the service keeps
running.
"""

from __future__ import annotations

import copyreg
import io
import logging
import pickle
import sqlite3
from types import MappingProxyType
from typing import Any

log = logging.getLogger("tessera.live")

SCHEMA = """
CREATE TABLE IF NOT EXISTS policy_memory (
    policy TEXT PRIMARY KEY, saved_s REAL NOT NULL, state BLOB NOT NULL);
"""

#: What a stored memory may name besides Tessera's own classes: value types and numpy's
#: array reconstruction (no function that touches files, processes or attributes).
_ALLOWED = {
    ("builtins", "frozenset"), ("builtins", "set"), ("builtins", "tuple"),
    ("builtins", "dict"), ("builtins", "list"), ("builtins", "float"), ("builtins", "int"),
    ("builtins", "complex"), ("builtins", "bytes"), ("builtins", "str"),
    ("random", "Random"), ("collections", "OrderedDict"),
    ("tessera.live.memory", "_mappingproxy"),
    # A GpuFlavor unpickles as the catalog's own object (a lookup in a fixed table; the
    # memory of Gavel's policies holds flavors).
    ("tessera.model.gpus", "resolve_flavor"),
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
}


#: Modules that moved, old name → new name: a memory stored before the move still names the
#: old module, and a restart must not lose it (``sched/`` went into sub-packages, issue 31).
MOVED_MODULES = {
    "tessera.sched.elastic_policy": "tessera.sched.elastic.policy",
    "tessera.sched.elastic": "tessera.sched.elastic.sizes",
    "tessera.sched.elastic_goodput": "tessera.sched.elastic.goodput",
    "tessera.sched.elastic_ilp": "tessera.sched.elastic.ilp",
    "tessera.sched.snapshot": "tessera.sched.core.snapshot",
    "tessera.sched.context": "tessera.sched.core.context",
    "tessera.sched.policy": "tessera.sched.core.policy",
    "tessera.sched.oracle": "tessera.sched.core.oracle",
    "tessera.sched.plans": "tessera.sched.core.plans",
    "tessera.sched.mixed": "tessera.sched.mixed.rates",
    "tessera.sched.packing": "tessera.sched.packing.pairs",
    "tessera.sched.slots": "tessera.sched.packing.slots",
    "tessera.sched.policies.gavel_mechanism": "tessera.sched.gavel.compat_mechanism",
    "tessera.sched.policies.gavel_packed": "tessera.sched.gavel.packed_policy",
    "tessera.sched.policies.gavel_lp": "tessera.sched.gavel.lp_policy",
    "tessera.sched.policies.gavel_compat": "tessera.sched.gavel.compat",
    "tessera.sched.policies.gavel_completion": "tessera.sched.gavel.completion",
    "tessera.sched.policies.gavel_gandiva": "tessera.sched.gavel.gandiva",
}


def _mappingproxy(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def _reduce_mappingproxy(m: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _mappingproxy, (dict(m),)


class _MemoryUnpickler(pickle.Unpickler):
    """An unpickler that resolves only Tessera's classes and the value types above."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module.split(".", 1)[0] == "tessera":
            found = super().find_class(MOVED_MODULES.get(module, module), name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"a policy memory may not name {module}.{name}")


#: The stored memory's format: 2 wraps it as ``(FORMAT_TAG, 2, memory)`` and holds flavors as
#: catalog :class:`~tessera.model.gpus.GpuFlavor` objects; 1 (no wrapper, before issue 31 typed
#: flavors) held them as short-name strings.
MEMORY_FORMAT = 2
FORMAT_TAG = "tessera-policy-memory"

#: Format-1 memories that hold no flavor, so they still mean what they meant: Sia's and
#: Pollux's restart counts, LAS's promotion offsets.
_FLAVOR_FREE = ("ElasticMemory", "mappingproxy")


def encode(state: object) -> bytes:
    """The stored form of a policy's memory (read-only mappings included)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table,
                              MappingProxyType: _reduce_mappingproxy}
    pickler.dump((FORMAT_TAG, MEMORY_FORMAT, state))
    return buf.getvalue()


def decode(blob: bytes) -> object:
    """The memory back from :func:`encode` (raises ``pickle.UnpicklingError`` if refused).

    A format-1 memory that holds flavors (Gavel's round states: its flavors were names then,
    which no longer match the catalog's flavors) is refused too -- :func:`load` drops it with a
    warning -- rather than read with its columns silently misaligned."""
    got = _MemoryUnpickler(io.BytesIO(blob)).load()
    if isinstance(got, tuple) and len(got) == 3 and got[0] == FORMAT_TAG:
        if got[1] != MEMORY_FORMAT:
            raise pickle.UnpicklingError(f"memory format {got[1]!r}; this tessera reads "
                                         f"{MEMORY_FORMAT}")
        return got[2]
    if type(got).__name__ not in _FLAVOR_FREE:
        raise pickle.UnpicklingError(
            f"a {type(got).__name__} saved by an older tessera (memory format 1: flavors "
            "were names)")
    return got


def save(db: sqlite3.Connection, policy: str, state: object, now_s: float) -> None:
    """Write ``policy``'s memory inside the caller's transaction (``None`` clears it)."""
    if state is None:
        db.execute("DELETE FROM policy_memory WHERE policy=?", (policy,))
        return
    db.execute("INSERT OR REPLACE INTO policy_memory VALUES (?, ?, ?)",
               (policy, now_s, encode(state)))


def load(db: sqlite3.Connection, policy: str) -> object:
    """``policy``'s last saved memory, or ``None`` (nothing saved, or unreadable: logged).

    Only the memory of the same policy is returned: a service restarted with another
    ``--policy`` starts that policy afresh.
    """
    row = db.execute("SELECT state, saved_s FROM policy_memory WHERE policy=?",
                     (policy,)).fetchone()
    if row is None:
        return None
    try:
        return decode(row[0])
    except Exception as e:  # an upgrade changed a class, or the row was tampered with
        log.warning("dropping the saved memory of policy %s (saved at %.0f): %s; it starts "
                    "afresh", policy, row[1], e)
        return None
