"""A folder store's shortcuts (artifacts/store.py, artifacts/folder.py): `adopt` makes a
checked file an object, renamed into the folder, written as any upload is when it cannot be
renamed there; a write goes straight into a file of the folder, renamed into place once its
size and sha256 are right (nothing left behind otherwise); `open` reads the object's file
straight, and `file` names it."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpufleet.artifacts.backends import ArtifactSettings, open_artifact_store
from gpufleet.errors import ArtifactCorrupt, NotFound, PayloadTooLarge

KEY = "workdirs/abc.tar"


def spooled(tmp_path: Path, data: bytes) -> tuple[Path, str]:
    (tmp_path / "spool").mkdir(exist_ok=True)
    path = tmp_path / "spool" / "upload-1"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


async def test_a_checked_file_is_renamed_into_a_folder_store(tmp_path: Path) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    path, sha = spooled(tmp_path, b"x" * 3_000_000)
    inode = path.stat().st_ino
    await store.adopt(KEY, path, sha256=sha)
    assert not path.exists()
    assert store.local_path(KEY) == tmp_path / "artifacts" / KEY
    assert (tmp_path / "artifacts" / KEY).stat().st_ino == inode  # moved, not copied
    assert b"".join([c async for c in await store.open(KEY)]) == b"x" * 3_000_000


async def test_a_file_on_another_file_system_is_written_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    path, sha = spooled(tmp_path, b"y" * 3_000_000)

    replace = os.replace

    def across(src: object, dst: object) -> None:  # the spool is on another file system
        if Path(str(src)).parent == tmp_path / "spool":
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", across)
    await store.adopt(KEY, path, sha256=sha)
    assert path.exists()  # the caller's to remove
    assert (tmp_path / "artifacts" / KEY).read_bytes() == b"y" * 3_000_000
    with pytest.raises(ArtifactCorrupt, match="sha256"):
        await store.adopt("workdirs/other.tar", path, sha256="0" * 64)
    assert not (tmp_path / "artifacts" / "workdirs" / "other.tar").exists()
    assert list((tmp_path / "artifacts" / "incoming").iterdir()) == []


async def test_a_direct_read_gives_the_stored_bytes_and_nothing_for_no_object(
    tmp_path: Path,
) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    data = os.urandom(2_500_000)
    path, sha = spooled(tmp_path, data)
    await store.adopt(KEY, path, sha256=sha)
    chunks = [c async for c in await store.open(KEY)]
    assert b"".join(chunks) == data and len(chunks) == 3  # MiB reads
    assert await store.file(KEY) == tmp_path / "artifacts" / KEY
    with pytest.raises(NotFound):
        await store.open("workdirs/none.tar")
    with pytest.raises(NotFound):
        await store.file("workdirs/none.tar")


async def chunks_of(data: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_a_write_lands_in_the_folder_in_one_piece_hashed_as_it_came(
    tmp_path: Path,
) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    data = os.urandom(3_000_001)
    sha = hashlib.sha256(data).hexdigest()
    stored = await store.write("jobs/j1/a1/out/model.bin", chunks_of(data), sha256=sha)
    assert (stored.size, stored.sha256) == (len(data), sha)
    assert (tmp_path / "artifacts" / stored.key).read_bytes() == data
    assert list((tmp_path / "artifacts" / "incoming").iterdir()) == []  # renamed, not copied


@pytest.mark.parametrize("wrong", ["sha256", "size", "stream"])
async def test_a_refused_write_stores_nothing_and_leaves_nothing_behind(
    tmp_path: Path, wrong: str
) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    data = os.urandom(2_000_000)
    key = "jobs/j1/a1/out/model.bin"

    async def broken() -> AsyncIterator[bytes]:
        yield data[:1_500_000]
        raise ConnectionResetError("the sender went away")

    if wrong == "sha256":
        with pytest.raises(ArtifactCorrupt, match="not the announced"):
            await store.write(key, chunks_of(data), sha256="0" * 64)
    elif wrong == "size":
        with pytest.raises(PayloadTooLarge):
            await store.write(key, chunks_of(data), sha256=None, max_size=len(data) - 1)
    else:
        with pytest.raises(ConnectionResetError):
            await store.write(key, broken(), sha256=None)
    assert not (tmp_path / "artifacts" / key).exists()
    assert list((tmp_path / "artifacts" / "incoming").iterdir()) == []
    assert await store.list("jobs") == []
