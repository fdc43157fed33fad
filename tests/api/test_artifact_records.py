"""Migration 0013 and the artifact queries, on SQLite and PostgreSQL: the tables
docs/artifacts.md names, a downgrade that leaves 0012's schema, and the rows read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Connection

from gpufleet.domain.records import ArtifactKind
from gpufleet.domain.states import (
    ATTEMPT_TRANSITIONS,
    AttemptStatus,
    RetryOn,
    Target,
    parse_reported_status,
)
from gpufleet.store import Store, open_store
from gpufleet.store.engine import alembic_config
from gpufleet.store.queries import NewJob
from tests.api.conftest import both_databases

pytestmark = both_databases

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _migrate(sync_conn: Connection, revision: str, *, down: bool) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    (command.downgrade if down else command.upgrade)(cfg, revision)


def _shape(sync_conn: Connection) -> dict[str, set[str]]:
    inspector = sa.inspect(sync_conn)
    return {t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()}


async def _queue_index(store: Store) -> str:
    """How the database defines ix_jobs_queue (the head of the queue reads it in order)."""
    sqlite = store.engine.dialect.name == "sqlite"
    query = (
        "SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_queue'"
        if sqlite
        else "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_queue'"
    )
    async with store.engine.connect() as conn:
        return str((await conn.execute(sa.text(query))).scalar_one())


async def _job(store: Store, job_id: str) -> None:
    async with store.write() as q:
        await q.queue_job(
            NewJob(
                id=job_id,
                config={"command": ["true"]},
                target=Target.WORKER,
                worker_labels={},
                gpu_count=0,
                priority=0,
                max_retries=1,
                retry_on=[RetryOn.LOST],
                submitted_by="test",
                created_at=T0,
            )
        )


async def _attempt(store: Store, job_id: str, attempt_id: str, number: int) -> None:
    async with store.write() as q:
        await q.insert_attempt(
            AttemptStatus.RUNNING,
            {
                "id": attempt_id,
                "job_id": job_id,
                "worker_id": "w_1",
                "number": number,
                "offered_at": T0,
            },
        )


def _artifact(
    job_id: str, attempt_id: str, n: int, path: str, **extra: object
) -> dict[str, object]:
    return {
        "id": f"r_{attempt_id}_{n}",
        "job_id": job_id,
        "attempt_id": attempt_id,
        "path": path,
        "kind": ArtifactKind.ARTIFACT.value,
        "checkpoint": None,
        "size": 10 * n,
        "sha256": f"{n:064x}",
        "key": f"jobs/{job_id}/{attempt_id}/{path}",
        "created_at": T0 + timedelta(seconds=n),
        **extra,
    }


async def test_0013_adds_its_tables_and_columns_and_downgrades_to_0012(database_url: str) -> None:
    store = await open_store(database_url)
    try:
        await _job(store, "j_old")
        async with store.engine.begin() as conn:
            head = await conn.run_sync(_shape)
        assert {
            "id",
            "job_id",
            "attempt_id",
            "path",
            "kind",
            "checkpoint",
            "size",
            "sha256",
            "key",
            "created_at",
        } <= head["artifacts"]
        assert {
            "id",
            "job_id",
            "attempt_id",
            "name",
            "path",
            "step",
            "files",
            "size",
            "created_at",
        } <= head["checkpoints"]
        assert "artifacts_pinned" in head["jobs"] and "resumed_from" in head["job_attempts"]

        async with store.engine.begin() as conn:
            await conn.run_sync(_migrate, "0012", down=True)
            down = await conn.run_sync(_shape)
            version = await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
            assert version.scalar_one() == "0012"
        assert "artifacts" not in down and "checkpoints" not in down
        assert "artifacts_pinned" not in down["jobs"]
        assert "resumed_from" not in down["job_attempts"]

        assert "priority DESC" in await _queue_index(store)  # kept in dispatch order (0006)

        async with store.engine.begin() as conn:
            await conn.run_sync(_migrate, "head", down=False)
        async with store.read() as q:
            job = await q.get_job("j_old")
        assert job is not None and job.artifacts_pinned is False  # rows from before: unpinned
        assert "priority DESC" in await _queue_index(store)
    finally:
        await store.close()


async def test_artifacts_read_back_with_their_attempt_and_replace_on_the_same_path(
    database_url: str,
) -> None:
    store = await open_store(database_url)
    try:
        await _job(store, "j_1")
        await _attempt(store, "j_1", "a_1", 1)
        await _attempt(store, "j_1", "a_2", 2)
        async with store.write() as q:
            await q.insert_artifact(_artifact("j_1", "a_1", 1, "result.json"))
            await q.insert_artifact(_artifact("j_1", "a_2", 2, "output/b.bin"))
            await q.insert_artifact(_artifact("j_1", "a_2", 3, "output/a.bin"))
            await q.insert_artifact(_artifact("j_1", "a_2", 4, "output/a.bin"))  # overwrite
        async with store.read() as q:
            listed = await q.artifacts_for_job("j_1")
            at = await q.artifact_at("a_2", "output/a.bin")
            total = await q.job_artifact_bytes("j_1")
            none = await q.job_artifact_bytes("j_nothing")
        assert [(a.attempt_number, a.path) for a in listed] == [
            (2, "output/a.bin"),
            (2, "output/b.bin"),
            (1, "result.json"),
        ]
        assert at is not None and at.id == "r_a_2_4" and at.sha256 == f"{4:064x}"
        assert at.kind is ArtifactKind.ARTIFACT and at.attempt_number == 2
        assert (total, none) == (10 + 20 + 40, 0)

        async with store.write() as q:
            assert await q.delete_artifacts(["r_a_2_4", "r_missing"]) == 1
        async with store.read() as q:
            assert await q.artifact_at("a_2", "output/a.bin") is None
            assert await q.job_artifact_bytes("j_1") == 30
    finally:
        await store.close()


def _checkpoint(
    job_id: str, attempt_id: str, name: str, step: int | None, n: int
) -> dict[str, object]:
    return {
        "id": f"k_{attempt_id}_{name}",
        "job_id": job_id,
        "attempt_id": attempt_id,
        "name": name,
        "path": f"output/{name}",
        "step": step,
        "files": 2,
        "size": 100,
        "created_at": T0 + timedelta(seconds=n),
    }


async def test_the_latest_checkpoint_is_drawn_only_from_the_attempts_given(
    database_url: str,
) -> None:
    store = await open_store(database_url)
    try:
        await _job(store, "j_1")
        for n in (1, 2, 3):
            await _attempt(store, "j_1", f"a_{n}", n)
        async with store.write() as q:
            await q.insert_checkpoint(_checkpoint("j_1", "a_1", "checkpoint-100", 100, 1))
            await q.insert_checkpoint(_checkpoint("j_1", "a_1", "checkpoint-200", 200, 2))
            await q.insert_checkpoint(_checkpoint("j_1", "a_2", "checkpoint-300", 300, 3))
            await q.insert_checkpoint(_checkpoint("j_1", "a_3", "checkpoint-50", 50, 4))
            await q.insert_checkpoint(_checkpoint("j_1", "a_1", "checkpoint-200", 200, 5))
        async with store.read() as q:
            from_2 = await q.latest_checkpoint("j_1", ["a_1", "a_2"])
            from_1 = await q.latest_checkpoint("j_1", ["a_1"])
            nothing = await q.latest_checkpoint("j_1", [])
            other_job = await q.latest_checkpoint("j_other", ["a_1"])
            listed = await q.checkpoints_for_job("j_1")
            one = await q.get_checkpoint("k_a_2_checkpoint-300")
        assert from_2 is not None and (from_2.name, from_2.attempt_number) == ("checkpoint-300", 2)
        assert from_1 is not None and from_1.name == "checkpoint-200"
        assert nothing is None and other_job is None
        assert [c.name for c in listed] == [
            "checkpoint-200",  # re-committed last: replaced, not doubled
            "checkpoint-50",
            "checkpoint-300",
            "checkpoint-100",
        ]
        assert one is not None and one.step == 300 and one.files == 2

        async with store.write() as q:
            assert await q.delete_checkpoints(["k_a_2_checkpoint-300"]) == 1
            await q.set_artifacts_pinned("j_1", True)
        async with store.read() as q:
            after = await q.latest_checkpoint("j_1", ["a_1", "a_2"])
            job = await q.get_job("j_1")
        assert after is not None and after.name == "checkpoint-200"
        assert job is not None and job.artifacts_pinned is True
    finally:
        await store.close()


def test_a_running_attempt_can_be_preempted_and_a_preempted_one_is_final() -> None:
    assert parse_reported_status("preempted") is AttemptStatus.PREEMPTED
    assert AttemptStatus.PREEMPTED in ATTEMPT_TRANSITIONS[AttemptStatus.RUNNING]
    assert AttemptStatus.PREEMPTED in ATTEMPT_TRANSITIONS[AttemptStatus.ACKNOWLEDGED]
    assert AttemptStatus.PREEMPTED in ATTEMPT_TRANSITIONS[AttemptStatus.OFFERED]
    assert AttemptStatus.PREEMPTED not in ATTEMPT_TRANSITIONS[AttemptStatus.LOST]
    assert ATTEMPT_TRANSITIONS[AttemptStatus.PREEMPTED] == frozenset()
