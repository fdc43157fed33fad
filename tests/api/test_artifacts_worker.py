"""The worker side of the artifact store (docs/artifacts.md, Worker API), on SQLite and
PostgreSQL, through the data folder and through object storage (moto's S3 server, started
here as in test_artifact_store.py): announce, send, finish, commit a checkpoint, resume from
it on the next attempt; and every way a worker, a stale one or a careless one, gets refused.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.artifacts.keys import job_prefix
from gpufleet.artifacts.store import STAGING_PREFIX
from gpufleet.domain.secrets import check_upload_token
from tests.api.conftest import HEARTBEAT_TIMEOUT, Agent, Fleet, post_raw, sqlite_only

MiB = 1024 * 1024


# ---- the object-storage backend: moto's S3 server in a child process ----------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto's S3 server did not serve on {endpoint}")
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def _bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket, and the AWS_* variables the orchestrator reads it with."""
    bucket = f"fleet-{secrets.token_hex(4)}"
    httpx.put(f"{endpoint}/{bucket}").raise_for_status()
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/gpufleet"


async def _fleet(tmp_path: Path, database_url: str, **settings: Any) -> Fleet:
    fleet = Fleet(tmp_path, database_url)
    fleet.settings = fleet.settings.model_copy(update=settings)
    return await fleet.start()


@pytest.fixture(params=["folder", "s3"])
async def any_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Fleet]:
    """The orchestrator on each backend: the data folder, then object storage."""
    url = None
    if request.param == "s3":
        url = _bucket(request.getfixturevalue("s3_endpoint"), monkeypatch)
    fleet = await _fleet(tmp_path, database_url, artifacts=url)
    try:
        yield fleet
    finally:
        await fleet.stop()


# ---- a worker's uploads, as the contract has them ------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def announce(
    agent: Agent, job_id: str, attempt_id: str, path: str, data: bytes, **more: Any
) -> httpx.Response:
    body = {"attempt_id": attempt_id, "path": path, "size": len(data), "sha256": sha(data)}
    return await agent.fleet.http.post(
        f"/api/workers/job/{job_id}/upload", json={**body, **more}, headers=agent.headers
    )


async def send(agent: Agent, job_id: str, plan: dict[str, Any], data: bytes) -> httpx.Response:
    """The bytes to where the announce said, and (object storage) the finish."""
    if plan["via"] == "orchestrator":
        assert plan["url"] == f"/api/workers/job/{job_id}/upload/{plan['upload_id']}"
        headers = {**agent.headers, **plan["headers"]}
        return await agent.fleet.http.put(plan["url"], content=data, headers=headers)
    async with httpx.AsyncClient() as bucket:  # straight to the bucket, over a real socket
        put = await bucket.put(plan["url"], content=data, headers=plan["headers"])
    assert put.status_code == 200, put.text
    return await agent.fleet.http.post(
        f"/api/workers/job/{job_id}/upload/{plan['upload_id']}/complete", headers=agent.headers
    )


async def upload(
    agent: Agent, job_id: str, attempt_id: str, path: str, data: bytes, **more: Any
) -> dict[str, Any]:
    said = await announce(agent, job_id, attempt_id, path, data, **more)
    assert said.status_code == 200, said.text
    sent = await send(agent, job_id, said.json(), data)
    assert sent.status_code == 201, sent.text
    record: dict[str, Any] = sent.json()
    return record


async def upload_checkpoint(
    agent: Agent, offer: dict[str, Any], step: int, files: dict[str, bytes]
) -> httpx.Response:
    name = f"checkpoint-{step}"
    folder = f"output/{name}"
    listed = []
    for rel, data in files.items():
        path = f"{folder}/{rel}"
        await upload(
            agent,
            offer["job_id"],
            offer["attempt_id"],
            path,
            data,
            kind="checkpoint",
            checkpoint=name,
        )
        listed.append({"path": path, "size": len(data), "sha256": sha(data)})
    return await commit(agent, offer, name, folder, step, listed)


