"""In-process wake-ups: what a stream waits on, and how shutdown ends every stream."""

from __future__ import annotations

import asyncio

from gpufleet.server.hub import Hub


async def test_closing_the_hub_wakes_and_closes_every_subscription() -> None:
    hub = Hub()
    worker, nudges = hub.subscribe("worker:w_1"), hub.subscribe("jobs", "workers")
    waiting = asyncio.gather(worker.wait(60), nudges.wait(60))

    hub.close_all()

    assert await asyncio.wait_for(waiting, 1) == [True, True]
    assert worker.closed and nudges.closed


async def test_a_subscription_made_after_the_hub_closed_is_closed_at_once() -> None:
    hub = Hub()
    hub.close_all()

    late = hub.subscribe("job:j_1")

    assert late.closed
    assert await late.wait(0) is True


def test_closing_one_topic_leaves_the_others_open() -> None:
    hub = Hub()
    one, other = hub.subscribe("worker:w_1"), hub.subscribe("worker:w_2")

    hub.close("worker:w_1")

    assert one.closed and not other.closed
    assert not hub.subscribe("worker:w_3").closed
