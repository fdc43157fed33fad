"""A multi-node job's checkpoints (#35, docs/artifacts.md): every node stores its part under
`node-K/` and commits it; a checkpoint is complete once every node did; a requeued gang
resumes from the newest complete one, each node fetching its own part. Fenced by attempt
and node rank."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import httpx

from gpufleet.server.services import retention
from tests.api.artifacts.uploads import announce, sha, upload
from tests.api.conftest import HEARTBEAT_TIMEOUT, Agent, Fleet, both_databases
from tests.api.test_gang_dispatch import gang_worker
from tests.api.test_gang_rendezvous import expect, gang, start_all
from tests.api.test_policy import add_user, client_of

# On PostgreSQL too (`both_databases`): which checkpoint is complete, and what retention
# keeps, are queries. Fencing and permissions are the service's: SQLite alone.
FOLDER = "checkpoints/checkpoint-{step}"


def node_file(rank: int, step: int) -> tuple[str, bytes]:
    """Node `rank`'s file of checkpoint `step`: its local path, and bytes only it holds."""
    return f"{FOLDER.format(step=step)}/weights.pt", f"rank {rank} step {step}".encode()


def part(rank: int, step: int) -> tuple[str, bytes, dict[str, str]]:
    """Node `rank`'s file of checkpoint `step` as stored (`node-K/…`), its bytes, and what
    its announce says of it besides."""
    path, data = node_file(rank, step)
    return f"node-{rank}/{path}", data, {"kind": "checkpoint", "checkpoint": f"checkpoint-{step}"}


async def announce_part(
    agent: Agent, job_id: str, attempt_id: str, rank: int, step: int
) -> httpx.Response:
    stored, data, more = part(rank, step)
    return await announce(agent, job_id, attempt_id, stored, data, **more)


async def store_part(agent: Agent, offer: dict[str, Any], rank: int, step: int) -> None:
    stored, data, more = part(rank, step)
    await upload(agent, offer["job_id"], offer["attempt_id"], stored, data, **more)


async def commit_part(
    agent: Agent, offer: dict[str, Any], step: int, **more: Any
) -> httpx.Response:
    """The node stores its part of checkpoint `step` and commits it."""
    rank = offer["node_rank"]
    await store_part(agent, offer, rank, step)
    stored, data, _ = part(rank, step)
    return await commit(agent, offer, step, stored, data, node_rank=rank, **more)


async def commit(
    agent: Agent | httpx.AsyncClient,
    offer: dict[str, Any],
    step: int,
    stored: str,
    data: bytes,
    said_step: int | None = None,
    **more: Any,
) -> httpx.Response:
    body = {
        "attempt_id": offer["attempt_id"],
        "name": f"checkpoint-{step}",
        "path": FOLDER.format(step=step),
        "step": step if said_step is None else said_step,
        "files": [{"path": stored, "size": len(data), "sha256": sha(data)}],
        **more,
    }
    url = f"/api/workers/job/{offer['job_id']}/checkpoints"
    if isinstance(agent, Agent):
        return await agent.fleet.http.post(url, json=body, headers=agent.headers)
    return await agent.post(url, json=body)


async def checkpoints(fleet: Fleet, job_id: str) -> list[dict[str, Any]]:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/artifacts")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["checkpoints"]
    return found


async def requeued(
    fleet: Fleet, job_id: str, agents: list[Agent]
) -> tuple[list[Agent], list[dict[str, Any]]]:
    """Node 1's worker is lost: the attempt ends, the job is queued again and offered to two
    fresh workers (the first ran their one job). The agents and their offers, in rank order."""
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await agents[0].heartbeat(status="busy", current_job_id=job_id)).status_code == 200
    assert await fleet.heartbeat_sweep() == [agents[1].id]
    await expect(agents[0], "job_cancel")
    fresh = [await gang_worker(fleet, f"node-again-{n}") for n in range(2)]  # ephemeral ones
    pairs = [(await a.next_offer(), a) for a in fresh]
    pairs.sort(key=lambda oa: oa[0]["node_rank"])
    return [a for _, a in pairs], [o for o, _ in pairs]


