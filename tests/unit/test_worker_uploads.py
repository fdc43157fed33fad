"""Uploads against a working fake of the artifact routes (tests/artifact_fake.py), through the
worker's real HTTP client: announce, stream, complete, commit; retries, fencing, refusals;
and the bandwidth cap on a fake clock."""

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
from tests.artifact_fake import STORE, ArtifactFake


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


def make_uploader(
    fake: ArtifactFake, folder: Path, rate: int = 0
) -> tuple[Uploader, OrchestratorClient]:
    settings = AgentSettings(orchestrator_url="http://orchestrator.test", worker_token="wt_test")
    client = OrchestratorClient(settings, transport=httpx.MockTransport(fake.handle))
    uploader = Uploader(
        "j_1", "a_1", folder, client, BandwidthLimiter(rate), lambda: Backoff(0.001, 0.01)
    )
    return uploader, client


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "output").mkdir()
    (tmp_path / "output/model.bin").write_bytes(os.urandom(3 * CHUNK + 17))
    (tmp_path / "result.json").write_text('{"ok": true}')
    return tmp_path


@pytest.mark.parametrize("via", ["orchestrator", "store"])
async def test_a_file_is_announced_streamed_and_stored_whole(job: Path, via: str) -> None:
    fake = ArtifactFake(via=via)
    uploader, client = make_uploader(fake, job)
    try:
        stored = await uploader.upload("output/model.bin")
    finally:
        await client.aclose()

    data = (job / "output/model.bin").read_bytes()
    assert stored is not None and stored.sha256 == hashlib.sha256(data).hexdigest()
    assert fake.blobs[("a_1", "output/model.bin")] == data
    announce = fake.requests[0]
    assert announce.url == "http://orchestrator.test/api/workers/job/j_1/upload"
    assert announce.body == {
        "attempt_id": "a_1",
        "path": "output/model.bin",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "kind": "artifact",
        "checkpoint": None,
    }
    (put,) = fake.put_requests()
    if via == "store":
        assert put.url.startswith(f"{STORE}/incoming/") and put.token is None  # no token leaves
        assert fake.requests[-1].url.endswith("/upload/u_1/complete")
    else:
        assert put.url == "http://orchestrator.test/api/workers/job/j_1/upload/u_1"
        assert put.token == "wt_test"
    assert uploader.failures == [] and uploader.summary() is None


async def test_a_file_is_read_in_chunks_under_the_cap_not_whole(job: Path) -> None:
    clock = FakeClock()
    limiter = BandwidthLimiter(CHUNK, clock=clock, sleep=clock.sleep)
    size = 3 * CHUNK + 17
    sizes = [len(chunk) async for chunk in read_chunks(job / "output/model.bin", size, limiter)]
    assert sizes == [CHUNK, CHUNK, CHUNK, 17]
    assert clock.now == pytest.approx(2 + 17 / CHUNK)  # one second's burst, then the rate


