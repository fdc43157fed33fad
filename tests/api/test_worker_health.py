"""Fleet health (#37 A): a worker reports a sick GPU and takes it out; a failing preflight
keeps a worker from jobs; the circuit breaker drains a worker whose attempts keep dying of
infrastructure (docs/workers.md, Health)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.server.services import agents as agents_service
from gpufleet.server.services import delivery
from tests.api.conftest import Agent, Fleet, both_databases
from tests.webhook_receiver import Receiver, receiving

TWO_GPUS = [{"index": 0, "name": "Test GPU"}, {"index": 1, "name": "Test GPU"}]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


async def two_gpu_worker(fleet: Fleet, name: str, **health: Any) -> Agent:
    agent = await fleet.create_worker(name)
    return await agent.connect(gpu_count=2, gpu_name="Test GPU", gpus=TWO_GPUS, **health)


async def running(agent: Agent, job: dict[str, Any]) -> dict[str, Any]:
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    await agent.run(offer)
    return offer


@both_databases
async def test_a_gpu_that_fell_off_the_bus_is_taken_out_and_its_job_requeued_without_a_retry(
    fleet: Fleet, receiver: Receiver
) -> None:
    answer = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": receiver.url, "events": ["gpu.fault"]}
    )
    assert answer.status_code == 201, answer.text
    sick = await two_gpu_worker(fleet, "sick")
    job = await fleet.submit(gpu_count=2, max_retries=0)
    offer = await running(sick, job)

    beat = await sick.heartbeat(
        status="busy",
        current_job_id=job["id"],
        gpu_health=[{"index": 0, "xids": [13, 79]}, {"index": 1, "temperature_c": 91}],
    )

    assert beat.status_code == 200, beat.text
    cancel = await sick.stream.expect("job_cancel") if sick.stream else None
    assert cancel is not None and cancel["attempt_id"] == offer["attempt_id"]
    detail = await fleet.job(job["id"])
    # max_retries 0, and still queued again: a GPU fault spends no retry
    assert detail["status"] == "queued"
    [ended] = detail["attempt_history"]
    assert ended["status"] == "preempted" and "GPU 0 XID 79" in ended["error"]
    info = await sick.info()
    assert info["gpu_count"] == 1  # offers what is left: the 2-GPU job waits elsewhere
    assert info["gpu_faults"] == [{"index": 0, "reason": "XID 79 (fell off the bus)"}]
    spare = await two_gpu_worker(fleet, "spare")
    assert (await spare.next_offer())["job_id"] == job["id"]
    [audited] = await fleet.audit(type="gpu.fault", target=sick.id)
    assert audited["detail"]["gpu_index"] == 0 and audited["detail"]["job_id"] == job["id"]
    metrics = (await fleet.admin.get("/metrics")).text
    assert 'gpufleet_gpu_faults_total{kind="xid"} 1.0' in metrics
    assert await delivery.deliver_due(fleet.ctx) == 1
    [sent] = receiver.wait_for(1)
    payload = json.loads(sent.body)
    assert payload["event"] == "gpu.fault" and payload["gpu_index"] == 0
    assert payload["worker"]["id"] == sick.id and payload["job_id"] == job["id"]


@pytest.mark.parametrize(
    ("reading", "reason"),
    [
        ({"ecc_uncorrected": 2}, "2 uncorrectable ECC error(s)"),
        ({"lost": True}, "fell off the bus (GPU is lost)"),
        ({"remap_failed": True}, "a row remapping failed"),
        ({"retired_pending": True}, "memory pages pending retirement: the GPU needs a reset"),
    ],
)
async def test_each_fatal_reading_takes_its_gpu_out(
    fleet: Fleet, reading: dict[str, Any], reason: str
) -> None:
    agent = await two_gpu_worker(fleet, "gpu-box")

    beat = await agent.heartbeat(status="idle", gpu_health=[{"index": 1, **reading}])

    assert beat.status_code == 200, beat.text
    info = await agent.info()
    assert info["gpu_faults"] == [{"index": 1, "reason": reason}]
    assert info["gpu_count"] == 1


async def test_heat_throttling_and_a_harmless_xid_take_nothing_out(fleet: Fleet) -> None:
    agent = await two_gpu_worker(fleet, "warm")
    health = [
        {"index": 0, "temperature_c": 95, "throttle": ["hardware thermal slowdown"]},
        {"index": 1, "xids": [13, 31], "ecc_uncorrected": 0},
    ]

    load = [{"index": 0, "utilization_pct": 99}, {"index": 1, "utilization_pct": 1}]

    beat = await agent.heartbeat(status="idle", gpu_health=health, gpu_stats=load)

    assert beat.status_code == 200
    assert await agents_service.flush_heartbeats(fleet.ctx) == 1  # a sign of life, kept
    info = await agent.info()
    assert (info["gpu_faults"], info["gpu_count"]) == ([], 2)
    assert await fleet.audit(type="gpu.fault") == []
    shown = {s["index"]: (s["temperature_c"], s["throttle"]) for s in info["gpu_stats"]}
    assert shown == {0: (95.0, "hardware thermal slowdown"), 1: (None, None)}


async def test_a_fault_is_kept_until_the_worker_registers_again(fleet: Fleet) -> None:
    agent = await two_gpu_worker(fleet, "box")
    await agent.heartbeat(status="idle", gpu_health=[{"index": 0, "lost": True}])
    await agent.heartbeat(status="idle", gpu_health=[{"index": 0, "lost": True}])
    assert len(await fleet.audit(type="gpu.fault")) == 1  # said once, not every heartbeat

    again = await agent.register(gpu_count=2, gpus=TWO_GPUS, gpu_health=[{"index": 0}])

    assert again.status_code == 200
    info = await agent.info()
    assert (info["gpu_faults"], info["gpu_count"]) == ([], 2)


async def test_a_failing_preflight_keeps_the_worker_from_jobs_until_it_passes(
    fleet: Fleet,
) -> None:
    failing = {"ok": False, "output": "checking disks\nnvme0: read-only file system\n"}
    agent = await fleet.create_worker("checked")
    await agent.connect(gpu_count=1, preflight=failing)
    job = await fleet.submit()

    assert agent.stream is not None
    assert [e for e in await agent.stream.collect(0.3) if e["type"] == "job_submit"] == []
    listed = (await fleet.admin.get("/api/admin/workers")).json()["workers"]
    [shown] = [w for w in listed if w["id"] == agent.id]
    assert shown["presence"] == "unhealthy"
    assert shown["preflight_error"] == failing["output"].strip()
    waiting = await fleet.job(job["id"])
    assert waiting["status"] == "queued"
    [row] = [r for r in waiting["waiting"]["workers"] if r["name"] == "checked"]
    assert row["reasons"] == ["is unhealthy: its preflight fails"]
    assert len(await fleet.audit(type="worker.unhealthy", target=agent.id)) == 1
    # Failing otherwise at its next run: the pages show the latest output, still out of jobs.
    later = {"ok": False, "output": "checking disks\nnvme0: no such device\n"}
    assert (await agent.heartbeat(status="idle", preflight=later)).status_code == 200
    info = await agent.info()
    assert (info["preflight_error"], info["presence"]) == (later["output"].strip(), "unhealthy")
    assert len(await fleet.audit(type="worker.unhealthy", target=agent.id)) == 1

    assert (await agent.heartbeat(status="idle", preflight={"ok": True})).status_code == 200

    assert (await agent.next_offer())["job_id"] == job["id"]
    assert (await agent.info())["preflight_error"] is None
    assert len(await fleet.audit(type="worker.healthy", target=agent.id)) == 1


async def test_an_agent_registering_again_without_a_preflight_is_healthy(fleet: Fleet) -> None:
    agent = await fleet.create_worker("restarted")
    await agent.connect(gpu_count=1, preflight={"ok": False, "output": "broken"})
    assert (await agent.info())["presence"] == "unhealthy"

    assert (await agent.register(gpu_count=1)).status_code == 200  # as SimpleTuner's does

    info = await agent.info()
    assert info["preflight_error"] is None and info["presence"] != "unhealthy"
    assert len(await fleet.audit(type="worker.healthy", target=agent.id)) == 1


async def test_a_preflight_failing_before_a_job_gives_the_offer_back_at_once(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("first")
    job = await fleet.submit(max_retries=0)
    offer = await agent.next_offer()
    spare = await fleet.online_worker("spare")

    beat = await agent.heartbeat(status="idle", preflight={"ok": False, "output": "no GPU"})

    assert beat.status_code == 200
    assert (await spare.next_offer())["job_id"] == job["id"]
    detail = await fleet.job(job["id"])
    assert [a["status"] for a in detail["attempt_history"]] == ["withdrawn", "offered"]
    assert detail["attempt_history"][0]["id"] == offer["attempt_id"]


@pytest.mark.parametrize(
    "health",
    [
        {"gpu_health": [{"index": -1}]},
        {"gpu_health": [{"index": 0, "xids": list(range(17))}]},
        {"gpu_health": [{"index": 0, "ecc_uncorrected": -3}]},
        {"gpu_health": "sick"},
        {"preflight": {"output": "no ok"}},
        {"preflight": {"ok": False, "output": "x" * 100_001}},
    ],
)
async def test_a_malformed_health_report_is_refused_with_422(
    fleet: Fleet, health: dict[str, Any]
) -> None:
    agent = await fleet.online_worker("box")

    answer = await agent.heartbeat(status="idle", **health)

    assert answer.status_code == 422
    assert (await agent.info())["gpu_faults"] == []


async def could_not_start(fleet: Fleet, agent: Agent) -> None:
    job = await fleet.submit(max_retries=0)
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    await agent.finish(offer, "failed", error="could not start: no such file")


@both_databases
async def test_three_infrastructure_failures_in_a_row_drain_the_worker_until_an_admin_undrains(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("flaky")
    await could_not_start(fleet, agent)
    await could_not_start(fleet, agent)
    job = await fleet.submit()
    await agent.finish(await running(agent, job))  # a sound end: the count starts again
    assert (await agent.info())["infra_failures"] == 0
    for _ in range(3):
        await could_not_start(fleet, agent)

    info = await agent.info()
    assert info["drained"] is True and info["status"] == "draining"
    assert info["infra_failures"] == 3
    assert "circuit breaker" in info["drain_reason"]
    assert agent.stream is not None
    assert "circuit breaker" in (await agent.stream.expect("drain"))["reason"]
    [drained] = await fleet.audit(type="worker.drained", target=agent.id)
    assert drained["detail"]["breaker"] is True
    assert "gpufleet_breaker_trips_total 1.0" in (await fleet.admin.get("/metrics")).text
    waiting = await fleet.submit()

    key = await fleet.mint_key("queue.read", "queue.submit", "metrics.read")
    async with fleet.client(headers={"Authorization": f"Bearer {key['key']}"}) as user:
        refused = await user.post(f"/api/admin/workers/{agent.id}/undrain")
    assert refused.status_code == 403
    assert (await agent.info())["drained"] is True

    lifted = await fleet.admin.post(f"/api/admin/workers/{agent.id}/undrain")
    assert lifted.status_code == 200
    assert (lifted.json()["drain_reason"], lifted.json()["infra_failures"]) == (None, 0)
    await agent.stream.expect("undrain")
    assert (await agent.next_offer())["job_id"] == waiting["id"]


async def test_a_job_that_could_not_start_elsewhere_either_counts_against_no_second_worker(
    fleet: Fleet,
) -> None:
    """Poison jobs drain no fleet: a job that failed to start on one worker and then on
    another is the suspect (the poison rule's side of the coin); only its first failure
    counts against a worker. Before, the chaos tier's three poison jobs drained all four
    workers and every other job stayed queued."""
    first = await fleet.online_worker("first")
    poison = await fleet.submit(max_retries=2, retry_on=["lost", "failed"])
    offer = await first.next_offer()
    assert offer["job_id"] == poison["id"]
    second = await fleet.online_worker("second")  # joins once the job avoids `first`
    await first.finish(offer, "failed", error="could not start: no such file")
    assert (await first.info())["infra_failures"] == 1
    again = await second.next_offer()
    assert again["job_id"] == poison["id"]
    await second.finish(again, "failed", error="could not start: no such file")
    assert (await second.info())["infra_failures"] == 0
    assert (await second.info())["drained"] is False


async def test_the_breaker_set_to_zero_never_drains(fleet: Fleet) -> None:
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"drain_after_infra_failures": 0})
    agent = await fleet.online_worker("flaky")
    for _ in range(4):
        await could_not_start(fleet, agent)

    info = await agent.info()
    assert (info["drained"], info["infra_failures"]) == (False, 4)
