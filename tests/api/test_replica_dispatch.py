"""One dispatch pass for a job queued while a worker is freed (#39 goal 2): the freed
worker's, on whichever replica freed it; the replica that queued the job looks no more once
it committed. On PostgreSQL with a second replica; on SQLite, one process, the same rules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event

from tests.api.conftest import Fleet, both_databases, linked

CONFIG: dict[str, Any] = {"command": ["python", "train.py"]}


@contextlib.contextmanager
def commits(fleet: Fleet) -> Iterator[list[int]]:
    """The write transactions `fleet` commits meanwhile, counted (the reads commit none)."""
    count = [0]

    def committed(_conn: object) -> None:
        count[0] += 1

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "commit", committed)
    try:
        yield count
    finally:
        event.remove(engine, "commit", committed)


async def submit(fleet: Fleet) -> dict[str, Any]:
    answer = await fleet.admin.post("/api/queue/submit", json={"config": CONFIG})
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


@both_databases
async def test_a_job_queued_behind_a_busy_worker_is_dispatched_by_the_freed_workers_pass_alone(
    fleet: Fleet, replica: Fleet
) -> None:
    agent = await replica.online_worker("gpu-a")  # streams from and reports to the replica
    async with linked(fleet, replica):
        first = await submit(fleet)
        offer = await agent.next_offer()
        assert offer["job_id"] == first["id"]
        await agent.run(offer)
        with commits(fleet) as submitted:
            waiting = await submit(fleet)
        assert waiting["status"] == "queued"
        # The submit's own transaction, and no pass of its own after it (before: a second
        # transaction that looked for an idle worker again, and found the one it knew busy).
        assert submitted == [1]
        await agent.finish(offer)
        again = await agent.next_offer()  # the freed worker's pass, on the replica
        assert again["job_id"] == waiting["id"]


@both_databases
async def test_a_job_submitted_on_one_replica_as_a_worker_is_freed_on_another_never_waits(
    fleet: Fleet, replica: Fleet
) -> None:
    agent = await replica.online_worker("gpu-a")
    async with linked(fleet, replica):
        running = await submit(fleet)
        for _ in range(5):
            offer = await agent.next_offer()
            assert offer["job_id"] == running["id"]
            await agent.run(offer)
            # The job's look and the worker's release race: whichever commits second sees
            # the other (the dispatch turn), so once both answered the job is offered.
            running, _ = await asyncio.gather(submit(fleet), agent.finish(offer))
            shown = await fleet.job(running["id"])
            assert shown["status"] == "offered", shown
