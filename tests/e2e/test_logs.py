"""`--log-format json`: every line of a `gpufleet server` and a `gpufleet worker` a JSON
object, labelled with its ids.

One orchestrator for the module, with its embedded local runner (its own test reads what that
adds): each test reads the lines of its own job, worker or request.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    FakeWorker,
    ServerProcess,
    WorkerProcess,
    serving,
    submit_job,
    unique,
    wait_job,
)
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = {"log-format": "json", "local-gpus": "auto"}
    yield from serving(tmp_path_factory.mktemp("orchestrator"), None, **flags)


def _lines(server: ServerProcess) -> list[dict[str, Any]]:
    """Every line the server has written whole so far (it may be writing the next one)."""
    text = server.log_path.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def test_json_logs_label_a_jobs_and_a_lost_workers_lines_and_leak_no_secret(
    server: ServerProcess,
) -> None:
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


def test_a_workers_json_logs_name_it_and_the_job_it_runs(
    server: ServerProcess, tmp_path: Path
) -> None:
    tag = {"pool": unique("p")}
    worker = WorkerProcess(server, tmp_path, labels=tag, extra_args=("--log-format", "json"))
    try:
        worker.start()
        job_id = submit_job(server, tag, [sys.executable, "-c", "print('hi')"])
        wait_job(server, job_id, "completed")
        assert worker.wait() == 0  # ephemeral: one job, then it exits
    finally:
        worker.stop()

    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines() if line]
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    registered = [line for line in lines if "registered" in line["message"]]
    assert registered and all(line["worker_id"] == worker.id for line in registered)
    about_job = [line for line in lines if line.get("job_id") == job_id]
    assert about_job and all(line["worker_id"] == worker.id for line in about_job)
    assert worker.token not in worker.log_path.read_text()


def test_the_embedded_local_runner_does_not_label_the_orchestrators_lines(
    server: ServerProcess,
) -> None:
    """The local runner is an agent inside the orchestrator's process: its id labels its own
    requests, not every line the process writes."""
    with server.admin() as admin:
        wait_until(
            lambda: admin.get("/api/admin/workers/w_local").json()["status"] == "idle",
            timeout=15,
            message="the local runner to connect",
        )
        assert admin.get("/api/queue").status_code == 200
    wait_until(
        lambda: any('"GET /api/queue HTTP' in line["message"] for line in _lines(server)),
        timeout=5,
        message="the listing's line",
    )

    lines = _lines(server)
    listing = [line for line in lines if '"GET /api/queue HTTP' in line["message"]]
    assert listing and all("worker_id" not in line for line in listing)
    beats = [
        line
        for line in lines
        if line["logger"] == "uvicorn.access" and "/api/workers/heartbeat" in line["message"]
    ]
    # Each heartbeat is labelled with its worker (the other tests' workers beat here too).
    assert all(line.get("worker_id") for line in beats)
    assert any(line["worker_id"] == "w_local" for line in beats)
