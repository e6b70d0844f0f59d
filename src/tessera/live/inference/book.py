"""The services, their replicas and the applied plan, in the service's SQLite store.

Four tables, created beside the jobs' (``CREATE TABLE IF NOT EXISTS`` when the manager starts,
so a state file written before services existed gains them on its next start, as the store's
other tables do):

* ``services`` -- one row per service: its spec as JSON (:class:`~.spec.ServiceSpec`);
* ``service_replicas`` -- one row per replica process the manager started: the executor's run
  name (``replica_id``, ``run``), its slice (GPU index, ``kind@start``, ``MIG-<uuid>``), its MPS
  share (``proc`` of ``procs``) and whether it is ``running`` or ``stopping``;
* ``service_state`` -- the plan the manager is applying (JSON, :mod:`.planstate`) and whether
  the services changed since it was made (``dirty``);
* ``service_events`` -- what happened to each service (planned, slice created, replica
  restarted, refused), newest last.

Everything is in the store, nothing in memory only, so a restarted ``tessera serve`` finds every
service, its replicas (still running: local runs outlive the service) and the plan.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from tessera.live.inference.spec import ServiceSpec
from tessera.live.store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS services (
    name TEXT PRIMARY KEY, queue TEXT NOT NULL, spec_json TEXT NOT NULL,
    created_s REAL NOT NULL, updated_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS service_replicas (
    replica_id TEXT PRIMARY KEY, service TEXT NOT NULL, gpu INTEGER NOT NULL,
    placement TEXT NOT NULL, mig_uuid TEXT NOT NULL, proc INTEGER NOT NULL,
    procs INTEGER NOT NULL, run INTEGER NOT NULL, status TEXT NOT NULL,
    started_s REAL NOT NULL, restarts INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS service_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS service_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_s REAL NOT NULL, service TEXT, kind TEXT NOT NULL,
    detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS service_events_by ON service_events(service, seq);
"""


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica process: the executor's run ``(replica_id, run)`` on one MIG slice."""

    replica_id: str
    service: str
    gpu: int
    placement: str
    mig_uuid: str
    proc: int
    procs: int
    run: int
    status: str
    started_s: float
    restarts: int

    @property
    def slot(self) -> tuple[int, str, int]:
        """Where it runs: (GPU, ``kind@start``, MPS process index)."""
        return (self.gpu, self.placement, self.proc)


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    seq: int
    ts_s: float
    service: str | None
    kind: str
    detail: str


class ServiceBook:
    """Reads and writes of the four tables, on the service's :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with store.tx() as db:  # one statement at a time: executescript would commit the tx
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    def _read(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self.store.tx() as db:
            return db.execute(sql, args).fetchall()

    # -- services -----------------------------------------------------------------------------

    def services(self) -> list[ServiceSpec]:
        rows = self._read("SELECT spec_json FROM services ORDER BY created_s, name")
        return [ServiceSpec.from_json(str(r[0])) for r in rows]

    def get(self, name: str) -> ServiceSpec | None:
        rows = self._read("SELECT spec_json FROM services WHERE name=?", (name,))
        return ServiceSpec.from_json(str(rows[0][0])) if rows else None

    def put(self, db: sqlite3.Connection, spec: ServiceSpec, now_s: float) -> None:
        """Insert or replace a service, and mark the plan stale."""
        db.execute("INSERT INTO services VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE "
                   "SET spec_json=excluded.spec_json, updated_s=excluded.updated_s",
                   (spec.name, spec.queue, spec.to_json(), now_s, now_s))
        self.set_state(db, "dirty", "1")

    def delete(self, db: sqlite3.Connection, name: str) -> None:
        db.execute("DELETE FROM services WHERE name=?", (name,))
        self.set_state(db, "dirty", "1")

    # -- the plan being applied ---------------------------------------------------------------

    def state(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM service_state WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    def set_state(self, db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute("INSERT INTO service_state VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                   "value=excluded.value", (key, value))

    # -- replicas -----------------------------------------------------------------------------

    def replicas(self, service: str | None = None) -> list[Replica]:
        sql = ("SELECT replica_id, service, gpu, placement, mig_uuid, proc, procs, run, status, "
               "started_s, restarts FROM service_replicas")
        rows = (self._read(sql + " WHERE service=? ORDER BY replica_id", (service,))
                if service is not None else self._read(sql + " ORDER BY replica_id"))
        return [Replica(str(r[0]), str(r[1]), int(r[2]), str(r[3]),  # type: ignore[call-overload]
                        str(r[4]), int(r[5]), int(r[6]), int(r[7]),  # type: ignore[call-overload]
                        str(r[8]), float(r[9]), int(r[10]))  # type: ignore[arg-type,call-overload]
                for r in rows]

    def add_replica(self, db: sqlite3.Connection, r: Replica) -> None:
        db.execute("INSERT OR REPLACE INTO service_replicas VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   (r.replica_id, r.service, r.gpu, r.placement, r.mig_uuid, r.proc, r.procs,
                    r.run, r.status, r.started_s, r.restarts))

    def set_replica(self, db: sqlite3.Connection, replica_id: str, **fields: object) -> None:
        cols = ", ".join(f"{k}=?" for k in fields)
        db.execute(f"UPDATE service_replicas SET {cols} WHERE replica_id=?",
                   (*fields.values(), replica_id))

    def drop_replica(self, db: sqlite3.Connection, replica_id: str) -> None:
        db.execute("DELETE FROM service_replicas WHERE replica_id=?", (replica_id,))

    # -- events -------------------------------------------------------------------------------

    def event(self, db: sqlite3.Connection, now_s: float, service: str | None, kind: str,
              detail: str) -> None:
        db.execute("INSERT INTO service_events (ts_s, service, kind, detail) VALUES (?,?,?,?)",
                   (now_s, service, kind, detail))

    def events(self, service: str | None = None, limit: int = 200) -> list[ServiceEvent]:
        where = "WHERE service=? " if service is not None else ""
        args: tuple[object, ...] = (service, limit) if service is not None else (limit,)
        rows = self._read("SELECT seq, ts_s, service, kind, detail FROM service_events "
                          f"{where}ORDER BY seq DESC LIMIT ?", args)
        return [ServiceEvent(int(r[0]), float(r[1]),  # type: ignore[call-overload,arg-type]
                             None if r[2] is None else str(r[2]), str(r[3]), str(r[4]))
                for r in reversed(rows)]
