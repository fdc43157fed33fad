"""A folder store's shortcuts (artifacts/store.py): `adopt` makes a checked file an object,
renamed into the folder, written as any upload is when it cannot be renamed there; `open`
with `direct` reads the object's file straight."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from gpufleet.artifacts.backends import ArtifactSettings, open_artifact_store
from gpufleet.errors import ArtifactCorrupt, NotFound

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

    def across(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "replace", across)
    await store.adopt(KEY, path, sha256=sha)
    monkeypatch.undo()
    assert path.exists()  # the caller's to remove
    assert (tmp_path / "artifacts" / KEY).read_bytes() == b"y" * 3_000_000
    monkeypatch.setattr(os, "replace", across)
    with pytest.raises(ArtifactCorrupt, match="sha256"):
        await store.adopt("workdirs/other.tar", path, sha256="0" * 64)
    assert not (tmp_path / "artifacts" / "workdirs" / "other.tar").exists()


async def test_a_direct_read_gives_the_stored_bytes_and_nothing_for_no_object(
    tmp_path: Path,
) -> None:
    store = open_artifact_store(ArtifactSettings(url=str(tmp_path / "artifacts")))
    data = os.urandom(2_500_000)
    path, sha = spooled(tmp_path, data)
    await store.adopt(KEY, path, sha256=sha)
    chunks = [c async for c in await store.open(KEY, direct=True)]
    assert b"".join(chunks) == data and len(chunks) == 3  # MiB reads
    with pytest.raises(NotFound):
        await store.open("workdirs/none.tar", direct=True)