async def fetch(agent: Agent, offer: dict[str, Any]) -> httpx.Response:
    checkpoint_id = offer["resume"]["checkpoint_id"]
    return await agent.fleet.http.get(
        f"/api/workers/job/{offer['job_id']}/checkpoints/{checkpoint_id}",
        params={"attempt_id": offer["attempt_id"]},
        headers=agent.headers,
    )


@both_databases
async def test_a_checkpoint_every_node_committed_is_complete_and_each_resumes_its_own_part(
    fleet: Fleet,
) -> None:
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    first = await commit_part(agents[0], offers[0], 4)
    assert first.status_code == 201, first.text
    [listed] = await checkpoints(fleet, job["id"])
    assert listed["nodes"] == {"nodes": 2, "done": [0], "missing": [1], "complete": False}
    second = await commit_part(agents[1], offers[1], 4)
    assert second.status_code == 201, second.text
    assert second.json()["id"] == first.json()["id"]  # one checkpoint, two parts
    [listed] = await checkpoints(fleet, job["id"])
    assert listed["nodes"] == {"nodes": 2, "done": [0, 1], "missing": [], "complete": True}
    assert (listed["files"], listed["step"]) == (2, 4)
    # Its tar holds each node's part under node-K/.
    answer = await fleet.admin.get(f"/api/queue/{job['id']}/checkpoints/{listed['id']}")
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert files == {
        f"checkpoint-4/node-{rank}/weights.pt": node_file(rank, 4)[1] for rank in (0, 1)
    }

    agents, offers = await requeued(fleet, job["id"], agents)
    for rank, (agent, offer) in enumerate(zip(agents, offers, strict=True)):
        assert offer["resume"]["checkpoint_id"] == listed["id"]
        answer = await fetch(agent, offer)
        assert answer.status_code == 200, answer.text
        path, data = node_file(rank, 4)
        # Its own part, at the path it wrote it at in its job folder.
        assert [(f["path"], f["sha256"]) for f in answer.json()["files"]] == [(path, sha(data))]


@both_databases
async def test_a_checkpoint_a_node_missed_is_passed_over_for_the_previous_complete_one(
    fleet: Fleet,
) -> None:
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    for agent, offer in zip(agents, offers, strict=True):
        assert (await commit_part(agent, offer, 4)).status_code == 201
    fleet.clock.advance(1)
    assert (await commit_part(agents[0], offers[0], 8)).status_code == 201  # node 1 never did
    newest, older = await checkpoints(fleet, job["id"])
    assert (newest["step"], newest["nodes"]["missing"]) == (8, [1])
    assert older["nodes"]["complete"]

    _agents, offers = await requeued(fleet, job["id"], agents)
    assert {o["resume"]["checkpoint_id"] for o in offers} == {older["id"]}
    assert offers[0]["resume"]["step"] == 4


async def test_a_checkpoint_a_live_node_completed_after_the_lost_nodes_last_beat_resumes(
    fleet: Fleet,
) -> None:
    """Node 1 commits its part, then goes silent; node 0 commits its own a second later. The
    attempt, found lost, ended at its last sign of life: node 0's commit, not node 1's (a
    real node killed within a heartbeat of a complete checkpoint lost it: the chaos tier)."""
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    assert (await commit_part(agents[1], offers[1], 4)).status_code == 201
    fleet.clock.advance(1)
    assert (await commit_part(agents[0], offers[0], 4)).status_code == 201
    [complete] = await checkpoints(fleet, job["id"])
    _agents, offers = await requeued(fleet, job["id"], agents)
    assert [o["resume"] and o["resume"]["checkpoint_id"] for o in offers] == [complete["id"]] * 2


