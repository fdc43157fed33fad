"""The Context's per-process parts (server/memory.py) keep their promises on their own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from gpufleet.domain import audit_chain
from gpufleet.server.memory import AuditHead, Beat, Heartbeats, LimitHolds, StreamCalls

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_heartbeats_are_taken_once_and_a_failed_flush_never_overwrites_a_newer_one() -> None:
    beats = Heartbeats()
    beats.heard("a", T0, [{"index": 0}], token_issued_at=None)
    beats.heard("b", T0, token_issued_at=T0)
    taken, samples = beats.take()
    assert taken == {"a": Beat(T0, None), "b": Beat(T0, T0)}
    assert samples == {"a": (T0, [{"index": 0}])}
    assert beats.take() == ({}, {})

    newer = T0 + timedelta(seconds=5)
    beats.heard("a", newer, token_issued_at=None)  # heard while the flush was writing
    beats.put_back(taken, samples)  # the flush failed
    assert beats.take() == (
        {"a": Beat(newer, None), "b": Beat(T0, T0)},
        {"a": (T0, [{"index": 0}])},
    )


def test_the_audit_head_only_moves_forward_and_a_cut_is_reported_once() -> None:
    head = AuditHead()
    later, earlier = audit_chain.Head(7, "m7"), audit_chain.Head(5, "m5")
    head.sealed(later)
    head.sealed(earlier)  # a commit seen out of order
    assert head.newest == later
    assert (head.found_cut(), head.found_cut(), head.cut) == (True, False, True)


def test_limit_holds_are_owed_from_a_held_job_until_the_next_full_pass() -> None:
    holds = LimitHolds()
    assert not holds.since_full_pass
    holds.held()
    assert holds.since_full_pass
    holds.full_pass()
    assert not holds.since_full_pass


async def test_stream_calls_are_awaited_at_finish_and_forgotten_once_done() -> None:
    calls = StreamCalls()
    gate = asyncio.Event()
    done: list[str] = []

    async def call() -> str:
        await gate.wait()
        done.append("call")
        return "result"

    task = calls.start(call())
    asyncio.get_running_loop().call_soon(gate.set)
    await calls.finish(within=5.0)
    assert done == ["call"] and task.result() == "result"
    assert not calls._running  # its done callback ran before the one that woke finish
