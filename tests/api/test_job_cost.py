"""What a job costs the orchestrator in statements: each request of a job's lifecycle
(submit, then the worker's acknowledged, running and completed) and a heartbeat, counted at
the database driver. #19 made these fewer; a change that adds one to the hot path shows
here, where a benchmark would only drift."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from tests.api.conftest import Agent, Fleet, both_databases

pytestmark = both_databases

# The most each request may send. PostgreSQL adds the NOTIFY that tells the other replicas
# and the audit chain's lock (its row locks are clauses, not statements), and reads a
# worker's token on every request: on SQLite one process makes every write, and keeps what a
# token names between requests (store/worker_cache.py) and the webhooks a job's end asks for
# (store/webhook_cache.py). #39 took these down from 12/5/8/11 (SQLite) and 14/5/11/14
# (PostgreSQL): the chain's head read by the audit INSERT itself, a report's job and attempt
# read together, a submit's user and teams read together, and SQLite's kept webhooks.
BUDGET = {
    # The worker changed (the claim made it busy, the end freed it): the next request of
    # its token reads it again (acknowledged; the first heartbeat), the others do not.
    "sqlite": {
        "submit": 10,
        "acknowledged": 4,
        "running": 6,
        "completed": 8,
        "heartbeat": 1,
        "heartbeat at rest": 0,
    },
    "postgresql": {
        "submit": 12,
        "acknowledged": 4,
        "running": 9,
        "completed": 12,
        "heartbeat": 1,
        "heartbeat at rest": 1,
    },
}


@contextmanager
def counting(fleet: Fleet, *, this_task: bool = False) -> Iterator[list[str]]:
    """The statements sent while it is open; `this_task`: only those of the task that opens
    it (a request, run in it by the ASGI transport), not a worker's stream, woken by a
    commit, reading in a task of its own (on a loaded machine its reads fell into a
    request's count)."""
    seen: list[str] = []
    mine = asyncio.current_task() if this_task else None

    def capture(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        if mine is None or asyncio.current_task() is mine:
            seen.append(statement)

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", capture)


async def lifecycle(fleet: Fleet, agent: Agent) -> dict[str, list[str]]:
    """One job through its whole life on an idle worker: the statements of each request."""
    assert agent.stream is not None
    await agent.stream.collect()
    spent: dict[str, list[str]] = {}
    with counting(fleet, this_task=True) as seen:
        job = await fleet.submit()
    spent["submit"] = seen
    offer = await agent.next_offer()
    for status in ("acknowledged", "running", "completed"):
        with counting(fleet, this_task=True) as seen:
            answer = await agent.report(job["id"], status, attempt_id=offer["attempt_id"])
        assert answer.status_code == 200, answer.text
        spent[status] = seen
    for beat in ("heartbeat", "heartbeat at rest"):
        with counting(fleet, this_task=True) as seen:
            assert (await agent.heartbeat()).status_code == 200
        spent[beat] = seen
    assert (await fleet.job(job["id"]))["status"] == "completed"
    return spent


async def test_a_job_costs_no_more_statements_than_its_budget(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await lifecycle(fleet, agent)  # the first job warms what is read once
    spent = await lifecycle(fleet, agent)
    budget = BUDGET[fleet.ctx.store.dialect]
    over = {
        step: (len(statements), budget[step], statements)
        for step, statements in spent.items()
        if len(statements) > budget[step]
    }
    assert not over, "\n".join(
        f"{step}: {n} statements, budget {budget}:\n  " + "\n  ".join(s[:120] for s in stmts)
        for step, (n, budget, stmts) in over.items()
    )


async def test_the_audit_rows_of_one_request_are_one_insert_in_order(fleet: Fleet) -> None:
    """A submit that offers at once writes four audit rows: one INSERT, the rows stored in
    the order they were recorded, each sealed onto the chain."""
    agent = await fleet.online_worker("gpu-1")
    with counting(fleet) as seen:
        job = await fleet.submit()
    await agent.next_offer()
    inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT INTO AUDIT")]
    assert len(inserts) == 1, inserts
    answer = await fleet.admin.get("/api/audit", params={"limit": 50})
    events = sorted(answer.json()["events"], key=lambda e: e["id"])
    mine = [e for e in events if e["target"] in (job["id"], agent.id)]
    assert [e["event_type"] for e in mine][-4:] == [
        "job.submitted",
        "worker.status_changed",
        "job.dispatched",
        "job.status_changed",
    ]
    verified = (await fleet.admin.get("/api/audit/verify")).json()
    assert verified["ok"] is True, verified


async def test_a_gang_nodes_report_costs_the_same_statements_at_any_node_count(
    fleet: Fleet,
) -> None:
    """A node's report locks every node's worker (node_reports.py), in one statement: one a
    node made each report of a 32-node gang 31 statements longer (scenario 10, #35)."""
    from tests.api.test_gang_dispatch import gang_worker, submit_gang
    from tests.api.test_gang_rendezvous import ack

    async def rank_1_ack(nodes: int) -> list[str]:
        agents = [await gang_worker(fleet, f"n{nodes}-{n}") for n in range(nodes)]
        await submit_gang(fleet, nodes)
        offers = {o["node_rank"]: (o, a) for a in agents for o in [await a.next_offer()]}
        offer, agent = offers[1]  # neither rank 0 (its port) nor the last (it starts all)
        with counting(fleet) as acked:
            assert (await ack(agent, offer)).status_code == 200
        return acked

    two, four = await rank_1_ack(2), await rank_1_ack(4)
    assert len(two) == len(four), four


# A gang's start, each node's report (scenario 10, #35): an acknowledgement or a `running`
# report that leaves others waiting, and the last of each (it starts every node; it makes
# the job run). A start report locks the reporter's worker alone (every node's cost 3
# statements more on PostgreSQL), reads the nodes once (not again after writing its own),
# and the last acknowledgement hands every node's `job_start` to its stream on commit
# (nothing written for it: an INSERT of them all before, one a node before that). A node's
# completion besides rank 0 ends that node alone and locks its own worker (PostgreSQL: 15
# statements when it locked every node's).
GANG_BUDGET = {
    "sqlite": {"ack": 6, "last ack": 10, "running": 5, "last running": 10, "node completed": 10},
    "postgresql": {
        "ack": 6,
        "last ack": 12,
        "running": 6,
        "last running": 13,
        "node completed": 13,
    },
}


async def test_a_gangs_start_costs_no_more_statements_than_its_budget(fleet: Fleet) -> None:
    from tests.api.test_gang_rendezvous import ack, expect, gang, node_report

    _, agents, offers = await gang(fleet, 4)
    spent: dict[str, list[str]] = {}
    for step in ("ack", "running"):
        for n, (agent, offer) in enumerate(zip(agents, offers, strict=True)):
            with counting(fleet) as seen:
                if step == "ack":
                    answer = await ack(agent, offer)
                else:
                    answer = await node_report(agent, offer, "running")
            assert answer.status_code == 200, answer.text
            if n == 1:  # neither rank 0 (its port) nor the last
                spent[step] = seen
            if n == len(agents) - 1:
                spent[f"last {step}"] = seen
        if step == "ack":
            for agent in agents:
                await expect(agent, "job_start")
    assert (await fleet.job(offers[0]["job_id"]))["status"] == "running"
    with counting(fleet) as spent["node completed"]:  # node 1 ends alone
        assert (await node_report(agents[1], offers[1], "completed")).status_code == 200
    budget = GANG_BUDGET[fleet.ctx.store.dialect]
    over = {step: (len(st), st) for step, st in spent.items() if len(st) > budget[step]}
    assert not over, over
