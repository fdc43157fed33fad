"""The replica logic over the store's backend seam: a working fake backend stands in for
PostgreSQL (the real one runs in tests/e2e/test_replicas.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.server.bus import Replicas
from gpufleet.server.hub import Hub
from gpufleet.store import locks
from gpufleet.store.backends import Backend, Listener, LocalBackend, backend_for
from gpufleet.store.postgres_link import PostgresBackend

NO_CONN = cast(AsyncConnection, None)  # the fake sends nothing through the transaction


class SharedLock(Backend):
    """Replicas on one database: one session lock, NOTIFY as a list every replica hears."""

    shared = True

    def __init__(self, db: dict[str, Any], name: str) -> None:
        self.db, self.name = db, name
        db.setdefault("sent", [])

    async def notify(self, conn: AsyncConnection, payloads: Callable[[], Iterable[str]]) -> None:
        self.db["sent"].extend(payloads())

    async def listen(self, listener: Listener) -> None:
        listener.linked()

    async def broadcast(self, payload: str) -> bool:
        self.db["sent"].append(payload)
        return True

    async def wait_linked(self, within: float) -> None:
        return None

    async def try_lead(self) -> bool:
        return self.db.setdefault("leader", self.name) == self.name

    async def alive(self) -> set[str] | None:
        return {self.name}

    def end_session(self) -> None:
        if self.db.get("leader") == self.name:
            del self.db["leader"]


def test_a_postgresql_store_links_replicas_and_a_sqlite_store_runs_alone() -> None:
    pg = backend_for(make_url("postgresql+asyncpg://u:p@db:5432/fleet"), "r1")
    assert isinstance(pg, PostgresBackend) and pg.shared
    assert pg.application_name == "gpufleet-replica:r1"
    alone = backend_for(make_url("sqlite+aiosqlite:///tmp/g.db"), "r1")
    assert isinstance(alone, LocalBackend) and not alone.shared


def test_lock_keys_keep_the_values_every_version_of_the_fleet_uses() -> None:
    keys = (locks.MIGRATION, locks.LEADER, locks.AUDIT_CHAIN, locks.API_KEYS)
    assert keys == (0x6770666C, 0x6770666D, 1735549281, 1735549282)


async def test_one_replica_on_sqlite_leads_from_the_start_and_sends_nothing() -> None:
    replicas = Replicas(Hub(), "r1", LocalBackend())
    assert replicas.is_leader and not replicas.shared
    assert await replicas.leading()
    assert await replicas.alive() is None


async def test_one_of_two_replicas_leads_until_its_session_ends() -> None:
    db: dict[str, Any] = {}
    first, second = SharedLock(db, "r1"), SharedLock(db, "r2")
    one, two = Replicas(Hub(), "r1", first), Replicas(Hub(), "r2", second)
    assert not one.is_leader, "a replica on a shared database leads only once it asks"
    assert await one.leading() and not await two.leading()
    first.end_session()
    one.unlinked()
    assert not one.is_leader
    assert await two.leading()


async def test_a_replica_wakes_its_streams_for_others_but_not_for_its_own_transactions() -> None:
    db: dict[str, Any] = {}
    hub = Hub()
    replicas = Replicas(hub, "r1", SharedLock(db, "r1"))
    offer = {"type": "job_submit", "job_id": "j_1"}
    with hub.subscribe("worker:w_1") as sub:
        await replicas.send_in(NO_CONN, {"jobs"}, set(), {"worker:w_1": [offer]})
        (own,) = db["sent"]
        replicas.heard(own)
        assert not sub.event.is_set()
        replicas.heard(orjson.dumps({"o": "r2", "e": {"worker:w_1": [offer]}}).decode())
        assert sub.take_handed() == ([offer], False)


async def test_a_transaction_with_nothing_to_tell_sends_no_notification() -> None:
    db: dict[str, Any] = {}
    replicas = Replicas(Hub(), "r1", SharedLock(db, "r1"))
    await replicas.send_in(NO_CONN, set(), set(), {})
    assert db["sent"] == []


async def test_a_new_link_drops_leadership_and_wakes_every_stream_to_re_read() -> None:
    db: dict[str, Any] = {}
    hub = Hub()
    replicas = Replicas(hub, "r1", SharedLock(db, "r1"))
    assert await replicas.leading()
    with hub.subscribe("worker:w_1") as sub:
        await replicas.listen()
        assert sub.event.is_set()
    assert not replicas.is_leader
