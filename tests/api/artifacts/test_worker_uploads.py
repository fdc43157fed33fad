"""Files coming home through the worker API (docs/artifacts.md), on SQLite and PostgreSQL,
through the data folder and object storage: announce, send, finish, and every way a worker,
a stale one or a careless one, gets refused with nothing stored."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gpufleet.artifacts.keys import job_prefix
from gpufleet.artifacts.store import PRESIGNED_PUT_MAX, STAGING_PREFIX
from tests.api.artifacts.uploads import (
    MiB,
    announce,
    commit,
    listed,
    metric,
    new_bucket,
    read_back,
    running_job,
    send,
    sha,
    start_fleet,
    stored_keys,
    upload,
)
from tests.api.conftest import HEARTBEAT_TIMEOUT, Fleet, post_raw

# ---- on both backends and both databases ---------------------------------------------------


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


async def test_a_file_past_one_puts_limit_streams_through_the_orchestrator_on_both_backends(
    any_fleet: Fleet,
) -> None:
    """A presigned upload is one PUT (5 GiB on S3): a larger file is given the orchestrator's
    route, whose write to the store is a multipart upload; one at the limit is presigned."""
    fleet = any_fleet
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    job_id, attempt_id = offer["job_id"], offer["attempt_id"]
    plans = {}
    for size in (PRESIGNED_PUT_MAX, PRESIGNED_PUT_MAX + 1):
        said = await announce(agent, job_id, attempt_id, f"output/{size}.bin", b"", size=size)
        assert said.status_code == 200, said.text
        plans[size] = said.json()["via"]
    at_limit = "store" if fleet.ctx.artifacts.presigns else "orchestrator"
    assert plans == {PRESIGNED_PUT_MAX: at_limit, PRESIGNED_PUT_MAX + 1: "orchestrator"}


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
    folder = fleet.ctx.artifacts.folder
    assert folder is not None and list((folder / "incoming").glob("*")) == []  # none half-kept
    scraped = (await fleet.admin.get("/metrics")).text
    assert metric(scraped, "gpufleet_artifact_upload_failures_total") == 3


async def test_a_replacement_that_fails_its_check_leaves_the_stored_file_as_it_was(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    offer = await running_job(fleet, agent)
    job_id, attempt_id = offer["job_id"], offer["attempt_id"]
    first, second = b"v1" * 1000, b"v2" * 1000
    kept = await upload(agent, job_id, attempt_id, "result.json", first)
    plan = (await announce(agent, job_id, attempt_id, "result.json", second)).json()

    refused = await send(agent, job_id, plan, b"v3" * 1000)

    assert refused.status_code == 422
    assert await listed(fleet, job_id) == [(1, "result.json", kept["sha256"])]
    (key,) = await stored_keys(fleet, job_id)
    assert await read_back(fleet, key) == first


async def test_a_corrupt_upload_to_the_bucket_is_refused_and_its_staging_removed(
    tmp_path: Path, database_url: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = await start_fleet(
        tmp_path, database_url, artifacts=new_bucket(s3_endpoint, monkeypatch)
    )
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
    fleet = await start_fleet(tmp_path, database_url, artifact_max_job_bytes=1000)
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
