"""A real `gpufleet server` process driven over HTTP and SSE, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import FakeWorker, ServerProcess, serving, unique
from tests.waiting import wait_until

# The orchestrator on PostgreSQL runs a job's whole run and a restart (what the database kept):
# the rest run once, on SQLite. The health loop's offline, withdrawal and fencing are the same
# queries on either backend and run on both in tests/api/test_failures.py; on PostgreSQL end
# to end in tests/e2e/test_replicas.py (the sweeps' leader marking a silent worker offline).
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str | None
) -> Iterator[ServerProcess]:
    """A worker lost 2 s after it was last heard, an offer withdrawn 1.5 s after it was sent
    (the tier's 3 and 3): five of these tests wait on one or the other (#32)."""
    flags = {"heartbeat-timeout": 2, "ack-timeout": 1.5}
    yield from serving(tmp_path_factory.mktemp("orchestrator"), database_url, **flags)


def _pool(server: ServerProcess, n: int = 1, **kw: Any) -> tuple[list[FakeWorker], dict[str, str]]:
    tag = {"pool": unique("p")}
    return [FakeWorker(server, unique("w"), labels=tag, **kw) for _ in range(n)], tag


def _submit(server: ServerProcess, tag: dict[str, str], **body: Any) -> dict[str, Any]:
    payload = {"config": {"command": ["true"]}, "target": "worker", "worker_labels": tag, **body}
    with server.admin() as admin:
        resp = admin.post("/api/queue/submit", json=payload)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _job(server: ServerProcess, job_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        return dict(admin.get(f"/api/queue/{job_id}").json())


def _worker(server: ServerProcess, worker_id: str) -> dict[str, Any]:
    with server.admin() as admin:
        return dict(admin.get(f"/api/admin/workers/{worker_id}").json())


def test_a_job_goes_from_submit_to_completed_through_a_registered_worker(
    server: ServerProcess,
) -> None:
    (w,), tag = _pool(server)
    w.register(gpu_count=2)
    stream = w.connect()
    job = _submit(server, tag, gpu_count=2)
    offer = stream.next("job_submit")
    assert offer["job_id"] == job["id"] and offer["config"] == {"command": ["true"]}
    attempt = offer["attempt_id"]
    assert w.report(job["id"], "acknowledged", attempt_id=attempt).status_code == 200
    assert (
        w.report(
            job["id"],
            "running",
            attempt_id=attempt,
            progress={"step": 5, "total": 10, "metrics": {"loss": 0.5}},
        ).status_code
        == 200
    )
    assert _job(server, job["id"])["progress"]["step"] == 5
    assert w.report(job["id"], "completed", attempt_id=attempt, exit_code=0).status_code == 200
    done = _job(server, job["id"])
    assert done["status"] == "completed"
    assert [a["status"] for a in done["attempt_history"]] == ["completed"]
    assert _worker(server, w.id)["status"] == "idle"
    w.close()


@sqlite_only
def test_the_simpletuner_agent_shapes_run_a_job_end_to_end(server: ServerProcess) -> None:
    (w,), tag = _pool(server)
    answer = w.register(
        name="st-agent",
        gpu_info={"name": "NVIDIA A100", "vram_gb": 80, "count": 1, "accelerator": "cuda"},
        persistent=True,
        current_job_id=None,
        gpu_count=None,
        gpu_name=None,
        gpu_vram_gb=None,
        accelerator_type=None,
    )
    assert answer["worker_id"] == w.id
    listed = _worker(server, w.id)
    assert (listed["gpu_count"], listed["gpu_name"], listed["gpu_vram_gb"]) == (
        1,
        "NVIDIA A100",
        80,
    )
    stream = w.connect()
    job = _submit(server, tag)
    offer = stream.next("job_submit")
    assert offer["upload_endpoint"]  # the SimpleTuner agent crashes without it
    for status in ("starting", "training", "completed"):
        assert w.report(job["id"], status, error=None).status_code == 200
    assert _job(server, job["id"])["status"] == "completed"
    with w.http() as c:
        assert (
            c.post(
                "/api/workers/heartbeat",
                json={"worker_id": w.id, "status": "idle", "current_job_id": None},
            ).status_code
            == 200
        )
        assert c.get("/api/workers/queue", params={"worker_id": w.id}).json() == {"has_jobs": False}
    w.close()


@sqlite_only
def test_rotating_a_token_closes_the_open_stream_and_refuses_the_old_token(
    server: ServerProcess,
) -> None:
    (w,), _ = _pool(server)
    w.register()
    stream = w.connect()
    with server.admin() as admin:
        new = admin.post(f"/api/admin/workers/{w.id}/token").json()["token"]
    assert stream.closed.wait(5), "the stream opened with the old token stayed open"
    assert w.post("/api/workers/register", {"name": "x"}).status_code == 401
    w.token = new
    assert w.post("/api/workers/register", {"name": "x"}).status_code == 200
    w.close()


@sqlite_only
def test_deleting_an_online_worker_is_refused_until_it_is_offline(server: ServerProcess) -> None:
    (w,), _ = _pool(server)
    w.register()
    w.connect()
    with server.admin() as admin:
        refused = admin.delete(f"/api/admin/workers/{w.id}")
        assert refused.status_code == 409
        assert "offline" in refused.json()["detail"]
        assert w.post("/api/workers/disconnect", {"worker_id": w.id}).status_code == 200
        assert admin.delete(f"/api/admin/workers/{w.id}").status_code == 200
        assert admin.get(f"/api/admin/workers/{w.id}").status_code == 404
    assert w.post("/api/workers/register", {"name": "x"}).status_code == 401
    w.close()


@sqlite_only
def test_a_silent_worker_goes_offline_and_its_job_is_retried_until_retries_run_out(
    server: ServerProcess,
) -> None:
    workers, tag = _pool(server, n=2)
    job = _submit(server, tag, max_retries=1)
    for w in workers:  # each takes the job, acknowledges, then falls silent
        w.register()
        stream = w.connect()
        offer = stream.next("job_submit", timeout=15)
        assert offer["job_id"] == job["id"]
        w.report(job["id"], "running", attempt_id=offer["attempt_id"])
        w.close()
        wait_until(
            lambda w=w: _worker(server, w.id)["status"] == "offline",
            timeout=15,
            message="worker offline",
        )
    failed = wait_until(
        lambda: (j := _job(server, job["id"]))["status"] == "failed" and j,
        timeout=15,
        message="job failed after retries",
    )
    assert failed["attempts"] == 2
    assert [a["status"] for a in failed["attempt_history"]] == ["lost", "lost"]
    assert "no retries left" in failed["error"]


@sqlite_only
def test_an_unacknowledged_offer_is_withdrawn_and_offered_again(server: ServerProcess) -> None:
    (w,), tag = _pool(server)
    w.register()
    w.keep_alive()
    stream = w.connect()
    job = _submit(server, tag)
    first = stream.next("job_submit")
    second = first
    while second["attempt_id"] == first["attempt_id"]:  # an offer is re-sent until acked
        second = stream.next("job_submit", timeout=10)
    assert second["attempt_id"] != first["attempt_id"]
    history = _job(server, job["id"])["attempt_history"]
    assert history[0]["status"] == "withdrawn"
    # The first attempt is fenced off: acknowledging it now is refused, and the cancel
    # that refusal queues is not sent, since it would stop the live second attempt.
    late = w.report(job["id"], "acknowledged", attempt_id=first["attempt_id"])
    assert late.status_code == 409
    assert w.report(job["id"], "acknowledged", attempt_id=second["attempt_id"]).status_code == 200
    w.close()


@sqlite_only
def test_a_stale_worker_is_fenced_off_and_told_to_cancel(server: ServerProcess) -> None:
    workers, tag = _pool(server, n=2)
    stale, fresh = workers
    stale.register()
    stale_stream = stale.connect()
    fresh.keep_alive()
    job = _submit(server, tag)
    offer = stale_stream.next("job_submit")
    stale.report(job["id"], "running", attempt_id=offer["attempt_id"])
    # The stale worker stops heartbeating (frozen); its job moves to the fresh worker.
    wait_until(
        lambda: _worker(server, stale.id)["status"] == "offline",
        timeout=15,
        message="stale offline",
    )
    fresh.register()
    fresh_offer = fresh.connect().next("job_submit", timeout=10)
    assert fresh_offer["job_id"] == job["id"]
    fresh.report(job["id"], "running", attempt_id=fresh_offer["attempt_id"])
    # It wakes and reports completion of the old attempt: refused, never recorded.
    late = stale.report(job["id"], "completed", attempt_id=offer["attempt_id"])
    assert late.status_code == 409
    assert _job(server, job["id"])["status"] == "running"
    assert (
        fresh.report(job["id"], "completed", attempt_id=fresh_offer["attempt_id"]).status_code
        == 200
    )
    assert _job(server, job["id"])["status"] == "completed"
    for w in workers:
        w.close()


def test_a_job_in_flight_survives_an_orchestrator_restart(server: ServerProcess) -> None:
    (w,), tag = _pool(server)
    w.register()
    stream = w.connect()
    job = _submit(server, tag)
    offer = stream.next("job_submit")
    w.report(job["id"], "running", attempt_id=offer["attempt_id"])
    server.kill()
    assert stream.closed.wait(5)
    # Register as soon as it is back: a restarted orchestrator gives its workers one heartbeat
    # timeout (2 s here) before it counts them lost, so nothing slow may come in between.
    server.start()  # same port, data folder and database
    answer = w.register(current_job_id=job["id"], current_attempt_id=offer["attempt_id"])
    assert answer["resume_job"] == {"job_id": job["id"], "attempt_id": offer["attempt_id"]}
    assert answer["abandon_job"] is False
    w.connect()
    assert w.report(job["id"], "completed", attempt_id=offer["attempt_id"]).status_code == 200
    done = _job(server, job["id"])
    assert done["status"] == "completed" and done["attempts"] == 1
    # A worker that claims a job it does not hold is told to abandon it.
    assert w.register(current_job_id=job["id"])["abandon_job"] is True
    w.close()


@sqlite_only
def test_every_call_without_credentials_is_refused(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as anon:
        for method, path in [
            ("GET", "/api/admin/workers"),
            ("POST", "/api/queue/submit"),
            ("GET", "/api/queue"),
            ("GET", "/api/audit"),
            ("POST", "/api/workers/register"),
            ("GET", "/api/configs"),
        ]:
            resp = anon.request(method, path, json={})
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.json()["detail"]


@sqlite_only
def test_a_worker_token_cannot_report_on_another_workers_job(server: ServerProcess) -> None:
    (owner, other), tag = _pool(server, n=2)
    owner.register()
    job = _submit(server, tag)
    stream = owner.connect()
    stream.next("job_submit")
    forbidden = other.report(job["id"], "completed")
    assert forbidden.status_code == 403
    assert "never offered" in forbidden.json()["detail"]
    assert (
        other.post(
            f"/api/workers/job/{job['id']}/logs", {"lines": [{"text": "forged"}]}
        ).status_code
        == 403
    )
    assert _job(server, job["id"])["status"] == "offered"
    owner.close()
