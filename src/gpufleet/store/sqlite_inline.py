"""SQLite without a thread hop: an aiosqlite-shaped connection that runs on the event loop.

SQLAlchemy's `sqlite+aiosqlite` dialect talks to aiosqlite, which runs every statement on a
thread of its own and hands the answer back to the event loop: about 0.4 ms a statement on
this project's benchmark machine, against about 0.07 ms when the same statement runs in
place (`bench`, docs/benchmarks.md, run 4). An orchestrator transaction is ten or more
statements, so the hops, not SQLite, bounded how many jobs a second one orchestrator moved.

This module keeps the dialect (`create_async_engine(..., async_creator=...)`, the hook
SQLAlchemy documents for supplying the driver connection) and gives it a connection whose
coroutines call `sqlite3` directly. Statements on a local file take microseconds; the price
is that a slow statement holds the event loop while it runs, which is why the orchestrator's
queries are indexed and paged. Only one process uses the file (the store's lock file), WAL
readers never wait for the writer, and writes in the process are serialised by the store's
lock, so SQLite's busy handler, which would sleep on the event loop, is not reached in
normal operation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any


class InlineCursor:
    """The async cursor SQLAlchemy's aiosqlite adapter expects, run in place."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        return self._cursor.fetchmany(size if size is not None else self._cursor.arraysize)

    async def fetchall(self) -> Sequence[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class InlineConnection:
    """The async connection SQLAlchemy's aiosqlite adapter expects, run in place."""

    def __init__(self, database: str) -> None:
        # The pool hands a connection to one task at a time, all on the event loop's thread;
        # `check_same_thread=False` only lets the pool's garbage collection close it.
        self._conn: sqlite3.Connection | None = sqlite3.connect(database, check_same_thread=False)

    @property
    def _connection(self) -> sqlite3.Connection | None:
        """What the adapter checks to tell an open connection from a closed one."""
        return self._conn

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError("Connection closed")  # the adapter reads this as a disconnect
        return self._conn

    def sqlite(self) -> sqlite3.Connection:
        """The sqlite3 connection itself, for the statements sent past SQLAlchemy
        (store/direct.py)."""
        return self._open()

    @property
    def isolation_level(self) -> str | None:
        return self._open().isolation_level

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._open().cursor())

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._open().create_function(*args, **kwargs)

    async def commit(self) -> None:
        self._open().commit()

    async def rollback(self) -> None:
        self._open().rollback()

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Close at once (SQLAlchemy's forced termination)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


async def connect(database: str) -> InlineConnection:
    return InlineConnection(database)


class Checkpointer:
    """Folds the write-ahead log into the database file from a thread of its own.

    PASSIVE: it copies what no reader still needs and never waits for, or blocks, the
    connections on the event loop; the log is reused from its start once folded in.
    """

    def __init__(self, database: str) -> None:
        self._database = database
        self._conn: sqlite3.Connection | None = None

    def run(self) -> None:
        if self._conn is None:
            self._conn = sqlite3.connect(self._database, check_same_thread=False)
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        """A last checkpoint that also empties the log file, then close."""
        if self._conn is None:
            self._conn = sqlite3.connect(self._database, check_same_thread=False)
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass  # the log is folded in by the next start instead
        finally:
            self._conn.close()
            self._conn = None
