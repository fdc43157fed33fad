"""The statements sent past SQLAlchemy's execution path (store/direct.py) behave as those
sent through it: inside the transaction, announced to listeners, values stored and read
back the same, a driver's error raised as SQLAlchemy's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from gpufleet.domain.states import JobStatus, Target
from gpufleet.store.queries.jobs import NewJob
from gpufleet.store.tables import jobs
from tests.api.conftest import Fleet, both_databases

pytestmark = both_databases


def new_job(job_id: str) -> NewJob:
    return NewJob(
        id=job_id,
        config={"model": "m", "lr": 0.5, "tags": ["a", "ü"]},
        target=Target.AUTO,
        worker_labels={},
        gpu_count=1,
        priority=0,
        max_retries=0,
        retry_on=(),
        submitted_by="tester",
        created_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    )


class Rollback(Exception):
    pass


async def test_a_direct_write_first_in_a_transaction_is_rolled_back_with_it(
    fleet: Fleet,
) -> None:
    """On PostgreSQL the adapter begins its transaction at the first statement it sends:
    one sent past it must begin it too, or it commits alone (and a lock it takes is gone
    at once)."""
    store = fleet.ctx.store
    async with store.write() as q:
        await q.queue_job(new_job("j_direct_1"))
    with pytest.raises(Rollback):
        async with store.write() as q:
            await q.set_job_status("j_direct_1", JobStatus.CANCELLED)  # the first statement
            raise Rollback
    async with store.read() as q:
        job = await q.get_job("j_direct_1")
    assert job is not None and job.status is JobStatus.QUEUED


async def test_a_direct_statement_stores_and_reads_values_as_sqlalchemy_does(
    fleet: Fleet,
) -> None:
    store = fleet.ctx.store
    async with store.write() as q:
        queued = await q.queue_job(new_job("j_direct_2"))
        found = await q.job_and_attempt("j_direct_2", None, "nobody", None)
    async with store.engine.connect() as conn:  # through SQLAlchemy's own path
        row = (await conn.execute(sa.select(jobs).where(jobs.c.id == "j_direct_2"))).one()
    assert found is not None
    job, attempt = found
    assert attempt is None
    assert job.config == queued.config == row.config
    assert job.created_at == queued.created_at == row.created_at.replace(tzinfo=UTC)
    assert job.created_at.tzinfo is not None


async def test_a_direct_statement_is_announced_and_its_driver_error_is_sqlalchemys(
    fleet: Fleet,
) -> None:
    store = fleet.ctx.store
    seen: list[str] = []

    def capture(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    async with store.write() as q:
        await q.queue_job(new_job("j_direct_3"))
    event.listen(store.engine.sync_engine, "before_cursor_execute", capture)
    try:
        with pytest.raises(sa.exc.IntegrityError):
            async with store.write() as q:
                await q.queue_job(new_job("j_direct_3"))  # the same id again
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", capture)
    assert any(s.startswith("INSERT INTO jobs") for s in seen), seen
    async with store.write() as q:  # the store goes on writing
        await q.queue_job(new_job("j_direct_4"))
