"""The PostgreSQL store's pool: connections that died while idle are replaced before use."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gpufleet.errors import StoreError
from gpufleet.store import Queries, Store, engine, open_store

pytestmark = pytest.mark.postgres


async def _backend_pids(store: Store) -> int:
    async with store.read() as q:
        return int((await q.conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _terminate_pool(url: str) -> int:
    """What a restarted server does to the pool: every session on the database ends."""
    u = make_url(url)
    conn = await asyncpg.connect(host=u.host, port=u.port, user=u.username, database=u.database)
    try:
        ended = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return len(ended)


async def test_a_connection_killed_while_idle_is_replaced_before_use(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "PING_AFTER_IDLE_SECONDS", 0.0)
    store = await open_store(postgres_url)
    try:
        before = await _backend_pids(store)
        assert await _terminate_pool(postgres_url) >= 1
        after = await _backend_pids(store)  # no error: the ping found it dead
        assert after != before
    finally:
        await store.close()


async def test_without_the_ping_the_first_use_fails_once_then_the_pool_recovers(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: a busy pool's connections are not pinged (one round trip each saved);
    one dying in that window costs one failed statement (a StoreError: the API answers 503,
    and workers retry), not more."""
    monkeypatch.setattr(engine, "PING_AFTER_IDLE_SECONDS", 3600.0)
    store = await open_store(postgres_url)
    try:
        before = await _backend_pids(store)
        assert await _terminate_pool(postgres_url) >= 1
        with pytest.raises(StoreError, match="lost the database connection"):
            await _backend_pids(store)
        assert await _backend_pids(store) != before
    finally:
        await store.close()


async def _xids(q: Queries, statements: int = 2) -> set[int]:
    conn = q.conn
    return {
        int((await conn.execute(text("SELECT txid_current()"))).scalar_one())
        for _ in range(statements)
    }


async def test_reads_run_outside_a_transaction_and_writes_inside_one(postgres_url: str) -> None:
    """A read costs no BEGIN and ROLLBACK (each of its statements is its own transaction);
    a write is one transaction, also on a pooled connection a read used just before."""
    store = await open_store(postgres_url)
    try:
        for _ in range(3):
            async with store.read() as q:
                assert len(await _xids(q)) == 2
            async with store.write() as q:
                assert len(await _xids(q)) == 1
    finally:
        await store.close()
