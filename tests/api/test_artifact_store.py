"""The artifact store's behaviour, the same on the data folder and on object storage.

The object-storage backend runs against moto's S3 server (a stand-in for a cloud bucket,
which cannot be reached from here), started by this module on a free port; each test gets
its own bucket. The server runs in a child process, not a thread: moto keeps every object in
its own memory, which would hide ours in the bounded-memory test.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import tracemalloc
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from bench.s3 import new_bucket
from pydantic import SecretStr

from gpufleet.artifacts.backends import ArtifactSettings, open_artifact_store
from gpufleet.artifacts.keys import artifact_key, job_prefix
from gpufleet.artifacts.store import STAGING_PREFIX, ArtifactStore
from gpufleet.errors import (
    ArtifactCorrupt,
    ArtifactStoreError,
    ConfigurationError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)

MiB = 1024 * 1024


def _s3_settings(endpoint: str) -> ArtifactSettings:
    bucket = new_bucket(endpoint)
    return ArtifactSettings(
        url=f"s3://{bucket}/fleet",
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="test",
        secret_access_key=SecretStr("test"),
    )


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "folder":
        return open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    return open_artifact_store(_s3_settings(request.getfixturevalue("s3_endpoint")))


@pytest.fixture
def s3_store(s3_endpoint: str) -> ArtifactStore:
    return open_artifact_store(_s3_settings(s3_endpoint))


async def chunks_of(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read_all(store: ArtifactStore, key: str) -> bytes:
    return b"".join([chunk async for chunk in await store.open(key)])


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


KEY = artifact_key("job_1", "att_1", "output/model.bin")


async def test_a_streamed_write_is_stored_with_its_size_and_sha256(store: ArtifactStore) -> None:
    data = secrets.token_bytes(300_000)
    stored = await store.write(KEY, chunks_of(data), sha256=sha(data))
    assert (stored.key, stored.size, stored.sha256) == (KEY, len(data), sha(data))
    assert await read_all(store, KEY) == data


async def test_a_write_with_no_announced_sha256_records_the_one_streamed(
    store: ArtifactStore,
) -> None:
    data = secrets.token_bytes(70_000)
    stored = await store.write(KEY, chunks_of(data), sha256=None)
    assert (stored.size, stored.sha256) == (len(data), sha(data))
    assert await read_all(store, KEY) == data


async def test_a_write_whose_sha256_differs_stores_nothing(store: ArtifactStore) -> None:
    data = b"checkpoint" * 1000
    with pytest.raises(ArtifactCorrupt, match="not the announced"):
        await store.write(KEY, chunks_of(data), sha256=sha(b"other"))
    assert await store.list(job_prefix("job_1")) == []
    with pytest.raises(NotFound):
        await store.open(KEY)


async def test_a_stream_that_breaks_midway_stores_nothing(store: ArtifactStore) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * (6 * MiB)  # past one multipart part: a part was already sent
        raise ConnectionResetError("the worker went away")

    with pytest.raises(ConnectionResetError):
        await store.write(KEY, broken(), sha256=sha(b""))
    assert await store.list(job_prefix("job_1")) == []


async def test_a_write_over_the_size_limit_stores_nothing(store: ArtifactStore) -> None:
    data = b"y" * 10_000
    with pytest.raises(PayloadTooLarge):
        await store.write(KEY, chunks_of(data, 1000), sha256=sha(data), max_size=9_999)
    assert await store.list(job_prefix("job_1")) == []


async def test_a_malformed_sha256_is_refused_before_anything_is_read(
    store: ArtifactStore,
) -> None:
    with pytest.raises(InvalidInput, match="64 lowercase hex"):
        await store.write(KEY, chunks_of(b"z"), sha256=sha(b"z").upper())


async def test_listing_a_job_shows_its_files_with_sizes_and_nothing_of_others(
    store: ArtifactStore,
) -> None:
    files = {
        artifact_key("job_1", "att_1", "output/a.bin"): b"a" * 10,
        artifact_key("job_1", "att_2", "checkpoint-100/state.bin"): b"b" * 20,
        artifact_key("job_12", "att_1", "output/a.bin"): b"c" * 30,
    }
    for key, data in files.items():
        await store.write(key, chunks_of(data), sha256=sha(data))
    listed = await store.list(job_prefix("job_1"))
    assert [(info.key, info.size) for info in listed] == [
        ("jobs/job_1/att_1/output/a.bin", 10),
        ("jobs/job_1/att_2/checkpoint-100/state.bin", 20),
    ]


async def test_a_deleted_artifact_is_gone_and_deleting_it_again_is_harmless(
    store: ArtifactStore,
) -> None:
    await store.write(KEY, chunks_of(b"data"), sha256=sha(b"data"))
    await store.delete(KEY)
    await store.delete(KEY)
    assert await store.list(job_prefix("job_1")) == []
    with pytest.raises(NotFound, match="list the job's artifacts"):
        await store.open(KEY)


async def test_a_large_object_streams_through_in_bounded_memory(store: ArtifactStore) -> None:
    total, chunk = 64 * MiB, MiB
    digest = hashlib.sha256()
    pattern = [secrets.token_bytes(chunk) for _ in range(2)]
    for i in range(total // chunk):
        digest.update(pattern[i % 2])

    async def generated() -> AsyncIterator[bytes]:
        for i in range(total // chunk):
            yield pattern[i % 2]

    tracemalloc.start()
    try:
        with RssPeak() as rss:
            stored = await store.write(KEY, generated(), sha256=digest.hexdigest())
            read_back, size = hashlib.sha256(), 0
            async for part in await store.open(KEY):
                read_back.update(part)
                size += len(part)
        python_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stored.size == size == total
    assert read_back.hexdigest() == digest.hexdigest()
    print(f"python {python_peak / MiB:.1f} MiB, rss {rss.growth / MiB:.1f} MiB")
    assert python_peak < 32 * MiB, f"Python held {python_peak / MiB:.1f} MiB of a 64 MiB object"
    assert rss.growth < 48 * MiB, f"the process grew {rss.growth / MiB:.1f} MiB for 64 MiB"


class RssPeak:
    """The most this process's resident memory grew over its start while in the block
    (sampled: obstore's Rust buffers are invisible to tracemalloc)."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._start = self._peak = 0
        self.growth = 0

    def __enter__(self) -> RssPeak:
        self._start = self._peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.growth = self._peak - self._start

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self._peak = max(self._peak, self._process.memory_info().rss)


async def test_the_data_folder_presigns_nothing(tmp_path: Path) -> None:
    store = open_artifact_store(ArtifactSettings(url=f"file://{tmp_path}"))
    assert not store.presigns
    assert await store.presign_put(KEY, timedelta(minutes=5)) is None
    assert await store.presign_get(KEY, timedelta(minutes=5)) is None


async def test_a_presigned_put_then_a_presigned_get_move_the_bytes_without_the_store(
    s3_store: ArtifactStore,
) -> None:
    data = secrets.token_bytes(200_000)
    upload = await s3_store.presign_put(KEY, timedelta(minutes=5))
    assert upload is not None
    async with httpx.AsyncClient() as client:
        (await client.put(upload.url, content=data)).raise_for_status()
    assert await s3_store.list(job_prefix("job_1")) == []  # staged, not yet an artifact

    stored = await s3_store.finish_upload(upload, sha256=sha(data))
    assert (stored.key, stored.size) == (KEY, len(data))
    assert [i.key for i in await s3_store.list(job_prefix("job_1"))] == [KEY]
    assert await s3_store.list(STAGING_PREFIX) == []

    url = await s3_store.presign_get(KEY, timedelta(minutes=5))
    assert url is not None
    async with httpx.AsyncClient() as client:
        assert (await client.get(url)).content == data


async def test_a_presigned_upload_with_the_wrong_sha256_is_dropped(
    s3_store: ArtifactStore,
) -> None:
    upload = await s3_store.presign_put(KEY, timedelta(minutes=5))
    assert upload is not None
    async with httpx.AsyncClient() as client:
        (await client.put(upload.url, content=b"truncated")).raise_for_status()
    with pytest.raises(ArtifactCorrupt):
        await s3_store.finish_upload(upload, sha256=sha(b"truncated and more"))
    assert await s3_store.list(job_prefix("job_1")) == []
    assert await s3_store.list(STAGING_PREFIX) == []


async def test_a_presigned_get_of_a_missing_artifact_is_not_found(
    s3_store: ArtifactStore,
) -> None:
    with pytest.raises(NotFound):
        await s3_store.presign_get(KEY, timedelta(minutes=5))


def test_an_unknown_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown scheme 'ftp'"):
        open_artifact_store(ArtifactSettings(url="ftp://host/artifacts"))


def test_a_folder_that_cannot_be_created_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigurationError, match="cannot be opened"):
        open_artifact_store(ArtifactSettings(url=str(tmp_path / "file" / "artifacts")))


