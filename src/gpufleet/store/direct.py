"""The hottest statements, compiled once a dialect and sent on the driver connection.

SQLAlchemy's execution path (the cache key, `_execute_context`, the binding of the
compiled parameters, the greenlet hop of the async adapter, the result's set-up) cost a
statement about 35 µs on SQLite and 85 µs on PostgreSQL where the driver itself spends 5
and 20 (docs/benchmarks.md, #39). A `Direct` statement keeps what SQLAlchemy does to the
values (its bind and result processors, the same objects a `conn.execute` uses) and skips
the rest: the SQL text is compiled once a dialect and set of columns, and sent to sqlite3
in place (store/sqlite_inline.py) or to asyncpg inside the transaction SQLAlchemy's
adapter keeps. Its rows are plain tuples in the statement's column order, read by the
same `rows` readers.

What a statement sent this way still does: it is announced to `before_cursor_execute`
listeners (the statement counts of tests/api/test_job_cost.py see it), and a driver's
error is raised as SQLAlchemy raises it (`DBAPIError`, a lost connection invalidated).
On PostgreSQL it uses the asyncpg adapter's own steps (`_execute_mutex`, `_transaction`,
`_start_transaction`, `_prepare`, `_handle_exception`: private, the same in SQLAlchemy 2.0
and 2.1), so that it shares the adapter's transaction and prepared statements;
tests/api/test_direct_statements.py fails where they change.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.util.concurrency import greenlet_spawn

from gpufleet.store.sqlite_inline import InlineConnection

Processor = Callable[[Any], Any] | None
# What asyncpg's status says a write matched (SQLAlchemy's adapter reads it the same way).
_STATUS = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+) (\d+)")


@dataclass(slots=True)
class _Plan:
    """One statement compiled for one dialect and set of values."""

    sql: str
    params: tuple[tuple[str, Processor], ...]  # each positional value's name and processor
    fixed: dict[str, Any]  # the values the statement carries itself (a LIMIT's)
    types: tuple[Any, ...]  # each result column's type
    keys: tuple[str, ...]  # each result column's name
    # Each result column's processor, and whether any has one: made on the first answer,
    # from the driver's type codes (PostgreSQL's numbers are read by their column's oid).
    results: tuple[Processor, ...] | None = None
    processed: bool = False

    def read_with(self, dialect: Dialect, codes: Sequence[Any] | None) -> None:
        """Make the result processors (none for SQL text, whose columns have no type)."""
        if not self.types or codes is None:
            codes = [None] * len(self.types)
        self.results = tuple(
            t._cached_result_processor(dialect, code)
            for t, code in zip(self.types, codes, strict=True)
        )
        self.processed = any(p is not None for p in self.results)


def _plan(stmt: ClauseElement, dialect: Dialect, keys: Sequence[str] | None) -> _Plan:
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if keys else None)
    if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
        raise TypeError("a Direct statement is SQL with positional values")
    if compiled.literal_execute_params or compiled.post_compile_params:
        raise TypeError("a Direct statement cannot expand its values (an IN list)")
    if compiled.insert_prefetch or compiled.update_prefetch:
        raise TypeError("a Direct statement cannot fill a column's Python-side default")
    binds: dict[str, Processor] = {}
    for name, proc in compiled._bind_processors.items():
        if not callable(proc):
            raise TypeError("a Direct statement binds no tuple of values")
        binds[name] = proc
    columns = compiled._result_columns or []
    return _Plan(
        sql=compiled.string,
        params=tuple((name, binds.get(name)) for name in compiled.positiontup),
        fixed={
            name: bind.effective_value
            for name, bind in compiled.binds.items()
            if bind.value is not None or not bind.required
        },
        types=tuple(entry.type for entry in columns),
        keys=tuple(entry.keyname for entry in columns),
    )


class Direct:
    """A statement (its values bound by name, as `Prebuilt`'s) run on the driver connection.

    `by_columns`: an INSERT or UPDATE whose columns are the keys of its values; each set
    of keys is compiled once."""

    __slots__ = ("_by_columns", "_plans", "_stmt")

    def __init__(self, stmt: ClauseElement, *, by_columns: bool = False) -> None:
        self._stmt = stmt
        self._by_columns = by_columns
        # By the engine's dialect itself: its processors carry the engine's JSON settings.
        self._plans: WeakKeyDictionary[Dialect, dict[tuple[str, ...] | None, _Plan]] = (
            WeakKeyDictionary()
        )

    def _plan_for(self, dialect: Dialect, values: Mapping[str, Any]) -> _Plan:
        keys = tuple(values) if self._by_columns else None
        plans = self._plans.get(dialect)
        if plans is None:
            plans = self._plans[dialect] = {}
        plan = plans.get(keys)
        if plan is None:
            plan = plans[keys] = _plan(self._stmt, dialect, keys)
        return plan

    def _params(self, plan: _Plan, values: Mapping[str, Any]) -> tuple[Any, ...]:
        if plan.fixed:
            values = {**plan.fixed, **values}
        return tuple(
            values[name] if proc is None else proc(values[name]) for name, proc in plan.params
        )

    async def _run(
        self, conn: AsyncConnection, values: Mapping[str, Any]
    ) -> tuple[_Plan, list[tuple[Any, ...]], int]:
        sync = conn.sync_connection
        assert sync is not None
        plan = self._plan_for(conn.dialect, values)
        params = self._params(plan, values)
        if sync._has_events or sync.engine._has_events:
            sync.dispatch.before_cursor_execute(sync, None, plan.sql, params, None, False)
        try:
            found, count, codes = await _send(sync, plan.sql, params)
        except Exception as exc:  # what the driver raises, raised as SQLAlchemy would
            await greenlet_spawn(_raise_as_sqlalchemy, sync, exc, plan.sql, params)
            raise
        if plan.results is None:
            plan.read_with(sync.dialect, codes)
        if plan.processed and found:
            procs = plan.results or ()
            found = [
                tuple(v if p is None else p(v) for p, v in zip(procs, row, strict=True))
                for row in found
            ]
        return plan, found, count

    async def rows(self, conn: AsyncConnection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows (none for a write without RETURNING), values processed."""
        return (await self._run(conn, values))[1]

    async def first(
        self, conn: AsyncConnection, values: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The first row by column name (a statement of one table's columns), or None."""
        plan, found, _ = await self._run(conn, values)
        return dict(zip(plan.keys, found[0], strict=True)) if found else None

    async def all(self, conn: AsyncConnection, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every row by column name (a statement of one table's columns)."""
        plan, found, _ = await self._run(conn, values)
        return [dict(zip(plan.keys, row, strict=True)) for row in found]

    async def count(self, conn: AsyncConnection, values: Mapping[str, Any]) -> int:
        """The rows a write matched."""
        return (await self._run(conn, values))[2]

    async def many(self, conn: AsyncConnection, values: Sequence[Mapping[str, Any]]) -> None:
        """A write without RETURNING, once for each set of values (one executemany)."""
        sync = conn.sync_connection
        assert sync is not None and values
        plan = self._plan_for(conn.dialect, values[0])
        params = [self._params(plan, v) for v in values]
        if sync._has_events or sync.engine._has_events:
            sync.dispatch.before_cursor_execute(sync, None, plan.sql, params, None, True)
        try:
            await _send_many(sync, plan.sql, params)
        except Exception as exc:
            await greenlet_spawn(_raise_as_sqlalchemy, sync, exc, plan.sql, params)
            raise


class DirectSelect:
    """A SELECT sent direct, plain or locked (`FOR UPDATE`; `of`: the tables it locks), each
    compiled once: `Prebuilt`'s pair for the statements sent past SQLAlchemy, chosen the
    same way (`QueryBase._either`: locked on PostgreSQL when asked)."""

    __slots__ = ("locked", "plain")

    def __init__(self, stmt: sa.Select[Any], *, of: Any = None) -> None:
        self.plain = Direct(stmt)
        self.locked = Direct(stmt.with_for_update(of=of))


def by_table(row: Sequence[Any], *tables: sa.Table) -> list[dict[str, Any]]:
    """A row of a statement that selects these tables' columns first, in this order, as a
    dict of each table's columns by name (what follows them is left out)."""
    found = []
    start = 0
    for table in tables:
        names = _names(table)
        found.append(dict(zip(names, row[start : start + len(names)], strict=True)))
        start += len(names)
    return found


@functools.cache
def _names(table: sa.Table) -> tuple[str, ...]:
    return tuple(c.name for c in table.c)


class DirectInsert:
    """A many-row INSERT … RETURNING of `table`, one statement for its rows: compiled once
    a dialect, set of columns and number of rows (up to `most`; `rows` answers None past
    it, for the caller to send it through SQLAlchemy)."""

    __slots__ = ("_most", "_returning", "_statements", "_table")

    def __init__(self, table: sa.Table, *returning: Any, most: int = 16) -> None:
        self._table = table
        self._returning = returning
        self._most = most
        self._statements: dict[tuple[int, tuple[str, ...]], Direct] = {}

    def _statement(self, n: int, keys: tuple[str, ...]) -> Direct:
        stmt = self._statements.get((n, keys))
        if stmt is None:
            c = self._table.c
            values = [
                {k: sa.bindparam(f"{k}_{i}", type_=c[k].type) for k in keys} for i in range(n)
            ]
            built = sa.insert(self._table).values(values).returning(*self._returning)
            stmt = self._statements[(n, keys)] = Direct(built)
        return stmt

    async def rows(
        self, conn: AsyncConnection, entries: Sequence[Mapping[str, Any]]
    ) -> list[tuple[Any, ...]] | None:
        if not 0 < len(entries) <= self._most:
            return None
        keys = tuple(entries[0])
        if any(tuple(e) != keys for e in entries):
            return None
        values = {f"{k}_{i}": v for i, e in enumerate(entries) for k, v in e.items()}
        return await self._statement(len(entries), keys).rows(conn, values)


async def _send(
    sync: Connection, sql: str, params: tuple[Any, ...]
) -> tuple[list[tuple[Any, ...]], int, list[Any] | None]:
    """The rows, the rows a write matched, and the type code of each column (asyncpg's)."""
    fairy = sync.connection
    driver = fairy.driver_connection
    if isinstance(driver, InlineConnection):
        # sqlite3's own transaction: it begins one before a write, as for SQLAlchemy's.
        cursor = driver.sqlite().execute(sql, params)
        found = cursor.fetchall()
        return found, cursor.rowcount, None
    # asyncpg: the statement prepared once a connection, as the adapter's cursor runs it.
    async with _adapter(sync) as adapted:
        prepared, attributes = await adapted._prepare(sql, _schema_asof(sync))
        found = [tuple(r) for r in await prepared.fetch(*params)]
    status = _STATUS.match(prepared.get_statusmsg() or "")
    codes = [a.type.oid for a in attributes] if attributes else None
    return found, int(status.group(1)) if status else -1, codes


async def _send_many(sync: Connection, sql: str, params: list[tuple[Any, ...]]) -> None:
    fairy = sync.connection
    driver = fairy.driver_connection
    if isinstance(driver, InlineConnection):
        driver.sqlite().executemany(sql, params)
        return
    async with _adapter(sync) as adapted:
        prepared, _ = await adapted._prepare(sql, _schema_asof(sync))
        await prepared.executemany(params)


@contextlib.asynccontextmanager
async def _adapter(sync: Connection) -> AsyncIterator[Any]:
    """SQLAlchemy's asyncpg adapter, as its cursor uses it: its mutex held, its transaction
    begun if no statement has, and a driver's error handed to it to translate."""
    adapted: Any = sync.connection.dbapi_connection
    async with adapted._execute_mutex:
        if adapted._transaction is None:
            await adapted._start_transaction()
        try:
            yield adapted
        except Exception as exc:
            adapted._handle_exception(exc)
            raise


def _schema_asof(sync: Connection) -> Any:
    return getattr(sync.dialect, "_invalidate_schema_cache_asof", 0)


def _raise_as_sqlalchemy(sync: Connection, exc: Exception, sql: str, params: Any) -> None:
    """Raise the driver's error wrapped as `conn.execute` would (a lost connection
    invalidated), in the greenlet SQLAlchemy's sync code needs."""
    if isinstance(exc, sync.dialect.loaded_dbapi.Error):
        sync._handle_dbapi_exception(exc, sql, params, None, None)
