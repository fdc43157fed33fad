"""Replicas on one database: wake-ups, presence and leadership between them.

Each replica's `Hub` wakes only its own streams. A write transaction also sends its topics
to the other replicas that wait on them (`interest.py`), which hear them on commit and wake
their own subscribers: a job submitted on one replica reaches a worker whose stream lives on
another as fast as one on its own. Leadership decides which one replica runs the sweeps.

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
from gpufleet.server.interest import Interest
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
        self.interest = Interest(instance_id)
        if backend.shared:
            hub.on_new_class = self._new_class

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
    ) -> int | None:
        """Tell the other replicas that wait on them from inside a write transaction: they
        hear it on commit. A token for `settled` once the transaction is over (None: alone)."""
        if not self.shared:
            return None
        token = self.interest.choosing()
        wanted = self.interest.wanted
        notify = {t for t in notify if wanted(t)}
        handed = {t: events for t, events in handed.items() if wanted(t)}
        if notify or close or handed:
            try:
                await self.backend.notify(
                    conn, lambda: payloads(self.instance_id, notify, close, handed)
                )
            except BaseException:
                self.interest.settled(token)  # the transaction goes no further
                raise
        return token

    def settled(self, token: int | None) -> None:
        """The transaction that `send_in` gave `token` committed or rolled back."""
        if token is not None:
            self.interest.settled(token)

    def _new_class(self, _kind: str) -> None:
        self.interest.announce(self.hub.classes())

    async def speak(self) -> None:
        """The supervised loop: send this replica's announcements and answers on the link
        (`interest.py`); what the link drops is said again once it is back (a hello)."""
        while True:
            await self.interest.due.wait()
            self.interest.due.clear()
            outbox = self.interest.outbox
            while outbox and await self.backend.broadcast(outbox[0]):
                outbox.pop(0)

    # ---- hearing (backends.Listener) --------------------------------------------------

    def heard(self, payload: str) -> None:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warning("ignored a malformed notification from another replica")
            return
        origin = message.get("o")
        if origin == self.instance_id:
            return  # our own transaction: the hub was told on commit already
        if "i" in message:  # another replica's interests (interest.py)
            if self.interest.heard_announcement(str(origin), message):
                self.interest.announce(self.hub.classes())
            return
        if "a" in message:  # an answer to an announcement
            woken = self.interest.answered(message)
            if woken:
                self.hub.notify_classes(woken)
            return
        for topic in message.get("c", ()):
            self.hub.close(topic)
        for topic, events in message.get("e", {}).items():
            self.hub.notify(topic, events)
        for topic in message.get("n", ()):
            self.hub.notify(topic)

    def linked(self) -> None:
        self._leading = False  # a new session holds no lock
        self.interest.link_up(self.hub.classes())
        self.hub.notify_all()  # what was sent while nobody listened is lost: re-read it all

    def unlinked(self) -> None:
        self._leading = False  # the session lock went with the session
        self.interest.link_down()

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
        alive = await self.backend.alive()
        if alive is not None:
            self.interest.keep_only(alive)
        return alive
