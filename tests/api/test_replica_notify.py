"""Replicas on one PostgreSQL database NOTIFY each other only the topics the other waits on
(#39, server/interest.py): a transaction whose topics no other replica's stream waits on
sends no NOTIFY, and a stream opened on one replica still hears every change made on the
other, the first one included (whatever the other had chosen before it heard)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.api.conftest import EventStream, Fleet, linked, postgres_only
from tests.api.test_job_cost import counting
from tests.waiting import wait_until_async


@contextmanager
def notifies(fleet: Fleet) -> Iterator[list[str]]:
    """The NOTIFY statements `fleet`'s transactions ran meanwhile (read once the block ends)."""
    sent: list[str] = []
    with counting(fleet) as seen:
        yield sent
    sent.extend(statement for statement in seen if "pg_notify" in statement)


async def knows(fleet: Fleet, other: Fleet) -> None:
    await wait_until_async(
        lambda: fleet.ctx.replicas.interest.heard_from(other.ctx.instance_id),
        timeout=5,
        message="the replica heard what the other waits on",
    )


async def nudged(stream: EventStream, topic: str) -> None:
    """The live view's next nudge for `topic`, skipping the others' (a replica's answer
    wakes every topic of the classes it announced)."""
    while (event := await stream.next()) is not None:
        if event["type"] == topic:
            return
    raise AssertionError(f"the stream ended before a {topic!r} nudge")


@postgres_only
async def test_a_replica_notifies_only_what_another_replicas_streams_wait_on(
    fleet: Fleet, replica: Fleet
) -> None:
    headers = {"Authorization": f"Bearer {fleet.admin_key}"}
    async with linked(fleet, replica):
        nudges = await replica.open_sse("/api/events", "", headers)
        assert (await nudges.expect("hello"))["type"] == "hello"
        await knows(fleet, replica)
        await knows(replica, fleet)
        # The first change, made as the replica's interest may still be on its way: heard.
        await fleet.submit()
        await nudged(nudges, "jobs")
        with notifies(fleet) as sent:
            await fleet.submit()
        assert len(sent) == 1  # the replica's live view waits on `jobs`
        await nudged(nudges, "jobs")
        # Nothing on the first replica waits on anything: the replica's own writes are
        # its own business.
        with notifies(replica) as sent:
            await replica.submit()
        assert sent == []
        await nudged(nudges, "jobs")  # its own hub, as ever


@postgres_only
async def test_a_stream_opened_after_the_link_hears_the_other_replicas_first_change(
    fleet: Fleet, replica: Fleet
) -> None:
    """Each time: a new class of topic on the replica, and the change on the other replica
    at once, before it could have heard of it."""
    async with linked(fleet, replica):
        await knows(fleet, replica)
        agent = await fleet.online_worker("gpu-a")
        job = await fleet.submit()
        offer = await agent.next_offer()
        await agent.run(offer)
        headers = {"Authorization": f"Bearer {fleet.admin_key}"}
        follow = await replica.open_sse(f"/api/queue/{job['id']}/logs", "follow=true", headers)
        answer = await agent.logs(job["id"], [{"stream": "stdout", "text": "step 1"}])
        assert answer.status_code == 200, answer.text
        line = await follow.next()
        assert line is not None and line["text"] == "step 1"
        await agent.finish(offer)
        assert (await follow.expect("end"))["status"] == "completed"
