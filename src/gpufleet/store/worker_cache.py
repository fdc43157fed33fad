"""The worker each live token names, kept between requests (SQLite: one process writes).

Every request a worker makes (heartbeats, reports, its stream) is first the read of its
token's row joined to its worker's: at 10,000 workers, most of what the orchestrator does at
rest. On SQLite one process owns the database (the store's lock file), so every write to a
worker or a token passes through this process's queries, which note the workers they
change; the store evicts them when the transaction commits. What the cache may hold stale is
only what the heartbeat path itself keeps newer in memory: the last heartbeat and the last
GPU sample (`touch_workers`, `record_gpu_stats` do not evict). On PostgreSQL another replica
can change a worker at any moment, so there is no cache there: each request reads.

A read that started before an eviction is not stored (`generation`): it may have read the
row as it was before that write.

An evicted token is not forgotten, nor one whose read an eviction overtook (a fleet's
registering writes all the time): it waits (`stale`) for the next `refresh`, which reads
every stale token's worker again in one statement (`Store.refresh_workers`, a loop of its
own). A worker's register and the opening of its stream each write it, so without it every
worker's first heartbeat after connecting read its token's row on its own (#39 goal 3: a
quarter of the server's CPU at rest in the first minutes of a fleet). The batch reads with
the same query as a request (a live token's row), so a revoked or deleted token is simply
not found again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from gpufleet.domain.records import Worker

Found = tuple[str, Worker]  # the token's stored hash, and its worker


class WorkerCache:
    def __init__(self, size: int = 100_000) -> None:
        self._size = size
        self._found: OrderedDict[str, Found] = OrderedDict()  # token hash → what was read
        self._hashes: dict[str, set[str]] = {}  # worker id → its token hashes held here
        self.generation = 0  # moves on every eviction
        self._stale: dict[str, None] = {}  # the token hashes evicted since `refresh`, in order

    def __len__(self) -> int:
        return len(self._found)

    async def through(
        self, token_hash: str, read: Callable[[], Awaitable[Found | None]]
    ) -> Found | None:
        """What the token names: as kept, or `read` and kept, unless a write evicted anything
        while it read (it may have read the row as it was before that write)."""
        found = self._found.get(token_hash)
        if found is not None:
            return found
        generation = self.generation
        found = await read()
        if found is not None:
            if generation == self.generation:
                self._keep(token_hash, found)
            elif len(self._stale) < self._size:  # the next `refresh` reads it again
                self._stale[token_hash] = None
        return found

    def evict(self, worker_ids: Iterable[str]) -> None:
        """These workers (or their tokens) changed: their next request, or the next
        `refresh`, reads again."""
        self.generation += 1
        for worker_id in worker_ids:
            for token_hash in self._hashes.pop(worker_id, ()):
                self._found.pop(token_hash, None)
                if len(self._stale) < self._size:
                    self._stale[token_hash] = None

    @property
    def stale(self) -> int:
        """How many evicted tokens wait for the next `refresh`."""
        return len(self._stale)

    async def refresh(
        self, read: Callable[[list[str]], Awaitable[Iterable[Found]]], batch: int = 500
    ) -> int:
        """Read the stale tokens' workers again, `batch` tokens a statement, and keep what
        was found, unless a write evicted anything while it read (those wait for the next
        pass). Returns how many were kept."""
        kept = 0
        while self._stale:
            hashes = list(self._stale)[:batch]
            for token_hash in hashes:
                del self._stale[token_hash]
            generation = self.generation
            found = list(await read(hashes))
            if generation != self.generation:
                for token_hash in hashes:  # may be the rows as they were before that write
                    self._stale.setdefault(token_hash, None)
                return kept
            for token_hash, worker in found:
                if token_hash not in self._found:  # a request may have read it meanwhile
                    self._keep(token_hash, (token_hash, worker))
                    kept += 1
        return kept

    def _keep(self, token_hash: str, found: Found) -> None:
        if len(self._found) >= self._size:
            old_hash, (_, old) = self._found.popitem(last=False)
            self._forget(old.id, old_hash)
        self._found[token_hash] = found
        self._hashes.setdefault(found[1].id, set()).add(token_hash)
        self._stale.pop(token_hash, None)

    def _forget(self, worker_id: str, token_hash: str) -> None:
        hashes = self._hashes.get(worker_id)
        if hashes is not None:
            hashes.discard(token_hash)
            if not hashes:
                del self._hashes[worker_id]
