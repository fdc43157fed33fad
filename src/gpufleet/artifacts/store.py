"""The artifact store: job files kept by key in the data folder or a bucket.

One implementation over `obstore` serves every backend (a local folder, S3 and its
look-alikes, GCS, Azure); what differs is said by the backend's capabilities, not by
subclasses. Writes stream: the bytes pass through in chunks, their size and sha256 counted
on the way, and the object appears only when the whole stream arrived with the announced
sha256 (obstore's put is atomic: a temporary file renamed, or a multipart upload completed
only at the end; an error raised while streaming aborts it).

In the data folder, a write is received straight into a file under `incoming/` (hashed and
written a MiB at a time on a thread: `artifacts/spool.py`), renamed to its key once its size
and sha256 are right, and a read may serve the file itself (`file`); obstore's stream of a local
file, and its put fed 64 KiB at a time, were 3-10 times slower (docs/benchmarks.md, scenario 7).

Presigned uploads go to a staging key outside `jobs/` (never listed); `finish_upload`
reads the staged object once to check its sha256, then copies it to its key inside the
store. The orchestrator reads those bytes from the bucket, it does not hold them: S3 could
check a sha256 itself (`x-amz-checksum-sha256`), but obstore cannot sign that header yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import obstore
from obstore.exceptions import BaseError, NotFoundError
from obstore.store import AzureStore, GCSStore, ObjectStore, S3Store

from gpufleet.artifacts.folder import (
    READ_CHUNK,
    STAGING_PREFIX,
    check_digest,
    file_chunks,
    move,
    too_large,
    write_file,
)
from gpufleet.errors import ArtifactStoreError, InvalidInput, NotFound

# S3's smallest multipart part; with `_PUT_CONCURRENCY` it bounds what one upload buffers.
_PART_SIZE = 5 * 1024 * 1024
_PUT_CONCURRENCY = 4
# The most one PUT may carry on S3 (AWS's limit; the compatible stores follow it): a presigned
# upload is one PUT, so a larger file goes through the orchestrator's multipart write.
PRESIGNED_PUT_MAX = 5 * 1024**3
_SHA256 = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


@dataclass(frozen=True)
class StoredArtifact:
    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ArtifactInfo:
    key: str
    size: int
    modified: datetime


@dataclass(frozen=True)
class PresignedUpload:
    """Where a worker PUTs one file itself; `finish_upload` makes it an artifact."""

    url: str
    key: str
    staging_key: str
    expires_at: datetime


class ArtifactStore:
    """Job files by key; `presigns` says whether workers can bypass the orchestrator."""

    def __init__(self, store: ObjectStore, *, name: str, folder: Path | None = None) -> None:
        self._store = store
        self.name = name
        self.presigns = isinstance(store, S3Store | GCSStore | AzureStore)
        self.folder = folder  # a folder store's root: its keys are files under it

    def local_path(self, key: str) -> Path | None:
        """The file that holds `key` (of letters, digits, `/`, `.`, `-` and `_`: obstore
        escapes others) in a folder store; None for a bucket."""
        return None if self.folder is None else self.folder / key

    async def adopt(self, key: str, path: Path, *, sha256: str) -> None:
        """Make the file at `path`, whose bytes the caller has checked, the object at `key`:
        renamed into a folder store on the same file system (the bytes are not copied),
        else written as `write` does (`path` is then left for the caller to remove)."""
        target = self.local_path(key)
        if target is not None:
            try:
                await asyncio.to_thread(move, path, target)
                return
            except OSError:  # another file system than the spool's: written below
                pass
        await self.write(key, file_chunks(path), sha256=sha256)

    async def write(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        sha256: str | None,
        max_size: int | None = None,
    ) -> StoredArtifact:
        """Store `chunks` at `key` if they hash to `sha256`; else store nothing and raise.

        `sha256=None` is for senders that announce none (SimpleTuner's boto3 over HTTPS
        sends a CRC32 trailer instead, which the caller's stream checks at its end)."""
        if self.folder is not None:
            expected = None if sha256 is None else checked_sha256(sha256)
            size, actual = await write_file(
                self.folder, key, chunks, expected, max_size, lambda exc: self._failed(key, exc)
            )
            return StoredArtifact(key=key, size=size, sha256=actual)
        counted = _Counted(chunks, None if sha256 is None else checked_sha256(sha256), max_size)
        await self._call(
            key,
            obstore.put_async(
                self._store,
                key,
                counted,
                use_multipart=True,
                chunk_size=_PART_SIZE,
                max_concurrency=_PUT_CONCURRENCY,
            ),
            counted,
        )
        return StoredArtifact(key=key, size=counted.size, sha256=counted.sha256)

    async def file(self, key: str) -> Path | None:
        """The file that holds `key` in a folder store, to serve as it is (a Range of it too);
        None for a bucket (read it with `open`). `NotFound` when there is none."""
        path = self.local_path(key)
        if path is not None and not await asyncio.to_thread(path.is_file):
            raise NotFound(f"no artifact {key!r} in the {self.name}; list the job's artifacts")
        return path

    async def open(self, key: str) -> AsyncIterator[bytes]:
        """The bytes at `key`, in chunks; `NotFound` (before any byte) if there are none. A
        folder store's file is read straight, in MiB reads on a thread (obstore's stream of a
        local file was 2-4 times slower: docs/benchmarks.md, scenario 9)."""
        path = self.local_path(key)
        if path is None:
            result = await self._call(key, obstore.get_async(self._store, key))
            return _chunks(result.stream(min_chunk_size=READ_CHUNK), key, self.name)
        if not await asyncio.to_thread(path.is_file):
            raise NotFound(f"no artifact {key!r} in the {self.name}; list the job's artifacts")
        return file_chunks(path)

    async def open_range(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes `start` to `end` (exclusive) at `key`, in chunks (an HTTP Range read);
        the caller checks the range against the artifact's size first."""
        get = obstore.get_async(self._store, key, options={"range": (start, end)})
        result = await self._call(key, get)
        return _chunks(result.stream(min_chunk_size=READ_CHUNK), key, self.name)

    async def stat(self, key: str) -> ArtifactInfo | None:
        """The object at `key`, or None when there is none."""
        try:
            meta = await self._call(key, obstore.head_async(self._store, key))
        except NotFound:
            return None
        return ArtifactInfo(meta["path"], meta["size"], meta["last_modified"])

    async def delete(self, key: str) -> None:
        """Remove `key`; a key already gone is not an error (a sweep may race a user)."""
        try:
            await self._call(key, obstore.delete_async(self._store, key))
        except NotFound:
            return

    async def list(self, prefix: str) -> list[ArtifactInfo]:
        """Every complete object under the folder `prefix`, by key."""
        found: list[ArtifactInfo] = []
        stream = obstore.list(self._store, prefix.rstrip("/") + "/", chunk_size=1000)
        try:
            async for batch in stream:
                found += [ArtifactInfo(m["path"], m["size"], m["last_modified"]) for m in batch]
        except (BaseError, OSError) as exc:
            raise ArtifactStoreError(
                f"listing {prefix!r} in the {self.name} failed ({exc}); check that it is reachable"
            ) from exc
        return sorted(found, key=lambda info: info.key)

    async def presign_get(self, key: str, expires_in: timedelta) -> str | None:
        """A URL that serves `key` without credentials until it expires; None for the data
        folder (the orchestrator streams those bytes itself)."""
        if not self.presigns:
            return None
        await self._call(key, obstore.head_async(self._store, key))
        return await self._sign("GET", key, expires_in)

    async def presign_put(self, key: str, expires_in: timedelta) -> PresignedUpload | None:
        """A URL the worker PUTs the file to (one request; S3 takes up to 5 GiB so); None for
        the data folder. Nothing is listed until `finish_upload`."""
        if not self.presigns:
            return None
        staging = f"{STAGING_PREFIX}/{secrets.token_hex(16)}"
        url = await self._sign("PUT", staging, expires_in)
        return PresignedUpload(url, key, staging, datetime.now(UTC) + expires_in)

    async def finish_upload(
        self, upload: PresignedUpload, *, sha256: str, max_size: int | None = None
    ) -> StoredArtifact:
        """Check the staged upload against `sha256`, then make it the artifact at its key."""
        expected = checked_sha256(sha256)
        try:
            counted = _Counted(await self.open(upload.staging_key), expected, max_size)
            async for _ in counted:
                pass
            await self._call(
                upload.key, obstore.copy_async(self._store, upload.staging_key, upload.key)
            )
        finally:
            await self.delete(upload.staging_key)
        return StoredArtifact(key=upload.key, size=counted.size, sha256=expected)

    async def _sign(self, method: obstore.HTTP_METHOD, key: str, expires_in: timedelta) -> str:
        if not isinstance(self._store, S3Store | GCSStore | AzureStore):
            raise InvalidInput(f"the {self.name} cannot presign; stream through the server")
        try:
            return await obstore.sign_async(self._store, method, key, expires_in)
        except (BaseError, OSError, ValueError) as exc:
            raise ArtifactStoreError(
                f"signing a {method} URL for {key!r} failed ({exc}); check the store's credentials"
            ) from exc

    async def _call(self, key: str, operation: Awaitable[T], source: _Counted | None = None) -> T:
        """Await one obstore call, its failures said in gpufleet's terms; a failure of the
        `source` stream it reads (the caller's) goes up as it was raised."""
        try:
            return await operation
        except Exception as exc:
            if source is not None and exc is source.failure:
                raise
            if isinstance(exc, NotFoundError | FileNotFoundError) and source is None:
                raise NotFound(
                    f"no artifact {key!r} in the {self.name}; list the job's artifacts"
                ) from exc
            if isinstance(exc, BaseError | OSError):
                raise self._failed(key, exc) from exc
            raise

    def _failed(self, key: str, exc: BaseException) -> ArtifactStoreError:
        return ArtifactStoreError(
            f"the {self.name} failed on {key!r} ({exc}); check that it is reachable "
            "and writable, then retry"
        )


def checked_sha256(value: str) -> str:
    if not _SHA256.fullmatch(value):
        raise InvalidInput(
            f"sha256 {value[:80]!r} is not 64 lowercase hex digits; send the file's sha256 hex"
        )
    return value


class _Counted:
    """Passes chunks through, counting size and sha256; raises at the end on a mismatch, so
    that the write it feeds is aborted, not completed."""

    def __init__(
        self, chunks: AsyncIterable[bytes], sha256: str | None, max_size: int | None
    ) -> None:
        self._chunks = aiter(chunks)
        self._expected = sha256
        self._max_size = max_size
        self._hash = hashlib.sha256()
        self.size = 0
        self.failure: BaseException | None = None

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._next()
        except StopAsyncIteration:
            raise
        except BaseException as exc:
            self.failure = exc
            raise

    async def _next(self) -> bytes:
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self._check_digest()
            raise
        self.size += len(chunk)
        if self._max_size is not None and self.size > self._max_size:
            raise too_large(self._max_size)
        self._hash.update(chunk)
        return chunk

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _check_digest(self) -> None:
        check_digest(self._hash.hexdigest(), self._expected, self.size)


async def _chunks(stream: AsyncIterable[bytes], key: str, name: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            yield bytes(chunk)
    except (BaseError, OSError) as exc:
        raise ArtifactStoreError(
            f"reading {key!r} from the {name} broke off ({exc}); download it again"
        ) from exc


__all__ = [
    "READ_CHUNK",
    "STAGING_PREFIX",
    "ArtifactInfo",
    "ArtifactStore",
    "PresignedUpload",
    "StoredArtifact",
    "checked_sha256",
]
