"""What replicas need from their database: wake-ups, presence and leadership.

The replica logic (`server/bus.py`) asks a `Backend` for three things: send the topics of
a write transaction to the other replicas, hold a link on which it hears theirs, and tell
whether this replica leads and which replicas are alive. The backend is chosen once, from
the database URL (`backend_for`).

`PostgresBackend` (`store/postgres_link.py`): the topics go out with `NOTIFY` inside the
write transaction (delivered when it commits, never for a rollback); one dedicated
connection `LISTEN`s, and says what the replica waits on (`broadcast`: server/interest.py).
That connection also carries presence (its `application_name` names the instance, so
`pg_stat_activity` lists the replicas alive) and leadership (a session advisory lock). When
a replica dies, PostgreSQL ends its session: the lock passes to the next replica that asks.

`LocalBackend`: SQLite serves one process (the store refuses a second), which has nobody to
tell and always leads.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection


class Listener(Protocol):
    """The replica logic, as the link calls it back."""

    def heard(self, payload: str) -> None:
        """Another replica (or this one) sent `payload`."""

    def linked(self) -> None:
        """The link is (again) up, as a new session: it holds no lock."""

    def unlinked(self) -> None:
        """The link dropped, and with it any session lock."""


class Backend(abc.ABC):
    shared: ClassVar[bool]  # whether other replicas can share the database

    @abc.abstractmethod
    async def notify(self, conn: AsyncConnection, payloads: Callable[[], Iterable[str]]) -> None:
        """Send `payloads()` to the other replicas from inside the write transaction on
        `conn`: they hear them once it commits. Not called when nobody could hear."""

    @abc.abstractmethod
    async def listen(self, listener: Listener) -> None:
        """The supervised loop: hold the link to the other replicas, reconnecting."""

    @abc.abstractmethod
    async def broadcast(self, payload: str) -> bool:
        """Send `payload` to every replica on the link, outside any transaction; False while
        the link is down."""

    @abc.abstractmethod
    async def wait_linked(self, within: float) -> None:
        """Return once the link is up; TimeoutError after `within` seconds."""

    @abc.abstractmethod
    async def try_lead(self) -> bool:
        """Take the sweeps' lock if it is free; whether this replica holds it now."""

    @abc.abstractmethod
    async def alive(self) -> set[str] | None:
        """Instance ids of the replicas whose link is up (this one included); None where
        that cannot be told."""


class LocalBackend(Backend):
    """One process on SQLite: nobody to tell, nobody to wait for, and it always leads."""

    shared = False

    async def notify(self, conn: AsyncConnection, payloads: Callable[[], Iterable[str]]) -> None:
        return None

    async def listen(self, listener: Listener) -> None:
        return None

    async def broadcast(self, payload: str) -> bool:
        return False

    async def wait_linked(self, within: float) -> None:
        return None

    async def try_lead(self) -> bool:
        return True

    async def alive(self) -> set[str] | None:
        return None


def backend_for(url: URL, instance_id: str) -> Backend:
    """The backend of the store at `url`, for the replica `instance_id`."""
    if url.get_backend_name() == "postgresql":
        # Imported here: a server on SQLite never loads asyncpg (a twentieth of a start, #32).
        from gpufleet.store.postgres_link import PostgresBackend

        return PostgresBackend(url, instance_id)
    return LocalBackend()
