"""The per-process listings of workdir snapshots (server/memory.py `WorkdirListings`):
bounded by entries, least recently used out first, the newest always kept."""

from __future__ import annotations

from gpufleet.artifacts.workdir_listing import Kind, Listed
from gpufleet.server.memory import WorkdirListings


def entries(n: int) -> list[Listed]:
    return [Listed(f"f{i}", 1, Kind.FILE, 512 * i) for i in range(n)]


def test_listings_are_bounded_by_entries_and_the_least_recently_used_go_first() -> None:
    kept = WorkdirListings(most=10)
    kept.keep("a", entries(4))
    kept.keep("b", entries(4))
    assert kept.get("a") is not None  # a is now the most recently used
    kept.keep("c", entries(4))  # 12 > 10: b, the least recently used, goes
    assert kept.get("b") is None
    assert kept.get("a") is not None and kept.get("c") is not None
    kept.keep("huge", entries(50))  # over the bound alone: kept, everything else out
    assert kept.get("huge") is not None
    assert kept.get("a") is None and kept.get("c") is None
    kept.keep("huge", entries(3))  # kept again: counted once
    kept.keep("d", entries(7))
    assert kept.get("huge") is not None and kept.get("d") is not None
