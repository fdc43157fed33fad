"""What one server process keeps in memory beside the database: the Context's named parts.

Each part holds one purpose's state and the only code that touches it. None of it is shared
between replicas: the database (and `bus.Replicas`) is what they share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from gpufleet.artifacts.workdir_listing import Listed
from gpufleet.domain import audit_chain

T = TypeVar("T")

GpuSample = tuple[datetime, list[dict[str, Any]]]  # when, the GpuStat dicts


class Beat(NamedTuple):
    """A heartbeat kept to write: when, and the issue time of the token it came with (written
    only while that token is still the worker's: one sent with the old token while a rotation
    committed is no sign that the worker holds the new one)."""

    at: datetime
    token_issued_at: datetime | None


class Heartbeats:
    """Heartbeats that changed nothing but the time, and the GPU samples they carried, by
    worker, until the next flush writes them in one statement (agents.flush_heartbeats)."""

    __slots__ = ("beats", "samples")

    def __init__(self) -> None:
        self.beats: dict[str, Beat] = {}
        self.samples: dict[str, GpuSample] = {}

    def heard(
        self,
        worker_id: str,
        at: datetime,
        gpu_stats: list[dict[str, Any]] | None = None,
        *,
        token_issued_at: datetime | None,
    ) -> None:
        """Keep the worker's heartbeat (and its GPU sample, if it carried one) to write."""
        self.beats[worker_id] = Beat(at, token_issued_at)
        if gpu_stats is not None:
            self.samples[worker_id] = (at, gpu_stats)

    def take(self) -> tuple[dict[str, Beat], dict[str, GpuSample]]:
        """Everything kept so far, to write now; the part starts over empty."""
        taken = self.beats, self.samples
        self.beats, self.samples = {}, {}
        return taken

    def put_back(self, beats: dict[str, Beat], samples: dict[str, GpuSample]) -> None:
        """A flush that failed: keep what it took for the next one, unless newer came."""
        for worker_id, at in beats.items():
            self.beats.setdefault(worker_id, at)
        for worker_id, sample in samples.items():
            self.samples.setdefault(worker_id, sample)


class AuditHead:
    """The newest audit chain entry this process sealed, recorded outside the database by
    audit.record_head; `cut` once the chain was found cut back below the record."""

    __slots__ = ("cut", "newest")

    def __init__(self) -> None:
        self.newest: audit_chain.Head | None = None
        self.cut = False

    def sealed(self, head: audit_chain.Head) -> None:
        """A commit sealed entries up to `head` (commits may be seen out of order)."""
        if self.newest is None or head.seq > self.newest.seq:
            self.newest = head

    def found_cut(self) -> bool:
        """Note that the chain was cut; True the first time (to say so once)."""
        first, self.cut = not self.cut, True
        return first


class StreamCalls:
    """The worker streams' database calls still running (streams.WorkerStream), which
    shutdown lets finish before the database goes."""

    __slots__ = ("_running",)

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def start(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `coro` as a task of its own, kept until it is done."""
        task = asyncio.create_task(coro)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def finish(self, within: float) -> None:
        """Wait (at most `within` seconds) for the calls still running."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=within)


class LimitHolds:
    """Whether a dispatch of this process passed over a job because a limit held it, since
    the last full pass that found none held: only then can a job that ends free room that
    another idle worker should look at (dispatch.dispatch_worker)."""

    __slots__ = ("since_full_pass",)

    def __init__(self) -> None:
        self.since_full_pass = False

    def held(self) -> None:
        """A dispatch passed over a job a limit held."""
        self.since_full_pass = True

    def full_pass(self) -> None:
        """A full pass begins: it looks at every idle worker, so nothing is owed before it."""
        self.since_full_pass = False


class DigestLocks:
    """One lock a workdir digest being stored by this process (services/workdirs.py): two
    uploads of the same snapshot at once store it once; the second finds it stored."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # digest → its lock, users

    @contextlib.asynccontextmanager
    async def hold(self, digest: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(digest, (asyncio.Lock(), 0))
        self._locks[digest] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[digest]
            if users == 1:
                del self._locks[digest]  # nobody else waits: forget it
            else:
                self._locks[digest] = (lock, users - 1)


class WorkdirListings:
    """The entries of the snapshots listed here lately (services/workdir_files.py), by digest:
    a snapshot never changes, so a listing read once stays true. Bounded by entries, not
    snapshots (one may hold 500,000): the least recently used go first, the newest stays."""

    __slots__ = ("_held", "_kept", "_most")

    def __init__(self, most: int = 100_000) -> None:
        self._kept: dict[str, list[Listed]] = {}
        self._most = most
        self._held = 0

    def get(self, digest: str) -> list[Listed] | None:
        found = self._kept.pop(digest, None)
        if found is not None:
            self._kept[digest] = found  # the most recently used goes last
        return found

    def keep(self, digest: str, entries: list[Listed]) -> None:
        self._held -= len(self._kept.pop(digest, []))
        self._kept[digest] = entries
        self._held += len(entries)
        while self._held > self._most and len(self._kept) > 1:
            self._held -= len(self._kept.pop(next(iter(self._kept))))


class Batches:
    """Work waiting to be applied together, one queue a key (services/batches.py): the
    reports of one gang's start, taken in one transaction instead of one each (#35)."""

    __slots__ = ("_draining", "_pending")

    def __init__(self) -> None:
        self._pending: dict[str, list[Any]] = {}
        # key → the task applying its batches; None: the caller that came first does
        self._draining: dict[str, asyncio.Task[None] | None] = {}

    def join(self, key: str, item: Any) -> bool:
        """Queue `item` under `key`. True: nothing drains the key, and the caller is to apply
        the batch (`take`, then `hand_on`); False: the one draining takes the item with its
        next batch."""
        self._pending.setdefault(key, []).append(item)
        if key in self._draining:
            return False
        self._draining[key] = None
        return True

    def hand_on(self, key: str, drain: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """The caller applied its batch: what queued meanwhile goes to `drain`, a task kept
        until done; nothing: the key is free."""
        if not self._pending.get(key):
            self._draining.pop(key, None)
            return
        task = asyncio.create_task(drain())
        self._draining[key] = task
        task.add_done_callback(lambda t: self._ended(key, t))

    def take(self, key: str) -> list[Any]:
        """The items queued under `key` since the last take, in order."""
        return self._pending.pop(key, [])

    def drained(self, key: str) -> list[Any]:
        """`take` for the draining task; none: the key is free (no await between this and
        the task's end, so a later join applies its own)."""
        batch = self.take(key)
        if not batch:
            self._draining.pop(key, None)
        return batch

    def _ended(self, key: str, task: asyncio.Task[None]) -> None:
        if self._draining.get(key) is task:  # it ended without taking an empty batch
            self._draining.pop(key)
