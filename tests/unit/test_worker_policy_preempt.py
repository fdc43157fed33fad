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
        # Long enough (30 s) that it cannot end before its preemption lands, on a loaded
        # machine too (at 4 s it once completed first); the resumed run is cancelled once it
        # runs from its checkpoint.
        args = ["3000", "--step-delay", "0.01", "--checkpoint-every", "50", "--seed", "3"]
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

        async def rerunning() -> dict[str, Any] | None:
            job = await fleet.job(low["id"])
            history = job["attempt_history"]
            return job if len(history) == 2 and history[1]["status"] == "running" else None

        resumed = await wait_until_async(
            rerunning, timeout=30, message="the preempted job running again"
        )

        assert done["status"] == "completed"
        first, second = sorted(resumed["attempt_history"], key=lambda a: a["number"])
        assert first["status"] == "preempted"
        # The agent took the preemption path (a plain cancel would say "cancelled by …").
        assert first["error"].startswith("preempted by the queue policy for another job: ")
        assert urgent["id"] in first["error"]
        assert second["resumed_from"] is not None
        assert second["resumed_from"]["attempt_number"] == 1
        assert second["worker_id"] == first["worker_id"]
        assert not task.done()  # the agent stayed: only its job was preempted
        cancelled = await fleet.admin.post(f"/api/queue/{low['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        del agent
    finally:
        await _policy(fleet, preemption=False, min_runtime_s=600)
        await asyncio.sleep(0)
