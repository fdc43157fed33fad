"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import re

import sqlalchemy as sa

from tests.api.conftest import Fleet, both_databases


def _value(text: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert match, f"{sample} not in the metrics"
    return float(match.group(1))


async def test_liveness_and_readiness_answer_without_credentials(fleet: Fleet) -> None:
    async with fleet.client() as anon:
        assert (await anon.get("/healthz")).json() == {"status": "ok"}
        ready = await anon.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


@both_databases
async def test_readiness_fails_when_the_schema_is_behind(fleet: Fleet) -> None:
    async with fleet.ctx.store.engine.begin() as conn:
        head = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar()
        await conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
    try:
        async with fleet.client() as anon:
            ready = await anon.get("/readyz")
        assert ready.status_code == 503 and "schema is behind" in ready.json()["detail"]
    finally:  # the database is shared by the module's tests
        async with fleet.ctx.store.engine.begin() as conn:
            await conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": head})


async def test_metrics_need_their_permission(fleet: Fleet) -> None:
    reader = await fleet.mint_key("queue.read")
    scraper = await fleet.mint_key("metrics.read")
    async with fleet.client() as anon:
        assert (await anon.get("/metrics")).status_code == 401
        assert (await anon.get("/metrics", headers={"X-API-Key": reader["key"]})).status_code == 403
        scraped = await anon.get("/metrics", headers={"X-API-Key": scraper["key"]})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")


async def test_the_histograms_and_counters_move_when_jobs_run(fleet: Fleet) -> None:
    before = (await fleet.admin.get("/metrics")).text
    assert _value(before, "gpufleet_dispatch_latency_seconds_count") == 0
    agent = await fleet.online_worker("gpu-1")
    ok = await fleet.submit()
    offer = await agent.next_offer()
    await agent.report(ok["id"], "running", attempt_id=offer["attempt_id"])
    await agent.report(ok["id"], "completed", attempt_id=offer["attempt_id"], exit_code=0)
    bad = await fleet.submit(max_retries=1, retry_on=["lost", "failed"])
    offer = await agent.next_offer()
    await agent.report(bad["id"], "failed", attempt_id=offer["attempt_id"], exit_code=2)
    await agent.heartbeat()
    after = (await fleet.admin.get("/metrics")).text
    assert _value(after, "gpufleet_dispatch_latency_seconds_count") == 3  # ok, bad, bad again
    assert _value(after, "gpufleet_time_to_gpu_seconds_count") == 1
    assert _value(after, 'gpufleet_requeues_total{reason="failed"}') == 1
    assert _value(after, "gpufleet_heartbeats_total") >= 1
    assert _value(after, 'gpufleet_jobs{status="completed"}') == 1
    assert _value(after, 'gpufleet_workers{status="busy"}') == 1
    assert _value(after, "gpufleet_queue_depth") == 0


@both_databases
async def test_a_replica_reports_itself_its_leadership_and_its_streams(fleet: Fleet) -> None:
    """On SQLite the one replica always leads."""
    first = (await fleet.admin.get("/metrics")).text
    assert _value(first, f'gpufleet_replica_info{{replica="{fleet.ctx.instance_id}"}}') == 1
    assert _value(first, "gpufleet_worker_streams") == 0
    await fleet.online_worker("gpu-1")
    await fleet.online_worker("gpu-2")

    after = (await fleet.admin.get("/metrics")).text

    assert _value(after, "gpufleet_worker_streams") == 2
    if not fleet.ctx.replicas.shared:  # replicas on PostgreSQL: tests/e2e/test_replicas.py
        assert _value(after, "gpufleet_replica_leader") == 1
        assert _value(after, "gpufleet_replicas") == 1
