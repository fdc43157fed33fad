"""The worker's workdir cache (worker/workdir_cache.py): one download a snapshot, checked
against its digest; a fresh copy for each attempt; the least recently used out first."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.artifacts.workdir_archive import pack
from gpufleet.errors import AgentError
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.workdir_cache import WorkdirCache


class Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), 1000):
            yield self.data[start : start + 1000]


class Orchestrator:
    """Serves snapshots by the job that names them, and counts the downloads."""

    def __init__(self) -> None:
        self.by_job: dict[str, bytes] = {}
        self.downloads: list[str] = []

    async def fetch_checkpoint(self, job_id: str, checkpoint_id: str, attempt_id: str) -> Any:
        raise NotImplementedError

    async def fetch_secrets(self, job_id: str, attempt_id: str) -> Any:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def download(self, url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
        job_id = url.split("/job/")[1].split("/")[0]
        self.downloads.append(job_id)
        yield Body(self.by_job[job_id])


def snapshot(tmp_path: Path, name: str, size: int = 100) -> tuple[str, bytes]:
    root = tmp_path / f"tree-{name}"
    root.mkdir()
    (root / "train.py").write_text(f"# {name}\n" + "x" * size)
    out = io.BytesIO()
    packed = pack(root, ["train.py"], out)
    return packed.sha256, out.getvalue()


async def put_in(
    cache: WorkdirCache, orchestrator: Orchestrator, job_id: str, digest: str, folder: Path
) -> None:
    await cache.put_in(
        folder,
        digest,
        downloads=orchestrator,
        job_id=job_id,
        attempt_id="a1",
        backoff=lambda: Backoff(0.001, 0.01),
    )


async def test_a_snapshot_is_downloaded_once_and_each_attempt_gets_its_own_copy(
    tmp_path: Path,
) -> None:
    orchestrator = Orchestrator()
    digest, body = snapshot(tmp_path, "a")
    orchestrator.by_job = {"j1": body, "j2": body}
    cache = WorkdirCache(tmp_path / "work", 10**6)
    await put_in(cache, orchestrator, "j1", digest, tmp_path / "job1")
    (tmp_path / "job1" / "train.py").write_text("scribbled")
    await put_in(cache, orchestrator, "j2", digest, tmp_path / "job2")
    assert orchestrator.downloads == ["j1"]
    assert (tmp_path / "job2" / "train.py").read_text().startswith("# a\n")
    cached = tmp_path / "work" / "cache" / "workdirs" / f"{digest}.tar"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == digest


async def test_the_least_recently_used_snapshot_goes_first(tmp_path: Path) -> None:
    orchestrator = Orchestrator()
    snaps = {name: snapshot(tmp_path, name, 3000) for name in "abc"}
    orchestrator.by_job = {name: body for name, (_, body) in snaps.items()}
    size = len(snaps["a"][1])
    cache = WorkdirCache(tmp_path / "work", 2 * size)  # room for two
    folder = tmp_path / "work" / "cache" / "workdirs"
    for step, name in enumerate("ab"):  # long ago, a first
        await put_in(cache, orchestrator, name, snaps[name][0], tmp_path / f"j{step}")
        os.utime(folder / f"{snaps[name][0]}.tar", (1000 + step, 1000 + step))
    await put_in(cache, orchestrator, "a", snaps["a"][0], tmp_path / "j2")  # a is used again
    await put_in(cache, orchestrator, "c", snaps["c"][0], tmp_path / "j3")
    kept = sorted(p.stem for p in folder.glob("*.tar"))
    assert kept == sorted([snaps["a"][0], snaps["c"][0]])
    assert orchestrator.downloads == ["a", "b", "c"]


async def test_bytes_that_are_not_the_digest_are_not_kept_and_fail_the_attempt(
    tmp_path: Path,
) -> None:
    orchestrator = Orchestrator()
    digest, _ = snapshot(tmp_path, "a")
    _, other = snapshot(tmp_path, "b")
    orchestrator.by_job = {"j1": other}
    cache = WorkdirCache(tmp_path / "work", 10**6)
    with pytest.raises(AgentError, match="sha256"):
        await put_in(cache, orchestrator, "j1", digest, tmp_path / "job1")
    assert list((tmp_path / "work" / "cache" / "workdirs").iterdir()) == []
    assert not (tmp_path / "job1").exists()
