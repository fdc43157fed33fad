"""The one supervisor of the orchestrator's and the worker's background loops."""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.errors import ConfigurationError, LoopDied
from gpufleet.supervisor import Supervisor


async def sleeps() -> None:
    await asyncio.sleep(60)


async def test_a_background_loop_that_dies_stops_the_supervisor_loudly():
    supervisor = Supervisor()

    async def broken() -> None:
        raise RuntimeError("bug in a loop")

    supervisor.spawn("steady", sleeps(), forever=True)
    supervisor.spawn("broken", broken())

    with pytest.raises(LoopDied, match="bug in a loop"):
        await asyncio.wait_for(supervisor.run(), 5)


async def test_a_forever_loop_that_returns_counts_as_dead():
    supervisor = Supervisor()

    async def quits() -> None:
        return None

    supervisor.spawn("heartbeat", quits(), forever=True)

    with pytest.raises(LoopDied, match="heartbeat"):
        await asyncio.wait_for(supervisor.run(), 5)


async def test_a_loop_that_finishes_its_work_is_not_a_death():
    supervisor = Supervisor()

    async def once() -> None:
        return None

    await supervisor.spawn("once", once())
    assert not supervisor.stopping
    supervisor.stop()
    await asyncio.wait_for(supervisor.run(), 5)


async def test_a_death_is_reported_to_the_owner_by_name():
    deaths: list[tuple[str, BaseException]] = []
    supervisor = Supervisor(lambda name, exc: deaths.append((name, exc)))

    async def broken() -> None:
        raise RuntimeError("bug in a sweep")

    await asyncio.wait([supervisor.spawn("health", broken())])

    assert [(name, str(exc)) for name, exc in deaths] == [("health", "bug in a sweep")]
    assert supervisor.stopping
    await supervisor.close()


async def test_a_gpufleet_error_is_raised_as_it_is():
    supervisor = Supervisor()

    async def misconfigured() -> None:
        raise ConfigurationError("set --port")

    supervisor.spawn("local-runner", misconfigured(), forever=True)

    with pytest.raises(ConfigurationError, match="set --port"):
        await asyncio.wait_for(supervisor.run(), 5)


async def test_close_cancels_every_task():
    supervisor = Supervisor()
    tasks = [supervisor.spawn(name, sleeps(), forever=True) for name in ("a", "b", "c")]
    assert supervisor.names == ["a", "b", "c"]

    await supervisor.close()

    assert all(task.cancelled() for task in tasks)
    assert supervisor.names == []


async def test_stop_ends_run_and_cancels_every_task():
    supervisor = Supervisor()
    task = supervisor.spawn("heartbeat", sleeps(), forever=True)

    supervisor.stop()
    await asyncio.wait_for(supervisor.run(), 5)

    assert task.cancelled()


async def test_nothing_starts_once_the_supervisor_stops():
    supervisor = Supervisor()
    await supervisor.close()
    coro = sleeps()

    with pytest.raises(LoopDied, match="cannot start late"):
        supervisor.spawn("late", coro)
    assert coro.cr_frame is None  # closed, so no "never awaited" warning


async def test_a_sweep_that_fails_is_retried_and_the_loop_lives():
    supervisor = Supervisor()
    calls: list[int] = []
    third = asyncio.Event()

    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise RuntimeError("one bad sweep")

    supervisor.every("health", 0.01, flaky)
    await asyncio.wait_for(third.wait(), 5)

    assert not supervisor.stopping
    await supervisor.close()
