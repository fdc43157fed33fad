"""Workdir snapshots (docs/jobs.md, services/workdirs.py): uploaded by digest and checked as
they stream, stored once, named by a job's config, downloaded by its attempt's worker, kept
while a job naming them is not ended."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from gpufleet.artifacts.backends import open_artifact_store
from gpufleet.artifacts.workdir_archive import pack
from gpufleet.server.services import retention, workdirs
from tests.api.conftest import GPUFLEET_FEATURES, Agent, Fleet
from tests.api.test_artifact_store import _s3_settings
from tests.api.test_policy import add_user, client_of

WORKDIR_FEATURES = [*GPUFLEET_FEATURES, "workdir"]


def archive_of(tmp_path: Path, files: dict[str, str]) -> bytes:
    root = tmp_path / "tree"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    out = io.BytesIO()
    pack(root, list(files), out)
    return out.getvalue()


def digest(body: bytes) -> str:
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


async def put(client: httpx.AsyncClient, body: bytes, name: str | None = None) -> httpx.Response:
    return await client.put(f"/api/workdirs/{name or digest(body)}", content=body)


def stored(fleet: Fleet) -> list[Path]:
    return sorted((fleet.settings.data_dir / "artifacts" / "workdirs").glob("*"))


def spooled(fleet: Fleet) -> list[Path]:
    return sorted((fleet.settings.data_dir / "incoming-workdirs").glob("*"))


async def test_an_upload_is_stored_once_and_answered_by_head_and_get(
    fleet: Fleet, tmp_path: Path
) -> None:
    body = archive_of(tmp_path, {"train.py": "print(1)\n"})
    name = digest(body)
    assert (await fleet.admin.head(f"/api/workdirs/{name}")).status_code == 404
    first = await put(fleet.admin, body)
    assert first.status_code == 201, first.text
    assert (first.json()["digest"], first.json()["size"], first.json()["created"]) == (
        name,
        len(body),
        True,
    )
    again = await put(fleet.admin, body)
    assert (again.status_code, again.json()["created"]) == (200, False)
    head = await fleet.admin.head(f"/api/workdirs/{name}")
    assert (head.status_code, head.headers["content-length"]) == (200, str(len(body)))
    info = await fleet.admin.get(f"/api/workdirs/{name}")
    assert (info.status_code, info.json()["size"]) == (200, len(body))
    assert [p.name for p in stored(fleet)] == [f"{name.removeprefix('sha256:')}.tar"]
    assert spooled(fleet) == []
    [audited] = await fleet.audit(type="workdir.uploaded")  # once: the second stored nothing
    assert (audited["target"], audited["detail"]["size"]) == (name, len(body))


async def test_bytes_that_are_not_their_digest_store_nothing(fleet: Fleet, tmp_path: Path) -> None:
    body = archive_of(tmp_path, {"a.py": "x"})
    wrong = "sha256:" + "0" * 64
    answer = await put(fleet.admin, body, wrong)
    assert answer.status_code == 422
    assert "sha256" in answer.json()["detail"] and "nothing was stored" in answer.json()["detail"]
    for bad in ("sha256:ABC", "md5:" + "0" * 32, "sha256:" + "g" * 64):
        refused = await put(fleet.admin, body, bad)
        assert refused.status_code == 422, bad
        assert "64 lowercase hex digits" in refused.json()["detail"]
    assert stored(fleet) == [] and spooled(fleet) == []


async def test_an_upload_cut_off_half_way_stores_nothing(fleet: Fleet, tmp_path: Path) -> None:
    body = archive_of(tmp_path, {"a.py": "x" * 20_000})

    async def half() -> AsyncIterator[bytes]:
        yield body[: len(body) // 2]

    answer = await fleet.admin.put(
        f"/api/workdirs/{digest(body)}",
        content=half(),
        headers={"Content-Length": str(len(body))},
    )
    assert answer.status_code == 422
    assert "cut off" in answer.json()["detail"]
    assert stored(fleet) == [] and spooled(fleet) == []
    assert (await fleet.admin.head(f"/api/workdirs/{digest(body)}")).status_code == 404


async def test_two_uploads_of_one_digest_at_once_store_it_once(
    fleet: Fleet, tmp_path: Path
) -> None:
    body = archive_of(tmp_path, {"a.py": "y" * 5_000_000})  # over the 4 MiB of a JSON body
    writes: list[str] = []
    adopt = fleet.ctx.artifacts.adopt

    async def counted(key: str, path: Path, **kw: Any) -> Any:
        writes.append(key)
        return await adopt(key, path, **kw)

    fleet.ctx.artifacts.adopt = counted  # type: ignore[method-assign]
    answers = await asyncio.gather(put(fleet.admin, body), put(fleet.admin, body))
    assert sorted(a.status_code for a in answers) == [200, 201]
    assert len(writes) == 1 and len(stored(fleet)) == 1 and spooled(fleet) == []


def hostile_tar(*members: tarfile.TarInfo) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    return out.getvalue()


def info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, link
    return member


async def test_hostile_archives_are_refused_and_nothing_is_stored(fleet: Fleet) -> None:
    cases = {
        "escapes the folder": hostile_tar(info("../../etc/cron.d/x")),
        "absolute": hostile_tar(info("/root/.ssh/authorized_keys")),
        "links out": hostile_tar(info("l", tarfile.SYMTYPE, "../../../etc")),
        "a device": hostile_tar(info("dev", tarfile.BLKTYPE)),
        "a newline": hostile_tar(info("a\nb")),
        "not a tar": b"\x1f\x8b\x08" + b"\0" * 1021,
    }
    for what, body in cases.items():
        answer = await put(fleet.admin, body)
        assert answer.status_code == 422, what
        assert "refused" in answer.json()["detail"] or "plain tar" in answer.json()["detail"]
    assert stored(fleet) == [] and spooled(fleet) == []


async def test_an_upload_over_the_limit_is_refused_before_it_is_read(fleet: Fleet) -> None:
    huge = fleet.settings.workdir_max_bytes + 1
    answer = await fleet.admin.put(
        f"/api/workdirs/sha256:{'1' * 64}",
        content=b"",
        headers={"Content-Length": str(huge)},
    )
    assert answer.status_code == 413
    assert "--workdir-max-bytes" in answer.json()["detail"]


async def test_uploading_needs_queue_submit_and_asking_needs_queue_read(
    fleet: Fleet, tmp_path: Path
) -> None:
    body = archive_of(tmp_path, {"a.py": "z"})
    reader = await fleet.mint_key("queue.read", name="reader")
    metrics = await fleet.mint_key("metrics.read", name="scraper")
    async with (
        fleet.client(headers={"Authorization": f"Bearer {reader['key']}"}) as read_only,
        fleet.client(headers={"Authorization": f"Bearer {metrics['key']}"}) as scraper,
    ):
        refused = await put(read_only, body)
        assert refused.status_code == 403 and "queue.submit" in refused.json()["detail"]
        assert stored(fleet) == []
        assert (await put(fleet.http, body)).status_code == 401  # no key at all
        assert (await put(fleet.admin, body)).status_code == 201
        assert (await read_only.head(f"/api/workdirs/{digest(body)}")).status_code == 200
        assert (await scraper.head(f"/api/workdirs/{digest(body)}")).status_code == 403
    # Another user, a viewer, may upload (viewers submit); sending the bytes of a snapshot
    # someone stored makes them a holder of it (tests/api/test_workdir_holders.py).
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    assert (await put(viewer, body)).json() | {"stored_at": None} == {
        "digest": digest(body),
        "size": len(body),
        "stored_at": None,
        "created": False,
        "read": True,
    }
    other = archive_of(tmp_path / "v", {"b.py": "v"})
    assert (await put(viewer, other)).status_code == 201


async def test_a_submit_naming_an_unknown_or_malformed_workdir_is_refused(fleet: Fleet) -> None:
    unknown = "sha256:" + "e" * 64
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "workdir": unknown}}
    )
    assert answer.status_code == 422
    assert unknown in answer.json()["detail"] and "not stored" in answer.json()["detail"]
    assert "gpufleet run" in answer.json()["detail_for"]["cli"]
    for bad in ("../x", "sha256:" + "e" * 63, 42):
        refused = await fleet.admin.post(
            "/api/queue/submit", json={"config": {"command": ["true"], "workdir": bad}}
        )
        assert refused.status_code == 422, bad
        assert "'workdir'" in refused.json()["detail"]
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0


async def workdir_job(fleet: Fleet, tmp_path: Path) -> tuple[bytes, dict[str, Any]]:
    body = archive_of(tmp_path, {"train.py": "print('from the snapshot')\n"})
    assert (await put(fleet.admin, body)).status_code == 201
    job = await fleet.submit(config={"command": ["python", "train.py"], "workdir": digest(body)})
    return body, job


async def test_only_a_worker_that_unpacks_workdirs_is_offered_the_job_and_it_downloads_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    older = await fleet.create_worker("older")
    await older.connect(gpu_count=1, features=GPUFLEET_FEATURES)
    body, job = await workdir_job(fleet, tmp_path)
    waiting = (await fleet.job(job["id"]))["waiting"]
    assert job["status"] == "queued"
    assert "unpacks a workdir" in str(waiting)
    assert "does not say `workdir` in its features" in str(waiting["workers"])

    current: Agent = await fleet.create_worker("current")
    await current.connect(gpu_count=1, features=WORKDIR_FEATURES)
    offer = await current.next_offer()
    assert offer["job_id"] == job["id"]
    path = f"/api/workers/job/{job['id']}/workdir"
    got = await fleet.http.get(
        path, params={"attempt_id": offer["attempt_id"]}, headers=current.headers
    )
    assert got.status_code == 200 and got.content == body
    assert got.headers["x-gpufleet-digest"] == digest(body)
    # The worker that was never offered the job, and a user's key, get nothing.
    stranger = await fleet.http.get(
        path, params={"attempt_id": offer["attempt_id"]}, headers=older.headers
    )
    assert stranger.status_code == 403
    assert (
        await fleet.admin.get(path, params={"attempt_id": offer["attempt_id"]})
    ).status_code == 401
    assert (await fleet.http.get(path, headers=current.headers)).status_code == 422


async def test_the_sweep_keeps_a_snapshot_while_a_job_naming_it_is_not_ended(
    fleet: Fleet, tmp_path: Path
) -> None:
    held, _job = await workdir_job(fleet, tmp_path)
    loose = archive_of(tmp_path / "loose", {"old.py": "x"})
    assert (await put(fleet.admin, loose)).status_code == 201
    fleet.clock.advance(timedelta(days=fleet.settings.artifact_retention_days + 1).total_seconds())
    await retention.sweep(fleet.ctx)
    assert [p.name for p in stored(fleet)] == [f"{workdirs.parse_digest(digest(held))}.tar"]


async def test_on_object_storage_a_snapshot_is_stored_asked_for_and_downloaded_alike(
    fleet: Fleet, s3_endpoint: str, tmp_path: Path
) -> None:
    fleet.ctx.artifacts = open_artifact_store(_s3_settings(s3_endpoint))
    current: Agent = await fleet.create_worker("on-s3")
    await current.connect(gpu_count=1, features=WORKDIR_FEATURES)
    body, job = await workdir_job(fleet, tmp_path)
    assert (await put(fleet.admin, body)).status_code == 200  # stored already, in the bucket
    assert (await fleet.admin.head(f"/api/workdirs/{digest(body)}")).status_code == 200
    offer = await current.next_offer()
    got = await fleet.http.get(
        f"/api/workers/job/{job['id']}/workdir",
        params={"attempt_id": offer["attempt_id"]},
        headers=current.headers,
    )
    assert got.status_code == 200 and got.content == body
    assert stored(fleet) == []  # nothing in the data folder's store
