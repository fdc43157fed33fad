"""Records read off rows by their fields (store/queries/rows.py): a field without a column,
or a column no field reads, is refused when the store is imported, not met in production."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from gpufleet.domain.levels import Level
from gpufleet.domain.records import GpuStat, Job
from gpufleet.domain.states import JobStatus, RetryOn, Target, WorkerStatus, WorkerType
from gpufleet.domain.webhooks import PayloadFormat, Subscription
from gpufleet.store import tables
from gpufleet.store.queries import rows
from gpufleet.store.queries.jobs import NewJob

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def columns_of(reader: rows.Reader[object]) -> set[str]:
    """The columns a reader reads: its fields' own, renamed, or read by a whole-row field."""
    read: set[str] = set()
    for f in dataclasses.fields(reader.record):  # type: ignore[arg-type]
        how = reader.read.get(f.name, rows.Read())
        read.update(how.columns if how.row else [how.column or f.name])
    return read


@pytest.mark.parametrize("reader", rows.READERS, ids=lambda r: r.record.__name__)
def test_every_field_of_a_record_has_its_column_or_a_declared_way_to_be_read(
    reader: rows.Reader[object],
) -> None:
    optional = {name for name, how in reader.read.items() if how.optional}
    assert columns_of(reader) - optional <= set(reader.table.c.keys())


@pytest.mark.parametrize("reader", rows.READERS, ids=lambda r: r.record.__name__)
def test_every_column_is_read_by_a_field_or_declared_unread(reader: rows.Reader[object]) -> None:
    assert set(reader.table.c.keys()) <= columns_of(reader) | reader.unread


def test_every_table_a_record_is_read_from_has_one_reader() -> None:
    read = [reader.table.name for reader in rows.READERS]
    assert len(read) == len(set(read)) >= 15


def test_a_field_added_to_a_record_without_its_column_stops_the_import() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Flavoured(Job):
        flavour: str | None = None

    with pytest.raises(TypeError, match=r"Flavoured\.flavour has no column in jobs"):
        rows.reader(Flavoured, tables.jobs, unread={"match_key"})


def test_a_column_added_to_a_table_without_its_field_stops_the_import() -> None:
    wider = sa.Table(
        "jobs",
        sa.MetaData(),
        *(c._copy() for c in tables.jobs.c),
        sa.Column("flavour", sa.String(16)),
    )
    with pytest.raises(TypeError, match=r"jobs has columns \['flavour'\]"):
        rows.reader(Job, wider, unread={"match_key"})


def test_a_declared_exception_that_names_nothing_is_refused() -> None:
    with pytest.raises(TypeError, match="not there"):
        rows.reader(Job, tables.jobs, unread={"match_key", "no_such_column"})
    with pytest.raises(TypeError, match="not there"):
        rows.reader(Job, tables.jobs, {"no_such_field": rows.Read()}, unread={"match_key"})


def test_a_field_is_converted_as_its_type_says() -> None:
    job = rows.new_job(
        {
            "id": "j1",
            "status": "queued",
            "config": {"a": 1},
            "target": "worker",
            "worker_labels": {},
            "retry_on": ["lost"],
            "gpu_count": 1,
            "created_at": NOW,
        }
    )
    assert job.status is JobStatus.QUEUED and job.target is Target.WORKER
    assert job.retry_on == frozenset({RetryOn.LOST})
    assert job.artifacts_pinned is False  # a bool column not given reads False
    assert job.preemptible is None and job.progress is None  # an optional field keeps None


def test_a_workers_labels_are_its_own_under_the_admins() -> None:
    stat = {"index": 0, "utilization_pct": 5.0, "memory_used_gb": 1.0, "memory_total_gb": 80.0}
    row = {c.name: None for c in tables.workers.c} | {
        "status": "idle",
        "worker_type": "ephemeral",
        "admin_labels": {"pool": "a"},
        "reported_labels": {"pool": "b", "zone": "z"},
        "capabilities": {},
        "gpu_stats": [stat],
    }
    worker = rows.worker(row)
    assert worker.status is WorkerStatus.IDLE and worker.worker_type is WorkerType.EPHEMERAL
    assert worker.labels == {"pool": "a", "zone": "z"}
    assert worker.gpu_stats == (GpuStat(**stat),)
    assert rows.worker(row | {"gpu_stats": None}).gpu_stats == ()


def test_renamed_and_enum_set_columns_are_read_as_declared() -> None:
    key = {c.name: None for c in tables.api_keys.c} | {"permissions": ["admin"]}
    assert rows.api_key(key).revoked is False
    assert rows.api_key(key | {"revoked_at": NOW}).revoked is True
    hook = {c.name: None for c in tables.webhooks.c} | {"events": ["job.ended"], "format": "slack"}
    assert rows.webhook(hook).events == frozenset({Subscription("job.ended")})
    assert rows.webhook(hook).format is PayloadFormat.SLACK
    user = {c.name: None for c in tables.users.c} | {"level": "lead", "usage": 2}
    assert rows.user(user).level is Level.LEAD and isinstance(rows.user(user).usage, float)


def test_a_submitted_jobs_every_field_is_a_column_of_jobs() -> None:
    assert {f.name for f in dataclasses.fields(NewJob)} <= set(tables.jobs.c.keys())


def test_a_submitted_job_reads_back_as_its_fields_say() -> None:
    new = NewJob(
        id="j1",
        config={"command": ["true"]},
        target=Target.AUTO,
        worker_labels={"pool": "a"},
        gpu_count=2,
        priority=5,
        max_retries=1,
        retry_on={RetryOn.FAILED, RetryOn.LOST},
        submitted_by="k1",
        created_at=NOW,
        config_version=3,
    )
    row = new.row()
    assert row["status"] == "queued" and row["retry_on"] == ["failed", "lost"]
    job = rows.new_job(row)
    assert (job.id, job.target, job.gpu_count, job.config_version) == ("j1", Target.AUTO, 2, 3)
    assert job.updated_at == NOW and job.attempts == 0 and job.artifacts_pinned is False
