"""The two-phase start of a multi-node (gang) attempt and its one attempt on N nodes (#35):
every node acknowledges (rank 0 with its MASTER_PORT), then all start together; a report is
fenced by attempt and node rank; a node that fails or is lost ends the whole attempt and
the others are told to stop (docs/jobs.md, docs/protocol.md)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ACK_TIMEOUT, HEARTBEAT_TIMEOUT, Agent, Fleet, both_databases
from tests.api.test_gang_dispatch import gang_worker, submit_gang, worker

# On PostgreSQL too (`both_databases`): the reports that are applied in batches there
# (node_reports.py: acknowledgements, completions), fenced or not. Sweeps, addresses and
# the logs (tests/api/test_gang_logs.py) are the same on either: SQLite alone.
PORT = 29_500


async def gang(
    fleet: Fleet, nodes: int, **config: Any
) -> tuple[dict[str, Any], list[Agent], list[dict[str, Any]]]:
    """A gang job offered to `nodes` workers: the job, the agents and their offers, in rank
    order."""
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(nodes)]
    job = await submit_gang(fleet, nodes, **config)
    offers = [await a.next_offer() for a in agents]
    ranked = sorted(zip(offers, agents, strict=True), key=lambda oa: oa[0]["node_rank"])
    return job, [a for _, a in ranked], [o for o, _ in ranked]


async def ack(agent: Agent, offer: dict[str, Any], **body: Any) -> httpx.Response:
    rank = offer["node_rank"]
    body.setdefault("node_rank", rank)
    if rank == 0:
        body.setdefault("port", PORT)
    return await agent.report(
        offer["job_id"], "acknowledged", attempt_id=offer["attempt_id"], **body
    )


async def node_report(
    agent: Agent, offer: dict[str, Any], status: str, **body: Any
) -> httpx.Response:
    return await agent.report(
        offer["job_id"],
        status,
        attempt_id=offer["attempt_id"],
        node_rank=offer["node_rank"],
        **body,
    )


async def start_all(agents: list[Agent], offers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node acknowledges and gets its start event; then every node runs."""
    for agent, offer in zip(agents, offers, strict=True):
        assert (await ack(agent, offer)).status_code == 200
    starts = [await expect(a, "job_start") for a in agents]
    for agent, offer in zip(agents, offers, strict=True):
        assert (await node_report(agent, offer, "running")).status_code == 200
    return starts


# An offer not yet acknowledged is sent again after a second (docs/protocol.md): a slow
# run may see such a resend before what it waits for.
RESENT = ("ping", "audit", "job_submit")


async def expect(agent: Agent, kind: str) -> dict[str, Any]:
    assert agent.stream is not None
    while (event := await agent.stream.expect(kind, "job_submit"))["type"] != kind:
        pass
    return event


async def quiet(agent: Agent) -> list[dict[str, Any]]:
    """What the agent was sent lately, offers sent again left out."""
    assert agent.stream is not None
    return [e for e in await agent.stream.collect(0.2) if e["type"] not in RESENT]


@both_databases
@pytest.mark.parametrize("nodes", [2, 3])
async def test_nodes_start_together_only_once_every_node_acknowledged(
    fleet: Fleet, nodes: int
) -> None:
    job, agents, offers = await gang(fleet, nodes)
    addrs = [f"10.0.0.{rank + 1}" for rank in range(nodes)]

    for rank in range(nodes - 1):
        assert (await ack(agents[rank], offers[rank], address=addrs[rank])).status_code == 200
    for agent in agents:
        assert await quiet(agent) == []  # nobody starts, nobody waits on the missing node
    assert (await fleet.job(job["id"]))["status"] == "offered"
    assert (await ack(agents[-1], offers[-1], address=addrs[-1])).status_code == 200

    starts = [await expect(a, "job_start") for a in agents]
    for rank, start in enumerate(starts):
        assert start == {
            "type": "job_start",
            "job_id": job["id"],
            "attempt_id": offers[0]["attempt_id"],
            "node_rank": rank,
            "num_nodes": nodes,
            "master_addr": addrs[0],
            "master_port": PORT,
            "node_addrs": addrs,
        }
    # The job runs when every node runs; its progress is rank 0's.
    for rank in range(1, nodes):
        assert (
            await node_report(agents[rank], offers[rank], "running", progress={"step": 99})
        ).status_code == 200
    assert (await fleet.job(job["id"]))["status"] == "offered"
    answer = await node_report(agents[0], offers[0], "running", progress={"step": 1, "total": 10})
    assert answer.json()["job_status"] == "running"
    assert (await fleet.job(job["id"]))["progress"] == {"step": 1, "total": 10}
    await node_report(agents[-1], offers[-1], "running", progress={"step": 7})
    assert (await fleet.job(job["id"]))["progress"] == {"step": 1, "total": 10}


