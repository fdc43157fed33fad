"""Replicas on one database: wake-ups, presence and leadership between them.

Each replica's `Hub` wakes only its own streams. Every write transaction also sends its
topics to the other replicas, which hear them on commit and wake their own subscribers: a
job submitted on one replica reaches a worker whose stream lives on another as fast as one
on its own. Leadership decides which one replica runs the sweeps.

How the topics travel, and how the replicas see each other, is the store's backend
(`store/backends.py`): NOTIFY and a session lock on PostgreSQL; on SQLite, one process that
always leads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.server.hub import Hub
from gpufleet.store.backends import Backend

log = logging.getLogger("gpufleet.server.bus")

_MAX_PAYLOAD = 7_000  # PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more


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
    """This replica's link to the others: what it sends, what it hears, whether it leads."""

    def __init__(self, hub: Hub, instance_id: str, backend: Backend) -> None:
        self.hub = hub
        self.instance_id = instance_id
        self.backend = backend
        self._leading = not backend.shared  # alone, it leads from the start

    @property
    def shared(self) -> bool:
        """Whether other replicas can share the database."""
        return self.backend.shared

    async def send_in(
        self,
        conn: AsyncConnection,
        notify: set[str],
        close: set[str],
        handed: Mapping[str, list[dict[str, Any]]],
    ) -> None:
        """Tell the other replicas from inside a write transaction: they hear it on commit."""
        if notify or close or handed:
            await self.backend.notify(
                conn, lambda: payloads(self.instance_id, notify, close, handed)
            )

    # ---- hearing (backends.Listener) --------------------------------------------------

    def heard(self, payload: str) -> None:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warning("ignored a malformed notification from another replica")
            return
        if message.get("o") == self.instance_id:
            return  # our own transaction: the hub was told on commit already
        for topic in message.get("c", ()):
            self.hub.close(topic)
        for topic, events in message.get("e", {}).items():
            self.hub.notify(topic, events)
        for topic in message.get("n", ()):
            self.hub.notify(topic)

    def linked(self) -> None:
        self._leading = False  # a new session holds no lock
        self.hub.notify_all()  # what was sent while nobody listened is lost: re-read it all

    def unlinked(self) -> None:
        self._leading = False  # the session lock went with the session

    async def listen(self) -> None:
        """The supervised loop: hold the link to the other replicas."""
        await self.backend.listen(self)

    async def wait_connected(self, within: float = 10.0) -> None:
        await self.backend.wait_linked(within)

    # ---- leadership and presence ---------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the sweeps' lock now (asks nothing, takes nothing)."""
        return self._leading

    async def leading(self) -> bool:
        """Whether this replica runs the sweeps now; asks for the lock when it does not."""
        if not self._leading:
            self._leading = await self.backend.try_lead()
            if self._leading:
                log.info("this replica (%s) now runs the sweeps", self.instance_id)
        return self._leading

    async def alive(self) -> set[str] | None:
        """Instance ids of the replicas whose link is up (this one included); None where that
        cannot be told: on SQLite (one replica), or while this replica's own link is down."""
        return await self.backend.alive()
