"""A job the queue policy preempts (#18), on a real agent against the real orchestrator: the
agent takes the SIGTERM path for that job only (checkpoint signal, grace, `preempted`), stays
on, runs the job it was stopped for, then the preempted one again, resumed from its
checkpoint, with no retry spent (max_retries 0)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpufleet.server.services import policy_loop
from tests.api.conftest import Fleet
from tests.unit.test_worker_preempt import TRAIN, Lane, lane, on_the_fleet, orchestrator
from tests.waiting import wait_until_async

__all__ = ["lane", "orchestrator"]


async def _policy(fleet: Fleet, **fields: Any) -> None:
    answer = await fleet.admin.patch("/api/queue/policy", json=fields)
    assert answer.status_code == 200, answer.text


@on_the_fleet
async def test_a_job_preempted_by_the_policy_checkpoints_yields_its_worker_and_resumes(
    lane: Lane,
) -> None:
    fleet = lane.fleet
    await _policy(fleet, preemption=True, min_runtime_s=0, preempt_grace_s=20)
    try:
        agent, task, _ = await lane.start_agent(persistent=True)
        args = ["400", "--step-delay", "0.01", "--checkpoint-every", "50", "--seed", "3"]
        low = await fleet.submit(
            config={"command": [*TRAIN, *args]},
            worker_labels=lane.labels,
            max_retries=0,
            priority=0,
            preemptible=True,
        )

        async def committed() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = (await lane.listing(low["id"]))["checkpoints"]
            return found

        await wait_until_async(committed, timeout=20, message="a committed checkpoint")
        urgent = await fleet.submit(
            config={"command": ["python", "-c", "pass"]},
            worker_labels=lane.labels,
            priority=30,
        )
        assert await policy_loop.preempt(fleet.ctx) == 1

        async def ended(job_id: str) -> dict[str, Any] | None:
            job = await fleet.job(job_id)
            return job if job["status"] in ("completed", "failed") else None

        done = await wait_until_async(
            lambda: ended(urgent["id"]), timeout=30, message="the urgent job's end"
        )
        resumed = await wait_until_async(
            lambda: ended(low["id"]), timeout=60, message="the preempted job's end"
        )

        assert done["status"] == "completed"
        assert resumed["status"] == "completed"
        first, second = resumed["attempt_history"]
        assert first["status"] == "preempted"
        # The agent took the preemption path (a plain cancel would say "cancelled by …").
        assert first["error"].startswith("preempted by the queue policy for another job: ")
        assert urgent["id"] in first["error"]
        assert second["resumed_from"] is not None
        assert second["resumed_from"]["attempt_number"] == 1
        assert not task.done()  # the agent stayed: only its job was preempted
        del agent
    finally:
        await _policy(fleet, preemption=False, min_runtime_s=600)
        await asyncio.sleep(0)
