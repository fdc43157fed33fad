"""The fleet over time (#33): the `fleet-history` loop's step, run by the test on the fake
clock, on both databases: what a sample says per label group, its roll-up into quarters,
what is kept, the range a reader asks for, and the same series in Prometheus. And the fleet
every signed-in key sees, read-only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from gpufleet.server.services import agents as agents_service
from gpufleet.server.services import fleet_history
from gpufleet.store.tables import fleet_samples
from tests.api.conftest import Fleet, both_databases
from tests.api.test_ops import _value
from tests.api.test_policy import add_user, client_of

A100 = {"gpu": "a100"}
H100 = {"gpu": "h100"}
LOAD = [
    {"index": 0, "utilization_pct": 90.0, "memory_used_gb": 60.0, "memory_total_gb": 80.0},
    {"index": 1, "utilization_pct": 50.0, "memory_used_gb": 10.0, "memory_total_gb": 80.0},
]


async def history(fleet: Fleet, **params: str) -> dict[str, Any]:
    answer = await fleet.admin.get("/api/fleet/history", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def rows(fleet: Fleet, resolution_s: int) -> list[Any]:
    async with fleet.ctx.store.engine.connect() as conn:
        stmt = sa.select(fleet_samples).where(fleet_samples.c.resolution_s == resolution_s)
        return list(await conn.execute(stmt.order_by(fleet_samples.c.at)))


@both_databases
async def test_a_sample_says_busy_idle_gpu_load_queue_depth_and_wait_per_label_group(
    fleet: Fleet,
) -> None:
    big = await fleet.online_worker("big", gpu_count=2, labels=A100)
    await fleet.online_worker("small", gpu_count=1, labels=H100)
    job = await fleet.submit(worker_labels=A100, gpu_count=2)
    offer = await big.next_offer()
    fleet.clock.advance(30)  # it waited 30 s from submit to start
    await big.run(offer)
    await big.heartbeat(status="busy", current_job_id=job["id"], gpu_stats=LOAD)
    await agents_service.flush_heartbeats(fleet.ctx)
    await fleet.submit(worker_labels=A100, gpu_count=2)  # waits: big is busy
    await fleet.submit(gpu_count=8)  # waits in the whole fleet only: it asks no label

    await fleet_history.sample(fleet.ctx)

    whole = await history(fleet)
    assert whole["group"] == "" and whole["groups"] == ["", "gpu=a100", "gpu=h100"]
    (now,) = whole["samples"]
    assert (now["workers_busy"], now["workers_idle"], now["workers_unavailable"]) == (1, 1, 0)
    assert (now["gpus"], now["gpus_busy"], now["gpu_util_pct"]) == (3, 2, 70.0)
    assert now["queue_depth"] == 2
    assert (now["jobs_started"], now["wait_p50_s"], now["wait_p90_s"]) == (1, 30.0, 30.0)
    (a100,) = (await history(fleet, group="gpu=a100"))["samples"]
    assert (a100["workers_busy"], a100["workers_idle"], a100["queue_depth"]) == (1, 0, 1)
    assert a100["wait_p50_s"] == 30.0
    (h100,) = (await history(fleet, group="gpu=h100"))["samples"]
    assert (h100["workers_busy"], h100["workers_idle"], h100["queue_depth"]) == (0, 1, 0)
    assert (h100["jobs_started"], h100["wait_p50_s"], h100["gpu_util_pct"]) == (0, None, None)

    # The next sample counts only the jobs that started since this one.
    fleet.clock.advance(60)
    await fleet_history.sample(fleet.ctx)
    later = (await history(fleet))["samples"]
    assert [s["jobs_started"] for s in later] == [1, 0]
    assert later[1]["wait_p50_s"] is None

    # The same series in Prometheus, the newest sample's, by group.
    scraper = await fleet.mint_key("metrics.read")
    async with fleet.client(headers={"X-API-Key": scraper["key"]}) as prom:
        text = (await prom.get("/metrics")).text
    assert _value(text, 'gpufleet_fleet_workers{group="gpu=a100",state="busy"}') == 1
    assert _value(text, 'gpufleet_fleet_workers{group="",state="idle"}') == 1
    assert _value(text, 'gpufleet_fleet_queue_depth{group="gpu=a100"}') == 1
    assert _value(text, 'gpufleet_fleet_gpu_utilization_percent{group=""}') == 70
    assert _value(text, "gpufleet_time_to_gpu_seconds_count") == 1  # the wait's histogram


async def test_samples_roll_up_into_quarters_of_their_means_and_waits(fleet: Fleet) -> None:
    agent = await fleet.online_worker("w", labels=A100)
    fleet.clock.now = fleet.clock.now.replace(minute=0, second=0)  # a quarter starts
    await fleet_history.sample(fleet.ctx)  # idle
    fleet.clock.advance(300)
    job = await fleet.submit(worker_labels=A100)
    offer = await agent.next_offer()
    fleet.clock.advance(20)
    await agent.run(offer)  # waited 20 s
    fleet.clock.advance(280)
    await fleet_history.sample(fleet.ctx)  # busy, one started
    fleet.clock.advance(200)
    await agent.finish(offer)
    await fleet.submit(worker_labels={"gpu": "none"})  # never runs
    await fleet_history.sample(fleet.ctx)  # idle again, one queued
    assert (await fleet.job(job["id"]))["status"] == "completed"

    quarters = [r for r in await rows(fleet, 900) if r.group == ""]
    (quarter,) = quarters
    assert quarter.at.replace(tzinfo=None) == fleet.clock.now.replace(
        minute=0, second=0, tzinfo=None
    )
    assert abs(quarter.workers_busy - 1 / 3) < 1e-9 and abs(quarter.workers_idle - 2 / 3) < 1e-9
    assert abs(quarter.queue_depth - 1 / 3) < 1e-9
    assert (quarter.jobs_started, quarter.wait_p50_s) == (1, 20.0)

    # The first sample of the next quarter closes this one and begins its own.
    fleet.clock.advance(200)
    await fleet_history.sample(fleet.ctx)
    quarters = [r for r in await rows(fleet, 900) if r.group == ""]
    assert len(quarters) == 2 and quarters[0].jobs_started == 1
    assert quarters[1].workers_idle == 1 and quarters[1].jobs_started == 0
    week = await history(fleet, range="week")
    assert week["resolution_s"] == 900 and len(week["samples"]) == 2


async def test_what_is_kept_is_a_day_of_samples_and_a_week_of_quarters(fleet: Fleet) -> None:
    await fleet.online_worker("w", labels=A100)
    fleet.clock.now = fleet.clock.now.replace(minute=0, second=0)  # a quarter starts
    for _ in range(20):  # ten days, a sample every twelve hours
        await fleet_history.sample(fleet.ctx)
        fleet.clock.advance(12 * 3600)
    await fleet_history.sample(fleet.ctx)

    now = fleet.clock.now
    samples, quarters = await rows(fleet, 0), await rows(fleet, 900)
    assert len(samples) == 3 * 2  # the last day's (its edge included), two groups each
    assert min(r.at for r in samples) >= now - timedelta(days=1)
    assert len(quarters) == 15 * 2  # the last week's
    assert min(r.at for r in quarters) >= now - timedelta(days=7)


async def test_a_worker_of_sixty_labels_is_sampled_in_at_most_sixteen_groups(fleet: Fleet) -> None:
    await fleet.online_worker("w", labels={f"k{i:03}": "v" for i in range(60)})

    written = await fleet_history.sample(fleet.ctx)

    assert len(written) == 16 and written[0].group == ""
    assert len(await rows(fleet, 0)) == 16


async def test_the_range_and_group_are_checked_with_a_clear_answer(fleet: Fleet) -> None:
    for bad, words in [
        ("fortnight", "range is hour, day, week, or a span such as 30m"),
        ("0m", "range is hour, day"),
        ("8d", "at most 7d"),
        ("99999999999999d", "range is hour, day"),
        ("-1h", "range is hour, day"),
        ("x" * 41, "at most 40 characters"),
    ]:
        answer = await fleet.admin.get("/api/fleet/history", params={"range": bad})
        assert answer.status_code == 422, (bad, answer.text)
        assert words in answer.text, (bad, answer.text)
    answer = await fleet.admin.get("/api/fleet/history", params={"group": "a100"})
    assert answer.status_code == 422 and "key=value" in answer.json()["detail"]
    ok = [await history(fleet, range=r) for r in ("hour", "day", "3d", "week", "90m")]
    assert [(h["range_s"], h["resolution_s"]) for h in ok] == [
        (3600, 0),
        (86400, 0),
        (3 * 86400, 900),
        (7 * 86400, 900),
        (5400, 0),
    ]


ADMIN_ONLY = {"admin_labels", "capabilities", "token_issued_at", "hostname", "address"}


async def test_a_researcher_and_a_viewer_see_the_fleet_but_cannot_change_it(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("common", gpu_count=2, labels=A100)
    researcher = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    viewer = await client_of(fleet, await add_user(fleet, "vera", "viewer"), "queue.read")
    scraper = await client_of(fleet, await add_user(fleet, "mo", "lead"), "metrics.read")
    clients: list[httpx.AsyncClient] = [researcher, viewer, scraper]
    for client in clients:
        listed = await client.get("/api/fleet/workers")
        assert listed.status_code == 200, listed.text
        (seen,) = listed.json()["workers"]
        assert (seen["name"], seen["gpu_count"], seen["labels"]) == ("common", 2, A100)
        assert seen["status"] == "idle" and listed.json()["counts"]["idle"] == 1
        assert not ADMIN_ONLY & set(seen), seen
        assert not any(secret in listed.text for secret in fleet.secrets)
        assert (await client.get("/api/fleet/history")).status_code == 200
        assert (await client.get("/api/admin/workers")).status_code == 403
        for method, path in [
            ("POST", f"/api/admin/workers/{agent.id}/drain"),
            ("POST", f"/api/admin/workers/{agent.id}/token"),
            ("DELETE", f"/api/admin/workers/{agent.id}"),
            ("PUT", f"/api/admin/workers/{agent.id}/labels"),
        ]:
            answer = await client.request(method, path, json={"labels": {}})
            assert answer.status_code == 403, (method, path, answer.text)
    info = await agent.info()
    assert info["drained"] is False and info["labels"] == A100
    async with fleet.client() as anon:
        assert (await anon.get("/api/fleet/workers")).status_code == 401
        assert (await anon.get("/api/fleet/history")).status_code == 401


@both_databases
async def test_a_sample_counts_the_workers_in_the_database_not_a_row_each(fleet: Fleet) -> None:
    """Workers alike are one row of the sample's read (#39 goal 3: reading every worker's
    record each minute was the fleet-history loop's cost at 10,000 workers), and the sample
    says what it said when it read them all."""
    from tests.api.test_job_cost import counting

    same = [await fleet.online_worker(f"same-{i}", gpu_count=2, labels=A100) for i in range(4)]
    gone = await fleet.online_worker("gone", gpu_count=4, labels=A100)
    fleet.clock.advance(fleet.ctx.settings.heartbeat_timeout - 1)
    for agent in same:  # the four stay online; the fifth goes silent
        assert (await agent.heartbeat()).status_code == 200
    await agents_service.flush_heartbeats(fleet.ctx)
    fleet.clock.advance(2)
    await fleet.heartbeat_sweep()
    assert (await gone.info())["status"] == "offline"

    with counting(fleet, this_task=True) as seen:
        await fleet_history.sample(fleet.ctx)

    worker_reads = [s for s in seen if "FROM workers" in s and "workers.capabilities" in s]
    assert worker_reads == []
    (now,) = (await history(fleet, group="gpu=a100"))["samples"]
    assert (now["workers_idle"], now["workers_unavailable"], now["gpus"]) == (4, 1, 8)
