"""A gang's start reports applied together (#35, services/batches.py): on PostgreSQL the
reports waiting on one job's lock share a transaction; each still gets its own answer, and
a refused one undoes only its own writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gpufleet.domain.states import JobStatus
from gpufleet.errors import Conflict
from gpufleet.server.context import Tx
from gpufleet.server.services import batches
from gpufleet.server.services.node_reports import NodeReport, report_node
from gpufleet.server.services.reports import StatusReport
from tests.api.conftest import Fleet, both_databases
from tests.api.test_gang_rendezvous import ack, expect, gang, node_report
from tests.api.test_job_cost import counting

pytestmark = both_databases

postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


async def test_concurrent_start_reports_each_get_their_answer(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 4)
    # Every node acknowledges at once, and node 1 also claims rank 2: refused alone.
    answers = await asyncio.gather(
        *(ack(a, o) for a, o in zip(agents, offers, strict=True)),
        node_report(agents[1], offers[2], "acknowledged"),
    )
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 403]
    assert "rank" in answers[-1].text
    starts = [await expect(a, "job_start") for a in agents]
    assert [s["node_rank"] for s in starts] == [0, 1, 2, 3]

    answers = await asyncio.gather(
        *(node_report(a, o, "running") for a, o in zip(agents, offers, strict=True)),
        node_report(agents[3], offers[0], "running"),
    )
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 403]
    assert "running" in {a.json()["job_status"] for a in answers[:4]}
    assert (await fleet.job(job["id"]))["status"] == "running"


@postgres_only
async def test_reports_queued_behind_one_share_a_transaction_and_a_refused_one_is_undone(
    fleet: Fleet,
) -> None:
    one = await fleet.submit(config={"command": ["x"]})
    two = await fleet.submit(config={"command": ["y"]})
    ctx = fleet.ctx
    began, release = asyncio.Event(), asyncio.Event()
    seen: list[Tx] = []

    async def blocking(tx: Tx) -> str:
        seen.append(tx)
        began.set()
        await release.wait()
        return "first"

    async def refused(tx: Tx) -> str:
        seen.append(tx)
        await tx.q.update_job(one["id"], progress={"step": 5})
        tx.audit("job.test_refused", "test", one["id"])
        tx.wake("refused-topic")
        raise Conflict("refused")

    async def taken(tx: Tx) -> str:
        seen.append(tx)
        await tx.q.update_job(two["id"], progress={"step": 7})
        tx.audit("job.test_taken", "test", two["id"])
        return "taken"

    workers = [(await fleet.create_worker(f"w{n}")).id for n in range(3)]
    head = asyncio.create_task(batches.together(ctx, "job", workers[0], blocking))
    await began.wait()
    queued = [
        asyncio.create_task(batches.together(ctx, "job", workers[1], refused)),
        asyncio.create_task(batches.together(ctx, "job", workers[2], taken)),
    ]
    await asyncio.sleep(0)  # both join the queue behind the running transaction
    release.set()
    assert await head == "first"
    with pytest.raises(Conflict, match="refused"):
        await queued[0]
    assert await queued[1] == "taken"

    # The queued two shared a transaction (the second pass, with a savepoint each, after
    # the refusal undid the first): the refused one's writes and notices went alone.
    assert seen[0] is not seen[-1] and seen[-2] is seen[-1]
    assert "refused-topic" not in seen[-1].notify
    assert (await fleet.job(one["id"])).get("progress") is None
    assert (await fleet.job(two["id"]))["progress"] == {"step": 7}
    kinds = {e["event_type"] for e in await fleet.audit()}
    assert "job.test_taken" in kinds and "job.test_refused" not in kinds


@postgres_only
async def test_reports_queued_behind_one_are_applied_in_one_transaction(fleet: Fleet) -> None:
    ctx = fleet.ctx
    began, release = asyncio.Event(), asyncio.Event()
    seen: list[Tx] = []

    async def blocking(tx: Tx) -> int:
        seen.append(tx)
        began.set()
        await release.wait()
        return 0

    def queued(n: int) -> Callable[[Tx], Awaitable[int]]:
        async def apply(tx: Tx) -> int:
            seen.append(tx)
            return n

        return apply

    workers = [(await fleet.create_worker(f"w{n}")).id for n in range(4)]
    head = asyncio.create_task(batches.together(ctx, "job", workers[0], blocking))
    await began.wait()
    rest = [
        asyncio.create_task(batches.together(ctx, "job", w, queued(n)))
        for n, w in enumerate(workers[1:], 1)
    ]
    await asyncio.sleep(0)
    release.set()
    assert [await head, *[await t for t in rest]] == [0, 1, 2, 3]
    assert len(seen) == 4 and seen[1] is seen[2] is seen[3] is not seen[0]


@postgres_only
async def test_a_batch_takes_its_workers_as_locked_and_writes_its_nodes_in_one_statement(
    fleet: Fleet,
) -> None:
    """A batch locks its reporters' workers in one statement, and each report takes its row
    from there; the nodes' rows its reports wrote alone go in one statement, not one a
    report (#35: 2 round trips a report less)."""
    job, agents, offers = await gang(fleet, 4)
    ctx = fleet.ctx
    async with ctx.store.read() as q:
        workers = [await q.get_worker(a.id) for a in agents]
    began, release = asyncio.Event(), asyncio.Event()

    async def blocking(_tx: Tx) -> None:
        began.set()
        await release.wait()

    head = asyncio.create_task(batches.together(ctx, job["id"], agents[0].id, blocking))
    await began.wait()
    acks = []
    for worker, offer in zip(workers[1:], offers[1:], strict=True):  # all but rank 0
        assert worker is not None
        report = StatusReport("acknowledged", offer["attempt_id"], None, None, None)
        node = NodeReport(report, offer["node_rank"], address="10.0.0.9")
        acks.append(asyncio.create_task(report_node(ctx, worker, job["id"], node, None)))
    await asyncio.sleep(0)  # each joins the queue behind the running transaction
    with counting(fleet) as seen:
        release.set()
        await head
        assert [await a for a in acks] == [JobStatus.OFFERED] * 3

    single_locked_reads = [s for s in seen if "FROM workers" in s and "FOR UPDATE" in s]
    node_writes = [s for s in seen if s.startswith("UPDATE attempt_nodes")]
    assert len(single_locked_reads) == 1, single_locked_reads  # the batch's lock, no other
    assert len(node_writes) == 1, node_writes
    assert (await ack(agents[0], offers[0])).status_code == 200  # the last: all start
    starts = [await expect(a, "job_start") for a in agents]
    assert starts[0]["node_addrs"][1:] == ["10.0.0.9"] * 3


@postgres_only
async def test_completions_besides_rank_0_are_applied_together_after_the_batchs_own_writes(
    fleet: Fleet,
) -> None:
    """The nodes' completions besides rank 0's wait on the job's lock as the start reports
    do, and are applied together with them; a node's end is written after its `running`
    in the same batch, never undone by it."""
    job, agents, offers = await gang(fleet, 4)
    for agent, offer in zip(agents, offers, strict=True):
        assert (await ack(agent, offer)).status_code == 200
    for agent in agents:
        await expect(agent, "job_start")
    ctx = fleet.ctx
    async with ctx.store.read() as q:
        workers = [await q.get_worker(a.id) for a in agents]
    began, release = asyncio.Event(), asyncio.Event()

    async def blocking(_tx: Tx) -> None:
        began.set()
        await release.wait()

    def report(rank: int, status: str) -> asyncio.Task[JobStatus]:
        worker = workers[rank]
        assert worker is not None
        sent = StatusReport(status, offers[rank]["attempt_id"], None, None, None)
        node = NodeReport(sent, rank)
        return asyncio.create_task(report_node(ctx, worker, job["id"], node, None))

    head = asyncio.create_task(batches.together(ctx, job["id"], agents[0].id, blocking))
    await began.wait()
    queued = [report(3, "running"), report(3, "completed"), report(2, "running")]
    queued.append(report(2, "completed"))
    await asyncio.sleep(0)
    with counting(fleet) as seen:
        release.set()
        await head
        assert [await t for t in queued] == [JobStatus.OFFERED] * 4  # rank 0, 1 not running
    batch = [s for s in seen if "FROM workers" in s and "FOR UPDATE" in s and "ORDER BY" in s]
    assert len(batch) == 1, batch  # one batch: its reporters' workers in one statement
    async with ctx.store.read() as q:
        nodes = await q.attempt_nodes(offers[0]["attempt_id"])
        freed = [await q.get_worker(a.id) for a in agents[2:]]
    assert [n.state.value for n in nodes][2:] == ["ended", "ended"]
    assert all(w is not None and w.current_attempt_id is None for w in freed)
