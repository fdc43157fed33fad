"""`gpufleet server --log-format json`: every line a JSON object, labelled with its ids."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    FakeWorker,
    ServerProcess,
    WorkerProcess,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until


def _lines(server: ServerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log_path.read_text().splitlines() if line.strip()]


def test_json_logs_label_a_jobs_and_a_lost_workers_lines_and_leak_no_secret(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "orchestrator", None, **{"log-format": "json"})
    server.start()
    try:
        admin_key = server.admin_key
        tag = {"pool": unique("p")}
        w = FakeWorker(server, unique("w"), labels=tag)
        w.register()
        stream = w.connect()
        with server.admin() as admin:
            resp = admin.post(
                "/api/queue/submit",
                json={"config": {"command": ["true"]}, "target": "worker", "worker_labels": tag},
            )
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        offer = stream.next("job_submit")
        attempt = offer["attempt_id"]
        assert w.report(job_id, "acknowledged", attempt_id=attempt).status_code == 200
        assert w.report(job_id, "completed", attempt_id=attempt, exit_code=0).status_code == 200
        w.close()  # no more heartbeats: the health sweep declares it lost
        with server.admin() as admin:
            wait_until(
                lambda: admin.get(f"/api/admin/workers/{w.id}").json()["status"] == "offline",
                timeout=15,
                message="the silent worker to go offline",
            )
        lost = wait_until(
            lambda: [
                line
                for line in _lines(server)
                if line.get("worker_id") == w.id and "lost: no heartbeat" in line["message"]
            ],
            timeout=15,
            message="the line saying the worker was lost",
        )
    finally:
        server.kill(signal.SIGTERM)

    lines = _lines(server)  # json.loads fails the test on any line that is not JSON
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    assert lost[0]["level"] == "INFO"
    replica = lost[0]["replica"]
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert access and all(line["replica"] == replica for line in access)
    reports = [line for line in access if f"/api/workers/job/{job_id}/status" in line["message"]]
    assert len(reports) == 2
    assert all(line["worker_id"] == w.id and line["job_id"] == job_id for line in reports)
    text = server.log_path.read_text()
    assert w.token not in text
    assert admin_key not in text


def test_a_workers_json_logs_name_it_and_the_job_it_runs(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "orchestrator", None)
    server.start()
    try:
        tag = {"pool": unique("p")}
        worker = WorkerProcess(server, tmp_path, labels=tag, extra_args=("--log-format", "json"))
        worker.start()
        job_id = submit_job(server, tag, [sys.executable, "-c", "print('hi')"])
        wait_job(server, job_id, "completed")
        assert worker.wait() == 0  # ephemeral: one job, then it exits
    finally:
        server.kill(signal.SIGTERM)

    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines() if line]
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    registered = [line for line in lines if "registered" in line["message"]]
    assert registered and all(line["worker_id"] == worker.id for line in registered)
    about_job = [line for line in lines if line.get("job_id") == job_id]
    assert about_job and all(line["worker_id"] == worker.id for line in about_job)
    assert worker.token not in worker.log_path.read_text()


def test_the_embedded_local_runner_does_not_label_the_orchestrators_lines(tmp_path: Path) -> None:
    """The local runner is an agent inside the orchestrator's process: its id labels its own
    requests, not every line the process writes."""
    server = ServerProcess(
        tmp_path / "orchestrator", None, **{"log-format": "json", "local-gpus": "auto"}
    )
    server.start()
    try:
        with server.admin() as admin:
            wait_until(
                lambda: admin.get("/api/admin/workers/w_local").json()["status"] == "idle",
                timeout=15,
                message="the local runner to connect",
            )
            assert admin.get("/api/queue").status_code == 200
    finally:
        server.kill(signal.SIGTERM)

    lines = _lines(server)
    listing = [line for line in lines if '"GET /api/queue HTTP' in line["message"]]
    assert listing and all("worker_id" not in line for line in listing)
    beats = [
        line
        for line in lines
        if line["logger"] == "uvicorn.access" and "/api/workers/heartbeat" in line["message"]
    ]
    assert beats and all(line.get("worker_id") == "w_local" for line in beats)
