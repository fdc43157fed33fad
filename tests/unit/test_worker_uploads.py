"""Uploads through the worker's real HTTP client to the real orchestrator on a real socket
(tests/worker_orchestrator.py), on the data folder and on object storage: announce, stream,
complete, commit; retries, fencing, refusals; and the bandwidth cap on a fake clock. What was
stored is read back through the user API."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest

from gpufleet.errors import ConfigurationError
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.errors import Fenced
from gpufleet.worker.settings import AgentSettings, parse_rate
from gpufleet.worker.uploads import CHUNK, BandwidthLimiter, Uploader, digest, read_chunks
from tests.api.conftest import Fleet
from tests.worker_orchestrator import (
    Held,
    Wire,
    busy,
    fail,
    held_attempt,
    module_fleets,
    refused,
    url_of,
)

# The tests that talk to the orchestrator share it: one per module, on the module's loop.
on_the_fleet = pytest.mark.asyncio(loop_scope="module")
LIMIT = 4 * CHUNK  # the orchestrator's per-job artifact limit here


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_the_limiter_holds_a_stream_to_its_rate() -> None:
    clock = FakeClock()
    limiter = BandwidthLimiter(1000, clock=clock, sleep=clock.sleep)
    for _ in range(10):
        await limiter.acquire(500)  # 5000 bytes at 1000 B/s, one second's burst allowed
    assert clock.now == pytest.approx(4.0)


async def test_the_limiter_does_not_bank_idle_time_into_a_burst() -> None:
    clock = FakeClock()
    limiter = BandwidthLimiter(1000, clock=clock, sleep=clock.sleep)
    clock.now = 3600.0  # an hour idle
    await limiter.acquire(3000)
    assert clock.slept == [pytest.approx(2.0)]


async def test_an_unlimited_limiter_never_waits() -> None:
    clock = FakeClock()
    limiter = BandwidthLimiter(0, clock=clock, sleep=clock.sleep)
    await limiter.acquire(10**12)
    assert clock.slept == []


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("", 0),
        ("0", 0),
        ("500000", 500000),
        ("800K", 800 * 1024),
        ("50M", 50 * 1024**2),
        ("1G", 1024**3),
        ("1.5g", int(1.5 * 1024**3)),
        ("10MB/s", 10 * 1024**2),
        ("2MiB", 2 * 1024**2),
    ],
)
def test_a_rate_is_bytes_per_second_with_binary_suffixes(text: str, rate: int) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["-1", "fast", "10X", "1e9", "9" * 40, "1\0", "1P"])
def test_a_rate_that_is_not_one_says_how_to_write_it(text: str) -> None:
    with pytest.raises(ConfigurationError, match="upload-bandwidth"):
        parse_rate(text)


def test_a_negative_bandwidth_or_grace_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must not be negative"):
        AgentSettings(orchestrator_url="http://o.test", worker_token="t", preempt_grace=-1)


orchestrator, s3_orchestrator, via, fleet = module_fleets(artifact_max_job_bytes=LIMIT)


def make_uploader(
    held: Held, wire: Wire, folder: Path, limiter: BandwidthLimiter | None = None
) -> tuple[Uploader, OrchestratorClient]:
    client = held.client(wire)
    uploader = Uploader(
        held.job_id,
        held.attempt_id,
        folder,
        client,
        limiter or BandwidthLimiter(0),
        lambda: Backoff(0.001, 0.01),
    )
    return uploader, client


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "output").mkdir()
    (tmp_path / "output/model.bin").write_bytes(os.urandom(3 * CHUNK + 17))
    (tmp_path / "result.json").write_text('{"ok": true}')
    return tmp_path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@on_the_fleet
async def test_a_file_is_announced_streamed_and_stored_whole(
    fleet: Fleet, via: str, job: Path
) -> None:
    held = await held_attempt(fleet)
    wire = Wire()
    uploader, client = make_uploader(held, wire, job)
    try:
        stored = await uploader.upload("output/model.bin")
    finally:
        await client.aclose()

    data = (job / "output/model.bin").read_bytes()
    assert stored is not None and stored.sha256 == sha(data)
    assert await held.stored() == {(held.attempt_id, "output/model.bin"): data}
    (record,) = (await held.listing())["artifacts"]
    assert (record["kind"], record["checkpoint"], record["size"], record["sha256"]) == (
        "artifact",
        None,
        len(data),
        sha(data),
    )
    announce = wire.sent[0]
    assert announce.url == f"{url_of(fleet)}/api/workers/job/{held.job_id}/upload"
    assert announce.body == {
        "attempt_id": held.attempt_id,
        "path": "output/model.bin",
        "size": len(data),
        "sha256": sha(data),
        "kind": "artifact",
        "checkpoint": None,
    }
    (put,) = wire.puts()
    assert put.headers["content-length"] == str(len(data))  # object stores refuse chunked
    assert "transfer-encoding" not in put.headers
    if via == "store":
        assert not put.url.startswith(url_of(fleet)) and put.token is None  # no token leaves
        assert "x-worker-token" not in put.headers
        finish = wire.sent[-1]
        assert (finish.method, finish.status) == ("POST", 201)
        assert finish.url.endswith("/complete") and finish.token == held.agent.token
    else:
        assert put.url.startswith(f"{url_of(fleet)}/api/workers/job/{held.job_id}/upload/")
        assert put.token == held.agent.token
        assert put.headers["content-type"] == "application/octet-stream"  # as announced
    assert [s.status for s in wire.sent] == [200, *([200, 201] if via == "store" else [201])]
    assert uploader.failures == [] and uploader.summary() is None


async def test_a_file_is_read_in_chunks_under_the_cap_not_whole(job: Path) -> None:
    clock = FakeClock()
    limiter = BandwidthLimiter(CHUNK, clock=clock, sleep=clock.sleep)
    size = 3 * CHUNK + 17
    chunks = read_chunks(job, job / "output/model.bin", size, limiter)
    sizes = [len(chunk) async for chunk in chunks]
    assert sizes == [CHUNK, CHUNK, CHUNK, 17]
    assert clock.now == pytest.approx(2 + 17 / CHUNK)  # one second's burst, then the rate


@on_the_fleet
async def test_a_capped_upload_is_paced_and_stored_whole(orchestrator: Fleet, job: Path) -> None:
    held = await held_attempt(orchestrator)
    clock = FakeClock()
    limiter = BandwidthLimiter(CHUNK, clock=clock, sleep=clock.sleep)
    uploader, client = make_uploader(held, Wire(), job, limiter)
    try:
        assert await uploader.upload("output/model.bin") is not None
    finally:
        await client.aclose()
    assert clock.now == pytest.approx(2 + 17 / CHUNK)
    data = (job / "output/model.bin").read_bytes()
    assert await held.stored() == {(held.attempt_id, "output/model.bin"): data}


@on_the_fleet
async def test_a_busy_or_unreachable_orchestrator_is_retried_until_the_file_is_stored(
    fleet: Fleet, via: str, job: Path
) -> None:
    held = await held_attempt(fleet)
    wire = Wire(faults=[fail("POST", 1, refused), fail("PUT", 2, busy)])
    uploader, client = make_uploader(held, wire, job)
    try:
        assert await uploader.upload("result.json") is not None
    finally:
        await client.aclose()
    assert [p.status for p in wire.puts()] == [503, 503, 200 if via == "store" else 201]
    assert wire.sent[0].status is None  # the first announce never got through
    assert await held.stored() == {(held.attempt_id, "result.json"): b'{"ok": true}'}


@on_the_fleet
async def test_a_stored_file_whose_answer_was_lost_is_not_sent_again_nor_failed(
    orchestrator: Fleet, job: Path
) -> None:
    held = await held_attempt(orchestrator)
    wire = Wire(lose=lambda request: request.method == "PUT")
    uploader, client = make_uploader(held, wire, job)
    try:
        stored = await uploader.upload("result.json")
    finally:
        await client.aclose()
    # The orchestrator stored it; asked again, it says so (`exists`), and that is success.
    assert stored is not None and uploader.summary() is None
    assert len(wire.puts()) == 1 and len(wire.announces()) == 2
    assert await held.stored() == {(held.attempt_id, "result.json"): b'{"ok": true}'}


@on_the_fleet
@pytest.mark.parametrize(
    ("path", "size", "why"),
    [("output/huge.bin", LIMIT + 1, "(413): the file's 4194305 bytes are over the per-job")],
)
async def test_a_refused_file_is_counted_and_named_and_the_next_one_goes_on(
    orchestrator: Fleet, job: Path, path: str, size: int, why: str
) -> None:
    held = await held_attempt(orchestrator)
    (job / path).write_bytes(os.urandom(size))
    uploader, client = make_uploader(held, Wire(), job)
    try:
        assert await uploader.upload(path) is None
        assert await uploader.upload("result.json") is not None
    finally:
        await client.aclose()
    summary = uploader.summary() or ""
    assert summary.startswith(
        f"1 upload(s) failed: {path}: the orchestrator refused "
        f"/api/workers/job/{held.job_id}/upload {why}"
    ), summary
    assert set(await held.stored()) == {(held.attempt_id, "result.json")}


@on_the_fleet
@pytest.mark.parametrize("path", ["output/model.bin#1", "output/\u202egnp.exe", "~/model.bin"])
async def test_a_path_the_orchestrator_would_refuse_is_failed_here_and_never_sent(
    orchestrator: Fleet, job: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    held = await held_attempt(orchestrator)
    (job / path).parent.mkdir(parents=True, exist_ok=True)
    (job / path).write_bytes(b"bytes")
    wire = Wire()
    uploader, client = make_uploader(held, wire, job)
    try:
        assert await uploader.upload(path) is None
        assert await uploader.upload("result.json") is not None
    finally:
        await client.aclose()

    assert (uploader.summary() or "").startswith(f"1 upload(s) failed: {path}: artifact path")
    announced = [s.body.get("path") for s in wire.sent if isinstance(s.body, dict)]
    assert announced == ["result.json"]
    assert any(f"upload of {path} failed" in r.getMessage() for r in caplog.records)
    assert set(await held.stored()) == {(held.attempt_id, "result.json")}


@on_the_fleet
async def test_a_file_that_changes_after_it_was_hashed_is_not_stored(
    fleet: Fleet, job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpufleet.worker.uploads as uploads

    def hashed_then_changed(folder: Path, path: str) -> uploads.FileDigest:
        found = digest(folder, path)
        (folder / path).write_text('{"ok": false}')  # same size, other bytes
        return found

    held = await held_attempt(fleet)
    uploader, client = make_uploader(held, Wire(), job)
    monkeypatch.setattr(uploads, "digest", hashed_then_changed)
    try:
        assert await uploader.upload("result.json") is None
    finally:
        await client.aclose()
    assert await held.stored() == {}
    assert "result.json: the orchestrator refused" in (uploader.summary() or "")
    assert "(422)" in (uploader.summary() or "")


@on_the_fleet
async def test_a_fenced_attempt_stops_uploading_anything_more(
    orchestrator: Fleet, job: Path
) -> None:
    held = await held_attempt(orchestrator)
    stale = Held(held.fleet, held.agent, held.offer)
    await held.preempt()  # another attempt holds the job now
    wire = Wire()
    uploader, client = make_uploader(stale, wire, job)
    try:
        with pytest.raises(Fenced):
            await uploader.upload("result.json")
        with pytest.raises(Fenced):
            await uploader.upload("output/model.bin")
    finally:
        await client.aclose()
    assert [s.status for s in wire.sent] == [409]  # the second file was not even announced
    assert await held.stored() == {}


@on_the_fleet
async def test_a_checkpoint_is_committed_with_its_files(fleet: Fleet, job: Path) -> None:
    held = await held_attempt(fleet)
    wire = Wire()
    uploader, client = make_uploader(held, wire, job)
    try:
        stored = await uploader.upload("output/model.bin", kind="checkpoint", checkpoint="c-1")
        assert stored is not None
        assert await uploader.commit_checkpoint("c-1", "output", 7, [stored])
    finally:
        await client.aclose()
    assert wire.sent[-1].body == {
        "attempt_id": held.attempt_id,
        "name": "c-1",
        "path": "output",
        "step": 7,
        "files": [{"path": "output/model.bin", "size": stored.size, "sha256": stored.sha256}],
    }
    listing = await held.listing()
    (checkpoint,) = listing["checkpoints"]
    assert {k: checkpoint[k] for k in ("name", "path", "step", "attempt_id", "files", "size")} == {
        "name": "c-1",
        "path": "output",
        "step": 7,
        "attempt_id": held.attempt_id,
        "files": 1,
        "size": stored.size,
    }
    (record,) = listing["artifacts"]
    assert (record["kind"], record["checkpoint"]) == ("checkpoint", "c-1")


@on_the_fleet
async def test_an_orchestrator_without_upload_routes_ends_the_attempt_s_uploads(
    orchestrator: Fleet, job: Path
) -> None:
    held = await held_attempt(orchestrator)

    def older_orchestrator(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            501, json={"detail": "uploads are not stored by this orchestrator"}, request=request
        )

    wire = Wire(faults=[older_orchestrator])  # a release from before the artifact routes
    uploader, client = make_uploader(held, wire, job)
    try:
        assert await uploader.upload("result.json") is None
        assert await uploader.upload("output/model.bin") is None
    finally:
        await client.aclose()
    assert [s.url for s in wire.sent] == [  # not retried, not asked again
        f"{url_of(orchestrator)}/api/workers/job/{held.job_id}/upload"
    ]
    assert uploader.summary() == (
        f"1 upload(s) failed: result.json: the orchestrator refused /api/workers/job/"
        f"{held.job_id}/upload (501): uploads are not stored by this orchestrator; no further "
        "file of this attempt is sent"
    )


@on_the_fleet
async def test_a_file_deleted_between_hash_and_send_fails_alone(
    orchestrator: Fleet, job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpufleet.worker.uploads as uploads

    def hashed_then_deleted(folder: Path, path: str) -> uploads.FileDigest:
        found = digest(folder, path)
        if path == "result.json":
            (folder / path).unlink()  # a trainer rotating its old checkpoints away
        return found

    held = await held_attempt(orchestrator)
    uploader, client = make_uploader(held, Wire(), job)
    monkeypatch.setattr(uploads, "digest", hashed_then_deleted)
    try:
        assert await uploader.upload("result.json") is None
        assert await uploader.upload("output/model.bin") is not None  # the next one goes on
    finally:
        await client.aclose()
    assert "result.json: cannot read it" in (uploader.summary() or "")
    assert set(await held.stored()) == {(held.attempt_id, "output/model.bin")}