async def test_a_put_says_its_length_so_an_object_store_takes_it(job: Path) -> None:
    fake = ArtifactFake(via="store")
    seen: list[httpx.Headers] = []

    async def spy(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            seen.append(request.headers)
        return await fake.handle(request)

    settings = AgentSettings(orchestrator_url="http://orchestrator.test", worker_token="wt_test")
    client = OrchestratorClient(settings, transport=httpx.MockTransport(spy))
    uploader = Uploader(
        "j_1", "a_1", job, client, BandwidthLimiter(0), lambda: Backoff(0.001, 0.01)
    )
    try:
        await uploader.upload("output/model.bin")
    finally:
        await client.aclose()
    (headers,) = seen
    assert headers["content-length"] == str(3 * CHUNK + 17)
    assert "transfer-encoding" not in headers
    assert headers["x-upload"] == "u_1"  # the announce answer's headers are sent
    assert "x-worker-token" not in headers


async def test_a_busy_orchestrator_is_retried_until_the_file_is_stored(job: Path) -> None:
    fake = ArtifactFake(fail_puts=2)
    uploader, client = make_uploader(fake, job)
    try:
        assert await uploader.upload("result.json") is not None
    finally:
        await client.aclose()
    assert len(fake.put_requests()) == 3
    assert fake.blobs[("a_1", "result.json")] == b'{"ok": true}'


async def test_a_refused_file_is_counted_and_named_and_the_next_one_goes_on(job: Path) -> None:
    fake = ArtifactFake(refuse_paths={"output/model.bin"})
    uploader, client = make_uploader(fake, job)
    try:
        assert await uploader.upload("output/model.bin") is None
        assert await uploader.upload("result.json") is not None
    finally:
        await client.aclose()
    assert uploader.summary() == (
        "1 upload(s) failed: output/model.bin: the orchestrator refused "
        "/api/workers/job/j_1/upload (422): path output/model.bin refused"
    )


async def test_a_file_that_changes_after_it_was_hashed_is_not_stored(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpufleet.worker.uploads as uploads

    def hashed_then_changed(folder: Path, path: str) -> uploads.FileDigest:
        found = digest(folder, path)
        (folder / path).write_text('{"ok": false}')  # same size, other bytes
        return found

    fake = ArtifactFake()
    uploader, client = make_uploader(fake, job)
    monkeypatch.setattr(uploads, "digest", hashed_then_changed)
    try:
        assert await uploader.upload("result.json") is None
    finally:
        await client.aclose()
    assert fake.blobs == {}
    assert "size or sha256 is not the announced one" in (uploader.summary() or "")


async def test_a_fenced_attempt_stops_uploading_anything_more(job: Path) -> None:
    fake = ArtifactFake(live_attempt="a_2")  # another attempt holds the job now
    uploader, client = make_uploader(fake, job)
    try:
        with pytest.raises(Fenced):
            await uploader.upload("result.json")
        with pytest.raises(Fenced):
            await uploader.upload("output/model.bin")
    finally:
        await client.aclose()
    assert len(fake.requests) == 1  # the second file was not even announced
    assert fake.blobs == {}


async def test_a_checkpoint_is_committed_with_its_files(job: Path) -> None:
    fake = ArtifactFake()
    uploader, client = make_uploader(fake, job)
    try:
        stored = await uploader.upload("output/model.bin", kind="checkpoint", checkpoint="c-1")
        assert stored is not None
        assert await uploader.commit_checkpoint("c-1", "output", 7, [stored])
    finally:
        await client.aclose()
    (committed,) = fake.checkpoints.values()
    assert committed == {
        "attempt_id": "a_1",
        "name": "c-1",
        "path": "output",
        "step": 7,
        "files": [{"path": "output/model.bin", "size": stored.size, "sha256": stored.sha256}],
    }


async def test_an_orchestrator_without_upload_routes_ends_the_attempt_s_uploads(job: Path) -> None:
    calls: list[str] = []

    async def old_server(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(501, json={"detail": "uploads are not stored by this orchestrator"})

    settings = AgentSettings(orchestrator_url="http://orchestrator.test", worker_token="wt_test")
    client = OrchestratorClient(settings, transport=httpx.MockTransport(old_server))
    uploader = Uploader(
        "j_1", "a_1", job, client, BandwidthLimiter(0), lambda: Backoff(0.001, 0.01)
    )
    try:
        assert await uploader.upload("result.json") is None
        assert await uploader.upload("output/model.bin") is None
    finally:
        await client.aclose()
    assert calls == ["/api/workers/job/j_1/upload"]  # not retried, not asked again
    assert uploader.summary() == (
        "1 upload(s) failed: result.json: the orchestrator refused /api/workers/job/j_1/upload "
        "(501): uploads are not stored by this orchestrator; no further file of this attempt "
        "is sent"
    )


async def test_a_file_deleted_between_hash_and_send_fails_alone(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpufleet.worker.uploads as uploads

    def hashed_then_deleted(folder: Path, path: str) -> uploads.FileDigest:
        found = digest(folder, path)
        (folder / path).unlink()  # a trainer rotating its old checkpoints away
        return found

    fake = ArtifactFake()
    uploader, client = make_uploader(fake, job)
    monkeypatch.setattr(uploads, "digest", hashed_then_deleted)
    try:
        assert await uploader.upload("result.json") is None
    finally:
        await client.aclose()
    assert "result.json: cannot read it" in (uploader.summary() or "")
