"""The retention sweep (services/retention.py) on a real database and a real store, run by
the test on the fake clock: what it deletes, what it never deletes, and a store that fails."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asgi_lifespan import LifespanManager

from gpufleet.artifacts.backends import open_artifact_store
from gpufleet.artifacts.store import ArtifactStore
from gpufleet.errors import ArtifactStoreError
from gpufleet.server.app import create_app
from gpufleet.server.context import Context
from gpufleet.server.services import retention
from gpufleet.server.settings import ServerSettings
from gpufleet.supervisor import Supervisor
from tests.api.artifact_world import Run, start_run, stored_keys
from tests.api.conftest import Fleet
from tests.api.test_artifact_store import _s3_settings

DAY = 24 * 3600.0


async def artifacts_of(fleet: Fleet, run: Run) -> set[str]:
    body = (await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")).json()
    return {a["path"] for a in body["artifacts"]}


async def checkpoints_of(fleet: Fleet, run: Run) -> list[str]:
    body = (await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")).json()
    return [c["name"] for c in body["checkpoints"]]


async def ended_run(fleet: Fleet, *files: str, checkpoint: int | None = None) -> Run:
    """A job that stored `files` (and a checkpoint, when its step is given), then ended."""
    run = await start_run(fleet)
    for name in files:
        await run.put(f"models/{name}", name.encode())
    if checkpoint is not None:
        await run.checkpoint(f"checkpoint-{checkpoint}", checkpoint, {"s.bin": b"s"})
    await run.finish()
    return run


async def test_an_ended_job_loses_its_files_after_the_period_unless_pinned(fleet: Fleet) -> None:
    old = await ended_run(fleet, "a.bin", "b.bin", checkpoint=5)
    pinned = await ended_run(fleet, "keep.bin")
    assert (
        await fleet.admin.put(f"/api/queue/{pinned.job_id}/artifacts/pin", json={"pinned": True})
    ).status_code == 200
    fleet.clock.advance(20 * DAY)
    recent = await ended_run(fleet, "recent.bin")
    running = await start_run(fleet)
    await running.put("models/live.bin", b"live")
    fleet.clock.advance(10 * DAY + 1)  # old and pinned ended 30 days ago; recent 10
    swept = await retention.sweep(fleet.ctx)
    assert swept.plan.expired_jobs == {old.job_id}
    assert swept.artifacts == 3
    assert await artifacts_of(fleet, old) == set()
    assert await checkpoints_of(fleet, old) == []
    assert await artifacts_of(fleet, pinned) == {"output/models/keep.bin"}
    assert await artifacts_of(fleet, recent) == {"output/models/recent.bin"}
    assert await artifacts_of(fleet, running) == {"output/models/live.bin"}
    assert not [key for key in await stored_keys(fleet) if old.job_id in key]
    [audited] = await fleet.audit(type="artifact.deleted")
    assert (audited["actor"], audited["target"]) == ("system", old.job_id)
    assert audited["detail"]["count"] == 3 and "retention" in audited["detail"]["reason"]
    again = await retention.sweep(fleet.ctx)
    assert again.plan.empty and again.artifacts == 0


async def test_zero_days_keeps_every_file_forever(fleet: Fleet) -> None:
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"artifact_retention_days": 0})
    run = await ended_run(fleet, "a.bin")
    fleet.clock.advance(10_000 * DAY)
    assert (await retention.sweep(fleet.ctx)).plan.empty
    assert await artifacts_of(fleet, run) == {"output/models/a.bin"}


async def test_a_job_keeps_only_its_newest_checkpoints_and_never_one_resumed_from(
    fleet: Fleet,
) -> None:
    run = await start_run(fleet)
    await run.put("models/weights.bin", b"w")
    ids = {}
    for step in (10, 20, 30):
        ids[step] = await run.checkpoint(f"checkpoint-{step}", step, {"s.bin": b"%d" % step})
        fleet.clock.advance(60)
    await run.preempt()  # the new attempt resumes from checkpoint-30
    assert run.offer["resume"]["checkpoint_id"] == ids[30]
    for step in (40, 50, 60):
        ids[step] = await run.checkpoint(f"checkpoint-{step}", step, {"s.bin": b"%d" % step})
        fleet.clock.advance(60)
    swept = await retention.sweep(fleet.ctx)
    assert await checkpoints_of(fleet, run) == [
        "checkpoint-60", "checkpoint-50", "checkpoint-40", "checkpoint-30",
    ]  # fmt: skip
    assert swept.plan.checkpoint_ids == {ids[10], ids[20]}
    assert await artifacts_of(fleet, run) == {
        "output/models/weights.bin",
        *(f"output/checkpoint-{s}/s.bin" for s in (30, 40, 50, 60)),
    }
    assert not [k for k in await stored_keys(fleet) if "checkpoint-10" in k or "-20/" in k]
    history = (await fleet.job(run.job_id))["attempt_history"]
    assert history[-1]["resumed_from"] == {
        "checkpoint": "checkpoint-30",
        "step": 30,
        "attempt_number": 1,
    }
    assert history[0]["resumed_from"] is None
    # Once that attempt is over, its checkpoint is only as safe as its age.
    await run.finish()
    await retention.sweep(fleet.ctx)
    assert await checkpoints_of(fleet, run) == ["checkpoint-60", "checkpoint-50", "checkpoint-40"]


async def test_on_object_storage_the_sweep_deletes_from_the_bucket(
    fleet: Fleet, s3_endpoint: str
) -> None:
    fleet.ctx.artifacts = open_artifact_store(_s3_settings(s3_endpoint))
    old = await ended_run(fleet, "a.bin", checkpoint=1)
    kept = await ended_run(fleet, "b.bin")
    fleet.clock.advance(31 * DAY)
    pin = await fleet.admin.put(f"/api/queue/{kept.job_id}/artifacts/pin", json={"pinned": True})
    assert pin.status_code == 200
    swept = await retention.sweep(fleet.ctx)
    assert swept.artifacts == 2
    keys = await stored_keys(fleet)
    assert keys and all(kept.job_id in key for key in keys)
    assert await artifacts_of(fleet, old) == set()


async def test_staged_uploads_older_than_a_day_are_removed(fleet: Fleet) -> None:
    store = fleet.ctx.artifacts

    async def body() -> AsyncIterator[bytes]:
        yield b"half an upload"

    await store.write("incoming/old", body(), sha256=None)
    await store.write("incoming/fresh", body(), sha256=None)
    # Staged objects are aged by the store's own clock (their modification time).
    aged = fleet.clock.now.timestamp() - DAY - 60
    os.utime(fleet.settings.data_dir / "artifacts" / "incoming" / "old", (aged, aged))
    swept = await retention.sweep(fleet.ctx)
    assert swept.plan.staged_keys == ("incoming/old",)
    assert [found.key for found in await store.list("incoming")] == ["incoming/fresh"]


async def test_a_blob_the_store_fails_to_delete_keeps_its_row_for_the_next_sweep(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await ended_run(fleet, "a.bin", "b.bin")
    fleet.clock.advance(31 * DAY)
    real_delete = ArtifactStore.delete

    async def flaky(self: ArtifactStore, key: str) -> None:
        if key.endswith("/a.bin"):
            raise ArtifactStoreError("the bucket is unreachable; retry")
        await real_delete(self, key)

    monkeypatch.setattr(ArtifactStore, "delete", flaky)
    with pytest.raises(ArtifactStoreError):
        await retention.sweep(fleet.ctx)
    assert await artifacts_of(fleet, run) == {"output/models/a.bin"}
    monkeypatch.setattr(ArtifactStore, "delete", real_delete)
    await retention.sweep(fleet.ctx)
    assert await artifacts_of(fleet, run) == set()
    assert await stored_keys(fleet) == []
    deleted = await fleet.audit(type="artifact.deleted")
    assert sorted(e["detail"]["count"] for e in deleted) == [1, 1]


async def test_the_sweep_is_one_of_the_servers_named_loops(
    tmp_path: Path, database_url: str
) -> None:
    """Started like the other sweeps (under `leader_only`: one replica at a time runs it)."""
    names: list[str] = []

    async def look(_ctx: Context, supervisor: Supervisor) -> None:
        names.extend(supervisor.names)
        await supervisor.close()

    settings = ServerSettings(
        data_dir=tmp_path / "d", database_url=database_url, print_admin_key=False
    )
    async with LifespanManager(create_app(settings, on_start=look)):
        pass
    assert "artifact-retention" in names
    assert "fleet-history" in names  # the fleet over time (#33), leader only likewise
