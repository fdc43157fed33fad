"""A job's artifacts for its users (docs/artifacts.md, User API): list and download with
`queue.read`, delete and pin as its owner (here the admin); on SQLite and PostgreSQL, the
data folder and, for the redirect to a presigned URL, object storage (moto's S3 server)."""

from __future__ import annotations

import hashlib
import io
import secrets
import tarfile

import httpx

from gpufleet.artifacts.backends import open_artifact_store
from tests.api.artifact_world import Run, start_run, stored_keys
from tests.api.conftest import Fleet
from tests.api.test_artifact_store import _s3_settings
from tests.api.test_policy import add_user, client_of

WEIGHTS = secrets.token_bytes(300_000)
CONFIG = b'{"rank": 16}'


async def two_attempts(fleet: Fleet) -> Run:
    """Attempt 1 stores weights and a config, fails; attempt 2 stores other weights and a
    checkpoint."""
    run = await start_run(fleet)
    await run.put("models/weights.bin", b"first try")
    await run.put("models/config.json", CONFIG)
    await run.fail_and_retry()
    await run.put("models/weights.bin", WEIGHTS)
    await run.checkpoint("checkpoint-20", 20, {"state.bin": b"s" * 100, "rng.bin": b"r"})
    return run


async def test_the_list_names_every_file_newest_attempt_first_with_its_checkpoints(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    answer = await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["job_id"], body["pinned"]) == (run.job_id, False)
    rows = [(a["attempt_number"], a["path"], a["kind"]) for a in body["artifacts"]]
    assert rows == [
        (2, "output/checkpoint-20/rng.bin", "checkpoint"),
        (2, "output/checkpoint-20/state.bin", "checkpoint"),
        (2, "output/models/weights.bin", "artifact"),
        (1, "output/models/config.json", "artifact"),
        (1, "output/models/weights.bin", "artifact"),
    ]
    assert body["total_bytes"] == len(WEIGHTS) + 101 + len(b"first try") + len(CONFIG)
    weights = body["artifacts"][2]
    assert weights["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert set(weights) == {
        "id", "job_id", "attempt_id", "attempt_number", "path", "kind", "checkpoint", "size",
        "sha256", "created_at",
    }  # fmt: skip
    [checkpoint] = body["checkpoints"]
    assert (checkpoint["name"], checkpoint["step"], checkpoint["files"]) == ("checkpoint-20", 20, 2)
    assert (checkpoint["attempt_number"], checkpoint["size"]) == (2, 101)
    assert checkpoint["path"] == "output/checkpoint-20"


