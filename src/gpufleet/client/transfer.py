"""Bringing a job's stored files home: each streamed to a temporary file beside its place,
hashed as it comes, and moved into place only once its size and sha256 are the listed ones.

The listing comes from the orchestrator, and the orchestrator checks every path it stores;
the client checks them again all the same (a path that climbs out of the folder, or a folder
inside it that is a link to elsewhere, is refused before anything is written). How far it
got is told to a `Meter` (the CLI's: a progress bar).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote

from gpufleet.artifacts.keys import checked_path
from gpufleet.client.http import ApiClient, part
from gpufleet.client.text import safe
from gpufleet.errors import ClientError, NotFound, UnsafeArtifactPath

CHUNK = 1 << 20  # bytes read, hashed and written at a time; two at most are held
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Saved:
    """A file in place: fetched now, or already there with the listed sha256."""

    record: dict[str, Any]
    file: Path
    fetched: bool

    @property
    def size(self) -> int:
        return int(self.record["size"])

    def as_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "path": r["path"],
            "attempt_number": r["attempt_number"],
            "kind": r["kind"],
            "size": r["size"],
            "sha256": r["sha256"],
            "file": str(self.file),
            "status": "downloaded" if self.fetched else "unchanged",
        }


class Meter(Protocol):
    """What a download tells of its progress, inside its `with`: the bytes in all, each file
    as it starts (`label`), the bytes as they come."""

    def __enter__(self) -> Meter: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def start(self, label: str, total: int) -> None: ...

    def label(self, label: str) -> None: ...

    def advance(self, count: int) -> None: ...


class Quiet:
    """A `Meter` that shows nothing (the Python client's)."""

    def __enter__(self) -> Quiet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def start(self, label: str, total: int) -> None:
        return None

    def label(self, label: str) -> None:
        return None

    def advance(self, count: int) -> None:
        return None


class _Mismatch(Exception):
    """The bytes that came are not the listed ones."""


def download_all(
    api: ApiClient,
    job_id: str,
    records: list[dict[str, Any]],
    directory: Path,
    again: str,
    meter: Meter | None = None,
) -> list[Saved]:
    """Every record into `directory`; a `ClientError` naming the files that did not come
    (none of them left behind, whole or in part) once the others are in place."""
    targets = [(r, target_of(directory, r["path"])) for r in records]
    saved: list[Saved] = []
    failed: list[str] = []
    with meter or Quiet() as bar:
        bar.start(job_id, sum(int(r["size"]) for r in records))
        for record, target in targets:
            bar.label(safe(record["path"]))
            try:
                saved.append(_one(api, job_id, record, target, bar))
            except _Mismatch as exc:
                failed.append(f"{record['path']} ({exc})")
            except NotFound:
                failed.append(f"{record['path']} (deleted since it was listed)")
        bar.label(f"{job_id}: {len(records) - len(failed)} of {len(records)} files")
    if failed:
        raise ClientError(
            f"{len(failed)} of {len(records)} files did not download and were not kept: "
            f"{'; '.join(failed)}. Run `{again}` again; a sha256 that differs again means the "
            "stored copy is damaged"
        )
    return saved


def checked_record(record: Any) -> dict[str, Any]:
    """The listed record, if it has what a download needs: a path, an attempt, a whole size,
    a sha256."""
    fields: dict[str, Any] = record if isinstance(record, dict) else {}
    size, digest = fields.get("size"), fields.get("sha256")
    if (
        not isinstance(fields.get("path"), str)
        or not isinstance(fields.get("attempt_id"), str)
        or type(fields.get("attempt_number")) is not int
        or type(size) is not int
        or size < 0
        or not (isinstance(digest, str) and _SHA256.fullmatch(digest))
    ):
        raise ClientError(
            f"the orchestrator listed a file without a usable path, attempt, size or sha256 "
            f"({safe(str(record)[:120])}); nothing was downloaded: check that --url / "
            "GPUFLEET_URL is your orchestrator, and that it is as new as this command"
        )
    return fields


def target_of(directory: Path, path: str) -> Path:
    """Where `path` goes under `directory`; `ClientError` if it would land anywhere else."""
    try:
        checked_path(path)
    except UnsafeArtifactPath:
        raise ClientError(
            f"the orchestrator listed a file at {safe(path[:80])!r}, which is not a plain "
            f"path inside {directory} (absolute, '..', empty or control characters); nothing "
            "was downloaded: check that --url / GPUFLEET_URL is your orchestrator"
        ) from None
    root = directory.resolve()
    target = root / path
    # A folder on the way that is a link out of the folder (made by anyone, before or now).
    if not target.parent.resolve().is_relative_to(root):
        raise ClientError(
            f"{directory / path} would be written outside {directory}: a folder on its way "
            "is a link to elsewhere; nothing was downloaded: remove the link, or choose "
            "another -o folder"
        )
    return target


def _one(
    api: ApiClient,
    job_id: str,
    record: dict[str, Any],
    target: Path,
    bar: Meter,
) -> Saved:
    size, sha256 = int(record["size"]), str(record["sha256"])
    if target.is_file() and not target.is_symlink() and _same(target, size, sha256):
        bar.advance(size)
        return Saved(record, target, fetched=False)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(
            prefix=f".{target.name[:64]}.", suffix=".part", dir=target.parent
        )
    except OSError as exc:
        raise ClientError(
            f"cannot write {target}: {exc.strerror or exc}; choose another -o folder"
        ) from None
    try:
        with os.fdopen(fd, "wb") as sink:
            got, digest = _stream(api, job_id, record, sink, bar)
            sink.flush()
            os.fsync(sink.fileno())
        if (got, digest) != (size, sha256):
            raise _Mismatch(
                f"its bytes have sha256 {digest[:12]}… and size {got}, the orchestrator "
                f"lists {sha256[:12]}… and {size}"
            )
        try:
            os.replace(temporary, target)
        except OSError as exc:
            raise ClientError(
                f"cannot put {target} in place: {exc.strerror or exc}; move what is there "
                "away, or choose another -o folder"
            ) from None
    finally:
        Path(temporary).unlink(missing_ok=True)
    return Saved(record, target, fetched=True)


def _stream(
    api: ApiClient,
    job_id: str,
    record: dict[str, Any],
    sink: Any,
    bar: Meter,
) -> tuple[int, str]:
    """The file's bytes into `sink`; (their size, their sha256). Each MiB is hashed and
    written on a thread while the next one is read (hashlib and the write let go of the GIL),
    one MiB in flight. Stops reading once more came than the listed size: such a file fails
    however it ends."""
    url = f"/api/queue/{part(job_id)}/artifacts/{quote(record['path'], safe='/')}"
    digest = hashlib.sha256()
    got = 0

    def take(chunk: bytes) -> None:
        digest.update(chunk)
        sink.write(chunk)

    with (
        api.fetch(url, attempt_id=record["attempt_id"]) as response,
        ThreadPoolExecutor(1, thread_name_prefix="gpufleet-download") as writer,
    ):
        pending: Future[None] | None = None
        batch: list[bytes] = []  # the network's chunks (64 KiB), joined once a MiB came
        batched = 0
        for chunk in response.iter_bytes():
            got += len(chunk)
            if got > int(record["size"]):
                break
            batch.append(chunk)
            batched += len(chunk)
            if batched >= CHUNK:
                if pending is not None:
                    pending.result()
                pending = writer.submit(take, b"".join(batch))
                bar.advance(batched)
                batch, batched = [], 0
        if pending is not None:
            pending.result()
        take(b"".join(batch))
        bar.advance(batched)
    return got, digest.hexdigest()


def _same(path: Path, size: int, sha256: str) -> bool:
    if path.stat().st_size != size:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == sha256