async def test_a_write_the_process_never_finished_is_not_listed_in_the_data_folder(
    tmp_path: Path,
) -> None:
    """A SIGKILL mid-write leaves obstore's temporary file (`<name>#<n>`) behind."""
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path)))
    await store.write(KEY, chunks_of(b"done"), sha256=sha(b"done"))
    (tmp_path / f"{KEY}#1").write_bytes(b"half")
    assert [info.key for info in await store.list(job_prefix("job_1"))] == [KEY]


async def test_a_bucket_that_does_not_exist_is_a_store_error(s3_endpoint: str) -> None:
    store = open_artifact_store(
        ArtifactSettings(
            url="s3://no-such-bucket",
            endpoint=s3_endpoint,
            region="us-east-1",
            access_key_id="test",
            secret_access_key=SecretStr("test"),
        )
    )
    with pytest.raises(ArtifactStoreError, match="check that it is reachable"):
        await store.write(KEY, chunks_of(b"data"), sha256=sha(b"data"))


@pytest.mark.parametrize(
    "path", ["out/sp ace.bin", "out/модель ü.bin", "out/a#b", "out/p%41", "out/x+y=z;~!.bin"]
)
async def test_an_accepted_odd_name_is_listed_and_read_back_as_written(
    store: ArtifactStore, path: str
) -> None:
    key = artifact_key("job_1", "att_1", path)
    await store.write(key, chunks_of(b"odd"), sha256=sha(b"odd"))
    assert [info.key for info in await store.list(job_prefix("job_1"))] == [key]
    assert await read_all(store, key) == b"odd"
