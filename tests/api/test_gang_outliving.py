"""A node that outlives rank 0 (#35): the job completes when rank 0 completes, but a node
still running keeps its worker (not offered work, still the job's) until it reports its own
end, or `rendezvous.OUTLIVE_GRACE` passes and it is told to stop (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

from gpufleet.domain import rendezvous
from gpufleet.server.services import health
from tests.api.conftest import HEARTBEAT_TIMEOUT, Agent, Fleet, both_databases
from tests.api.test_gang_dispatch import GANG, submit_gang, worker
from tests.api.test_gang_rendezvous import expect, node_report, quiet, start_all

# On PostgreSQL too (`both_databases`): a node's completion after rank 0's, which is applied
# in a batch there (node_reports.py). A failure, the grace and a lost node take the path
# every database shares, and a late report is fenced before it writes: SQLite alone.


async def gang(
    fleet: Fleet, nodes: int
) -> tuple[dict[str, Any], list[Agent], list[dict[str, Any]]]:
    """A gang job offered to `nodes` persistent workers (each runs job after job): the job,
    the agents and their offers, in rank order."""
    agents = []
    for n in range(nodes):
        agent = await fleet.create_worker(f"node-{n}")
        agents.append(
            await agent.connect(gpu_count=1, gpu_name="Test GPU", features=GANG, persistent=True)
        )
    job = await submit_gang(fleet, nodes)
    offers = [await a.next_offer() for a in agents]
    ranked = sorted(zip(offers, agents, strict=True), key=lambda oa: oa[0]["node_rank"])
    return job, [a for _, a in ranked], [o for o, _ in ranked]


async def outlived(fleet: Fleet) -> tuple[dict[str, Any], list[Agent], list[dict[str, Any]]]:
    """A two-node job whose rank 0 completed while rank 1 still runs."""
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    done = await node_report(agents[0], offers[0], "completed", exit_code=0)
    assert done.json()["job_status"] == "completed"
    return job, agents, offers


async def solo(fleet: Fleet) -> dict[str, Any]:
    return await fleet.submit(config={"command": ["python", "eval.py"]})


@both_databases
async def test_a_node_still_running_keeps_its_worker_until_it_completes(fleet: Fleet) -> None:
    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    waiting = [await solo(fleet), await solo(fleet)]  # every worker is busy: both wait
    done = await node_report(agents[0], offers[0], "completed", exit_code=0)
    assert done.json()["job_status"] == "completed"

    first = (await agents[0].next_offer())["job_id"]  # rank 0's worker is free
    (other,) = [w["id"] for w in waiting if w["id"] != first]
    held = await worker(fleet, agents[1])
    assert (held["status"], held["current_job_id"]) == ("busy", job["id"])
    # Its heartbeat names the job it still runs: no cancel, nothing changes.
    beat = await agents[1].heartbeat(status="busy", current_job_id=job["id"])
    assert beat.status_code == 200, beat.text
    running = await node_report(agents[1], offers[1], "running", progress={"step": 9})
    assert running.status_code == 200, running.text
    assert await quiet(agents[1]) == []  # neither offered the waiting job nor told to stop
    assert (await worker(fleet, agents[1]))["status"] == "busy"
    assert (await fleet.job(other))["status"] == "queued"

    ended = await node_report(agents[1], offers[1], "completed", exit_code=0)
    assert ended.status_code == 200, ended.text
    assert (await agents[1].next_offer())["job_id"] == other
    detail = await fleet.job(job["id"])
    assert detail["status"] == "completed" and detail["error"] is None


async def test_a_node_failing_after_rank_zero_completed_is_freed_and_noted(fleet: Fleet) -> None:
    job, agents, offers = await outlived(fleet)
    failed = await node_report(agents[1], offers[1], "failed", exit_code=3, error="upload hung")
    assert failed.status_code == 200, failed.text
    assert failed.json()["job_status"] == "completed"

    assert (await worker(fleet, agents[1]))["status"] == "idle"
    assert (await fleet.job(job["id"]))["status"] == "completed"
    (noted,) = await fleet.audit(type="job.node_ended")
    assert noted["target"] == job["id"]
    said = str(noted)
    assert f"node 1 (worker {agents[1].id}) failed after rank 0 completed: upload hung" in said


async def test_a_node_outliving_the_grace_is_told_to_stop_and_freed(fleet: Fleet) -> None:
    job, agents, offers = await outlived(fleet)
    attempt = offers[0]["attempt_id"]

    fleet.clock.advance(rendezvous.OUTLIVE_GRACE.total_seconds())
    assert await health.stop_outliving_nodes(fleet.ctx) == []  # not past it yet
    assert (await worker(fleet, agents[1]))["status"] == "busy"
    fleet.clock.advance(1)
    assert await health.stop_outliving_nodes(fleet.ctx) == [(attempt, 1)]

    stop = await expect(agents[1], "job_cancel")
    assert (stop["job_id"], stop["attempt_id"]) == (job["id"], attempt)
    assert (await worker(fleet, agents[1]))["status"] == "idle"
    assert await health.stop_outliving_nodes(fleet.ctx) == []  # once
    # It confirms the stop: taken, and the job stays completed.
    confirmed = await node_report(agents[1], offers[1], "cancelled")
    assert confirmed.status_code == 200, confirmed.text
    assert (await fleet.job(job["id"]))["status"] == "completed"


async def test_a_node_lost_after_rank_zero_completed_is_just_freed(fleet: Fleet) -> None:
    job, agents, _offers = await outlived(fleet)

    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await agents[0].heartbeat(status="idle")).status_code == 200
    assert await fleet.heartbeat_sweep() == [agents[1].id]
    assert await health.stop_outliving_nodes(fleet.ctx) == []  # nothing to stop: it is gone

    assert (await worker(fleet, agents[1]))["current_job_id"] is None
    assert (await fleet.job(job["id"]))["status"] == "completed"
    assert [e for e in await quiet(agents[0]) if e["type"] == "job_cancel"] == []


async def test_a_late_report_of_an_ended_node_says_its_attempt_has_ended(fleet: Fleet) -> None:
    job, agents, offers = await outlived(fleet)
    assert (await node_report(agents[1], offers[1], "completed")).status_code == 200

    late = await node_report(agents[1], offers[1], "running")
    assert late.status_code == 409
    detail = late.json()["detail"]
    assert f"attempt {offers[1]['attempt_id']} of job {job['id']} has ended (completed)" in detail
    assert "another attempt" not in detail
