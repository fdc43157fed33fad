"""What every group of queries shares: one connection, inside a transaction the caller owns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.store.webhook_cache import WebhookCache


class Prebuilt:
    """A hot path's SELECT built once, its values bound by name at each execution: a new
    statement each call cost its construction and its cache key (SQLAlchemy memoizes the key
    on the statement object) on every request, more than SQLite spent running it."""

    __slots__ = ("locked", "plain")

    def __init__(self, stmt: sa.Select[Any]) -> None:
        self.plain = stmt
        self.locked = stmt.with_for_update()


def by(name: str) -> sa.BindParameter[Any]:
    """A value bound at execution (`Prebuilt` statements)."""
    return sa.bindparam(name)


# The row a prebuilt UPDATE's WHERE names: a parameter no column is called (the other
# parameters are the columns it sets).
ROW = "row_key"

V = TypeVar("V", bound=Mapping[str, Any])
S = TypeVar("S", covariant=True)
T = TypeVar("T")


class Lockable(Protocol[S]):
    """A statement built once plain and locked: `Prebuilt`, or store/direct.py's
    `DirectSelect`."""

    @property
    def plain(self) -> S: ...

    @property
    def locked(self) -> S: ...


def no_status(values: V) -> V:
    """The values, refused if they set a status: a job's, an attempt's or a worker's moves
    are `services/lifecycle.py`'s, written by the queries named for them (`set_job_status`,
    `claim_job`, ...), never by a generic update."""
    if "status" in values:
        raise TypeError("a status is written only through services/lifecycle.py")
    return values


class QueryBase:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._pg = conn.dialect.name == "postgresql"
        # The workers (or their tokens) this transaction wrote: the store's worker cache
        # forgets them when it commits (store/worker_cache.py).
        self.workers_written: set[str] = set()
        # Worker rows `lock_workers` read as it locked them: a locked read of one takes it
        # from here, once, unless this transaction wrote it since (a batch's reports, #35).
        self.workers_locked: dict[str, RowMapping] = {}
        # SQLite's write transactions: the webhooks as last read (store/webhook_cache.py),
        # forgotten when a transaction that wrote one (`webhooks_written`) commits.
        self.webhook_cache: WebhookCache | None = None
        self.webhooks_written = False

    async def _rowcount(self, stmt: sa.Executable, params: Any = None) -> int:
        result = await self.conn.execute(stmt, params)
        return int(result.rowcount)

    async def _mapped(self, stmt: sa.Executable, params: Any = None) -> Sequence[RowMapping]:
        """Every row of `stmt`, by column name."""
        return (await self.conn.execute(stmt, params)).mappings().all()

    async def _first(self, stmt: sa.Executable, params: Any = None) -> RowMapping | None:
        return (await self.conn.execute(stmt, params)).mappings().first()

    def _either(self, stmt: Lockable[T], lock: bool) -> T:
        """The prebuilt statement, locked (PostgreSQL) when asked."""
        return stmt.locked if lock and self._pg else stmt.plain

    @property
    def locks_rows(self) -> bool:
        """Whether `SELECT … FOR UPDATE` locks (PostgreSQL; SQLite has one writer at a time)."""
        return self._pg

    def _locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt.with_for_update() if self._pg else stmt