async def test_a_download_streams_the_newest_attempts_file_or_the_one_asked_for(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    reader = await fleet.mint_key("queue.read")
    headers = {"Authorization": f"Bearer {reader['key']}"}
    url = f"/api/queue/{run.job_id}/artifacts/output/models/weights.bin"
    newest = await fleet.http.get(url, headers=headers)
    assert newest.status_code == 200 and newest.content == WEIGHTS
    assert newest.headers["content-length"] == str(len(WEIGHTS))
    assert newest.headers["x-gpufleet-sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert "weights.bin" in newest.headers["content-disposition"]
    first = (await fleet.job(run.job_id))["attempt_history"][0]["id"]
    older = await fleet.http.get(url, params={"attempt_id": first}, headers=headers)
    assert older.content == b"first try"
    metrics = (await fleet.admin.get("/metrics")).text
    assert f"gpufleet_artifact_bytes_downloaded_total {float(len(WEIGHTS) + 9)}" in metrics
    total = (await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")).json()["total_bytes"]
    assert f"gpufleet_artifact_store_bytes {float(total)}" in metrics


async def test_a_download_from_the_data_folder_resumes_with_a_range_of_the_same_bytes(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    url = f"/api/queue/{run.job_id}/artifacts/output/models/weights.bin"
    whole = await fleet.admin.get(url)
    etag = f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'
    assert (whole.headers["etag"], whole.headers["accept-ranges"]) == (etag, "bytes")
    part = await fleet.admin.get(url, headers={"Range": "bytes=1000-", "If-Range": etag})
    assert part.status_code == 206 and part.content == WEIGHTS[1000:]
    assert part.headers["content-range"] == f"bytes 1000-{len(WEIGHTS) - 1}/{len(WEIGHTS)}"
    assert part.headers["x-gpufleet-sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert "weights.bin" in part.headers["content-disposition"]
    # Another file's tag (the bytes changed since): the whole file again, never a mix.
    stale = await fleet.admin.get(url, headers={"Range": "bytes=1000-", "If-Range": '"0"'})
    assert stale.status_code == 200 and stale.content == WEIGHTS
    past = await fleet.admin.get(url, headers={"Range": f"bytes={len(WEIGHTS)}-"})
    assert past.status_code == 416
    metrics = (await fleet.admin.get("/metrics")).text
    sent = 2 * len(WEIGHTS) + len(WEIGHTS) - 1000
    assert f"gpufleet_artifact_bytes_downloaded_total {float(sent)}" in metrics


async def test_a_download_that_names_nothing_stored_or_a_bad_path_says_what_to_do(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    base = f"/api/queue/{run.job_id}/artifacts"
    cases = {
        f"{base}/output/models/none.bin": (404, "list them"),
        f"{base}/output/models/config.json?attempt_id=a_nope": (404, "in attempt a_nope"),
        f"{base}/output/../../etc/passwd": (404, None),  # the URL is normalised first
        f"{base}/output/%2E%2E/x": (422, "'..'"),
        f"{base}/output//x": (422, "empty"),
        f"{base}/output/a%5Cb": (422, "backslash"),
        f"{base}/output/%00": (422, "NUL"),
        "/api/queue/j_none/artifacts/output/x": (404, "no job"),
        "/api/queue/j_none/artifacts": (404, "no job"),
    }
    for url, (status, said) in cases.items():
        answer = await fleet.admin.get(url)
        assert answer.status_code == status, (url, answer.text)
        if said:
            assert said in answer.json()["detail"], (url, answer.text)


async def test_an_admin_deletes_one_path_then_everything_blobs_first_and_audited(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    other = await start_run(fleet)
    await other.put("models/keep.bin", b"another job's")
    someone = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    url = f"/api/queue/{run.job_id}/artifacts"
    refused = await someone.delete(url)  # the admin's job: not hers
    assert refused.status_code == 403, refused.text
    before = len(await stored_keys(fleet))
    one = await fleet.admin.delete(f"{url}/output/models/weights.bin")
    assert one.json() == {"job_id": run.job_id, "deleted": 2}  # both attempts' copies
    assert len(await stored_keys(fleet)) == before - 2
    listed = (await fleet.admin.get(url)).json()
    assert "output/models/weights.bin" not in {a["path"] for a in listed["artifacts"]}
    # A checkpoint that loses a file can no longer be resumed from: it goes too.
    gone = await fleet.admin.delete(f"{url}/output/checkpoint-20/rng.bin")
    assert gone.json()["deleted"] == 1
    listed = (await fleet.admin.get(url)).json()
    assert listed["checkpoints"] == []
    missing = await fleet.admin.delete(f"{url}/output/models/weights.bin")
    assert missing.status_code == 404
    everything = await fleet.admin.delete(url)
    assert everything.json() == {"job_id": run.job_id, "deleted": 2}
    assert (await fleet.admin.get(url)).json()["artifacts"] == []
    keys = await stored_keys(fleet)
    assert keys and all(other.job_id in key for key in keys)  # the other job's file stays
    audited = await fleet.audit(type="artifact.deleted")
    assert [e["detail"]["count"] for e in audited] == [2, 1, 2][::-1]
    assert all(e["target"] == run.job_id for e in audited)


async def test_pinning_is_its_owners_and_is_audited(fleet: Fleet) -> None:
    run = await start_run(fleet)
    url = f"/api/queue/{run.job_id}/artifacts/pin"
    someone = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    refused = await someone.put(url, json={"pinned": True})  # the admin's job: not hers
    assert refused.status_code == 403, refused.text
    pinned = await fleet.admin.put(url, json={"pinned": True})
    assert pinned.json() == {"job_id": run.job_id, "pinned": True}
    assert (await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")).json()["pinned"]
    for bad in ({"pinned": "yes"}, {}, {"pinned": True, "extra": 1}):
        assert (await fleet.admin.put(url, json=bad)).status_code == 422, bad
    assert (
        await fleet.admin.put("/api/queue/j_none/artifacts/pin", json={"pinned": True})
    ).status_code == 404
    unpinned = await fleet.admin.put(url, json={"pinned": False})
    assert unpinned.json()["pinned"] is False
    audited = await fleet.audit(type="artifacts.pinned")
    assert [e["detail"]["pinned"] for e in audited] == [False, True]


async def test_a_checkpoint_downloads_as_one_tar_of_its_folder_to_a_reader_only(
    fleet: Fleet,
) -> None:
    run = await two_attempts(fleet)
    listed = (await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts")).json()
    [checkpoint] = listed["checkpoints"]
    url = f"/api/queue/{run.job_id}/checkpoints/{checkpoint['id']}"

    answer = await fleet.admin.get(url)

    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-tar"
    assert answer.headers["content-disposition"] == "attachment; filename*=UTF-8''checkpoint-20.tar"
    assert int(answer.headers["content-length"]) == len(answer.content)
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert files == {"checkpoint-20/rng.bin": b"r", "checkpoint-20/state.bin": b"s" * 100}

    other = await start_run(fleet)
    refused = {
        f"/api/queue/{other.job_id}/checkpoints/{checkpoint['id']}": (404, "list them"),
        f"/api/queue/{run.job_id}/checkpoints/c_none": (404, "list them"),
        f"/api/queue/j_none/checkpoints/{checkpoint['id']}": (404, "no job"),
    }
    for where, (status, said) in refused.items():
        answer = await fleet.admin.get(where)
        assert answer.status_code == status, (where, answer.text)
        assert said in answer.json()["detail"], (where, answer.text)
    assert (await fleet.http.get(url)).status_code == 401  # no key, no bytes


async def test_with_object_storage_a_download_redirects_to_a_presigned_url(
    fleet: Fleet, s3_endpoint: str
) -> None:
    fleet.ctx.artifacts = open_artifact_store(_s3_settings(s3_endpoint))
    run = await two_attempts(fleet)
    answer = await fleet.admin.get(f"/api/queue/{run.job_id}/artifacts/output/models/weights.bin")
    assert answer.status_code == 307
    assert answer.headers["x-gpufleet-sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    location = answer.headers["location"]
    assert location.startswith(s3_endpoint) and "X-Amz-Signature" in location
    async with httpx.AsyncClient() as outside:
        fetched = await outside.get(location)
    assert fetched.status_code == 200 and fetched.content == WEIGHTS
    deleted = await fleet.admin.delete(f"/api/queue/{run.job_id}/artifacts")
    assert deleted.json()["deleted"] == 5
    assert await stored_keys(fleet) == []
