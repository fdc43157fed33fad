"""Replicas on one PostgreSQL database: wake-ups, presence and leadership between them.

Each replica's `Hub` wakes only its own streams. On PostgreSQL every write transaction also
sends its topics with `NOTIFY` (delivered when it commits, never for a rollback), and every
replica `LISTEN`s on one dedicated connection and wakes its own subscribers: a job submitted
on one replica reaches a worker whose stream lives on another as fast as one on its own.

The same connection carries the replica's presence (its `application_name` names its
instance id, so `pg_stat_activity` lists the replicas alive) and its leadership: the session
advisory lock that lets exactly one replica run the sweeps. When a replica dies, PostgreSQL
ends its session: the lock passes to the next replica that asks, and the streams it owned are
known to be gone.

SQLite serves one replica (the store refuses a second), which always leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg
import orjson
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.server.hub import Hub

log = logging.getLogger("gpufleet.server.bus")

CHANNEL = "gpufleet"
APPLICATION_PREFIX = "gpufleet-replica:"
LEADER_LOCK = 0x6770_666D  # "gpfm": the replica that runs the sweeps
_MAX_PAYLOAD = 7_000  # PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more
_RECONNECT_SECONDS = 1.0
_QUERY_SECONDS = 5.0  # a query on the link that takes longer means the link is dead


def payloads(
    origin: str,
    notify: Iterable[str],
    close: Iterable[str],
    handed: Mapping[str, list[dict[str, Any]]],
) -> list[str]:
    """The topics (and the events handed over with them) as NOTIFY payloads, split so that
    none is too long. Events too long to travel become a plain notification: the replica
    that hears it reads them from the database instead."""
    out: list[str] = []
    message: dict[str, Any] = {}
    size = 0

    def flush() -> None:
        nonlocal message, size
        if message:
            out.append(orjson.dumps({"o": origin, **message}).decode())
        message, size = {}, 0

    def add(kind: str, topic: str, item_size: int, events: Any = None) -> None:
        nonlocal size
        if size + item_size > _MAX_PAYLOAD:
            flush()
        if kind == "e":
            message.setdefault("e", {})[topic] = events
        else:
            message.setdefault(kind, []).append(topic)
        size += item_size

    plain = set(notify)
    for topic, events in sorted(handed.items()):
        item_size = len(orjson.dumps(events)) + len(topic.encode()) + 8
        if item_size > _MAX_PAYLOAD:
            plain.add(topic)
        else:
            add("e", topic, item_size, events)
    for kind, topics in (("n", plain), ("c", close)):
        for topic in sorted(topics):
            add(kind, topic, len(topic.encode()) + 4)
    flush()
    return out


class Replicas:
    """This replica's link to the others; on SQLite, a stand-in that always leads."""

    def __init__(self, hub: Hub, instance_id: str, database_url: str) -> None:
        self.hub = hub
        self.instance_id = instance_id
        self.shared = database_url.startswith("postgresql")
        self._dsn = (
            make_url(database_url).set(drivername="postgresql").render_as_string(False)
            if self.shared
            else ""
        )
        self._conn: asyncpg.Connection | None = None
        self._conn_lock = asyncio.Lock()
        self._leading = not self.shared
        self._connected = asyncio.Event()

    @property
    def application_name(self) -> str:
        return APPLICATION_PREFIX + self.instance_id

    # ---- sending ---------------------------------------------------------------------

    async def send_in(
        self,
        conn: AsyncConnection,
        notify: set[str],
        close: set[str],
        handed: Mapping[str, list[dict[str, Any]]],
    ) -> None:
        """NOTIFY the other replicas from inside a write transaction: they hear it on commit."""
        if not self.shared or not (notify or close or handed):
            return
        for payload in payloads(self.instance_id, notify, close, handed):
            await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": CHANNEL, "p": payload})

    # ---- hearing ---------------------------------------------------------------------

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warning("ignored a malformed notification on %s", CHANNEL)
            return
        if message.get("o") == self.instance_id:
            return  # our own transaction: the hub was told on commit already
        for topic in message.get("c", ()):
            self.hub.close(topic)
        for topic, events in message.get("e", {}).items():
            self.hub.notify(topic, events)
        for topic in message.get("n", ()):
            self.hub.notify(topic)

    async def listen(self) -> None:
        """The supervised loop: hold the LISTEN connection, reconnecting when it drops."""
        if not self.shared:
            return
        while True:
            try:
                conn = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": self.application_name}
                )
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("cannot listen for other replicas (%s); retrying", exc)
            else:
                try:
                    await self._hold(conn)
                except (
                    OSError,
                    TimeoutError,
                    asyncpg.PostgresError,
                    asyncpg.InterfaceError,
                ) as exc:
                    log.warning("lost the link to the other replicas (%s); reconnecting", exc)
                finally:
                    async with self._conn_lock:
                        self._conn = None
                        self._leading = False  # the session lock went with the session
                    self._connected.clear()
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=1.0)
            await asyncio.sleep(_RECONNECT_SECONDS)

    async def _hold(self, conn: asyncpg.Connection) -> None:
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def terminated(_conn: object) -> None:
            if not lost.done():
                lost.set_result(None)

        conn.add_termination_listener(terminated)
        await conn.add_listener(CHANNEL, self._heard)
        async with self._conn_lock:
            self._conn = conn
            self._leading = False
        self._connected.set()
        self.hub.notify_all()  # what was sent while nobody listened is lost: re-read it all
        while not lost.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(lost), timeout=5.0)
            if not lost.done():
                async with self._conn_lock:
                    await conn.execute("SELECT 1", timeout=_QUERY_SECONDS)  # a dead link

    async def wait_connected(self, within: float = 10.0) -> None:
        if self.shared:
            await asyncio.wait_for(self._connected.wait(), within)

    # ---- leadership and presence ---------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the sweeps' lock now (asks nothing, takes nothing)."""
        return self._leading

    async def leading(self) -> bool:
        """Whether this replica runs the sweeps now; asks for the lock when it does not."""
        if not self.shared or self._leading:
            return self._leading
        async with self._conn_lock:
            if self._conn is None or self._conn.is_closed():
                return False
            try:
                self._leading = bool(
                    await self._conn.fetchval(
                        "SELECT pg_try_advisory_lock($1)", LEADER_LOCK, timeout=_QUERY_SECONDS
                    )
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return False
        if self._leading:
            log.info("this replica (%s) now runs the sweeps", self.instance_id)
        return self._leading

    async def alive(self) -> set[str] | None:
        """Instance ids of the replicas whose link is up (this one included); None where that
        cannot be told: on SQLite (one replica), or while this replica's own link is down."""
        if not self.shared:
            return None
        async with self._conn_lock:
            if self._conn is None or self._conn.is_closed():
                return None
            try:
                rows = await self._conn.fetch(
                    "SELECT application_name FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name LIKE $1",
                    APPLICATION_PREFIX + "%",
                    timeout=_QUERY_SECONDS,
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return None  # the link is failing: the listen loop reconnects
        return {r["application_name"].removeprefix(APPLICATION_PREFIX) for r in rows}