async def test_a_node_without_an_advertised_address_gets_the_one_it_called_from(
    fleet: Fleet,
) -> None:
    _job, agents, offers = await gang(fleet, 2)
    starts = await start_all(agents, offers)
    assert starts[0]["master_addr"] == starts[0]["node_addrs"][0]
    assert starts[0]["master_addr"] == starts[1]["master_addr"] != ""


@both_databases
async def test_a_repeated_acknowledgement_after_the_start_sends_the_start_again(
    fleet: Fleet,
) -> None:
    _job, agents, offers = await gang(fleet, 2)
    for agent, offer in zip(agents, offers, strict=True):
        await ack(agent, offer)
    first = await expect(agents[1], "job_start")
    assert (await ack(agents[1], offers[1])).status_code == 200
    assert await expect(agents[1], "job_start") == first
    assert await quiet(agents[0]) == [first | {"node_rank": 0}]


@both_databases
async def test_a_node_speaks_only_for_its_own_rank(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    outsider = await gang_worker(fleet, "outsider")

    other = await ack(agents[1], offers[1], node_rank=0, port=PORT)
    assert other.status_code == 403
    assert "is node 1 and reports only as that node_rank" in other.json()["detail"]
    stranger = await ack(outsider, offers[1])
    assert stranger.status_code == 403
    assert f"worker {outsider.id} is not a node of this attempt" in stranger.json()["detail"]
    no_port = await ack(agents[0], offers[0], port=None)
    assert no_port.status_code == 422
    assert "MASTER_PORT" in no_port.text
    unranked = await agents[0].report(job["id"], "acknowledged", attempt_id=offers[0]["attempt_id"])
    assert unranked.status_code == 422
    assert "node_rank" in unranked.text
    early = await node_report(agents[1], offers[1], "running")
    assert early.status_code == 409
    assert "job_start" in early.json()["detail"]
    # Nothing of it was recorded: still no node started.
    assert (await ack(agents[1], offers[1])).status_code == 200
    for agent in agents:
        assert await quiet(agent) == []


async def test_a_gang_not_all_acknowledged_in_time_is_given_back_whole(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    assert (await ack(agents[0], offers[0])).status_code == 200

    fleet.clock.advance(ACK_TIMEOUT + 1)
    assert await fleet.ack_sweep() == 1

    detail = await fleet.job(job["id"])
    first = detail["attempt_history"][0]
    assert first["status"] == "withdrawn"
    assert "not acknowledged within" in first["error"]
    for agent in agents:
        events = [e for e in await quiet(agent) if e.get("attempt_id") == first["id"]]
        assert events and all(e["type"] == "job_cancel" for e in events)
    # Offered again as a whole (the same two workers are the only ones there are).
    assert detail["status"] == "offered" and detail["attempts"] == 2


@both_databases
async def test_a_failed_node_stops_the_others_and_fails_the_job(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 3)
    await start_all(agents, offers)

    answer = await node_report(agents[1], offers[1], "failed", exit_code=3, error="NCCL timeout")
    assert answer.json()["job_status"] == "failed"

    for rank in (0, 2):
        stop = await expect(agents[rank], "job_cancel")
        assert stop["attempt_id"] == offers[0]["attempt_id"]
    assert await quiet(agents[1]) == []
    detail = await fleet.job(job["id"])
    assert detail["status"] == "failed"
    assert f"node 1 (worker {agents[1].id}) failed: NCCL timeout" in detail["error"]
    for agent in agents:
        assert (await worker(fleet, agent))["status"] == "idle"
    # The stopped nodes confirm: taken, nothing changes.
    assert (await node_report(agents[0], offers[0], "cancelled")).status_code == 200
    assert (await fleet.job(job["id"]))["status"] == "failed"


async def test_a_lost_node_stops_the_others_and_requeues_the_job(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)

    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await agents[0].heartbeat(status="busy", current_job_id=job["id"])).status_code == 200
    assert await fleet.heartbeat_sweep() == [agents[1].id]

    stop = await expect(agents[0], "job_cancel")
    assert stop["attempt_id"] == offers[0]["attempt_id"]
    detail = await fleet.job(job["id"])
    assert detail["attempt_history"][0]["status"] == "lost"
    assert detail["status"] == "queued"  # its other node went offline: it waits for two
    assert (await worker(fleet, agents[0]))["status"] == "idle"


async def test_a_lost_node_counts_against_its_own_worker_for_the_breaker_not_its_peers(
    fleet: Fleet,
) -> None:
    """The circuit breaker on a gang: the node's worker that was lost counts one
    infrastructure failure; the peer the orchestrator stopped counts none (before, a gang's
    end counted against no worker at all)."""
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await agents[0].heartbeat(status="busy", current_job_id=job["id"])).status_code == 200
    assert await fleet.heartbeat_sweep() == [agents[1].id]

    assert (await worker(fleet, agents[1]))["infra_failures"] == 1
    assert (await worker(fleet, agents[0]))["infra_failures"] == 0


