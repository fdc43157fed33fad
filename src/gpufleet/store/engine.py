"""Opening the database, applying migrations, and handing out transactions."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gpufleet.domain import jsonpolicy
from gpufleet.domain.records import Worker
from gpufleet.errors import ConfigurationError, StoreError, WriteConflict
from gpufleet.store import locks, sqlite_inline
from gpufleet.store.queries import Queries
from gpufleet.store.webhook_cache import WebhookCache
from gpufleet.store.worker_cache import WorkerCache

# Alembic (with Mako and Pygments) is imported only to migrate: a schema already at the newest
# migration is told by one query, so a restart, or a start on a migrated file, never loads
# it (a tenth of a second of a server's start, #32).
if TYPE_CHECKING:
    from alembic.config import Config

# PostgreSQL's deadlock_detected and serialization_failure: the write may simply be retried.
# (The services take rows in one order, worker before job, so these should not happen.)
_RETRYABLE = ("40P01", "40001")


class Store:
    """The database behind one orchestrator process.

    SQLite allows one writer: writes in this process are serialised with a lock, so they
    never meet "database is locked". PostgreSQL takes concurrent writers; correctness there
    comes from conditional updates and row locks in the queries, not from this lock.
    """

    def __init__(self, engine: AsyncEngine, lock_file: IO[str] | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        # Reads run outside a transaction on PostgreSQL: at READ COMMITTED every statement
        # takes its own snapshot either way, and BEGIN and the ROLLBACK that returns the
        # connection to the pool cost two round trips a read (the caller's identity is one
        # read per request). SQLite's in-place driver begins nothing for a read anyway.
        self._reader = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.dialect == "postgresql"
            else engine
        )
        self._lock_file = lock_file
        # SQLite: this process makes every write, so it can keep what a token names
        # (store/worker_cache.py). PostgreSQL: another replica may change a worker any time.
        self.workers = WorkerCache() if self.dialect == "sqlite" else None
        self.webhooks = WebhookCache() if self.dialect == "sqlite" else None  # the same
        database = engine.url.database if self.dialect == "sqlite" else None
        self._checkpointer = (
            sqlite_inline.Checkpointer(database) if database and database != ":memory:" else None
        )

    @property
    def checkpoints(self) -> bool:
        """Whether `checkpoint()` has work to do: a SQLite file, whose log it folds in."""
        return self._checkpointer is not None

    async def checkpoint(self) -> None:
        """SQLite: fold the write-ahead log into the database file, on a thread.

        The connections never do it themselves (`wal_autocheckpoint=0`): SQLite would run it
        inside a commit, which here runs on the event loop (sqlite_inline), copying pages and
        syncing the file while every request waits.
        """
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.run)

    @contextlib.asynccontextmanager
    async def write(self, after_commit: Callable[[], None] | None = None) -> AsyncIterator[Queries]:
        """One write transaction. `after_commit` runs once it has committed, before the next
        writer waiting on SQLite's lock goes on: the streams it wakes send first."""

        written: Queries | None = None

        def committed(exc_type: object, _exc: object, _tb: object) -> bool:
            if exc_type is not None:
                return False
            if self.workers is not None and written is not None and written.workers_written:
                self.workers.evict(written.workers_written)
            if self.webhooks is not None and written is not None and written.webhooks_written:
                self.webhooks.evict()
            if after_commit is not None:
                after_commit()
            return False

        async with contextlib.AsyncExitStack() as stack:
            if self._write_lock is not None:
                await stack.enter_async_context(self._write_lock)
            stack.push(committed)  # unwound after the commit, before the lock
            try:
                conn = await stack.enter_async_context(self.engine.begin())
            except (OperationalError, DBAPIError, OSError) as exc:
                raise StoreError(f"cannot reach the database: {exc}") from exc
            try:
                written = Queries(conn)
                written.webhook_cache = self.webhooks
                yield written
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) in _RETRYABLE:
                    raise WriteConflict(f"write aborted by the database: {exc.orig}") from exc
                if exc.connection_invalidated:  # the server went away mid-transaction
                    raise StoreError(f"lost the database connection: {exc.orig}") from exc
                raise

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[Queries]:
        try:
            async with self._reader.connect() as conn:
                yield Queries(conn)
        except (OperationalError, OSError) as exc:
            raise StoreError(f"cannot reach the database: {exc}") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:  # the server went away mid-read
                raise StoreError(f"lost the database connection: {exc.orig}") from exc
            raise

    async def refresh_workers(self) -> None:
        """SQLite: read again, in batches, the workers the cache dropped since the last call
        (store/worker_cache.py); a request that comes first reads its own."""
        if self.workers is None or not self.workers.stale:
            return

        async def read(token_hashes: list[str]) -> list[tuple[str, Worker]]:
            async with self.read() as q:
                return await q.workers_for_tokens(token_hashes)

        await self.workers.refresh(read)

    async def schema_is_current(self) -> bool:
        """The database answers and carries the newest migration."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(at_newest_migration)

    async def close(self) -> None:
        await self.engine.dispose()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.close)
        if self._lock_file is not None:
            self._lock_file.close()


def default_database_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{(data_dir / 'gpufleet.db').resolve()}"


def _check_url(url: str) -> str:
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise ConfigurationError(
            f"--database-url {url!r} is not a database URL; use sqlite+aiosqlite:///path.db "
            "or postgresql+asyncpg://user@host/db"
        ) from exc
    driver = parsed.drivername
    if driver in ("sqlite", "sqlite+pysqlite"):
        return str(parsed.set(drivername="sqlite+aiosqlite"))
    if driver in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    if driver not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        raise ConfigurationError(
            f"database driver {driver!r} is not supported; use sqlite+aiosqlite or "
            "postgresql+asyncpg"
        )
    return url


def _lock_sqlite(url: str) -> IO[str] | None:
    """Hold an exclusive lock beside the SQLite file: a second orchestrator is refused."""
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    lock_path = Path(database).with_suffix(".lock")
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigurationError(
            f"another gpufleet server already uses {database}; SQLite serves one orchestrator "
            "only: stop the other one, or run several replicas on PostgreSQL "
            "(--database-url postgresql+asyncpg://…)"
        ) from None
    return handle


# A pooled PostgreSQL connection idle for longer is pinged before use (a restarted server
# leaves dead ones behind); a busy pool's connections are not (one round trip per checkout).
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_when_idle(engine: AsyncEngine) -> None:
    """SQLAlchemy's `pool_pre_ping`, for connections that sat idle only.

    A dead connection found this way is replaced before use. One that dies while in use, or
    within the idle window, fails its statement once; SQLAlchemy then invalidates the whole
    pool, so the next checkout connects anew.
    """
    pool, dialect = engine.sync_engine.pool, engine.sync_engine.dialect

    def returned(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def taken(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return  # just connected, or in use a moment ago
        try:
            dialect.do_ping(dbapi_conn)
        except Exception as exc:  # whatever the driver raises for a dead link
            raise DisconnectionError(f"a pooled connection is dead: {exc}") from exc

    event.listen(pool, "checkin", returned)
    event.listen(pool, "checkout", taken)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA wal_autocheckpoint=0")  # Store.checkpoint does it, on a thread
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reached only if something outside this process writes the file: it would wait on the
    # event loop (sqlite_inline), so not for long.
    cursor.execute("PRAGMA busy_timeout=2000")
    cursor.close()


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


_MIGRATIONS = resources.files("gpufleet.store") / "migrations"


@functools.cache
def newest_revision() -> str:
    """The newest migration's revision. Each migration's file name starts with its revision,
    four digits, and follows the one numbered before it (tests/unit/test_sqlite_store.py
    holds this to Alembic's own reading of the scripts), so the names tell it without loading
    a script."""
    return max(
        entry.name[:4]
        for entry in (_MIGRATIONS / "versions").iterdir()
        if entry.name.endswith(".py") and entry.name[:4].isdigit()
    )


def at_newest_migration(sync_conn: Connection) -> bool:
    if not inspect(sync_conn).has_table("alembic_version"):
        return False
    found = sync_conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return found == [newest_revision()]


def _run_migrations(sync_conn: Connection) -> None:
    """Bring the schema to the newest migration. A schema already there is left without
    running Alembic's `upgrade`, which reads every migration script to find nothing to do
    (6 % of the API tier's CPU, whose every test starts an app; twice a server's start)."""
    if at_newest_migration(sync_conn):
        return
    from alembic import command

    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")


async def open_store(url: str, *, lock: bool = True) -> Store:
    """Connect, lock (SQLite), and bring the schema to the newest migration."""
    url = _check_url(url)
    lock_file = None
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        lock_file = _lock_sqlite(url) if lock else None
        # Statements run on the event loop, not on aiosqlite's threads (see sqlite_inline).
        engine = create_async_engine(
            url,
            async_creator=functools.partial(sqlite_inline.connect, database or ":memory:"),
            pool_size=8,
            max_overflow=4,
            json_deserializer=jsonpolicy.loads_stored,
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    else:
        engine = create_async_engine(
            url, pool_size=20, max_overflow=20, json_deserializer=jsonpolicy.loads_stored
        )
        _ping_when_idle(engine)
    try:
        async with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                await locks.hold_until_commit(conn, locks.MIGRATION)
            await conn.run_sync(_run_migrations)
    except (OperationalError, DBAPIError, OSError) as exc:
        await engine.dispose()
        if lock_file is not None:
            lock_file.close()
        safe = make_url(url).render_as_string(hide_password=True)
        raise ConfigurationError(
            f"cannot open the database {safe}: {exc.__class__.__name__}: {exc}; check "
            "--database-url and that the server is running"
        ) from exc
    return Store(engine, lock_file)


def data_dir_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(
            f"data folder {path} is not writable ({exc.strerror}); pass --data-dir to a folder "
            "you can write"
        ) from exc
    os.chmod(path, 0o700)
