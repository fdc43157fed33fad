"""The embedded SQLite store: statements on the event loop, the log folded in on a thread."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from gpufleet.domain.levels import ADMIN_USER_ID
from gpufleet.domain.records import StoredConfig
from gpufleet.domain.states import JobStatus, Target
from gpufleet.errors import StoreError
from gpufleet.store import Queries, open_store
from gpufleet.store.engine import alembic_config, newest_revision
from gpufleet.store.queries.jobs import NewJob, TeamOf
from gpufleet.store.sqlite_inline import InlineConnection


async def test_statements_run_in_place_and_the_connections_never_checkpoint(
    tmp_path: Path,
) -> None:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}")
    try:
        async with store.read() as q:
            raw = await q.conn.get_raw_connection()
            assert isinstance(raw.driver_connection, InlineConnection)
            mode = (await q.conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            auto = (await q.conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one()
        assert (mode, auto) == ("wal", 0)
    finally:
        await store.close()


async def test_checkpoint_folds_the_log_in_and_close_empties_it(tmp_path: Path) -> None:
    path = tmp_path / "gf.db"
    store = await open_store(f"sqlite+aiosqlite:///{path}")
    assert store.checkpoints
    now = datetime.now(UTC)
    for n in range(50):
        async with store.write() as q:
            body = {"n": n, "pad": "x" * 2000}
            config = StoredConfig(
                f"cfg-{n}", body, now, now, ADMIN_USER_ID, None, 1, "0" * 64, None
            )
            assert await q.insert_config(config)
    wal = path.with_name("gf.db-wal")
    assert wal.stat().st_size > 0
    assert _configs_in_the_file_alone(path, tmp_path / "before.db") == 0

    await store.checkpoint()

    assert _configs_in_the_file_alone(path, tmp_path / "after.db") == 50
    async with store.read() as q:
        assert len(await q.list_configs()) == 50

    await store.close()
    assert not wal.exists() or wal.stat().st_size == 0  # folded in, then emptied or removed
    with sqlite3.connect(path) as probe:
        assert probe.execute("SELECT count(*) FROM configs").fetchone() == (50,)


def _configs_in_the_file_alone(path: Path, copy: Path) -> int:
    """Configs in the database file itself, without its write-ahead log."""
    shutil.copyfile(path, copy)
    with sqlite3.connect(copy) as probe:
        try:
            return int(probe.execute("SELECT count(*) FROM configs").fetchone()[0])
        except sqlite3.OperationalError:  # not even the table is in the file yet
            return 0


async def test_a_statement_on_a_closed_store_is_a_store_error(tmp_path: Path) -> None:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}")
    await store.close()
    (tmp_path / "gf.db").unlink()
    (tmp_path / "gf.db").mkdir()  # the file is gone and cannot be made again
    with pytest.raises(StoreError, match="cannot reach the database"):
        async with store.read() as q:
            await q.list_configs()


async def queue_plan(tmp_path: Path, read: Callable[[Queries], Awaitable[object]]) -> str:
    """SQLite's plan of the last statement on `jobs` that `read` sends."""
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}")
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            seen.append((statement, params))

    event.listen(store.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with store.read() as q:
            await read(q)
            statement, params = seen[-1]
            return " / ".join(
                str(row[-1])
                for row in await q.conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
            )
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", capture)
        await store.close()


async def test_the_head_of_the_queue_is_read_through_the_index_without_sorting(
    tmp_path: Path,
) -> None:
    """The dispatch order (priority high to low, oldest first) is the index's order, so a
    freed worker's look at the head of the queue stops after a page, however deep it is."""
    plan = await queue_plan(
        tmp_path,
        lambda q: q.queued_jobs(max_gpus=1, targets=["worker", "auto"], after=None, limit=20),
    )
    assert "ix_jobs_queue" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize(
    ("match_keys", "index"),
    [(None, "ix_jobs_team_queue"), (["*", "[]"], "ix_jobs_team_match")],
    ids=["head", "matching"],
)
async def test_a_teams_queue_is_read_through_its_own_index(
    tmp_path: Path, match_keys: list[str] | None, index: str
) -> None:
    """Fair share reads each team's queue: its head in dispatch order, then only the jobs the
    worker's labels match, each through an index of the team's jobs, never a scan of every
    queued job (bench scenario 8: 100,000 jobs over 50 teams)."""
    plan = await queue_plan(
        tmp_path,
        lambda q: q.queued_jobs(
            max_gpus=1,
            targets=["worker", "auto"],
            after=None,
            limit=4,
            match_keys=match_keys,
            team=TeamOf("t_nlp"),
        ),
    )
    assert index in plan, plan
    if match_keys is None:
        assert "TEMP B-TREE" not in plan, plan


async def test_a_commit_wakes_its_streams_before_the_next_writer_goes_on(tmp_path: Path) -> None:
    """SQLite writers queue on one lock: the committed transaction's after-commit step (it
    wakes the streams its offers go to) runs before the writer waiting behind it."""
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}")
    order: list[str] = []

    async def next_writer() -> None:
        async with store.write() as q:
            await q.conn.execute(text("SELECT 1"))
            order.append("next writer")

    try:
        async with store.write(after_commit=lambda: order.append("woken")) as q:
            waiting = asyncio.create_task(next_writer())
            await asyncio.sleep(0)  # it now waits for the lock
            await q.conn.execute(text("SELECT 1"))
        await waiting
        with pytest.raises(RuntimeError):
            async with store.write(after_commit=lambda: order.append("rolled back")):
                raise RuntimeError("the transaction fails")
    finally:
        await store.close()
    assert order == ["woken", "next writer"]


