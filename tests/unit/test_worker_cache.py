"""The worker cache's refresh (store/worker_cache.py): what an eviction dropped is read again
in batches, never kept from a read a write overtook."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from gpufleet.domain.records import Worker
from gpufleet.store.worker_cache import Found, WorkerCache


def found(token_hash: str, worker_id: str) -> Found:
    return token_hash, cast(Worker, SimpleNamespace(id=worker_id))


async def kept(cache: WorkerCache, token_hash: str) -> Found | None:
    async def unread() -> Found | None:
        return None

    return await cache.through(token_hash, unread)


async def test_an_evicted_token_is_kept_again_by_the_refresh_in_batches() -> None:
    cache = WorkerCache()
    for i in range(5):
        cache._keep(f"h{i}", found(f"h{i}", f"w{i}"))
    cache.evict([f"w{i}" for i in range(5)])
    asked: list[list[str]] = []

    async def read(hashes: list[str]) -> list[Found]:
        asked.append(hashes)
        return [found(h, f"w{h[1:]}") for h in hashes if h != "h3"]  # h3: revoked since

    assert await cache.refresh(read, batch=2) == 4
    assert asked == [["h0", "h1"], ["h2", "h3"], ["h4"]]
    assert cache.stale == 0
    assert await kept(cache, "h0") is not None
    assert await kept(cache, "h3") is None


async def test_a_refresh_overtaken_by_a_write_keeps_nothing_and_tries_again() -> None:
    cache = WorkerCache()
    cache._keep("h0", found("h0", "w0"))
    cache.evict(["w0"])

    async def read_while_written(hashes: list[str]) -> list[Found]:
        cache.evict(["other"])  # a write commits while the batch reads
        return [found(h, "w0") for h in hashes]

    assert await cache.refresh(read_while_written) == 0
    assert await kept(cache, "h0") is None
    assert cache.stale == 1

    async def read(hashes: list[str]) -> list[Any]:
        return [found(h, "w0") for h in hashes]

    assert await cache.refresh(read) == 1
    assert await kept(cache, "h0") is not None


async def test_a_request_read_overtaken_by_a_write_waits_for_the_refresh() -> None:
    """A fleet registering writes all the time: a token read while another worker's write
    committed is not kept, but the refresh reads it again."""
    cache = WorkerCache()

    async def read_while_written() -> Found | None:
        cache.evict(["other"])
        return found("h0", "w0")

    assert await cache.through("h0", read_while_written) is not None
    assert await kept(cache, "h0") is None
    assert cache.stale == 1

    async def read(hashes: list[str]) -> list[Found]:
        return [found(h, "w0") for h in hashes]

    assert await cache.refresh(read) == 1
    assert await kept(cache, "h0") is not None
