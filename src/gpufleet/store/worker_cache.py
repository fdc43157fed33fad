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
        if found is not None and generation == self.generation:
            self._keep(token_hash, found)
        return found

    def evict(self, worker_ids: Iterable[str]) -> None:
        """These workers (or their tokens) changed: their next request reads again."""
        self.generation += 1
        for worker_id in worker_ids:
            for token_hash in self._hashes.pop(worker_id, ()):
                self._found.pop(token_hash, None)

    def _keep(self, token_hash: str, found: Found) -> None:
        if len(self._found) >= self._size:
            old_hash, (_, old) = self._found.popitem(last=False)
            self._forget(old.id, old_hash)
        self._found[token_hash] = found
        self._hashes.setdefault(found[1].id, set()).add(token_hash)

    def _forget(self, worker_id: str, token_hash: str) -> None:
        hashes = self._hashes.get(worker_id)
        if hashes is not None:
            hashes.discard(token_hash)
            if not hashes:
                del self._hashes[worker_id]