async def commit(
    agent: Agent, offer: dict[str, Any], name: str, folder: str, step: int | None, files: list[Any]
) -> httpx.Response:
    body = {"attempt_id": offer["attempt_id"], "name": name, "path": folder, "step": step}
    return await agent.fleet.http.post(
        f"/api/workers/job/{offer['job_id']}/checkpoints",
        json={**body, "files": files},
        headers=agent.headers,
    )


async def listed(fleet: Fleet, job_id: str) -> list[tuple[int | None, str, str]]:
    async with fleet.ctx.store.read() as q:
        return [(a.attempt_number, a.path, a.sha256) for a in await q.artifacts_for_job(job_id)]


async def stored_keys(fleet: Fleet, job_id: str) -> list[str]:
    return [info.key for info in await fleet.ctx.artifacts.list(job_prefix(job_id))]


async def read_back(fleet: Fleet, key: str) -> bytes:
    return b"".join([chunk async for chunk in await fleet.ctx.artifacts.open(key)])


async def running_job(fleet: Fleet, agent: Agent, **submit: Any) -> dict[str, Any]:
    await fleet.submit(**submit)
    offer = await agent.next_offer()
    await agent.run(offer)
    return offer


def metric(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert found, f"{sample} not in the metrics"
    return float(found.group(1))


# ---- happy paths, on both backends and both databases -------------------------------------


async def test_a_file_sent_through_either_backend_is_stored_verified_and_listed(
    any_fleet: Fleet,
) -> None:
    fleet = any_fleet
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    job_id, attempt_id = offer["job_id"], offer["attempt_id"]
    data = secrets.token_bytes(5 * MiB + 123)  # past the 4 MiB limit of a JSON body

    said = await announce(agent, job_id, attempt_id, "output/model.bin", data)
    assert said.status_code == 200, said.text
    plan = said.json()
    assert plan["method"] == "PUT"
    assert plan["via"] == ("store" if fleet.ctx.artifacts.presigns else "orchestrator")
    assert (await listed(fleet, job_id)) == []  # announced is not stored
    sent = await send(agent, job_id, plan, data)

    assert sent.status_code == 201, sent.text
    record = sent.json()
    assert {k: record[k] for k in ("job_id", "attempt_id", "attempt_number", "path")} == {
        "job_id": job_id,
        "attempt_id": attempt_id,
        "attempt_number": 1,
        "path": "output/model.bin",
    }
    assert (record["kind"], record["checkpoint"], record["size"], record["sha256"]) == (
        "artifact",
        None,
        len(data),
        sha(data),
    )
    assert record["id"].startswith("r_")
    assert await listed(fleet, job_id) == [(1, "output/model.bin", sha(data))]
    key = f"{job_prefix(job_id)}/{attempt_id}/output/model.bin"
    assert await stored_keys(fleet, job_id) == [key]
    assert await read_back(fleet, key) == data
    again = await announce(agent, job_id, attempt_id, "output/model.bin", data)
    assert again.status_code == 200 and again.json() == {"exists": True, "artifact": record}
    (created,) = await fleet.audit(type="artifact.created")
    assert created["target"] == job_id and created["detail"]["path"] == "output/model.bin"
    scraped = (await fleet.admin.get("/metrics")).text
    assert metric(scraped, "gpufleet_artifact_bytes_uploaded_total") == len(data)
    assert metric(scraped, "gpufleet_artifact_upload_failures_total") == 0


async def test_a_lost_attempts_checkpoint_is_where_the_next_attempt_resumes_from(
    any_fleet: Fleet,
) -> None:
    fleet = any_fleet
    first = await fleet.online_worker("first")
    offer = await running_job(fleet, first)
    files = {"weights.bin": secrets.token_bytes(200_000), "state.json": b'{"step": 1200}'}
    committed = await upload_checkpoint(first, offer, 1200, files)
    assert committed.status_code == 201, committed.text
    checkpoint = committed.json()
    assert (checkpoint["name"], checkpoint["path"], checkpoint["step"]) == (
        "checkpoint-1200",
        "output/checkpoint-1200",
        1200,
    )
    assert (checkpoint["files"], checkpoint["size"]) == (2, sum(map(len, files.values())))

    second = await fleet.online_worker("second")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await second.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [first.id]
    resumed = await second.next_offer()

    assert resumed["job_id"] == offer["job_id"]
    assert resumed["resume"] == {
        "checkpoint_id": checkpoint["id"],
        "name": "checkpoint-1200",
        "path": "output/checkpoint-1200",
        "step": 1200,
        "attempt_id": offer["attempt_id"],
        "attempt_number": 1,
    }
    async with fleet.ctx.store.read() as q:
        attempt = await q.get_attempt(resumed["attempt_id"])
    assert attempt is not None and attempt.resumed_from == checkpoint["id"]
    await second.run(resumed)
    fetched = await fleet.http.get(
        f"/api/workers/job/{offer['job_id']}/checkpoints/{checkpoint['id']}",
        params={"attempt_id": resumed["attempt_id"]},
        headers=second.headers,
    )
    assert fetched.status_code == 200, fetched.text
    body = fetched.json()
    assert (body["id"], body["name"], body["step"]) == (checkpoint["id"], "checkpoint-1200", 1200)
    got = {}
    for f in body["files"]:
        if fleet.ctx.artifacts.presigns:
            assert f["url"].startswith("http://127.0.0.1:")  # presigned, the bucket's own
            async with httpx.AsyncClient() as bucket:
                answer = await bucket.get(f["url"], headers=f["headers"])
        else:
            assert f["url"].startswith(f"/api/workers/job/{offer['job_id']}/artifacts/r_")
            answer = await fleet.http.get(f["url"], headers={**second.headers, **f["headers"]})
            assert answer.headers["x-gpufleet-sha256"] == f["sha256"]
        assert answer.status_code == 200
        assert sha(answer.content) == f["sha256"] and len(answer.content) == f["size"]
        got[f["path"].removeprefix("output/checkpoint-1200/")] = answer.content
    assert got == files


# ---- fencing --------------------------------------------------------------------------------


async def test_uploads_are_taken_until_the_final_report_and_refused_after_it(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    job_id, attempt_id = offer["job_id"], offer["attempt_id"]
    # The process has ended; the worker uploads, then reports: the attempt is still running.
    kept = await upload(agent, job_id, attempt_id, "result.json", b'{"loss": 0.1}')
    late = b"written after the end"
    pending = (await announce(agent, job_id, attempt_id, "output/late.txt", late)).json()
    await agent.finish(offer)

    after = await announce(agent, job_id, attempt_id, "output/more.txt", b"more")
    sent = await send(agent, job_id, pending, late)
    ck = await commit(
        agent,
        offer,
        "checkpoint-1",
        "output/checkpoint-1",
        1,
        [{"path": "output/checkpoint-1/w", "size": 1, "sha256": "0" * 64}],
    )

    for refused in (after, sent, ck):
        assert refused.status_code == 409, refused.text
        assert (
            "is not job" in refused.json()["detail"] and "live attempt" in refused.json()["detail"]
        )
    assert await listed(fleet, job_id) == [(1, "result.json", kept["sha256"])]
    assert len(await stored_keys(fleet, job_id)) == 1


async def test_a_stale_attempt_and_other_workers_are_refused_and_store_nothing(
    fleet: Fleet,
) -> None:
    silent = await fleet.online_worker("silent")
    offer = await running_job(fleet, silent, max_retries=2)
    spare = await fleet.online_worker("spare")
    stranger = await fleet.online_worker("stranger")
    job_id = offer["job_id"]
    pending = (await announce(silent, job_id, offer["attempt_id"], "output/a", b"a")).json()
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    for live in (spare, stranger):
        assert (await live.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [silent.id]
    new = await (
        spare if (await fleet.job(job_id))["worker_id"] == spare.id else stranger
    ).next_offer()
    holder = spare if (await fleet.job(job_id))["worker_id"] == spare.id else stranger
    other = stranger if holder is spare else spare

    stale = [
        await announce(silent, job_id, offer["attempt_id"], "output/b", b"b"),
        await send(silent, job_id, pending, b"a"),
        await announce(silent, job_id, new["attempt_id"], "output/c", b"c"),  # not its own
        await announce(holder, job_id, offer["attempt_id"], "output/d", b"d"),  # not the live one
    ]
    never_offered = await announce(other, job_id, new["attempt_id"], "output/e", b"e")

    assert [r.status_code for r in stale] == [409, 409, 409, 409], [r.text for r in stale]
    assert never_offered.status_code == 403, never_offered.text
    assert "never offered to worker" in never_offered.json()["detail"]
    assert await listed(fleet, job_id) == [] and await stored_keys(fleet, job_id) == []
    assert (await upload(holder, job_id, new["attempt_id"], "output/f", b"f"))[
        "attempt_number"
    ] == 2


# ---- what a careless or hostile worker sends -------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "output/../../etc/passwd",
        "/etc/passwd",
        "output/\x00model",
        "output/\ud800.bin",
        "output\\model.bin",
        "output//model.bin",
        "output/model.bin#12",
        "a/" * 600,
    ],
)
async def test_a_path_outside_the_job_folder_is_refused_with_422(fleet: Fleet, path: str) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    body = {"attempt_id": offer["attempt_id"], "path": path, "size": 1, "sha256": "0" * 64}

    answer = await post_raw(
        fleet.http, f"/api/workers/job/{offer['job_id']}/upload", body, **agent.headers
    )
    checkpoint = await post_raw(
        fleet.http,
        f"/api/workers/job/{offer['job_id']}/checkpoints",
        {
            "attempt_id": offer["attempt_id"],
            "name": "checkpoint-1",
            "path": path,
            "files": [{"path": path, "size": 1, "sha256": "0" * 64}],
        },
        **agent.headers,
    )

    assert answer.status_code == 422, answer.text
    assert checkpoint.status_code == 422, checkpoint.text
    assert await listed(fleet, offer["job_id"]) == []


@sqlite_only
async def test_bytes_that_are_not_the_announced_ones_store_nothing(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    job_id, attempt_id = offer["job_id"], offer["attempt_id"]
    data = secrets.token_bytes(100_000)

    async def attempt_with(body: bytes, **headers: str) -> httpx.Response:
        plan = (await announce(agent, job_id, attempt_id, "output/x.bin", data)).json()
        return await fleet.http.put(plan["url"], content=body, headers={**agent.headers, **headers})

    async def chunked(body: bytes) -> AsyncIterator[bytes]:
        yield body

    other_bytes = await attempt_with(secrets.token_bytes(len(data)))
    fewer = await attempt_with(data[:-1])
    plan = (await announce(agent, job_id, attempt_id, "output/x.bin", data)).json()
    more = await fleet.http.put(plan["url"], content=chunked(data + b"!"), headers=agent.headers)

    for refused in (other_bytes, fewer, more):
        assert refused.status_code == 422, refused.text
        assert "nothing was stored" in refused.json()["detail"]
    assert "sha256" in other_bytes.json()["detail"]
    assert await listed(fleet, job_id) == [] and await stored_keys(fleet, job_id) == []
    scraped = (await fleet.admin.get("/metrics")).text
    assert metric(scraped, "gpufleet_artifact_upload_failures_total") == 3


async def test_a_corrupt_upload_to_the_bucket_is_refused_and_its_staging_removed(
    tmp_path: Path, database_url: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = await _fleet(tmp_path, database_url, artifacts=_bucket(s3_endpoint, monkeypatch))
    try:
        agent = await fleet.online_worker("gpu-1")
        offer = await running_job(fleet, agent)
        data = secrets.token_bytes(50_000)
        plan = (await announce(agent, offer["job_id"], offer["attempt_id"], "o/x", data)).json()
        assert plan["via"] == "store"
        finished_early = await fleet.http.post(
            f"/api/workers/job/{offer['job_id']}/upload/{plan['upload_id']}/complete",
            headers=agent.headers,
        )
        corrupt = await send(agent, offer["job_id"], plan, secrets.token_bytes(len(data)))

        assert finished_early.status_code == 422, finished_early.text
        assert "PUT the file to the announced url" in finished_early.json()["detail"]
        assert corrupt.status_code == 422 and "sha256" in corrupt.json()["detail"]
        assert await listed(fleet, offer["job_id"]) == []
        assert await stored_keys(fleet, offer["job_id"]) == []
        assert await fleet.ctx.artifacts.list(STAGING_PREFIX) == []
    finally:
        await fleet.stop()


async def test_the_per_job_limit_refuses_with_413_saying_both_numbers(
    tmp_path: Path, database_url: str
) -> None:
    fleet = await _fleet(tmp_path, database_url, artifact_max_job_bytes=1000)
    try:
        agent = await fleet.online_worker("gpu-1")
        offer = await running_job(fleet, agent)
        job_id, attempt_id = offer["job_id"], offer["attempt_id"]
        await upload(agent, job_id, attempt_id, "output/a", b"a" * 600)

        past = await announce(agent, job_id, attempt_id, "output/b", b"b" * 401)
        alone = await announce(agent, job_id, attempt_id, "output/c", b"c" * 1001)
        huge, past_int64 = [
            await post_raw(
                fleet.http,
                f"/api/workers/job/{job_id}/upload",
                {"attempt_id": attempt_id, "path": "output/d", "size": size, "sha256": "0" * 64},
                **agent.headers,
            )
            for size in (2**62, 10**30)
        ]
        negative = await post_raw(
            fleet.http,
            f"/api/workers/job/{job_id}/upload",
            {"attempt_id": attempt_id, "path": "output/d", "size": -1, "sha256": "0" * 64},
            **agent.headers,
        )
        replaced = await upload(agent, job_id, attempt_id, "output/a", b"A" * 1000)  # replaces

        assert past.status_code == 413, past.text
        assert "1000 bytes" in past.json()["detail"] and "holds 600 bytes" in past.json()["detail"]
        assert alone.status_code == 413 and "1000 bytes" in alone.json()["detail"]
        assert huge.status_code == 413, huge.text
        assert past_int64.status_code == 422 and "smaller number" in past_int64.text
        assert negative.status_code == 422, negative.text
        assert await listed(fleet, job_id) == [(1, "output/a", replaced["sha256"])]
    finally:
        await fleet.stop()


@sqlite_only
async def test_a_tampered_or_expired_upload_id_is_refused(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    plan = (await announce(agent, offer["job_id"], offer["attempt_id"], "o/x", b"x")).json()
    body, mac = plan["upload_id"].split(".")
    forged = f"{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"
    url = f"/api/workers/job/{offer['job_id']}/upload/"

    tampered = await fleet.http.put(url + forged, content=b"x", headers=agent.headers)
    elsewhere = await fleet.http.put(
        f"/api/workers/job/j_other/upload/{plan['upload_id']}", content=b"x", headers=agent.headers
    )
    fleet.clock.advance(timedelta(hours=13).total_seconds())
    expired = await fleet.http.put(url + plan["upload_id"], content=b"x", headers=agent.headers)

    assert tampered.status_code == 404 and "announce the file again" in tampered.json()["detail"]
    assert elsewhere.status_code == 404
    assert expired.status_code == 404 and "expired" in expired.json()["detail"]
    assert await listed(fleet, offer["job_id"]) == []


# ---- checkpoints ----------------------------------------------------------------------------


@sqlite_only
async def test_a_checkpoint_is_committed_only_when_every_file_is_stored_as_listed(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    w = b"weights"
    await upload(
        agent,
        offer["job_id"],
        offer["attempt_id"],
        "output/checkpoint-5/w.bin",
        w,
        kind="checkpoint",
        checkpoint="checkpoint-5",
    )
    as_artifact = await upload(
        agent, offer["job_id"], offer["attempt_id"], "output/checkpoint-5/o", w
    )
    files = [
        {"path": "output/checkpoint-5/w.bin", "size": len(w), "sha256": sha(w)},
        {"path": "output/checkpoint-5/o", "size": len(w), "sha256": sha(w)},  # not as checkpoint
        {"path": "output/checkpoint-5/missing", "size": 1, "sha256": "1" * 64},
    ]
    wrong_sha = [{**files[0], "sha256": "2" * 64}]
    outside = [{"path": "output/elsewhere/w.bin", "size": len(w), "sha256": sha(w)}]
    no_checkpoint_name = await announce(
        agent, offer["job_id"], offer["attempt_id"], "output/checkpoint-5/z", w, kind="checkpoint"
    )

    partial = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, files)
    mismatched = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, wrong_sha)
    stray = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, outside)
    pathy = await commit(agent, offer, "a/b", "output/checkpoint-5", 5, files[:1])
    whole = await commit(agent, offer, "checkpoint-5", "output/checkpoint-5", 5, files[:1])

    assert partial.status_code == 422
    detail = partial.json()["detail"]
    assert "'output/checkpoint-5/o'" in detail and "'output/checkpoint-5/missing'" in detail
    assert "'output/checkpoint-5/w.bin'" not in detail
    assert mismatched.status_code == 422 and "w.bin" in mismatched.json()["detail"]
    assert stray.status_code == 422 and "not in the checkpoint's folder" in stray.json()["detail"]
    assert pathy.status_code == 422 and no_checkpoint_name.status_code == 422
    assert whole.status_code == 201, whole.text
    async with fleet.ctx.store.read() as q:
        stored = await q.checkpoints_for_job(offer["job_id"])
    assert [(c.name, c.files, c.attempt_number) for c in stored] == [("checkpoint-5", 1, 1)]
    assert as_artifact["kind"] == "artifact"


async def test_a_fenced_attempts_checkpoint_is_never_offered_to_resume_from(
    fleet: Fleet,
) -> None:
    """Attempt 1 checkpoints at step 100 and is lost; attempt 2 resumes from it. The lost
    worker comes back and tries to commit step 200 for attempt 1: refused. A checkpoint row of
    attempt 1 written after it ended (as if past the fence) is not offered either; when
    attempt 2 is preempted, attempt 3 still resumes from step 100, attempt 1's last live one."""
    silent = await fleet.online_worker("silent")
    offer = await running_job(fleet, silent, max_retries=1)
    assert (await upload_checkpoint(silent, offer, 100, {"w": b"100"})).status_code == 201
    spare = await fleet.online_worker("spare")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await spare.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [silent.id]
    second = await spare.next_offer()
    assert second["resume"]["name"] == "checkpoint-100"
    await spare.run(second)

    late_file = await announce(
        silent,
        offer["job_id"],
        offer["attempt_id"],
        "output/checkpoint-200/w",
        b"200",
        kind="checkpoint",
        checkpoint="checkpoint-200",
    )
    late_commit = await commit(
        silent,
        offer,
        "checkpoint-100",  # its files are stored: only the fence refuses it
        "output/checkpoint-100",
        100,
        [{"path": "output/checkpoint-100/w", "size": 3, "sha256": sha(b"100")}],
    )
    assert (late_file.status_code, late_commit.status_code) == (409, 409), late_commit.text
    async with fleet.ctx.store.write() as q:  # a row that got past the fence, somehow
        await q.insert_checkpoint(
            {
                "id": "k_fenced",
                "job_id": offer["job_id"],
                "attempt_id": offer["attempt_id"],
                "name": "checkpoint-900",
                "path": "output/checkpoint-900",
                "step": 900,
                "files": 1,
                "size": 1,
                "created_at": fleet.clock.advance(1),
            }
        )
    preempted = await spare.report(
        offer["job_id"], "preempted", attempt_id=second["attempt_id"], error="spot notice"
    )
    assert preempted.status_code == 200 and preempted.json()["job_status"] == "queued"
    third = await spare.next_offer()

    assert third["attempt_id"] not in (offer["attempt_id"], second["attempt_id"])
    assert third["resume"]["checkpoint_id"] != "k_fenced"
    assert (third["resume"]["name"], third["resume"]["attempt_number"]) == ("checkpoint-100", 1)


async def test_a_preempted_attempt_is_requeued_without_spending_a_retry(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent, max_retries=0)
    answer = await agent.report(
        offer["job_id"], "preempted", attempt_id=offer["attempt_id"], error="spot notice"
    )
    assert answer.status_code == 200 and answer.json()["job_status"] == "queued"
    again = await agent.next_offer()
    await agent.run(again)
    lost = await agent.report(offer["job_id"], "failed", attempt_id=again["attempt_id"])

    detail = await fleet.job(offer["job_id"])
    assert [a["status"] for a in detail["attempt_history"]] == ["preempted", "failed"]
    assert detail["attempt_history"][0]["error"] == "spot notice"
    assert lost.json()["job_status"] == "failed"  # its one run, not the preemption, spent it
    assert again["resume"] is None  # nothing was checkpointed
    scraped = (await fleet.admin.get("/metrics")).text
    assert metric(scraped, 'gpufleet_requeues_total{reason="preempted"}') == 1


@sqlite_only
async def test_an_attempt_after_a_failed_one_starts_afresh(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent, max_retries=1, retry_on=["failed"])
    assert (await upload_checkpoint(agent, offer, 10, {"w": b"w"})).status_code == 201
    await agent.finish(offer, "failed", exit_code=1)
    again = await agent.next_offer()
    assert again["job_id"] == offer["job_id"] and again["resume"] is None


@sqlite_only
async def test_a_checkpoint_is_fetched_only_by_the_live_attempt_of_its_own_job(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1", labels={"slot": "a"})
    offer = await running_job(fleet, agent, worker_labels={"slot": "a"})
    checkpoint = (await upload_checkpoint(agent, offer, 1, {"w": b"w"})).json()
    other = await fleet.online_worker("gpu-2", labels={"slot": "b"})
    foreign = await running_job(fleet, other, worker_labels={"slot": "b"})

    def fetch(job_id: str, attempt_id: str | None, who: Agent) -> Any:
        params = {"attempt_id": attempt_id} if attempt_id else {}
        return fleet.http.get(
            f"/api/workers/job/{job_id}/checkpoints/{checkpoint['id']}",
            params=params,
            headers=who.headers,
        )

    own = await fetch(offer["job_id"], offer["attempt_id"], agent)
    wrong_job = await fetch(foreign["job_id"], foreign["attempt_id"], other)
    wrong_worker = await fetch(offer["job_id"], offer["attempt_id"], other)
    unnamed = await fetch(offer["job_id"], None, agent)
    await agent.finish(offer)
    after = await fetch(offer["job_id"], offer["attempt_id"], agent)
    download = await fleet.http.get(own.json()["files"][0]["url"], headers=agent.headers)

    assert own.status_code == 200 and [f["path"] for f in own.json()["files"]] == [
        "output/checkpoint-1/w"
    ]
    assert wrong_job.status_code == 404
    assert wrong_worker.status_code == 403
    assert unnamed.status_code == 422 and "attempt_id" in unnamed.json()["detail"]
    assert after.status_code == 409 and download.status_code == 409


# ---- upload tokens --------------------------------------------------------------------------


@sqlite_only
async def test_each_attempt_has_its_own_upload_token_the_same_on_every_resend(
    fleet: Fleet,
) -> None:
    a = await fleet.online_worker("gpu-1")
    b = await fleet.online_worker("gpu-2")
    await fleet.submit()
    await fleet.submit()
    first, second = await a.next_offer(), await b.next_offer()
    assert a.stream is not None
    await a.stream.close()
    resent = await (await a.open_stream()).expect("job_submit")

    assert first["upload_token"] != second["upload_token"]
    assert resent["attempt_id"] == first["attempt_id"]
    assert resent["upload_token"] == first["upload_token"]
    key = fleet.ctx.audit_key
    assert check_upload_token(key, first["attempt_id"], first["upload_token"])
    assert check_upload_token(key, second["attempt_id"], second["upload_token"])
    assert not check_upload_token(key, second["attempt_id"], first["upload_token"])
    assert not check_upload_token(key, first["attempt_id"], first["upload_token"][:-1])
    assert first["upload_token"] not in await fleet.all_stored_text()
