"""Upload an attempt's checkpoints while it trains, and commit each one once (docs/artifacts.md).

A checkpoint folder is found two ways: the job announces it (`gpufleet.progress.checkpoint`,
read from the progress file by `ProgressTail`), or it matches the config's `checkpoints` glob
and has stopped changing (the same files, sizes and mtimes at two polls in a row). Either
way its files are uploaded in the background, then the checkpoint is committed; a folder is
never committed twice, and the folder an attempt resumed from is never committed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.worker import keep
from gpufleet.worker.keep import KeepRules
from gpufleet.worker.relay import CheckpointNote, ProgressTail
from gpufleet.worker.uploads import FileDigest, Uploader

log = logging.getLogger(__name__)

Snapshot = tuple[tuple[str, int, int], ...]  # (path, size, mtime_ns) of each file
_TRAILING_NUMBER = re.compile(r"(\d+)$")


def snapshot(folder: Path, relative: str) -> Snapshot:
    """What a checkpoint folder holds now: its files' paths, sizes and mtimes."""
    entries = []
    for path in keep.folder_files(folder, relative):
        with contextlib.suppress(OSError):  # deleted while we looked: the next poll sees it
            stat = os.stat(folder / path)
            entries.append((path, stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


@dataclass
class StableFolders:
    """Which folders have stopped changing: seen the same, not empty, at two polls in a row.
    Each folder is reported once."""

    _last: dict[str, Snapshot] = field(default_factory=dict)
    _reported: set[str] = field(default_factory=set)

    def observe(self, snapshots: dict[str, Snapshot]) -> list[str]:
        stable = [
            path
            for path, now in sorted(snapshots.items())
            if now and path not in self._reported and self._last.get(path) == now
        ]
        self._reported.update(stable)
        self._last = dict(snapshots)
        return stable

    def forget(self, path: str) -> None:
        """Never report `path` (it was committed another way)."""
        self._reported.add(path)


def step_of(name: str) -> int | None:
    """The step a checkpoint's name ends in (`checkpoint-1200` → 1200), if any."""
    match = _TRAILING_NUMBER.search(name)
    return int(match.group(1)) if match and len(match.group(1)) < 19 else None


class CheckpointShipper:
    def __init__(
        self,
        folder: Path,
        rules: KeepRules,
        tail: ProgressTail,
        uploader: Uploader,
        interval: float,
    ) -> None:
        self._folder = folder
        self._rules = rules
        self._tail = tail
        self._uploader = uploader
        self._interval = interval
        self._stable = StableFolders()
        self.committed: set[str] = set()
        self.notes_done = 0  # announced checkpoints handled (committed, refused or skipped)
        self.commits = 0
        self._progress = asyncio.Condition()
        self._ending = asyncio.Event()
        self._ship_unsettled = False

    def skip(self, path: str) -> None:
        """Never commit `path` (the checkpoint this attempt resumed from)."""
        self.committed.add(path)
        self._stable.forget(path)

    async def run(self) -> None:
        """Ship checkpoints until `end` is called; then ship what is left and return. A
        `Fenced` upload ends it (raised)."""
        while True:
            ending = self._ending.is_set()
            await self._round(final=ending)
            if ending:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._ending.wait()

    def end(self, *, completed: bool) -> None:
        """The process is over: one last look, then `run` returns. A process that completed
        wrote its last checkpoint whole, so what matches the glob is shipped even if it
        changed at the last poll; after a failure or a stop only settled folders are."""
        self._ship_unsettled = completed
        self._ending.set()

    async def wait_for_note(self, count: int) -> None:
        """Wait until `count` announced checkpoints were handled (committed or given up)."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.notes_done >= count)

    async def _round(self, *, final: bool) -> None:
        self._tail.poll()
        for note in self._tail.take_checkpoints():
            try:
                await self._announced(note)
            finally:
                async with self._progress:
                    self.notes_done += 1
                    self._progress.notify_all()
        snapshots = await asyncio.to_thread(self._scan)  # a walk: off the event loop
        settled = self._stable.observe(snapshots)
        if final and self._ship_unsettled:
            settled = [path for path, files in snapshots.items() if files]
        for path in settled:
            await self._ship(path, step_of(Path(path).name))

    def _scan(self) -> dict[str, Snapshot]:
        found = keep.checkpoint_folders(self._folder, self._rules)
        return {path: snapshot(self._folder, path) for path in found if path not in self.committed}

    async def _announced(self, note: CheckpointNote) -> None:
        relative = keep.inside(self._folder, note.path)
        if relative is None or not await asyncio.to_thread((self._folder / relative).is_dir):
            log.warning(
                "ignoring checkpoint %r: not a folder inside the job folder %s",
                note.path[:200],
                self._folder,
            )
            return
        self._stable.forget(relative)
        step = note.step if note.step is not None else step_of(Path(relative).name)
        await self._ship(relative, step)

    async def _ship(self, path: str, step: int | None) -> None:
        if path in self.committed:
            return
        self.committed.add(path)
        name = Path(path).name
        files: list[FileDigest] = []
        for file in await asyncio.to_thread(keep.folder_files, self._folder, path):
            stored = await self._uploader.upload(file, kind="checkpoint", checkpoint=name)
            if stored is None:
                log.error("checkpoint %s is not committed: %s was not stored", path, file)
                return
            files.append(stored)
        if not files:
            log.warning("checkpoint %s holds no file: not committed", path)
            return
        if await self._uploader.commit_checkpoint(name, path, step, files):
            self.commits += 1