@both_databases
async def test_the_job_completes_when_rank_zero_does(fleet: Fleet) -> None:
    _job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)

    done = await node_report(agents[1], offers[1], "completed", exit_code=0)
    assert done.json()["job_status"] == "running"
    assert (await worker(fleet, agents[1]))["status"] == "idle"
    assert (await node_report(agents[0], offers[0], "completed", exit_code=0)).json()[
        "job_status"
    ] == "completed"
    assert (await worker(fleet, agents[0]))["status"] == "idle"
    assert await quiet(agents[1]) == []  # a completed attempt stops no one


async def test_every_node_may_send_the_attempts_logs_as_its_own_node(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    for rank, agent in enumerate(agents):
        answer = await agent.logs(
            job["id"],
            [{"stream": "stdout", "text": f"hello from {rank}"}],
            attempt_id=offers[0]["attempt_id"],
            node_rank=rank,
        )
        assert answer.status_code == 200, answer.text
    page = await fleet.admin.get(f"/api/queue/{job['id']}/logs")
    said = [(line["node"], line["text"]) for line in page.json()["lines"]]
    assert said == [(0, "hello from 0"), (1, "hello from 1")]  # tests/api/test_gang_logs.py


async def test_every_nodes_first_batch_is_kept_beside_the_others(fleet: Fleet) -> None:
    """`first` counts a node's own lines, not the attempt's: rank 1's first batch (first 0)
    arriving after rank 0's is not taken for a redelivery of lines already stored."""
    job, agents, offers = await gang(fleet, 3)
    await start_all(agents, offers)
    for rank, agent in enumerate(agents):
        for first in (0, 2):
            lines = [{"stream": "stdout", "text": f"node {rank} line {first + n}"} for n in (0, 1)]
            answer = await agent.logs(
                job["id"], lines, attempt_id=offers[0]["attempt_id"], first=first, node_rank=rank
            )
            assert answer.status_code == 200, answer.text
    read = await fleet.admin.get(f"/api/queue/{job['id']}/logs")
    texts = [line["text"] for line in read.json()["lines"]]
    assert texts == [f"node {rank} line {n}" for rank in range(3) for n in range(4)]


async def test_a_nodes_last_lines_after_rank_zero_completed_are_kept(fleet: Fleet) -> None:
    """The job completes with rank 0; another node's process, ending with it, may ship its
    last lines after that (the end of a torchrun), and they are the log's, not refused."""
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    attempt = offers[0]["attempt_id"]
    done = await node_report(agents[0], offers[0], "completed", exit_code=0)
    assert done.json()["job_status"] == "completed"

    last = [{"stream": "stdout", "text": "rank 1 of 2: weights sha256 0f"}]
    answer = await agents[1].logs(job["id"], last, attempt_id=attempt, first=0, node_rank=1)
    assert answer.status_code == 200, answer.text
    assert (await node_report(agents[1], offers[1], "completed", exit_code=0)).status_code == 200
    read = await fleet.admin.get(f"/api/queue/{job['id']}/logs")
    assert [line["text"] for line in read.json()["lines"]] == [last[0]["text"]]
    assert await quiet(agents[1]) == []  # not told to stop
    assert (await worker(fleet, agents[1]))["status"] == "idle"


async def test_a_node_of_a_failed_attempt_may_not_add_to_its_log(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    failed = await node_report(agents[1], offers[1], "failed", exit_code=3)
    assert failed.json()["job_status"] == "failed"
    late = [{"stream": "stdout", "text": "too late"}]
    answer = await agents[0].logs(job["id"], late, attempt_id=offers[0]["attempt_id"], node_rank=0)
    assert answer.status_code == 409, answer.text


async def test_every_node_reads_the_attempts_secrets_and_only_rank_zero_uploads(
    fleet: Fleet,
) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    attempt = offers[0]["attempt_id"]
    for agent in agents:
        answer = await fleet.http.get(
            f"/api/workers/job/{job['id']}/secrets",
            params={"attempt_id": attempt},
            headers=agent.headers,
        )
        assert answer.status_code == 200, answer.text
    announce = {"attempt_id": attempt, "path": "model.bin", "size": 1, "sha256": "0" * 64}
    upload = await fleet.http.post(
        f"/api/workers/job/{job['id']}/upload", json=announce, headers=agents[1].headers
    )
    assert upload.status_code in (403, 409), upload.text
