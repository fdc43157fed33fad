"""The storage route at the HTTP level (in process, SQLite): hostile keys and bodies, S3's
ranges, which offers gain a publishing_config, and wrong tokens counted as failed
authentications. The trainer's own publisher is in test_simpletuner_storage.py."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx

from gpufleet.server.ratelimit import FailureLimiter
from tests.api.conftest import Fleet
from tests.api.test_simpletuner_storage import OUTPUT, listed, running_simpletuner_job


async def storage_put(
    fleet: Fleet, key: str, token: str, body: bytes = b"x", **headers: str
) -> httpx.Response:
    return await fleet.http.put(
        f"/api/cloud/storage/gpufleet/{key}",
        content=body,
        headers={"X-SimpleTuner-Secret": token, **headers},
    )


async def test_hostile_keys_and_bodies_are_refused_and_store_nothing(fleet: Fleet) -> None:
    _agent, offer = await running_simpletuner_job(fleet)
    job, token = offer["job_id"], offer["upload_token"]
    cases = {
        f"{job}/../../etc/passwd": 422,
        f"{job}/models/../../x": 422,
        f"{job}/a//b": 422,
        f"{job}/models/%00evil": 422,
        f"{job}/back\\slash": 422,
        f"{job}/" + "n" * 300: 422,
        f"{job}": 422,
        "j_other/models/x": 401,  # another (unknown) job: the token is not its
    }
    for key, status in cases.items():
        answer = await storage_put(fleet, key, token)
        assert answer.status_code == status, (key, answer.text)
        assert answer.json()["detail"]
    corrupt = await storage_put(
        fleet, f"{job}/m/x", token, b"abc", **{"x-amz-content-sha256": "0" * 64}
    )
    assert corrupt.status_code == 422 and "sha256" in corrupt.text
    short = await storage_put(
        fleet,
        f"{job}/m/y",
        token,
        b"3\r\nabc\r\n0\r\n\r\n",
        **{"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "99"},
    )
    assert short.status_code == 422 and "ended after 3 of the 99" in short.text
    huge = await storage_put(
        fleet,
        f"{job}/m/z",
        token,
        b"",
        **{"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "9" * 30},
    )
    assert huge.status_code == 422
    assert await listed(fleet, job) == {}
    assert await fleet.ctx.artifacts.list("jobs") == []


async def test_ranges_are_served_as_s3_serves_them(fleet: Fleet) -> None:
    _agent, offer = await running_simpletuner_job(fleet)
    job, token = offer["job_id"], offer["upload_token"]
    data = bytes(range(256)) * 40
    put = await storage_put(fleet, f"{job}/m/blob", token, data)
    assert put.status_code == 200, put.text
    assert put.headers["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert put.content == b""  # boto3 reads a body as a possible error document
    url = f"/api/cloud/storage/gpufleet/{job}/m/blob"
    auth = {"X-Upload-Token": token}
    for asked, want, status in [
        ("bytes=0-99", data[:100], 206),
        ("bytes=10000-", data[10000:], 206),
        ("bytes=-10", data[-10:], 206),
        ("bytes=10230-99999", data[10230:], 206),
    ]:
        got = await fleet.http.get(url, headers={**auth, "Range": asked})
        assert (got.status_code, got.content) == (status, want), asked
    whole = await fleet.http.get(url, headers=auth)
    assert whole.content == data and whole.headers["content-length"] == str(len(data))
    for bad in ("bytes=10240-", "bytes=5-1", "bytes=0-1,5-6", "items=0-1", "bytes=-"):
        refused = await fleet.http.get(url, headers={**auth, "Range": bad})
        assert refused.status_code == 416, bad
    stale = await fleet.http.get(url, headers={**auth, "If-Match": '"other"'})
    assert stale.status_code == 412
    head = await fleet.http.head(url, headers=auth)
    assert head.headers["content-length"] == str(len(data))
    assert head.headers["etag"] == whole.headers["etag"]
    missing = await fleet.http.get(f"/api/cloud/storage/gpufleet/{job}/m/none", headers=auth)
    assert missing.status_code == 404


async def test_a_config_that_publishes_elsewhere_or_runs_a_command_is_offered_unchanged(
    fleet: Fleet,
) -> None:
    own = {**OUTPUT, "publishing_config": [{"provider": "s3", "bucket": "mine"}]}
    _agent, offer = await running_simpletuner_job(fleet, own)
    assert offer["config"]["publishing_config"] == own["publishing_config"]
    runner = await fleet.online_worker("runner")
    job = await fleet.submit(config={"command": ["python", "train.py"]})
    command_offer = await runner.next_offer()
    assert command_offer["job_id"] == job["id"]
    assert "publishing_config" not in command_offer["config"]
    stored = (await fleet.job(job["id"]))["config"]
    assert "publishing_config" not in stored


async def test_wrong_upload_tokens_are_audited_and_rate_limited_like_any_credential(
    fleet: Fleet,
) -> None:
    _agent, offer = await running_simpletuner_job(fleet)
    fleet.ctx.auth_failures = FailureLimiter(3, 60.0)
    key = f"{offer['job_id']}/m/x"
    answers = [(await storage_put(fleet, key, f"ut_guess{n}")).status_code for n in range(4)]
    assert answers == [401, 401, 401, 429]
    failed = await fleet.audit(type="auth.failed")
    assert [e["detail"]["credential"] for e in failed] == ["upload_token"] * 3
    assert await fleet.audit(type="auth.rate_limited")
    # The right token still works from that address: a valid credential is never locked out.
    assert (await storage_put(fleet, key, offer["upload_token"])).status_code == 200


async def test_an_upload_past_the_jobs_limit_is_413_whether_announced_or_not(
    fleet: Fleet,
) -> None:
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"artifact_max_job_bytes": 1000})
    _agent, offer = await running_simpletuner_job(fleet)
    job, token = offer["job_id"], offer["upload_token"]
    assert (await storage_put(fleet, f"{job}/m/small", token, b"s" * 600)).status_code == 200
    told = await storage_put(fleet, f"{job}/m/told", token, b"t" * 500)  # Content-Length
    assert told.status_code == 413, told.text
    assert "limit of 1000 bytes (it holds 600)" in told.json()["detail"]

    async def untold() -> AsyncIterator[bytes]:  # chunked: found out while it streams
        for _ in range(5):
            yield b"u" * 100

    streamed = await fleet.http.put(
        f"/api/cloud/storage/gpufleet/{job}/m/untold",
        content=untold(),
        headers={"X-SimpleTuner-Secret": token},
    )
    assert streamed.status_code == 413, streamed.text
    # Replacing a stored file counts its new size instead of the old one.
    assert (await storage_put(fleet, f"{job}/m/small", token, b"r" * 1000)).status_code == 200
    assert {p: a["size"] for p, a in (await listed(fleet, job)).items()} == {"output/m/small": 1000}
    assert len(await fleet.ctx.artifacts.list("jobs")) == 1