# ---- migrations at open -------------------------------------------------------------------


def _revision(sync_conn: Connection) -> str | None:
    return MigrationContext.configure(sync_conn).get_current_revision()


async def test_a_schema_at_the_newest_migration_opens_without_running_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alembic's `upgrade` read every migration script at each open to find nothing to do."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}"
    await (await open_store(url)).close()

    def refuse(*_args: Any, **_kwargs: Any) -> None:  # the fault: upgrade fails if it runs
        raise AssertionError("Alembic's upgrade ran on a schema at the newest migration")

    monkeypatch.setattr(command, "upgrade", refuse)
    store = await open_store(url)
    async with store.engine.connect() as conn:
        assert await conn.run_sync(_revision) == newest_revision()
    await store.close()


async def test_a_schema_a_migration_behind_is_brought_to_the_newest(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}"
    store = await open_store(url, lock=False)
    head = newest_revision()
    scripts = ScriptDirectory.from_config(alembic_config())
    assert head == scripts.get_current_head() is not None
    previous = scripts.get_revision(head).down_revision
    assert isinstance(previous, str)

    def down_one(sync_conn: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = sync_conn
        command.downgrade(cfg, "-1")

    async with store.engine.begin() as conn:
        await conn.run_sync(down_one)
        assert await conn.run_sync(_revision) == previous
    await store.close()
    store = await open_store(url, lock=False)
    async with store.engine.connect() as conn:
        assert await conn.run_sync(_revision) == head
    await store.close()


async def test_a_downgrade_past_every_migration_that_alters_users_or_jobs_keeps_their_rows(
    tmp_path: Path,
) -> None:
    """On SQLite a batch alter copies its table and drops the old one, and dropping it deletes
    every row that references it (`ON DELETE CASCADE`, foreign keys on): 0030's downgrade lost
    every job's log lines, 0027's every team membership. Their columns are dropped in place."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}"
    store = await open_store(url, lock=False)
    now = datetime.now(UTC).isoformat()
    rows = {
        "teams": f"INSERT INTO teams (id, name, created_at) VALUES ('t_1', 'vision', '{now}')",
        "team_members": "INSERT INTO team_members (team_id, user_id) "
        f"VALUES ('t_1', '{ADMIN_USER_ID}')",
    }

    def migrate(sync_conn: Connection, target: str) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = sync_conn
        (command.downgrade if target != "head" else command.upgrade)(cfg, target)

    def counted(sync_conn: Connection) -> dict[str, int]:
        return {t: sync_conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in rows}

    try:
        async with store.engine.begin() as conn:
            for statement in rows.values():
                await conn.execute(text(statement))
            await conn.run_sync(migrate, "0026")
            assert await conn.run_sync(counted) == {"teams": 1, "team_members": 1}
            await conn.run_sync(migrate, "head")
            assert await conn.run_sync(counted) == {"teams": 1, "team_members": 1}
    finally:
        await store.close()


async def test_the_generic_update_of_a_job_refuses_a_status_and_writes_nothing(
    tmp_path: Path,
) -> None:
    # Only services/lifecycle.py moves a job (set_job_status); tests/unit/test_status_writers
    # finds a writer in the source, this one a `status` that came in a dict of values.
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gf.db'}")
    now = datetime.now(UTC)
    new = NewJob(
        id="j_1",
        config={"command": ["x"]},
        target=Target.WORKER,
        worker_labels={},
        gpu_count=1,
        priority=0,
        max_retries=0,
        retry_on=(),
        submitted_by="test",
        created_at=now,
    )
    try:
        async with store.write() as q:
            await q.queue_job(new)
        with pytest.raises(TypeError, match="lifecycle"):
            async with store.write() as q:
                await q.update_job("j_1", **{"status": "failed", "error": "x"})
        async with store.write() as q:
            await q.update_job("j_1", error="kept")
            await q.set_job_status("j_1", JobStatus.CANCELLED, ended_at=now)
        async with store.read() as q:
            job = await q.get_job("j_1")
        assert job is not None and (job.status, job.error) == (JobStatus.CANCELLED, "kept")
    finally:
        await store.close()
