"""Multi-node (gang) jobs at dispatch (#35): all the nodes at once or none, holds for the
gang at the head of the queue, and what a waiting gang says (docs/jobs.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpufleet.domain.gang import held_reason
from tests.api.conftest import GPUFLEET_FEATURES, Agent, Fleet, both_databases

GANG = [*GPUFLEET_FEATURES, "gang"]
pytestmark = both_databases


async def gang_worker(fleet: Fleet, name: str, **labels: str) -> Agent:
    """An online worker that says it runs multi-node jobs (the fake agents may: the real
    worker will once the rendezvous exists)."""
    agent = await fleet.create_worker(name, labels=labels)
    return await agent.connect(gpu_count=1, gpu_name="Test GPU", features=GANG)


async def submit_gang(fleet: Fleet, nodes: int, **config: Any) -> dict[str, Any]:
    return await fleet.submit(config={"command": ["python", "train.py"], "nodes": nodes, **config})


async def worker(fleet: Fleet, agent: Agent) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/admin/workers/{agent.id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a_gang_is_claimed_on_all_its_workers_at_once(fleet: Fleet, nodes: int) -> None:
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(nodes)]
    job = await submit_gang(fleet, nodes)

    offers = [await a.next_offer() for a in agents]

    details = await fleet.job(job["id"])
    assert details["status"] == "offered"
    assert {o["attempt_id"] for o in offers} == {details["current_attempt_id"]}
    assert sorted(o["node_rank"] for o in offers) == list(range(nodes))
    assert {o["num_nodes"] for o in offers} == {nodes}
    rank0 = next(a for a, o in zip(agents, offers, strict=True) if o["node_rank"] == 0)
    assert details["worker_id"] == rank0.id
    for agent in agents:
        assert (await worker(fleet, agent))["current_job_id"] == job["id"]
