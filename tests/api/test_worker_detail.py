"""One worker's page behind the API: what it reported, admin labels, GPU load, job history."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from gpufleet.server.services import agents as agents_service
from tests.api.conftest import Fleet

GPU_STATS = [
    {"index": 0, "utilization_pct": 87.0, "memory_used_gb": 61.5, "memory_total_gb": 80.0},
    {"index": 1, "utilization_pct": 3.0, "memory_used_gb": 0.4, "memory_total_gb": 80.0},
]


async def _detail(fleet: Fleet, worker_id: str) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/admin/workers/{worker_id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


async def test_admin_labels_win_over_reported_ones_are_audited_and_match_queued_jobs(
    fleet: Fleet,
) -> None:
    agent = await fleet.create_worker("labelled")
    await agent.connect(gpu_count=1, labels={"pool": "spot", "zone": "eu"})
    job = await fleet.submit(worker_labels={"pool": "reserved"})
    assert (await fleet.job(job["id"]))["status"] == "queued"

    answer = await fleet.admin.put(
        f"/api/admin/workers/{agent.id}/labels", json={"labels": {"pool": "reserved"}}
    )

    assert answer.status_code == 200, answer.text
    assert (await agent.next_offer())["job_id"] == job["id"]  # matched on the admin label
    detail = await _detail(fleet, agent.id)
    assert detail["labels"] == {"pool": "reserved", "zone": "eu"}
    assert detail["admin_labels"] == {"pool": "reserved"}
    assert detail["reported_labels"] == {"pool": "spot", "zone": "eu"}
    [event] = await fleet.audit(type="worker.labels_set")
    assert event["target"] == agent.id
    assert event["detail"]["old"] == {} and event["detail"]["new"] == {"pool": "reserved"}

    # Removed, the worker's own label shows through again.
    answer = await fleet.admin.put(f"/api/admin/workers/{agent.id}/labels", json={"labels": {}})
    assert answer.json()["labels"] == {"pool": "spot", "zone": "eu"}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"labels": {"bad key": "x"}}, "label key 'bad key' is not valid"),
        ({"labels": {"gpu": "a" * 300}}, "longer than 256 characters"),
        ({"labels": {"gpu": 3}}, "labels.gpu"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "labels"),
        ({"labels": {"ok": "1"}, "extra": True}, "extra"),
        ({}, "labels"),
    ],
)
async def test_bad_admin_labels_are_refused_saying_what_to_fix(
    fleet: Fleet, body: dict[str, Any], says: str
) -> None:
    agent = await fleet.create_worker("strict")

    answer = await fleet.admin.put(f"/api/admin/workers/{agent.id}/labels", json=body)

    assert answer.status_code == 422, answer.text
    assert says in answer.text
    assert (await _detail(fleet, agent.id))["admin_labels"] == {}


async def test_labels_of_a_worker_that_does_not_exist_answer_404(fleet: Fleet) -> None:
    answer = await fleet.admin.put("/api/admin/workers/w_nope/labels", json={"labels": {}})

    assert answer.status_code == 404
    assert "no worker w_nope" in answer.json()["detail"]


async def test_gpu_load_from_heartbeats_shows_while_the_worker_is_online(fleet: Fleet) -> None:
    agent = await fleet.create_worker("nvml")
    await agent.connect(
        gpu_count=2,
        gpu_name="NVIDIA H100 80GB HBM3",
        gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gb": 80.0}],
        driver_version="550.90.07",
        cuda_version="12.4",
        agent="gpufleet/0.1.0",
        hostname="gpu-box-7",
    )

    beat = await agent.heartbeat(status="idle", gpu_stats=GPU_STATS)
    await agents_service.flush_heartbeats(fleet.ctx)

    assert beat.status_code == 200, beat.text
    detail = await _detail(fleet, agent.id)
    # A heartbeat with no health (an older agent) leaves the heat unknown.
    unknown = {"temperature_c": None, "throttle": None}
    assert detail["gpu_stats"] == [{**g, **unknown} for g in GPU_STATS]
    assert detail["gpu_stats_at"] is not None
    assert detail["agent"] == "gpufleet 0.1.0"
    assert detail["hostname"] == "gpu-box-7"
    assert detail["address"]  # where it registered from
    assert (detail["driver_version"], detail["cuda_version"]) == ("550.90.07", "12.4")
    assert detail["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"

    # A heartbeat that changes the worker's state (a transaction of its own) keeps it too.
    fresher = [{**GPU_STATS[0], "utilization_pct": 12.5}]
    await agent.heartbeat(status="idle", current_job_id="j_unheld", gpu_stats=fresher)
    assert (await _detail(fleet, agent.id))["gpu_stats"] == [{**g, **unknown} for g in fresher]

    assert (await agent.disconnect()).status_code == 200
    assert (await _detail(fleet, agent.id))["gpu_stats"] == []  # offline: nothing stale


async def test_a_simpletuner_heartbeat_is_accepted_unchanged_and_shows_no_gpu_load(
    fleet: Fleet,
) -> None:
    agent = await fleet.create_worker("simpletuner")
    await agent.connect(
        gpu_info={"name": "NVIDIA A100", "vram_gb": 80, "count": 1, "driver": "535"},
        persistent=True,
        features=None,
    )

    beat = await agent.heartbeat(status="idle", current_job_id=None)
    await agents_service.flush_heartbeats(fleet.ctx)

    assert beat.status_code == 200, beat.text
    detail = await _detail(fleet, agent.id)
    assert detail["agent"] == "SimpleTuner agent"
    assert detail["gpu_stats"] == [] and detail["gpu_stats_at"] is None
    assert detail["driver_version"] == "535"


@pytest.mark.parametrize(
    "stats",
    [
        [{"index": 0, "utilization_pct": 150}],
        [{"index": -1}],
        [{"utilization_pct": 5}],
        [{"index": 0, "memory_used_gb": -2}],
        "busy",
    ],
)
async def test_impossible_gpu_load_is_refused_saying_which_field(fleet: Fleet, stats: Any) -> None:
    agent = await fleet.online_worker("liar")

    beat = await agent.heartbeat(status="idle", gpu_stats=stats)

    assert beat.status_code == 422, beat.text
    assert "gpu_stats" in beat.text


async def test_the_job_history_lists_the_workers_attempts_newest_first(fleet: Fleet) -> None:
    agent = await fleet.online_worker("historian", labels={"lane": "history"})
    done = []
    for _ in range(2):
        job = await fleet.submit(config_name=None, worker_labels={"lane": "history"})
        offer = await agent.next_offer()
        await agent.run(offer)
        await agent.finish(offer, exit_code=0)
        done.append(job["id"])
        fleet.clock.advance(1)

    detail = await _detail(fleet, agent.id)

    history = detail["history"]
    assert [h["job_id"] for h in history] == done[::-1]
    assert history[0]["status"] == "completed" and history[0]["job_status"] == "completed"
    assert history[0]["number"] == 1 and history[0]["exit_code"] == 0


async def test_the_job_history_reads_the_worker_attempts_index(fleet: Fleet) -> None:
    """A worker's page reads its newest attempts through ix_attempts_worker, not a scan of
    every attempt of the fleet."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if "FROM job_attempts JOIN jobs" in statement:
            seen.append((statement, params))

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        async with fleet.ctx.store.read() as q:
            await q.attempts_of_worker("w_any", 25)
            statement, params = seen[-1]
            plan = " / ".join(
                str(row[-1])
                for row in await q.conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
            )
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert "ix_attempts_worker" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