async def test_a_gang_with_no_complete_checkpoint_starts_afresh(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    assert (await commit_part(agents[1], offers[1], 4)).status_code == 201
    _agents, offers = await requeued(fleet, job["id"], agents)
    assert [o["resume"] for o in offers] == [None, None]


async def test_a_node_stores_and_commits_only_its_own_part_of_a_checkpoint(
    fleet: Fleet,
) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    path, data = node_file(0, 4)
    # Node 1 storing under node-0/ (another's part): refused, nothing stored.
    said = await announce_part(agents[1], job["id"], offers[1]["attempt_id"], 0, 4)
    assert said.status_code == 409, said.text
    assert "node-<its rank>/" in said.json()["detail"]
    # Committing as another node, or as no node at all in a gang: refused.
    as_other = await commit(agents[1], offers[1], 4, f"node-0/{path}", data, node_rank=0)
    assert as_other.status_code == 409, as_other.text
    no_node = await commit(agents[0], offers[0], 4, path, data)
    assert no_node.status_code == 422, no_node.text
    assert "node_rank" in no_node.json()["detail"]
    # Every node's checkpoint of one name holds the same step.
    assert (await commit_part(agents[0], offers[0], 4)).status_code == 201
    path1, data1 = node_file(1, 4)
    await store_part(agents[1], offers[1], 1, 4)
    skewed = await commit(
        agents[1], offers[1], 4, f"node-1/{path1}", data1, node_rank=1, said_step=5
    )
    assert skewed.status_code == 422, skewed.text
    assert "same path and step" in skewed.json()["detail"]
    assert (await checkpoints(fleet, job["id"]))[0]["nodes"]["missing"] == [1]


async def test_a_node_of_an_older_attempt_stores_nothing(fleet: Fleet) -> None:
    job, agents, old = await gang(fleet, 2, max_retries=1)
    await start_all(agents, old)
    new_agents, _offers = await requeued(fleet, job["id"], agents)
    path, data = node_file(0, 4)
    late = await announce_part(new_agents[0], job["id"], old[0]["attempt_id"], 0, 4)
    assert late.status_code == 409, late.text
    committed = await commit(new_agents[0], old[0], 4, f"node-0/{path}", data, node_rank=0)
    assert committed.status_code == 409, committed.text
    assert await checkpoints(fleet, job["id"]) == []


async def test_a_users_key_commits_no_checkpoint_part(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    path, data = node_file(0, 4)
    await store_part(agents[0], offers[0], 0, 4)
    researcher = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    viewer = await client_of(fleet, await add_user(fleet, "vera", "viewer"), "queue.read")
    for client in (researcher, viewer, fleet.admin):
        answer = await commit(client, offers[0], 4, f"node-0/{path}", data, node_rank=0)
        assert answer.status_code in (401, 403), answer.text
    assert await checkpoints(fleet, job["id"]) == []


@both_databases
async def test_retention_never_prunes_the_newest_checkpoint_every_node_completed(
    fleet: Fleet,
) -> None:
    """--keep-checkpoints 1: newer checkpoints node 1 never finished count towards the one
    kept, but the newest complete one (the one a resume needs) is kept beside them."""
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"keep_checkpoints": 1})
    job, agents, offers = await gang(fleet, 2, max_retries=1)
    await start_all(agents, offers)
    for agent, offer in zip(agents, offers, strict=True):
        assert (await commit_part(agent, offer, 4)).status_code == 201
    for step in (8, 12):  # node 1 never finished these
        fleet.clock.advance(1)
        assert (await commit_part(agents[0], offers[0], step)).status_code == 201

    swept = await retention.sweep(fleet.ctx)
    assert len(swept.plan.checkpoint_ids) == 1
    kept = await checkpoints(fleet, job["id"])
    assert [(c["step"], c["nodes"]["complete"]) for c in kept] == [(12, False), (4, True)]

    _agents, offers = await requeued(fleet, job["id"], agents)
    assert {o["resume"]["checkpoint_id"] for o in offers} == {kept[1]["id"]}
