"""Replicas on one PostgreSQL database (`store/backends.py` tells the rest): the topics of a
write transaction go out with `NOTIFY` inside it, and one dedicated connection `LISTEN`s,
carrying presence (its `application_name`) and leadership (a session advisory lock)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.store import locks
from gpufleet.store.backends import Backend, Listener
from gpufleet.store.direct import Direct

log = logging.getLogger("gpufleet.store.backends")

CHANNEL = "gpufleet"
APPLICATION_PREFIX = "gpufleet-replica:"
_RECONNECT_SECONDS = 1.0
# Several payloads in one statement, in their order (unnest returns its array in order).
_NOTIFY = Direct(text("SELECT pg_notify(:c, :p)"))  # every write's that wakes a stream
_NOTIFY_ALL = text("SELECT pg_notify(:c, p) FROM unnest(CAST(:ps AS text[])) AS p")
_QUERY_SECONDS = 5.0  # a query on the link that takes longer means the link is dead
_LINK_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class PostgresBackend(Backend):
    """Replicas on one PostgreSQL database, linked by one dedicated connection each."""

    shared = True

    def __init__(self, url: URL, instance_id: str) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.application_name = APPLICATION_PREFIX + instance_id
        self._conn: asyncpg.Connection | None = None
        self._conn_lock = asyncio.Lock()  # one query at a time on the link
        self._linked = asyncio.Event()

    async def notify(self, conn: AsyncConnection, payloads: Callable[[], Iterable[str]]) -> None:
        sent = list(payloads())
        if len(sent) == 1:
            await _NOTIFY.rows(conn, {"c": CHANNEL, "p": sent[0]})
        elif sent:  # one round trip for them all (a gang's offers or starts, #35)
            await conn.execute(_NOTIFY_ALL, {"c": CHANNEL, "ps": sent})

    async def listen(self, listener: Listener) -> None:
        while True:
            try:
                conn = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": self.application_name}
                )
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("cannot listen for other replicas (%s); retrying", exc)
            else:
                try:
                    await self._hold(conn, listener)
                except _LINK_ERRORS as exc:
                    log.warning("lost the link to the other replicas (%s); reconnecting", exc)
                finally:
                    await self._drop(conn, listener)
            await asyncio.sleep(_RECONNECT_SECONDS)

    async def _hold(self, conn: asyncpg.Connection, listener: Listener) -> None:
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def terminated(_conn: object) -> None:
            if not lost.done():
                lost.set_result(None)

        def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            listener.heard(payload)

        conn.add_termination_listener(terminated)
        await conn.add_listener(CHANNEL, heard)
        async with self._conn_lock:
            self._conn = conn
            listener.linked()
        self._linked.set()
        while not lost.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(lost), timeout=5.0)
            if not lost.done():
                async with self._conn_lock:
                    await conn.execute("SELECT 1", timeout=_QUERY_SECONDS)  # a dead link

    async def _drop(self, conn: asyncpg.Connection, listener: Listener) -> None:
        async with self._conn_lock:
            self._conn = None
            listener.unlinked()  # under the lock: no ask for leadership is still in flight
        self._linked.clear()
        with contextlib.suppress(Exception):
            await conn.close(timeout=1.0)

    async def wait_linked(self, within: float) -> None:
        await asyncio.wait_for(self._linked.wait(), within)

    async def try_lead(self) -> bool:
        return bool(await self._ask("SELECT pg_try_advisory_lock($1)", locks.LEADER, many=False))

    async def broadcast(self, payload: str) -> bool:
        sent = await self._ask("SELECT 1 FROM pg_notify($1, $2)", CHANNEL, payload, many=False)
        return sent is not None

    async def alive(self) -> set[str] | None:
        rows = await self._ask(
            "SELECT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE $1",
            APPLICATION_PREFIX + "%",
            many=True,
        )
        if rows is None:
            return None
        return {r["application_name"].removeprefix(APPLICATION_PREFIX) for r in rows}

    async def _ask(self, query: str, *args: Any, many: bool) -> Any:
        """A query on the link; None while the link is down or failing (the listen loop
        reconnects)."""
        async with self._conn_lock:
            if self._conn is None or self._conn.is_closed():
                return None
            run = self._conn.fetch if many else self._conn.fetchval
            try:
                return await run(query, *args, timeout=_QUERY_SECONDS)
            except _LINK_ERRORS:
                return None
